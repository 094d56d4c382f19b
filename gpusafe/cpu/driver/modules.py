"""Modules (``cuModuleLoad*``, ``cuModuleUnload``, ``cuModuleGet*``,
``cuModuleEnumerateFunctions``).

Images are PTX text only: bytes, a numpy char array, any buffer, or an
``int`` address of a NUL-terminated string (``str`` is a TypeError, as in
cuda-python).  An ELF cubin or a fatbin cannot run on the CPU device
(``CUDA_ERROR_NOT_SUPPORTED``); PTX the parser rejects is
``CUDA_ERROR_INVALID_PTX`` with the parser's message in
``last_error_detail``; PTX newer than the device is refused as a real
sm_90 driver refuses it.
"""

from __future__ import annotations

import re
from typing import Any

from cuda.bindings.driver import CUdeviceptr, CUfunction, CUjit_option, CUmodule, CUresult

from gpusafe_instrument.ptx import ParseError

from ...cudaapi import args as _args
from ...cudaapi import images as _images
from .. import driver_profile as _profile
from ..errors import DeviceError
from ..program import Program
from .api import api
from .state import Context, DriverBase, E, Fail, Function, LoadedModule

_VERSION_RE = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.M)
_TARGET_RE = re.compile(r"^\s*\.target\s+sm_(\d+)", re.M)

_JIT_SUPPORTED = frozenset(
    "CU_JIT_" + n for n in (
        "MAX_REGISTERS THREADS_PER_BLOCK INFO_LOG_BUFFER_SIZE_BYTES ERROR_LOG_BUFFER_SIZE_BYTES "
        "OPTIMIZATION_LEVEL GLOBAL_SYMBOL_COUNT TARGET_FROM_CUCONTEXT REFERENCED_KERNEL_COUNT "
        "REFERENCED_VARIABLE_COUNT MIN_CTA_PER_SM SPLIT_COMPILE WALL_TIME INFO_LOG_BUFFER "
        "ERROR_LOG_BUFFER TARGET FALLBACK_STRATEGY GENERATE_DEBUG_INFO LOG_VERBOSE "
        "GENERATE_LINE_INFO LTO FTZ PREC_DIV PREC_SQRT FMA OPTIMIZE_UNUSED_DEVICE_VARIABLES "
        "CACHE_MODE GLOBAL_SYMBOL_NAMES REFERENCED_KERNEL_NAMES REFERENCED_VARIABLE_NAMES "
        "GLOBAL_SYMBOL_ADDRESSES").split())


def _image_text(image: Any) -> str:
    """The PTX text of a module image, read as the C driver would (up to the first NUL)."""
    hp = _args.host_pointer(image)
    if hp.address == 0:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, "the module image is a NULL pointer")
    if hp.nbytes is None:
        raw = _args.read_c_string(hp.address)
    else:
        raw = _args.read_host(hp.address, hp.nbytes)
        nul = raw.find(b"\0")
        if nul >= 0:
            raw = raw[:nul]
    kind = _images.image_kind(raw)
    if kind is _images.ImageKind.CUBIN:
        raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                   "the module image is an ELF cubin; the CPU device runs PTX only "
                   "(compile with --gpu-architecture=compute_XX and load the PTX)")
    if kind is _images.ImageKind.FATBIN:
        raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                   "the module image is a fatbin; the CPU device runs PTX only")
    return raw.decode("utf-8", errors="replace")


def _write_log(buffer: Any, size: int, text: str) -> None:
    """Write a JIT log into the caller's buffer (NUL-terminated, at most ``size`` bytes)."""
    if size <= 0 or buffer is None:
        return
    hp = _args.host_pointer(buffer)
    if hp.address == 0:
        return
    cap = size if hp.nbytes is None else min(size, hp.nbytes)
    data = text.encode(errors="replace")[: max(cap - 1, 0)] + b"\0"
    _args.write_host(hp.address, data[:cap])


class ModuleCalls(DriverBase):
    def _load_module(self, ctx: Context, text: str) -> LoadedModule:
        m = _VERSION_RE.search(text)
        version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        if m and version > _profile.MAX_PTX_ISA:
            raise Fail(E.CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                       f"PTX ISA {version[0]}.{version[1]} is newer than this driver's "
                       f"{_profile.MAX_PTX_ISA[0]}.{_profile.MAX_PTX_ISA[1]}")
        t = _TARGET_RE.search(text)
        target = int(t.group(1)) if t else 0
        if target > _profile.MAX_SM_TARGET:
            raise Fail(E.CUDA_ERROR_INVALID_PTX,
                       f"PTX .target sm_{target} is newer than the device (compute capability "
                       f"{_profile.CC_MAJOR}.{_profile.CC_MINOR})")
        try:
            program = Program(text, self._memory, ctx.device if self.devices > 1 else -1)
        except ParseError as e:
            raise Fail(E.CUDA_ERROR_INVALID_PTX, f"PTX parse error: {e}", e) from None
        except DeviceError as e:
            raise Fail(CUresult[e.result], str(e), e) from None
        if self.devices > 1:
            program.barred = lambda: self._barred(ctx)
        mod = LoadedModule(0, ctx, program, version, target)
        mod.handle = self._new_handle(mod)
        ctx.modules[mod.handle] = mod
        return mod

    def _module(self, hmod: Any) -> LoadedModule:
        h = _args.handle_value(hmod, CUmodule)
        self._require_init()
        mod = self._lookup(h, LoadedModule, E.CUDA_ERROR_INVALID_HANDLE, "module")
        self._check_ctx(mod.ctx)
        return mod

    def _get_function(self, mod: LoadedModule, name: str) -> Function:
        fn = mod.functions.get(name)
        if fn is None:
            info = mod.program.kernels.get(name)
            if info is None:
                raise Fail(E.CUDA_ERROR_NOT_FOUND, f"the module has no kernel named {name!r}")
            fn = Function(0, mod, name, info)
            fn.handle = self._new_handle(fn)
            mod.functions[name] = fn
        return fn

    @api(1)
    def cuModuleLoadData(self, image: Any) -> CUmodule:
        _args.host_pointer(image)  # cuda-python's conversion (a str is a TypeError) comes first
        ctx = self._current()
        return CUmodule(self._load_module(ctx, _image_text(image)).handle)

    @api(1)
    def cuModuleLoadDataEx(self, image: Any, numOptions: Any, options: Any,
                           optionValues: Any) -> CUmodule:
        _args.host_pointer(image)
        n = _args.c_int(numOptions, "unsigned int", "numOptions")
        options = [] if options is None else options
        optionValues = [] if optionValues is None else optionValues
        if not all(isinstance(o, CUjit_option) for o in options):
            raise TypeError("Argument 'options' is not instance of type (expected "
                            "tuple[cydriver.CUjit_option] or list[cydriver.CUjit_option]")
        if n > len(options):
            raise RuntimeError(f"List is too small: {len(options)} < {n}")
        if n > len(optionValues):
            raise RuntimeError(f"List is too small: {len(optionValues)} < {n}")
        for o in options:
            if o.name not in _JIT_SUPPORTED:
                raise TypeError(f"Unsupported attribute: {o.name}")
        opts = {o.name: v for o, v in list(zip(options, optionValues, strict=False))[:n]}
        ctx = self._current()
        try:
            mod = self._load_module(ctx, _image_text(image))
        except Fail as f:
            _write_log(opts.get("CU_JIT_ERROR_LOG_BUFFER"),
                       int(opts.get("CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES", 0) or 0), f.detail)
            raise
        _write_log(opts.get("CU_JIT_INFO_LOG_BUFFER"),
                   int(opts.get("CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES", 0) or 0), "")
        return CUmodule(mod.handle)

    @api(1)
    def cuModuleLoad(self, fname: Any) -> CUmodule:
        path = _args.require_bytes(fname, "fname")
        ctx = self._current()
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise Fail(E.CUDA_ERROR_FILE_NOT_FOUND,
                       f"{path.decode(errors='replace')}: {e}", e) from None
        return CUmodule(self._load_module(ctx, _image_text(raw)).handle)

    @api(0)
    def cuModuleUnload(self, hmod: Any) -> None:
        self._unload_module(self._module(hmod))

    @api(1)
    def cuModuleGetFunction(self, hmod: Any, name: Any) -> CUfunction:
        n = _args.require_bytes(name, "name")
        mod = self._module(hmod)
        return CUfunction(self._get_function(mod, n.decode(errors="replace")).handle)

    @api(2)
    def cuModuleGetGlobal(self, hmod: Any, name: Any) -> tuple[CUdeviceptr, int]:
        n = _args.require_bytes(name, "name")
        mod = self._module(hmod)
        try:
            addr, size = mod.program.global_symbol(n.decode(errors="replace"))
        except KeyError:
            raise Fail(E.CUDA_ERROR_NOT_FOUND, "the module has no global variable named "
                                               f"{n.decode(errors='replace')!r}") from None
        return CUdeviceptr(int(addr)), int(size)

    @api(1)
    def cuModuleGetFunctionCount(self, mod: Any) -> int:
        return len(self._module(mod).program.kernels)

    @api(1)
    def cuModuleEnumerateFunctions(self, numFunctions: Any, mod: Any) -> list[CUfunction]:
        n = _args.c_int(numFunctions, "unsigned int", "numFunctions")
        m = self._module(mod)
        names = list(m.program.kernels)
        if n > len(names):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"numFunctions {n} exceeds the module's {len(names)} functions")
        return [CUfunction(self._get_function(m, name).handle) for name in names[:n]]
