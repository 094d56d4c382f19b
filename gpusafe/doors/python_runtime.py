"""The Python door for ``cuda.bindings.runtime``: the runtime calls that
allocate, free, copy, set memory and synchronise, checked like their driver
twins against the same engine, so a pointer from ``cudaMalloc`` is checked
when it reaches ``cuLaunchKernel``, and a ``cuMemAlloc`` pointer freed twice
with ``cudaFree`` is a double free.

A refused call (bad free, copy or memset) is not passed on; it returns the
runtime's invalid-value error, ``cudaErrorInvalidValue``. ``cudaFree(0)`` and
``cudaMalloc(0)`` go to the backend unjudged: the runtime documents the first
as a no-op (the usual way to create the context) and the second as returning
a null pointer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cuda.bindings.runtime import cudaError_t, cudaKernelNodeParams, cudaMemcpyKind

from ..cudaapi.params import ParamError
from ..engine.checking import Engine
from .wrappers import ApiWrappers, Ranges, address, size, unrouted_graph_node


def _extent(pitch: Any, width: Any, height: Any) -> int:
    """Bytes spanned by a 2D region: full rows but the last, which is ``width`` long."""
    h, w = size(height), size(width)
    return size(pitch) * (h - 1) + w if h > 0 and w > 0 else 0


class RuntimeDoor(ApiWrappers):
    """The wrapped functions of ``cuda.bindings.runtime``."""

    null_free_passes = True  # cudaFree(0) is a documented no-op

    def __init__(self, engine: Engine, real: dict[str, Any]) -> None:
        super().__init__(engine, real, cudaError_t.cudaSuccess, cudaError_t.cudaErrorInvalidValue)

    def _copy_sides(self, dst: Any, dst_bytes: int, src: Any, src_bytes: int,
                    kind: Any) -> list[tuple[int | None, int]]:
        """The device side(s) of a copy of ``kind``; with ``cudaMemcpyDefault`` both
        sides, each judged by whether the registry tracks its address."""
        K = cudaMemcpyKind
        sides = []
        if kind in (K.cudaMemcpyHostToDevice, K.cudaMemcpyDeviceToDevice, K.cudaMemcpyDefault):
            sides.append((address(dst), dst_bytes))
        if kind in (K.cudaMemcpyDeviceToHost, K.cudaMemcpyDeviceToDevice, K.cudaMemcpyDefault):
            sides.append((address(src), src_bytes))
        return sides

    # -- the table of wrapped functions ---------------------------------------

    def wrappers(self) -> dict[str, Callable[..., Any]]:
        w: dict[str, Callable[..., Any]] = {}

        def add(name: str, make: Callable[[], Callable[..., Any]]) -> None:
            if name in self.real:
                w[name] = make()

        for name in ("cudaMalloc", "cudaMallocManaged", "cudaMallocAsync",
                     "cudaMallocFromPoolAsync"):
            add(name, functools.partial(self.alloc_wrapper, name))
        # pinned and registered host memory: kernels reach it through its device pointer
        for name in ("cudaMallocHost", "cudaHostAlloc"):
            add(name, functools.partial(self.mapped_wrapper, name))
        add("cudaFreeHost", functools.partial(self.unmapped_wrapper, "cudaFreeHost"))
        if "cudaHostGetDevicePointer" in self.real:
            add("cudaHostRegister", functools.partial(
                self.register_wrapper, "cudaHostRegister", "cudaHostGetDevicePointer"))
            add("cudaHostUnregister", functools.partial(
                self.unregister_wrapper, "cudaHostUnregister", "cudaHostGetDevicePointer"))
        add("cudaMallocPitch", functools.partial(self.pitch_wrapper, "cudaMallocPitch"))
        for name in ("cudaFree", "cudaFreeAsync"):
            add(name, functools.partial(self.free_wrapper, name))

        sides = self._copy_sides

        def copy2d(d, dp, src, sp, wd, h, k, *stream):
            return sides(d, _extent(dp, wd, h), src, _extent(sp, wd, h), k)

        copies: dict[str, tuple[Ranges, bool]] = {
            # cudaMemcpy(dst, src, count, kind[, stream])
            "cudaMemcpy": (lambda d, src, n, k: sides(d, size(n), src, size(n), k), True),
            "cudaMemcpyAsync": (lambda d, src, n, k, st: sides(d, size(n), src, size(n), k),
                                False),
            # cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind[, stream])
            "cudaMemcpy2D": (copy2d, True),
            "cudaMemcpy2DAsync": (copy2d, False),
            # cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count[, stream])
            "cudaMemcpyPeer": (
                lambda d, dd, src, sd, n: [(address(d), size(n)), (address(src), size(n))], True),
            "cudaMemcpyPeerAsync": (
                lambda d, dd, src, sd, n, st: [(address(d), size(n)), (address(src), size(n))],
                False),
            # cudaMemcpy2DToArray(dst, wOffset, hOffset, src, spitch, width, height, kind[, st])
            "cudaMemcpy2DToArray": (
                lambda a, wo, ho, src, sp, wd, h, k: sides(None, 0, src, _extent(sp, wd, h), k),
                True),
            "cudaMemcpy2DToArrayAsync": (
                lambda a, wo, ho, src, sp, wd, h, k, st: sides(None, 0, src, _extent(sp, wd, h),
                                                               k), False),
            # cudaMemcpyToArray(dst, wOffset, hOffset, src, count, kind[, stream]), and From
            "cudaMemcpyToArray": (
                lambda a, wo, ho, src, n, k: sides(None, 0, src, size(n), k), True),
            "cudaMemcpyToArrayAsync": (
                lambda a, wo, ho, src, n, k, st: sides(None, 0, src, size(n), k), False),
            "cudaMemcpyFromArray": (
                lambda d, a, wo, ho, n, k: sides(d, size(n), None, 0, k), True),
            "cudaMemcpyFromArrayAsync": (
                lambda d, a, wo, ho, n, k, st: sides(d, size(n), None, 0, k), False),
            # cudaMemcpy2DFromArray(dst, dpitch, src, wOffset, hOffset, width, height, kind[, st])
            "cudaMemcpy2DFromArray": (
                lambda d, dp, a, wo, ho, wd, h, k: sides(d, _extent(dp, wd, h), None, 0, k),
                True),
            "cudaMemcpy2DFromArrayAsync": (
                lambda d, dp, a, wo, ho, wd, h, k, st: sides(d, _extent(dp, wd, h), None, 0, k),
                False),
            # cudaMemset(devPtr, value, count[, stream])
            "cudaMemset": (lambda p, v, n: [(address(p), size(n))], True),
            "cudaMemsetAsync": (lambda p, v, n, st: [(address(p), size(n))], False),
            # cudaMemset2D(devPtr, pitch, value, width, height[, stream])
            "cudaMemset2D": (lambda p, pt, v, wd, h: [(address(p), _extent(pt, wd, h))], True),
            "cudaMemset2DAsync": (
                lambda p, pt, v, wd, h, st: [(address(p), _extent(pt, wd, h))], False),
            # managed memory: cudaMemPrefetchAsync(devPtr, count, ...),
            # cudaMemAdvise(devPtr, count, ...), cudaStreamAttachMemAsync(stream, devPtr, length, ..)
            "cudaMemPrefetchAsync": (lambda p, n, *rest: [(address(p), int(n))], False),
            "cudaMemAdvise": (lambda p, n, *rest: [(address(p), int(n))], False),
            "cudaStreamAttachMemAsync": (lambda st, p, n, f: [(address(p), int(n))], False),
        }
        for name, (ranges, sync) in copies.items():
            add(name, functools.partial(self.range_wrapper, name, ranges, sync))
        for name in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                     "cudaStreamQuery", "cudaEventQuery"):
            add(name, functools.partial(self.sync_wrapper, name))
        add("cudaDeviceReset", self.device_reset_wrapper)
        for name, index, n_out in (("cudaGraphAddKernelNode", 3, 1),
                                   ("cudaGraphKernelNodeSetParams", 1, 0),
                                   ("cudaGraphExecKernelNodeSetParams", 2, 0)):
            add(name, functools.partial(self.graph_kernel_node_wrapper, name, index, n_out))
        return w

    def graph_kernel_node_wrapper(self, name: str, index: int, n_out: int) -> Callable[..., Any]:
        """``cudaGraphAddKernelNode`` (``cudaGraphKernelNodeSetParams``,
        ``cudaGraphExecKernelNodeSetParams``): the node's parameters, argument
        ``index``, get the program's arguments laid out for the instrumented
        kernel (as the driver door's twin does); each launch of the node is
        then a checked ``cuLaunchKernel``."""
        real = self.real[name]
        engine = self.engine
        failed = (None,) * n_out
        kept: list[Any] = []  # the argument copies live as long as the door

        def wrapper(*args):
            pNodeParams = args[index]
            if getattr(engine.driver, "set_graph_calls", None) is None:
                unrouted_graph_node(engine, name)
                return (cudaError_t.cudaErrorNotSupported, *failed)
            try:
                array = engine.graph_kernel_params(int(pNodeParams.func),
                                                   pNodeParams.kernelParams, pNodeParams.extra)
            except (AttributeError, TypeError):
                return real(*args)
            except ParamError:
                return (self.invalid, *failed)
            if array is None:
                return real(*args)
            node = cudaKernelNodeParams()
            node.func, node.gridDim, node.blockDim = (pNodeParams.func, pNodeParams.gridDim,
                                                      pNodeParams.blockDim)
            node.sharedMemBytes = pNodeParams.sharedMemBytes
            node.kernelParams, node.extra = array.address, 0
            kept.append(array)
            return real(*args[:index], node, *args[index + 1:])

        return wrapper

    def device_reset_wrapper(self) -> Callable[..., Any]:
        """``cudaDeviceReset()`` destroys the current device's primary context."""
        real = self.real["cudaDeviceReset"]
        engine = self.engine

        def wrapper():
            err, device = engine.driver.cuCtxGetDevice()
            context = engine.primary_context(device) if err == engine.E.CUDA_SUCCESS else None
            engine.context_ending()
            result = real()
            if result[0] == self.ok and context is not None:
                engine.context_destroyed(context)
            return result

        return wrapper
