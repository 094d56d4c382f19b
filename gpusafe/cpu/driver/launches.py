"""Kernel launches (``cuLaunchKernel``, ``cuLaunchKernelEx``,
``cuLaunchCooperativeKernel``).

Arguments are packed by the kernel's parameter layout (``kernelParams`` in
every form cuda-python accepts, or ``extra``'s parameter buffer), the launch
configuration is checked against the device's limits, and the kernel runs to
completion before the call returns, with the context's stack size and the
driver's kernel timeout.  A launch that faults returns its error from the
launch call itself; an error the real driver treats as fatal to the context
(a stack overflow and a timeout included) becomes the context's sticky error.

A cooperative launch (``cuLaunchCooperativeKernel``, or ``cuLaunchKernelEx``
with ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE``) runs all its blocks co-resident with
a grid workspace, so ``cooperative_groups::this_grid().sync()`` works; a grid
larger than the device holds at once (occupancy times
``MULTIPROCESSOR_COUNT``, as the device reports them) is refused with
``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE``.  ``cuLaunchKernelEx`` accepts no
other launch attribute: each is refused naming it.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CUfunction,
    CUlaunchAttributeID,
    CUlaunchConfig,
    CUresult,
    CUstream,
)

from ...cudaapi import args as _args
from ...cudaapi.params import ParamError, pack
from .. import driver_profile as _profile
from ..errors import DeviceError
from ..memory import DeviceMemory
from ..program import GRID_WORKSPACE
from .api import api
from .functions import FunctionCalls, max_threads, occupancy
from .state import E, Fail, Function


def _pack_params(fn: Function, kp: _args.KernelParams, extra: int) -> bytes:
    """The kernel's parameter buffer, from ``kernelParams`` or ``extra``."""
    info = fn.info
    spans = [(p.name, p.offset, p.size) for p in info.params]
    try:
        return pack(fn.name, spans, int(info.param_size or 0), kp, extra)
    except ParamError as e:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, str(e), e) from None


def _check_config(fn: Function, grid: tuple[int, ...], block: tuple[int, ...],
                  shared: int) -> None:
    if min(grid) == 0 or min(block) == 0:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"empty launch: grid {grid}, block {block}")
    for axis, (g, lim) in enumerate(zip(grid, _profile.MAX_GRID_DIM, strict=True)):
        if g > lim:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"grid dimension {'xyz'[axis]}={g} exceeds {lim}")
    for axis, (b, lim) in enumerate(zip(block, _profile.MAX_BLOCK_DIM, strict=True)):
        if b > lim:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"block dimension {'xyz'[axis]}={b} exceeds {lim}")
    threads = block[0] * block[1] * block[2]
    if threads > max_threads(fn):
        raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                   f"{threads} threads per block exceed {fn.name}'s maximum of {max_threads(fn)}")
    static = int(fn.info.static_shared or 0)
    if shared > fn.max_dynamic_shared or static + shared > _profile.OPTIN_SHARED_PER_BLOCK:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                   f"{shared} bytes of dynamic shared memory exceed {fn.name}'s "
                   f"{fn.max_dynamic_shared} (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)")


def _check_cooperative(fn: Function, grid: tuple[int, ...], block: tuple[int, ...],
                       shared: int) -> None:
    """A cooperative grid must be resident at once, as the device reports it can be."""
    blocks = grid[0] * grid[1] * grid[2]
    per_sm = occupancy(fn, block[0] * block[1] * block[2], shared)
    most = per_sm * _profile.DEVICE_ATTRIBUTES["MULTIPROCESSOR_COUNT"]
    if blocks > most:
        raise Fail(E.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                   f"a cooperative launch of {blocks} blocks of {fn.name}; the device holds "
                   f"{per_sm} per multiprocessor (cuOccupancyMaxActiveBlocksPerMultiprocessor) "
                   f"times {_profile.DEVICE_ATTRIBUTES['MULTIPROCESSOR_COUNT']} multiprocessors "
                   f"= {most} at once")


def _launch_attributes(config: CUlaunchConfig) -> bool:
    """Whether ``config``'s attributes ask for a cooperative launch; any
    other attribute is refused, named."""
    cooperative = False
    attrs = list(config.attrs or ())
    n = int(config.numAttrs)
    if n > len(attrs):
        raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                   f"numAttrs is {n} but config.attrs holds {len(attrs)} attributes")
    for attr in attrs[:n]:
        ident = CUlaunchAttributeID(int(attr.id))
        if ident == CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            cooperative = bool(int(attr.value.cooperative))
        else:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       f"launch attribute {ident.name} is not supported by the CPU device "
                       "(only CU_LAUNCH_ATTRIBUTE_COOPERATIVE is)")
    return cooperative


class LaunchCalls(FunctionCalls):
    _workspace: tuple[DeviceMemory, int] | None = None  # the memory it is in, its address

    def _grid_workspace(self) -> int:
        memory = self.memory
        if self._workspace is None or self._workspace[0] is not memory:
            self._workspace = (memory, memory.alloc(GRID_WORKSPACE.size, label="grid workspace"))
        return self._workspace[1]

    def grid_workspace(self) -> int:
        """The device address of the grid workspace every cooperative launch
        uses (placed on first use, kept as long as the device): a checker puts
        it in its allocation table, as the driver's own memory that
        ``grid.sync()`` may touch."""
        with self._lock:
            return self._grid_workspace()

    def _launch(self, fn: Function, grid: tuple[int, ...], block: tuple[int, ...], shared: int,
                hs: int, kp: _args.KernelParams, extra: int, cooperative: bool = False) -> None:
        ctx = fn.module.ctx
        self._stream(hs, ctx)
        _check_config(fn, grid, block, shared)
        if cooperative:
            _check_cooperative(fn, grid, block, shared)
        params = _pack_params(fn, kp, extra)
        try:
            result = fn.module.program.launch(
                fn.name, grid, block, shared, params, observers=self._observers,
                stdout=self._stdout, stack_size=ctx.limits["CU_LIMIT_STACK_SIZE"],
                timeout=self.kernel_timeout,
                workspace=self._grid_workspace() if cooperative else 0)
        except DeviceError as e:
            res = CUresult[e.result]
            detail = str(e) if str(e).startswith(f"kernel {fn.name}:") else f"{fn.name}: {e}"
            if res.name in _profile.STICKY_RESULTS:
                ctx.sticky = res
                ctx.sticky_detail = detail
            raise Fail(res, detail, e) from None
        self._last_launch = result

    @api(0)
    def cuLaunchKernel(self, f: Any, gridDimX: Any, gridDimY: Any, gridDimZ: Any,
                       blockDimX: Any, blockDimY: Any, blockDimZ: Any, sharedMemBytes: Any,
                       hStream: Any, kernelParams: Any, extra: Any) -> None:
        dims = [_args.c_int(v, "unsigned int", n) for v, n in (
            (gridDimX, "gridDimX"), (gridDimY, "gridDimY"), (gridDimZ, "gridDimZ"),
            (blockDimX, "blockDimX"), (blockDimY, "blockDimY"), (blockDimZ, "blockDimZ"))]
        shared = _args.c_int(sharedMemBytes, "unsigned int", "sharedMemBytes")
        hs = _args.handle_value(hStream, CUstream)
        hf = _args.handle_value(f, CUfunction)
        kp = _args.convert_kernel_params(kernelParams)
        ex = _args.c_int(extra, "void_ptr", "extra")
        fn = self._function(hf)
        self._launch(fn, tuple(dims[:3]), tuple(dims[3:]), shared, hs, kp, ex)

    @api(0)
    def cuLaunchKernelEx(self, config: Any, f: Any, kernelParams: Any, extra: Any) -> None:
        if config is not None:
            _args.require_struct(config, CUlaunchConfig, "config")
        hf = _args.handle_value(f, CUfunction)
        kp = _args.convert_kernel_params(kernelParams)
        ex = _args.c_int(extra, "void_ptr", "extra")
        self._require_init()
        if config is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "config is NULL")
        cooperative = _launch_attributes(config)
        fn = self._function(hf)
        grid = (int(config.gridDimX), int(config.gridDimY), int(config.gridDimZ))
        block = (int(config.blockDimX), int(config.blockDimY), int(config.blockDimZ))
        hs = _args.handle_value(config.hStream, CUstream)
        self._launch(fn, grid, block, int(config.sharedMemBytes), hs, kp, ex, cooperative)

    @api(0)
    def cuLaunchCooperativeKernel(self, f: Any, gridDimX: Any, gridDimY: Any, gridDimZ: Any,
                                  blockDimX: Any, blockDimY: Any, blockDimZ: Any,
                                  sharedMemBytes: Any, hStream: Any, kernelParams: Any) -> None:
        dims = [_args.c_int(v, "unsigned int", n) for v, n in (
            (gridDimX, "gridDimX"), (gridDimY, "gridDimY"), (gridDimZ, "gridDimZ"),
            (blockDimX, "blockDimX"), (blockDimY, "blockDimY"), (blockDimZ, "blockDimZ"))]
        shared = _args.c_int(sharedMemBytes, "unsigned int", "sharedMemBytes")
        hs = _args.handle_value(hStream, CUstream)
        hf = _args.handle_value(f, CUfunction)
        kp = _args.convert_kernel_params(kernelParams)
        fn = self._function(hf)
        self._launch(fn, tuple(dims[:3]), tuple(dims[3:]), shared, hs, kp, 0, cooperative=True)
