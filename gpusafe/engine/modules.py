"""Modules under checking: image in, instrumented PTX and site table out, and
which loaded function is which kernel.

A PTX image is instrumented (through the cache) and the instrumented text is
what the driver loads.  A cubin or fatbin, or PTX the toolkit cannot
instrument, is loaded as it is and its kernels run unchecked, each listed
with the reason when it is launched.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import Any

from gpusafe_instrument.checks import InstrumentError, instrument
from gpusafe_instrument.parser import ParseError
from gpusafe_instrument.sites import KernelInfo, SiteTable

from ..cudaapi import images
from . import cache


@dataclass
class ModuleInfo:
    sites: SiteTable | None  # None: the whole module runs unchecked
    reason: str = ""  # why, when sites is None
    globals: list[int] = field(default_factory=list)  # addresses the program took


@dataclass(frozen=True)
class LoadPlan:
    """What to hand the driver for a module image, and what gpusafe knows of it."""

    image: Any  # the instrumented PTX (NUL-terminated bytes) or the program's own image
    info: ModuleInfo
    problem: str | None = None  # gpusafe could not instrument PTX it should have


def image_bytes(image: Any) -> bytes | None:
    """The bytes of a module image in any form cuda-python accepts (an ``int``
    address of a NUL-terminated image, bytes, any buffer); None when unreadable."""
    if isinstance(image, int):
        return ctypes.string_at(image) if image else None
    if isinstance(image, (bytes, bytearray)):
        return bytes(image)
    try:
        return bytes(memoryview(image).cast("B"))
    except TypeError:
        return None


def instrument_cached(text: str, kernel_filter: str | None = None,
                      every_offender: bool = False) -> tuple[str, SiteTable]:
    """Instrumented PTX and site table, from the on-disk cache when present."""
    key = cache.entry_key(text, kernel_filter, every_offender)
    hit = cache.load(key)
    if hit is not None:
        return hit
    pattern = re.compile(kernel_filter) if kernel_filter is not None else None
    result = instrument(text, select=None if pattern is None else
                        (lambda name: pattern.search(name) is not None),
                        every_offender=every_offender)
    cache.store(key, result.ptx, result.sites)
    return result.ptx, result.sites


class Modules:
    """Loaded modules and functions by driver handle."""

    def __init__(self, kernel_filter: str | None = None, every_offender: bool = False) -> None:
        self.kernel_filter = kernel_filter
        self.every_offender = every_offender
        self._modules: dict[int, ModuleInfo] = {}
        self._functions: dict[int, tuple[ModuleInfo, str]] = {}
        self._proven: dict[int, Any] = {}  # function handle -> its proven entry (a CUfunction)

    def plan(self, image: Any) -> LoadPlan:
        data = image_bytes(image)
        kind = images.image_kind(data) if data is not None else None
        if kind is not images.ImageKind.PTX:
            what = kind.value if kind is not None else "an image gpusafe cannot read"
            return LoadPlan(image, ModuleInfo(None, f"the module was loaded as {what}, not PTX"))
        assert data is not None
        text = images.ptx_text(data)
        try:
            checked, sites = instrument_cached(text, self.kernel_filter, self.every_offender)
        except (ParseError, InstrumentError) as e:
            return LoadPlan(image, ModuleInfo(None, f"gpusafe could not instrument it: {e}"),
                            problem=str(e))
        return LoadPlan(images.ptx_bytes(checked), ModuleInfo(sites))

    def loaded(self, handle: int, info: ModuleInfo) -> None:
        self._modules[handle] = info

    def unloaded(self, handle: int) -> ModuleInfo | None:
        info = self._modules.pop(handle, None)
        if info is not None:
            self._functions = {f: e for f, e in self._functions.items() if e[0] is not info}
            self._proven = {f: p for f, p in self._proven.items() if f in self._functions}
        return info

    def module(self, handle: int) -> ModuleInfo | None:
        return self._modules.get(handle)

    def function_found(self, module_handle: int, name: str, function_handle: int) -> None:
        info = self._modules.get(module_handle)
        if info is not None:
            self._functions[function_handle] = (info, name)

    def proven_found(self, function_handle: int, proven: Any) -> None:
        """``proven``: the proven entry (``KernelInfo.proven_entry``) of the
        kernel whose handle is ``function_handle``."""
        self._proven[function_handle] = proven

    def proven(self, function_handle: int) -> Any | None:
        """The proven entry of a kernel, when its module holds one."""
        return self._proven.get(function_handle)

    def kernel(self, function_handle: int) -> tuple[ModuleInfo, str] | None:
        return self._functions.get(function_handle)

    def checked_kernel(self, info: ModuleInfo, name: str) -> tuple[KernelInfo | None, str]:
        """(the kernel's launch ABI, "") when it is instrumented, else (None, why not)."""
        if info.sites is None:
            return None, info.reason
        kernel = info.sites.kernels.get(name)
        if kernel is not None:
            return kernel, ""
        if name in info.sites.unchecked:
            return None, info.sites.unchecked[name]
        return None, f"excluded by --kernel-filter {self.kernel_filter!r}"

    def filtered_out(self, info: ModuleInfo, name: str) -> bool:
        """Whether ``name`` runs unchecked only because ``--kernel-filter``
        left it out (the user's request, not gpusafe's failure)."""
        sites = info.sites
        return sites is not None and name not in sites.kernels and name not in sites.unchecked
