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

CuPy (``cupy_runtime``): its statically linked runtime module is served
through the door, its kernels are compiled to PTX with line information, its
memory pool is bypassed, and its CUDA-library modules are stand-ins that
name their use.

Each patch is applied when the framework's module is imported, so a program
that never imports numba or CuPy pays nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.findings import Findings


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


def _cupy_runtime(module: ModuleType) -> None:
    from .cupy_runtime import serve_runtime

    serve_runtime(module)


def _cupy_driver(module: ModuleType) -> None:
    from .cupy_runtime import quiet_unload_at_exit

    quiet_unload_at_exit(module)


def _cupy(module: ModuleType) -> None:
    from .cupy_runtime import plain_allocator

    plain_allocator(module)


def _cupy_compiler(module: ModuleType) -> None:
    from .cupy_runtime import add_line_info

    add_line_info(module)


def _cupy_libraries(module: ModuleType) -> None:
    """CuPy's library package loads each NVIDIA library before its module:
    the stand-ins need none."""
    load = module.__getattr__

    def getattr_(name: str) -> Any:
        full = f"{module.__name__}.{name}"
        if full in _STAND_INS:
            return importlib.import_module(full)
        return load(name)

    module.__getattr__ = getattr_  # type: ignore[method-assign]


_HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "cupy_backends.cuda.libs": _cupy_libraries,
    "numba.cuda.codegen": _numba_codegen,
    "cupy_backends.cuda.api.runtime": _cupy_runtime,
    "cupy_backends.cuda.api.driver": _cupy_driver,
    "cupy": _cupy,
    "cupy.cuda.compiler": _cupy_compiler,
}


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


class _StandInLoader(importlib.abc.Loader):
    """A module the CPU device replaces whole (a CUDA library's CuPy module)."""

    def __init__(self, library: str) -> None:
        self.library = library

    def create_module(self, spec: Any) -> ModuleType:
        from .cupy_runtime import LibraryStandIn

        return LibraryStandIn(spec.name, self.library)

    def exec_module(self, module: ModuleType) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]],
                 stand_ins: dict[str, str]) -> None:
        self._busy = False
        self._hooks = hooks
        self._stand_ins = stand_ins

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in self._stand_ins:
            return importlib.util.spec_from_loader(name,
                                                   _StandInLoader(self._stand_ins[name]))
        hook = self._hooks.get(name)
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


_STAND_INS = {
    "cupy_backends.cuda.libs.cublas": "cuBLAS",
    "cupy_backends.cuda.libs.cusolver": "cuSOLVER",
    "cupy_backends.cuda.libs.cusparse": "cuSPARSE",
    "cupy_backends.cuda.libs.curand": "cuRAND",
    "cupy.cuda.cufft": "cuFFT",
    "cupy.cuda.thrust": "Thrust",
}
"""CuPy's modules over NVIDIA's CUDA libraries (machine code only, reaching
the driver through its private interface): none runs on the CPU device, so
each is a stand-in that names the calls made to it.  The optional ones CuPy
probes for at start-up (cuTENSOR, cuSPARSELt, NCCL) keep CuPy's own import,
which fails where they are not installed."""


def install_framework_hooks(findings: Findings) -> None:
    """Patch the frameworks the CPU device needs PTX from, when they load
    (now, for one already loaded); what they call that the CPU device does
    not serve goes into ``findings``."""
    from . import cupy_runtime

    cupy_runtime.configure(findings)
    _install(_HOOKS, _STAND_INS)


def install_gpu_hooks() -> None:
    """On a GPU, where a Python program's driver calls reach the stand-in
    (``--device cuda``): numba-cuda's kernels reach the driver as PTX, so
    that they are instrumented and checked (a cubin would run unchecked).
    CuPy keeps its own runtime and libraries there."""
    _install({"numba.cuda.codegen": _numba_codegen}, {})


def _install(hooks: dict[str, Callable[[ModuleType], None]], stand_ins: dict[str, str]) -> None:
    for name, hook in hooks.items():
        if name in sys.modules:
            hook(sys.modules[name])
    sys.meta_path.insert(0, _Finder(hooks, stand_ins))
