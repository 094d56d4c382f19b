"""The Python door for ``cuda.bindings.driver``: driver calls in, engine
questions and events out.

Like AddressSanitizer's interceptors, the wrappers hold no policy: they
translate a call into questions to the engine (is this free, this copy good?
what should the driver load for this image? with what arguments does this
launch run?), act on the answer, and call the backend's function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cuda.bindings.driver import (
    CUDA_KERNEL_NODE_PARAMS,
    CUdeviceptr,
    CUlaunchAttributeID,
    CUpointer_attribute,
)

from ..cudaapi.args import handle_value
from ..cudaapi.params import ParamError
from ..engine.callsite import program_site
from ..engine.checking import Engine
from .wrappers import ApiWrappers, Ranges, address, size, unrouted_graph_node


def _name(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class DriverDoor(ApiWrappers):
    """The wrapped functions of ``cuda.bindings.driver``."""

    def __init__(self, engine: Engine, real: dict[str, Any]) -> None:
        E = engine.E
        super().__init__(engine, real, E.CUDA_SUCCESS, E.CUDA_ERROR_INVALID_VALUE)
        self.graphs_routed = False  # set once the backend runs graph nodes through the door
        self.kept: list[Any] = []  # kernel nodes' argument copies live as long as the door

    def address_range_wrapper(self) -> Callable[..., Any]:
        """``cuMemGetAddressRange``: the allocation as the program asked for
        it, never with gpusafe's red zone."""
        real = self.real["cuMemGetAddressRange"]
        engine = self.engine

        def wrapper(dptr):
            result = real(dptr)
            if result[0] == self.ok:
                known = engine.address_range(int(dptr))
                if known is not None:
                    base, size = known
                    return (result[0], type(result[1])(base), size)
            return result

        return wrapper

    def pointer_attribute_wrapper(self, name: str) -> Callable[..., Any]:
        """``cuPointerGetAttribute(s)``: a range as the program asked for it,
        never with gpusafe's red zone (``CU_POINTER_ATTRIBUTE_RANGE_SIZE``)."""
        real = self.real[name]
        engine = self.engine
        range_size = CUpointer_attribute.CU_POINTER_ATTRIBUTE_RANGE_SIZE

        def wrapper(*args):
            result = real(*args)
            if result[0] != self.ok:
                return result
            known = engine.address_range(int(args[-1]))
            if known is None:
                return result
            if name == "cuPointerGetAttribute":
                return (result[0], known[1]) if args[0] == range_size else result
            values = [known[1] if a == range_size else v
                      for a, v in zip(args[1], result[1], strict=True)]
            return (result[0], values)

        return wrapper

    # -- modules ---------------------------------------------------------------

    def load_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        engine = self.engine

        def wrapper(image, *rest):
            plan = engine.plan_module(image, program_site())
            result = real(plan.image, *rest)
            if result[0] == self.ok:
                engine.module_loaded(int(result[1]), plan)
            return result

        return wrapper

    def load_file_wrapper(self) -> Callable[..., Any]:
        """``cuModuleLoad(fname)``: read the file and load it as data, so a PTX
        file is instrumented like an in-memory image."""
        load_data = self.load_wrapper("cuModuleLoadData")
        real = self.real["cuModuleLoad"]

        def wrapper(fname):
            try:
                with open(_name(fname), "rb") as f:
                    image = f.read()
            except (OSError, TypeError, UnicodeDecodeError):
                return real(fname)  # the driver's own error for a bad name
            return load_data(image + b"\0")

        return wrapper

    def get_function_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuModuleGetFunction"]
        engine = self.engine

        def wrapper(hmod, name):
            result = real(hmod, name)
            if result[0] == self.ok:
                engine.function_found(int(hmod), _name(name), int(result[1]))
            return result

        return wrapper

    def get_global_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuModuleGetGlobal"]
        engine = self.engine

        def wrapper(hmod, name):
            result = real(hmod, name)
            if result[0] == self.ok and int(result[2]) > 0:
                engine.global_taken(int(hmod), int(result[1]), int(result[2]), program_site())
            return result

        return wrapper

    def unload_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuModuleUnload"]
        engine = self.engine

        def wrapper(hmod):
            engine.drain()
            result = real(hmod)
            if result[0] == self.ok:
                engine.module_unloaded(int(hmod))
            return result

        return wrapper

    # -- launches --------------------------------------------------------------

    def _node_arguments(self, name: str, function: Any, kernel_params: Any,
                        extra: Any) -> tuple[Any, Any] | None:
        """A kernel node's arguments (graph node, updated node or captured
        launch): the program's laid out for the instrumented kernel, whose
        launch-context slot :meth:`Engine.launch` fills at each graph launch;
        the program's own for a kernel that runs unchecked.  None when the
        backend cannot route graph kernels through the door (reported)."""
        if not self.graphs_routed:
            unrouted_graph_node(self.engine, name)
            return None
        try:
            array = self.engine.graph_kernel_params(function, kernel_params, extra)
        except (AttributeError, TypeError):
            return kernel_params, extra
        except ParamError:
            return (self.invalid, None)
        if array is None:
            return kernel_params, extra
        self.kept.append(array)
        return array.address, 0

    def launch_wrapper(self) -> Callable[..., Any]:
        """``cuLaunchKernel``: a checked launch, or on a capturing stream a
        kernel node (checked at each launch of its graph)."""
        real = self.real["cuLaunchKernel"]
        engine = self.engine

        def wrapper(f, gx, gy, gz, bx, by, bz, shared, stream, kernelParams, extra):
            if self._capturing(stream):
                args = self._node_arguments("cuLaunchKernel", f, kernelParams, extra)
                if args is None:
                    return (engine.E.CUDA_ERROR_NOT_SUPPORTED,)
                if args[0] is self.invalid:
                    return (self.invalid,)
                return real(f, gx, gy, gz, bx, by, bz, shared, stream, *args)
            return engine.launch(
                f, shared, kernelParams, extra,
                lambda kp, ex, fn=f: real(fn, gx, gy, gz, bx, by, bz, shared, stream, kp, ex),
                program_site, dims=((gx, gy, gz), (bx, by, bz)))

        return wrapper

    def cooperative_launch_wrapper(self) -> Callable[..., Any]:
        """``cuLaunchCooperativeKernel``: checked like any launch (it has no
        ``extra``; the instrumented kernel's arguments go in kernelParams)."""
        real = self.real["cuLaunchCooperativeKernel"]
        engine = self.engine

        def wrapper(f, gx, gy, gz, bx, by, bz, shared, stream, kernelParams):
            return engine.launch(
                f, shared, kernelParams, 0,
                lambda kp, ex, fn=f: real(fn, gx, gy, gz, bx, by, bz, shared, stream, kp),
                program_site, cooperative="cuLaunchCooperativeKernel",
                dims=((gx, gy, gz), (bx, by, bz)))

        return wrapper

    def launch_ex_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuLaunchKernelEx"]
        engine = self.engine

        def wrapper(config, f, kernelParams, extra):
            if hasattr(config, "hStream") and self._capturing(config.hStream):
                args = self._node_arguments("cuLaunchKernelEx", f, kernelParams, extra)
                if args is None:
                    return (engine.E.CUDA_ERROR_NOT_SUPPORTED,)
                if args[0] is self.invalid:
                    return (self.invalid,)
                return real(config, f, *args)
            shared = int(config.sharedMemBytes) if config is not None else 0
            dims = None if config is None else tuple(
                tuple(getattr(config, f"{what}Dim{axis}", None) for axis in "XYZ")
                for what in ("grid", "block"))
            return engine.launch(f, shared, kernelParams, extra,
                                 lambda kp, ex, fn=f: real(config, fn, kp, ex),
                                 program_site,
                                 cooperative="cuLaunchKernelEx" if _cooperative(config) else "",
                                 dims=dims)

        return wrapper

    def graph_kernel_node_wrapper(self, name: str, index: int, n_out: int) -> Callable[..., Any]:
        """``cuGraphAddKernelNode`` (``cuGraphKernelNodeSetParams``,
        ``cuGraphExecKernelNodeSetParams``): the node's parameters, argument
        ``index``, get the program's arguments laid out for the instrumented
        kernel, so the backend can copy them; each launch of the node then
        goes through :meth:`launch_wrapper`."""
        real = self.real[name]
        failed = (None,) * n_out

        def wrapper(*args):
            nodeParams = args[index]
            try:
                found = self._node_arguments(name, nodeParams.func, nodeParams.kernelParams,
                                             nodeParams.extra)
            except AttributeError:
                return real(*args)  # not a CUDA_KERNEL_NODE_PARAMS: the backend's TypeError
            if found is None:
                return (self.engine.E.CUDA_ERROR_NOT_SUPPORTED, *failed)
            if found[0] is self.invalid:
                return (self.invalid, *failed)
            node = CUDA_KERNEL_NODE_PARAMS()
            for field in ("func", "gridDimX", "gridDimY", "gridDimZ", "blockDimX", "blockDimY",
                          "blockDimZ", "sharedMemBytes"):
                setattr(node, field, getattr(nodeParams, field))
            node.kernelParams, node.extra = found
            return real(*args[:index], node, *args[index + 1:])

        return wrapper

    # -- virtual memory management -----------------------------------------------

    def map_wrapper(self) -> Callable[..., Any]:
        """``cuMemMap(ptr, size, offset, handle, flags)``: each mapping is an
        allocation of its own, freed by ``cuMemUnmap``."""
        real = self.real["cuMemMap"]
        engine = self.engine

        def wrapper(ptr, size, *rest):
            result = real(ptr, size, *rest)
            if result[0] == self.ok:
                engine.allocated("cuMemMap", int(ptr), int(size), program_site())
            return result

        return wrapper

    def unmap_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuMemUnmap"]
        free = self.real["cuMemFree"]
        engine = self.engine

        def wrapper(ptr, size):
            engine.drain()
            result = real(ptr, size)
            if result[0] == self.ok:
                for base in engine.range_unmapped("cuMemUnmap", int(ptr), int(size),
                                                  program_site()):
                    free(base)
            return result

        return wrapper

    # -- contexts --------------------------------------------------------------

    def ctx_destroy_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuCtxDestroy"]
        engine = self.engine

        def wrapper(ctx):
            engine.context_ending()
            result = real(ctx)
            if result[0] == self.ok:
                engine.context_destroyed(int(ctx))
            return result

        return wrapper

    def primary_ctx_wrapper(self, name: str) -> Callable[..., Any]:
        """``cuDevicePrimaryCtxRelease``/``Reset(dev)``: the primary context
        is destroyed by a reset, or by the release of its last reference."""
        real = self.real[name]
        engine = self.engine

        def wrapper(dev):
            context = engine.primary_context(dev)
            engine.context_ending()
            result = real(dev)
            if result[0] == self.ok and context is not None \
                    and engine.primary_context(dev) != context:
                engine.context_destroyed(context)
            return result

        return wrapper

    # -- the table -------------------------------------------------------------

    def wrappers(self) -> dict[str, Callable[..., Any]]:
        makers: dict[str, Callable[[], Callable[..., Any]]] = {}
        for name in ("cuMemAlloc", "cuMemAllocManaged", "cuMemAllocAsync",
                     "cuMemAllocFromPoolAsync"):
            makers[name] = functools.partial(self.alloc_wrapper, name)
        makers["cuMemAllocPitch"] = functools.partial(self.pitch_wrapper, "cuMemAllocPitch")
        for name in ("cuMemAllocHost", "cuMemHostAlloc"):
            makers[name] = functools.partial(self.mapped_wrapper, name)
        makers["cuMemFreeHost"] = functools.partial(self.unmapped_wrapper, "cuMemFreeHost")
        if "cuMemHostGetDevicePointer" in self.real:
            makers["cuMemHostRegister"] = functools.partial(
                self.register_wrapper, "cuMemHostRegister", "cuMemHostGetDevicePointer")
            makers["cuMemHostUnregister"] = functools.partial(
                self.unregister_wrapper, "cuMemHostUnregister", "cuMemHostGetDevicePointer")
        for name in ("cuMemFree", "cuMemFreeAsync"):
            makers[name] = functools.partial(self.free_wrapper, name)
        for name, (ranges, sync) in _COPIES.items():
            makers[name] = functools.partial(self.range_wrapper, name, ranges, sync)
        for name in ("cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
                     "cuStreamQuery", "cuEventQuery"):
            makers[name] = functools.partial(self.sync_wrapper, name)
        for name in ("cuModuleLoadData", "cuModuleLoadDataEx"):
            makers[name] = functools.partial(self.load_wrapper, name)
        makers.update({
            "cuModuleLoad": self.load_file_wrapper,
            "cuModuleGetFunction": self.get_function_wrapper,
            "cuModuleGetGlobal": self.get_global_wrapper,
            "cuModuleUnload": self.unload_wrapper,
            "cuLaunchKernel": self.launch_wrapper,
            "cuLaunchKernelEx": self.launch_ex_wrapper,
            "cuLaunchCooperativeKernel": self.cooperative_launch_wrapper,
            "cuGraphAddKernelNode": functools.partial(
                self.graph_kernel_node_wrapper, "cuGraphAddKernelNode", 3, 1),
            "cuGraphKernelNodeSetParams": functools.partial(
                self.graph_kernel_node_wrapper, "cuGraphKernelNodeSetParams", 1, 0),
            "cuGraphExecKernelNodeSetParams": functools.partial(
                self.graph_kernel_node_wrapper, "cuGraphExecKernelNodeSetParams", 2, 0),
            "cuCtxDestroy": self.ctx_destroy_wrapper,
            "cuMemGetAddressRange": self.address_range_wrapper,
            "cuMemMap": self.map_wrapper,
            "cuPointerGetAttribute": functools.partial(self.pointer_attribute_wrapper,
                                                       "cuPointerGetAttribute"),
            "cuPointerGetAttributes": functools.partial(self.pointer_attribute_wrapper,
                                                        "cuPointerGetAttributes"),
            "cuMemUnmap": self.unmap_wrapper,
        })
        for name in ("cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset"):
            makers[name] = functools.partial(self.primary_ctx_wrapper, name)
        wrapped = {name: make() for name, make in makers.items() if name in self.real}
        self._route_graph_nodes(wrapped)
        return wrapped

    def _route_graph_nodes(self, wrapped: dict[str, Callable[..., Any]]) -> None:
        """A backend that runs graph nodes through its own calls (the CPU
        device) runs them through these wrappers instead: each kernel node of
        each ``cuGraphLaunch`` is then a checked launch, each copy a judged one."""
        route = getattr(self.engine.driver, "set_graph_calls", None)
        if route is not None:
            route(wrapped)
            self.graphs_routed = True


def _cooperative(config: Any) -> bool:
    """Whether a ``CUlaunchConfig`` asks for a cooperative launch (the
    launch call itself judges a malformed one)."""
    try:
        attrs = list(config.attrs or ())[:int(config.numAttrs)]
        return any(int(a.id) == int(CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
                   and int(a.value.cooperative) for a in attrs)
    except (AttributeError, TypeError, ValueError):
        return False


def _ptr(value: Any) -> int:
    """A ``CUdeviceptr`` argument, converted as cuda-python converts it."""
    return handle_value(value, CUdeviceptr)


def _pitched(p: Any, depth: Any) -> list[tuple[int | None, int]]:
    """The pointer sides of a CUDA_MEMCPY2D/3D (``cuMemcpy2D``, ``cuMemcpy3D``):
    each the bytes from its first to its last byte copied (an array side is
    no memory of the allocation table); a struct the bindings would refuse
    gives none, the backend's own error follows."""
    try:
        width, height, depth = int(p.WidthInBytes), int(p.Height), int(depth)
        if not (width and height and depth):
            return []
        out: list[tuple[int | None, int]] = []
        for side in ("src", "dst"):
            kind = int(getattr(p, f"{side}MemoryType") or 0)
            if kind == 3 or kind == 0:  # CU_MEMORYTYPE_ARRAY, or unset
                continue
            base = int(getattr(p, f"{side}Host") if kind == 1 else getattr(p, f"{side}Device"))
            pitch = int(getattr(p, f"{side}Pitch")) or width
            rows = int(getattr(p, f"{side}Height", 0) or 0) or height
            start = (base + int(getattr(p, f"{side}XInBytes")) + int(getattr(p, f"{side}Y")) * pitch
                     + int(getattr(p, f"{side}Z", 0) or 0) * pitch * rows)
            out.append((start, (depth - 1) * pitch * rows + (height - 1) * pitch + width))
        return out
    except (AttributeError, TypeError, ValueError):
        return []


def _dst(n_index: int, width: int = 1) -> Ranges:
    return lambda *a: [(_ptr(a[0]), size(a[n_index]) * width)]


_COPIES: dict[str, tuple[Ranges, bool]] = {
    "cuMemcpyHtoD": (lambda *a: [(_ptr(a[0]), size(a[2]))], True),
    "cuMemcpyHtoDAsync": (lambda *a: [(_ptr(a[0]), size(a[2]))], False),
    "cuMemcpyDtoH": (lambda *a: [(_ptr(a[1]), size(a[2]))], True),
    "cuMemcpyDtoHAsync": (lambda *a: [(_ptr(a[1]), size(a[2]))], False),
    "cuMemcpyDtoD": (lambda *a: [(_ptr(a[0]), size(a[2])), (_ptr(a[1]), size(a[2]))], True),
    "cuMemcpyDtoDAsync": (lambda *a: [(_ptr(a[0]), size(a[2])), (_ptr(a[1]), size(a[2]))],
                          False),
    # unified addressing: each side judged when the registry tracks it
    "cuMemcpy": (lambda *a: [(address(a[0]), size(a[2])), (address(a[1]), size(a[2]))], True),
    "cuMemcpyAsync": (
        lambda *a: [(address(a[0]), size(a[2])), (address(a[1]), size(a[2]))], False),
    # cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount[, hStream])
    "cuMemcpyPeer": (lambda *a: [(_ptr(a[0]), size(a[4])), (_ptr(a[2]), size(a[4]))], True),
    "cuMemcpyPeerAsync": (
        lambda *a: [(_ptr(a[0]), size(a[4])), (_ptr(a[2]), size(a[4]))], False),
    "cuMemsetD8": (_dst(2, 1), True),
    "cuMemsetD16": (_dst(2, 2), True),
    "cuMemsetD32": (_dst(2, 4), True),
    "cuMemsetD8Async": (_dst(2, 1), False),
    "cuMemsetD16Async": (_dst(2, 2), False),
    "cuMemsetD32Async": (_dst(2, 4), False),
    # 1D copies between an array and device memory: the device side
    "cuMemcpyDtoA": (lambda *a: [(_ptr(a[2]), size(a[3]))], True),
    "cuMemcpyAtoD": (lambda *a: [(_ptr(a[0]), size(a[3]))], True),
    # 2D and 3D copies (CUDA_MEMCPY2D/3D): their host and device sides
    "cuMemcpy2D": (lambda p: _pitched(p, 1), True),
    "cuMemcpy2DUnaligned": (lambda p: _pitched(p, 1), True),
    "cuMemcpy2DAsync": (lambda p, st: _pitched(p, 1), False),
    "cuMemcpy3D": (lambda p: _pitched(p, getattr(p, "Depth", 0)), True),
    "cuMemcpy3DAsync": (lambda p, st: _pitched(p, getattr(p, "Depth", 0)), False),
    # managed memory: the range prefetched, advised or attached (length 0: all of it)
    "cuMemPrefetchAsync": (lambda *a: [(int(a[0]), int(a[1]))], False),
    "cuMemAdvise": (lambda *a: [(int(a[0]), int(a[1]))], False),
    "cuStreamAttachMemAsync": (lambda *a: [(int(a[1]), int(a[2]))], False),
}
"""Copies and memsets: the device ranges each touches, and whether it
synchronises (a synchronous copy is a drain point)."""
