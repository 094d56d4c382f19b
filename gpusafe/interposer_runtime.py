"""Interposition of ``cuda.bindings.runtime``: the runtime calls that allocate,
free, copy, set memory and synchronise, checked like their driver twins.

The backend is the real runtime (``--device cuda``) or the CPU device's
runtime surface, :mod:`gpusafe.cpu.runtime` (``--device cpu``), which has the
same API and shares one device memory with the CPU driver. The wrappers ask
the same allocation registry as the driver wrappers, so a pointer from
``cudaMalloc`` is checked when it reaches ``cuLaunchKernel``, and a
``cuMemAlloc`` pointer freed twice with ``cudaFree`` is a double free.

A refused call (bad free, copy or memset) is not passed on; it returns the
runtime's invalid-value error, ``cudaErrorInvalidValue``. ``cudaFree(0)`` and
``cudaMalloc(0)`` go to the backend unjudged: the runtime documents the first
as a no-op (the usual way to create the context) and the second as returning
a null pointer.

As for the driver, the module's attributes are replaced in place, so every
import style sees the wrappers: ``from cuda.bindings import runtime``,
``import cuda.bindings.runtime as cudart``, ``from cuda.bindings.runtime
import cudaMalloc`` (after start-up, which is when the program imports).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .host_checks import HostChecks, Ranges, address

_INSTALLED: dict[str, Any] = {}


def _backend(device: str, module: ModuleType) -> ModuleType:
    if device == "cpu":
        from .cpu import runtime

        return runtime
    return module


def _extent(pitch: Any, width: Any, height: Any) -> int:
    """Bytes spanned by a 2D region: full rows but the last, which is ``width`` long."""
    h = int(height)
    return int(pitch) * (h - 1) + int(width) if h > 0 and int(width) > 0 else 0


class RuntimeInterposer(HostChecks):
    """The checking layer between the program and a backend runtime module."""

    null_free_passes = True  # cudaFree(0) is a documented no-op

    def __init__(self, session, real: dict[str, Any], launches, kinds) -> None:
        from cuda.bindings.runtime import cudaError_t

        super().__init__(session, real, cudaError_t.cudaSuccess,
                         cudaError_t.cudaErrorInvalidValue)
        self.launches = launches  # the driver interposer's LaunchManager (drains)
        self.K = kinds  # cudaMemcpyKind

    def drain(self) -> None:
        if self.launches is not None:
            self.launches.drain()

    def _copy_sides(self, dst: Any, dst_bytes: int, src: Any, src_bytes: int,
                    kind: Any) -> list[tuple[int | None, int]]:
        """The device side(s) of a copy of ``kind``; with ``cudaMemcpyDefault`` both
        sides, each judged by whether the registry tracks its address."""
        K = self.K
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

        for name in ("cudaMalloc", "cudaMallocManaged", "cudaMallocAsync"):
            add(name, functools.partial(self.alloc_wrapper, name))
        add("cudaMallocPitch", functools.partial(self.pitch_wrapper, "cudaMallocPitch"))
        for name in ("cudaFree", "cudaFreeAsync"):
            add(name, functools.partial(self.free_wrapper, name))

        sides = self._copy_sides

        def copy2d(d, dp, src, sp, wd, h, k, *stream):
            return sides(d, _extent(dp, wd, h), src, _extent(sp, wd, h), k)

        copies: dict[str, tuple[Ranges, bool]] = {
            # cudaMemcpy(dst, src, count, kind[, stream])
            "cudaMemcpy": (lambda d, src, n, k: sides(d, int(n), src, int(n), k), True),
            "cudaMemcpyAsync": (lambda d, src, n, k, st: sides(d, int(n), src, int(n), k), False),
            # cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind[, stream])
            "cudaMemcpy2D": (copy2d, True),
            "cudaMemcpy2DAsync": (copy2d, False),
            # cudaMemset(devPtr, value, count[, stream])
            "cudaMemset": (lambda p, v, n: [(address(p), int(n))], True),
            "cudaMemsetAsync": (lambda p, v, n, st: [(address(p), int(n))], False),
            # cudaMemset2D(devPtr, pitch, value, width, height[, stream])
            "cudaMemset2D": (lambda p, pt, v, wd, h: [(address(p), _extent(pt, wd, h))], True),
            "cudaMemset2DAsync": (
                lambda p, pt, v, wd, h, st: [(address(p), _extent(pt, wd, h))], False),
        }
        for name, (ranges, sync) in copies.items():
            add(name, functools.partial(self.range_wrapper, name, ranges, sync))
        for name in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                     "cudaStreamQuery", "cudaEventQuery"):
            add(name, functools.partial(self.sync_wrapper, name))
        add("cudaDeviceReset", functools.partial(self.drain_before, "cudaDeviceReset"))
        return w


_ACTIVE: RuntimeInterposer | None = None


def install_runtime(session, interposer) -> None:
    """Replace the functions of ``cuda.bindings.runtime`` with checked ones.

    ``interposer``: the driver's :class:`~gpusafe.interposer.Interposer` (None
    when checking is off), whose launch manager the synchronising calls drain.
    """
    global _ACTIVE
    try:
        from cuda.bindings import runtime as module
    except ImportError:
        return  # this cuda-python has no runtime bindings: nothing the program can call
    from .interposer import _unimplemented

    backend = _backend(session.options.device, module)
    names = [n for n in dir(module) if n.startswith("cuda") and callable(getattr(module, n))
             and not isinstance(getattr(module, n), type)]
    real: dict[str, Any] = {}
    for name in names:
        impl = getattr(backend, name, None)
        real[name] = impl if impl is not None else _unimplemented(name)
    table = dict(real) if backend is not module else {}
    if session.options.check and interposer is not None:
        _ACTIVE = RuntimeInterposer(session, real, interposer.launches, module.cudaMemcpyKind)
        table.update(_ACTIVE.wrappers())
    for name, fn in table.items():
        _INSTALLED[name] = getattr(module, name)
        setattr(module, name, fn)
