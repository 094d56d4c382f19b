"""Modules and launches under checking: instrument at load, context at launch,
violation records back at every synchronisation point.

``cuModuleLoadData(Ex)`` with PTX: the module is instrumented (cached on disk
by content hash) and the instrumented PTX is loaded; the site table is kept
per module.  ``cuLaunchKernel`` of an instrumented kernel: the program's
arguments are packed, each pointer root is resolved against the allocation
registry, the launch context, the allocation table and a violation buffer are
placed in device memory, and the kernel is launched with the hidden
parameter.  Records are read back and folded into the session's report when
the program synchronises (on the CPU device every launch is synchronous).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from instrument import host, layout
from instrument.checks import InstrumentError, instrument
from instrument.parser import ParseError
from instrument.sites import KernelInfo, SiteTable

from . import __version__
from .cudaapi import args, images
from .registry import State, program_site
from .report import SourceLocation
from .session import allocation_info

VIOLATION_CAPACITY = 4096


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpusafe" / "ptx"


def instrument_cached(text: str, kernel_filter: str | None = None) -> tuple[str, SiteTable]:
    """Instrumented PTX and site table, from the on-disk cache when present."""
    key = hashlib.sha256(
        f"{__version__}\0{layout.LAYOUT_VERSION}\0{kernel_filter}\0".encode() + text.encode()
    ).hexdigest()
    directory = cache_dir()
    ptx_path, sites_path = directory / f"{key}.ptx", directory / f"{key}.sites.json"
    try:
        return ptx_path.read_text(), SiteTable.from_json(sites_path.read_text())
    except (OSError, ValueError):
        pass
    pattern = re.compile(kernel_filter) if kernel_filter is not None else None
    result = instrument(text, select=None if pattern is None else
                        (lambda name: pattern.search(name) is not None))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, data in ((sites_path, result.sites.to_json()), (ptx_path, result.ptx)):
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(data)
            os.replace(tmp, path)
    except OSError:
        pass  # a read-only home directory only costs the cache
    return result.ptx, result.sites


def image_text(image: Any) -> str | None:
    """The PTX text of a module image, or None for a cubin/fatbin."""
    if isinstance(image, int):
        data = ctypes.string_at(image)
    elif isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    else:
        try:
            data = bytes(memoryview(image).cast("B"))
        except TypeError:
            return None
    if images.image_kind(data) is not images.ImageKind.PTX:
        return None
    return images.ptx_text(data)


@dataclass
class LoadedModule:
    sites: SiteTable | None  # None: the module runs unchecked
    reason: str = ""


@dataclass
class PendingLaunch:
    kernel: str
    sites: SiteTable
    buffers: list[int] = field(default_factory=list)
    violations: int = 0


class LaunchManager:
    def __init__(self, session, backend: ModuleType, real: dict[str, Any]) -> None:
        self.session = session
        self.registry = session.registry
        self.backend = backend
        self.real = real
        self.E = backend.CUresult
        self.modules: dict[int, LoadedModule] = {}
        self.functions: dict[int, tuple[LoadedModule, str]] = {}
        self.pending: list[PendingLaunch] = []
        self.problems: list[str] = session.problems
        self.globals_of: dict[int, list[int]] = {}  # module -> globals whose address was taken
        # ((registry version, context), device address, records) of the last upload
        self._table_copy: tuple[tuple[int, int], int, list[host.AllocationRecord]] | None = None
        self._retired: list[int] = []  # replaced table copies, freed at the next drain
        self.table_uploads = 0
        self.filter = session.options.kernel_filter

    # -- device memory of our own (never in the registry) -----------------------

    def _alloc(self, data: bytes) -> int:
        err, ptr = self.real["cuMemAlloc"](max(len(data), 8))
        if err != self.E.CUDA_SUCCESS:
            raise MemoryError(f"gpusafe could not allocate {len(data)} bytes of device memory")
        address = int(ptr)
        (err,) = self.real["cuMemcpyHtoD"](address, data, len(data))
        if err != self.E.CUDA_SUCCESS:
            raise MemoryError(f"gpusafe could not write its launch records: {err}")
        return address

    # -- modules ---------------------------------------------------------------

    def _load(self, name: str) -> Callable[..., Any]:
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(image, *rest):
            try:
                text = image_text(image)
            except UnicodeDecodeError:
                text = None
            if text is None:
                result = real(image, *rest)
                info = LoadedModule(None, "the module was loaded as a cubin/fatbin, not PTX")
            else:
                try:
                    checked, sites = instrument_cached(text, self.filter)
                except (ParseError, InstrumentError) as e:
                    self.problems.append(f"could not instrument a module loaded at "
                                         f"{program_site(2)}: {e}")
                    self.session.flush_if_new()
                    result = real(image, *rest)
                    info = LoadedModule(None, f"gpusafe could not instrument it: {e}")
                else:
                    result = real(checked.encode() + b"\0", *rest)
                    info = LoadedModule(sites)
            if result[0] == self.E.CUDA_SUCCESS:
                self.modules[int(result[1])] = info
            return result

        return wrapper

    def _get_function(self) -> Callable[..., Any]:
        real = self.real["cuModuleGetFunction"]

        @functools.wraps(real)
        def wrapper(hmod, name):
            result = real(hmod, name)
            module = self.modules.get(int(hmod))
            if result[0] == self.E.CUDA_SUCCESS and module is not None:
                kernel = name.decode() if isinstance(name, bytes) else str(name)
                self.functions[int(result[1])] = (module, kernel)
            return result

        return wrapper

    # -- launches --------------------------------------------------------------

    def _checked_launch(self, f: Any, shared: int, kernel_params: Any, extra: Any,
                        launch: Callable[[Any, Any], tuple]) -> tuple:
        """One launch of function ``f``: ``launch(kernelParams, extra)`` performs
        it with whatever parameters this decides (the program's own for an
        unchecked kernel, the instrumented kernel's with the hidden one)."""
        entry = self.functions.get(int(f))
        if entry is None:
            self.session.report.record_unchecked(
                self._function_name(f),
                "loaded through an API gpusafe does not interpose "
                "(cuLibraryLoadData, cuModuleLoadFatBinary, ...)")
            return launch(kernel_params, extra)
        module, kernel = entry
        if module.sites is None or kernel not in module.sites.kernels:
            reason = module.reason or f"excluded by --kernel-filter {self.filter!r}"
            self.session.report.record_unchecked(kernel, reason)
            return launch(kernel_params, extra)
        info = module.sites.kernels[kernel]
        params = self._packed(info, kernel_params, extra)
        if params is None:
            return (self.E.CUDA_ERROR_INVALID_VALUE,)
        site = None
        for value in host.root_values(info, params):
            v = self.registry.check_argument(value, "cuLaunchKernel", None)
            if v is not None:
                site = site or program_site(3)
                self.session.host_violation(dataclasses.replace(v, location=site),
                                           kernel=kernel)
        pending = PendingLaunch(kernel, module.sites)
        try:
            param_buffer = self._context(info, params, int(shared), pending)
        except MemoryError as e:
            self._release(pending)
            self.problems.append(str(e))
            self.session.flush_if_new()
            return (self.E.CUDA_ERROR_OUT_OF_MEMORY,)
        array, keep = _pointer_array(info, param_buffer)
        result = launch(array, 0)
        del keep
        if result[0] != self.E.CUDA_SUCCESS:
            self._release(pending)
            return result
        self.session.report.record_launch(kernel)
        self.pending.append(pending)
        if self.session.options.device == "cpu":
            self.drain()  # the CPU device has finished the launch already
        return result

    def _function_name(self, f: Any) -> str:
        getter = self.real.get("cuFuncGetName")
        if getter is not None:
            try:
                err, name = getter(f)
                if err == self.E.CUDA_SUCCESS:
                    return name.decode() if isinstance(name, bytes) else str(name)
            except Exception:  # a backend without it, or a handle it rejects
                pass
        return f"<function {int(f):#x}>"

    def _launch(self) -> Callable[..., Any]:
        real = self.real["cuLaunchKernel"]

        @functools.wraps(real)
        def wrapper(f, gx, gy, gz, bx, by, bz, shared, stream, kernelParams, extra):
            return self._checked_launch(
                f, shared, kernelParams, extra,
                lambda kp, ex: real(f, gx, gy, gz, bx, by, bz, shared, stream, kp, ex))

        return wrapper

    def _launch_ex(self) -> Callable[..., Any]:
        real = self.real["cuLaunchKernelEx"]

        @functools.wraps(real)
        def wrapper(config, f, kernelParams, extra):
            shared = int(config.sharedMemBytes) if config is not None else 0
            return self._checked_launch(f, shared, kernelParams, extra,
                                        lambda kp, ex: real(config, f, kp, ex))

        return wrapper

    def _get_global(self) -> Callable[..., Any]:
        """A module global whose address the program takes may be passed to a
        kernel: it joins the allocation table (never freed, never leaked)."""
        real = self.real["cuModuleGetGlobal"]

        @functools.wraps(real)
        def wrapper(hmod, name):
            result = real(hmod, name)
            if result[0] == self.E.CUDA_SUCCESS and int(result[2]) > 0:
                self.registry.mapped(int(result[1]), int(result[2]), "cuModuleGetGlobal",
                                     program_site(2))
                self.globals_of.setdefault(int(hmod), []).append(int(result[1]))
            return result

        return wrapper

    def _unload(self) -> Callable[..., Any]:
        real = self.real["cuModuleUnload"]

        @functools.wraps(real)
        def wrapper(hmod):
            self.drain()
            result = real(hmod)
            if result[0] == self.E.CUDA_SUCCESS:
                self.registry.unmapped(self.globals_of.pop(int(hmod), []))
                self.modules.pop(int(hmod), None)
            return result

        return wrapper

    def _load_file(self) -> Callable[..., Any]:
        """``cuModuleLoad(fname)``: read the file and load it as data, so a
        PTX file is instrumented like an in-memory image."""
        load_data = self._load("cuModuleLoadData")
        real = self.real["cuModuleLoad"]

        @functools.wraps(real)
        def wrapper(fname):
            try:
                with open(fname.decode() if isinstance(fname, bytes) else fname, "rb") as f:
                    image = f.read()
            except (OSError, TypeError, UnicodeDecodeError):
                return real(fname)  # the driver's own error for a bad name
            return load_data(image + b"\0")

        return wrapper

    def _packed(self, info: KernelInfo, kernel_params: Any, extra: Any) -> bytes | None:
        size = info.context_param_offset
        if extra not in (None, 0):
            buf, bufsize = args.read_extra(int(extra))
            if buf is None or bufsize is None or bufsize < size:
                return None
            return args.read_host(buf, size)
        kp = args.convert_kernel_params(kernel_params)
        out = bytearray(size)
        for i, (_, offset, psize) in enumerate(info.params):
            data = kp.param_bytes(i, psize) if kp.kind != "null" else None
            if data is None:
                return None
            out[offset:offset + psize] = data
        return bytes(out)

    def _table(self) -> tuple[int, list[host.AllocationRecord]]:
        """The device copy of the allocation table, uploaded again only when
        the registry changed since the last launch.  A replaced copy may still
        be read by a launch in flight: it is freed at the next drain."""
        err, ctx = self.real["cuCtxGetCurrent"]()
        version = (self.registry.version, int(ctx) if err == self.E.CUDA_SUCCESS else 0)
        if self._table_copy is not None and self._table_copy[0] == version:
            return self._table_copy[1], self._table_copy[2]
        allocations = [
            host.AllocationRecord(a.tag, a.base, a.size, a.state is State.LIVE)
            for a in self.registry.table()
        ]
        address = self._alloc(host.allocation_table(allocations))
        if self._table_copy is not None:
            self._retired.append(self._table_copy[1])
        self._table_copy = (version, address, allocations)
        self.table_uploads += 1
        return address, allocations

    def _context(self, info: KernelInfo, params: bytes, shared: int,
                 pending: PendingLaunch) -> bytes:
        table_address, allocations = self._table()
        vbuf = host.violation_buffer(VIOLATION_CAPACITY)
        pending.violations = self._alloc(vbuf)
        pending.buffers.append(pending.violations)
        context = host.context_bytes(
            info, params, allocations, violations=pending.violations, table=table_address,
            table_len=len(allocations), dynamic_shared=shared)
        context_address = self._alloc(context)
        pending.buffers.append(context_address)
        return host.kernel_params(info, params, context_address)

    def _release(self, pending: PendingLaunch) -> None:
        for address in pending.buffers:
            self.real["cuMemFree"](address)
        pending.buffers.clear()

    # -- draining --------------------------------------------------------------

    def drain(self) -> None:
        """Read back the violation records of every finished launch."""
        if not self.pending:
            return
        if self.session.options.device != "cpu":
            self.real["cuCtxSynchronize"]()
        size = layout.violation_buffer_size(VIOLATION_CAPACITY)
        report = self.session.report
        for launch in self.pending:
            data = bytearray(size)
            (err,) = self.real["cuMemcpyDtoH"](data, launch.violations, size)
            if err != self.E.CUDA_SUCCESS:
                self.problems.append(f"could not read the violation records of {launch.kernel}: "
                                     f"{err}")
                continue
            records, dropped = host.decode_violations(bytes(data), launch.sites)
            if dropped:
                report.record_dropped(dropped)
            for r in records:
                alloc = self.registry.by_tag.get(r.tag) if r.tag else None
                if alloc is None and r.site.space in ("global", "generic"):
                    alloc = self.registry.find(r.address) or self.registry.nearest(r.address)
                s = r.site
                location = SourceLocation(s.file, s.line, s.column) if s.file and s.line else None
                report.add_device_violation(
                    r.kind, access=s.access, size=r.width, address=r.address,
                    kernel=launch.kernel, ptx_line=s.ptx_line, instruction=s.instruction,
                    block=r.block, thread=r.thread, location=location,
                    allocation=allocation_info(alloc, r.address),
                )
            self._release(launch)
        self.pending.clear()
        for address in self._retired:
            self.real["cuMemFree"](address)
        self._retired.clear()
        self.session.flush_if_new()

    def _drain_before(self, name: str) -> Callable[..., Any]:
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(*a, **kw):
            self.drain()
            # the table copy may live in the context going away
            self._table_copy = None
            self._retired.clear()
            return real(*a, **kw)

        return wrapper

    def wrappers(self) -> dict[str, Callable[..., Any]]:
        w: dict[str, Callable[..., Any]] = {
            "cuModuleLoadData": self._load("cuModuleLoadData"),
            "cuModuleLoadDataEx": self._load("cuModuleLoadDataEx"),
            "cuModuleGetFunction": self._get_function(),
            "cuLaunchKernel": self._launch(),
        }
        if "cuLaunchKernelEx" in self.real:
            w["cuLaunchKernelEx"] = self._launch_ex()
        if "cuModuleLoad" in self.real:
            w["cuModuleLoad"] = self._load_file()
        if "cuModuleGetGlobal" in self.real:
            w["cuModuleGetGlobal"] = self._get_global()
        if "cuModuleUnload" in self.real:
            w["cuModuleUnload"] = self._unload()
        for name in ("cuCtxDestroy", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset"):
            w[name] = self._drain_before(name)
        return {k: v for k, v in w.items() if k in self.real}


def _pointer_array(info: KernelInfo, buffer: bytes) -> tuple[int, tuple]:
    """A ``void*[]`` pointing at each parameter (hidden one included) inside a
    copy of ``buffer``: the kernelParams form both drivers take."""
    storage = ctypes.create_string_buffer(buffer, len(buffer))
    base = ctypes.addressof(storage)
    offsets = [offset for _, offset, _ in info.params] + [info.context_param_offset]
    array = (ctypes.c_void_p * len(offsets))(*(base + o for o in offsets))
    return ctypes.addressof(array), (storage, array)
