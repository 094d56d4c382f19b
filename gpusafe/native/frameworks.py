"""What the CPU device needs of Python frameworks that load the driver
themselves: their kernels reach the driver as PTX.

numba-cuda links every kernel to a cubin with nvJitLink (a library beside
the driver, which the stand-in does not replace); the CPU device runs PTX
only, so on the CPU device a kernel whose code is one PTX module with nothing
to link is handed to the driver as that PTX, and is instrumented and checked
like any module (numba's link-time optimisation, on by default, only matters
when there is something to link with).  A kernel that needs linking (linked
files, cudadevrt) keeps numba's own path: the driver then gets a cubin, which
the CPU device refuses and gpusafe names.

The patch is applied when numba-cuda's code generator is imported, so a
program that never imports numba pays nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def _numba_codegen(module: ModuleType) -> None:
    library = module.CUDACodeLibrary
    linked = library.get_cubin

    def get_cubin(self: Any, cc: Any = None) -> Any:
        cc = self._ensure_cc(cc)
        if self._linking_files or self.needs_cudadevrt:
            return linked(self, cc)
        ptxes = self.get_asm_strs(cc=cc)
        if len(ptxes) != 1:
            return linked(self, cc)
        from cuda.core import ObjectCode

        return ObjectCode.from_ptx(ptxes[0].encode())

    library.get_cubin = get_cubin


_HOOKS: dict[str, Callable[[ModuleType], None]] = {"numba.cuda.codegen": _numba_codegen}


class _Loader(importlib.abc.Loader):
    """The framework's own loader, then the patch."""

    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.hook = hook

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.hook(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._busy = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        hook = _HOOKS.get(name)
        if hook is None or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, hook)
        return spec


def install_framework_hooks() -> None:
    """Patch the frameworks the CPU device needs PTX from, when they load
    (now, for one already loaded)."""
    for name, hook in _HOOKS.items():
        if name in sys.modules:
            hook(sys.modules[name])
    sys.meta_path.insert(0, _Finder())
