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
import numbers
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .registry import program_site

_INSTALLED: dict[str, Any] = {}

Ranges = Callable[..., list[tuple[int | None, int]]]


def _backend(device: str, module: ModuleType) -> ModuleType:
    if device == "cpu":
        from .cpu import runtime

        return runtime
    return module


def _address(value: Any) -> int | None:
    """A device address argument as an int; None for a host buffer object."""
    if value is None:
        return 0
    if isinstance(value, numbers.Integral):
        return int(value)
    if hasattr(value, "getPtr"):  # cuda-python handle types: CUdeviceptr, ...
        return int(value)
    return None


def _extent(pitch: Any, width: Any, height: Any) -> int:
    """Bytes spanned by a 2D region: full rows but the last, which is ``width`` long."""
    h = int(height)
    return int(pitch) * (h - 1) + int(width) if h > 0 and int(width) > 0 else 0


class RuntimeInterposer:
    """The checking layer between the program and a backend runtime module."""

    def __init__(self, session, real: dict[str, Any], launches, kinds) -> None:
        self.session = session
        self.registry = session.registry
        self.real = real
        self.launches = launches  # the driver interposer's LaunchManager (drains)
        self.K = kinds  # cudaMemcpyKind
        from cuda.bindings.runtime import cudaError_t

        self.E = cudaError_t

    def _drain(self) -> None:
        if self.launches is not None:
            self.launches.drain()

    # -- allocation --------------------------------------------------------

    def alloc_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(size, *rest):
            n = int(size)
            if n == 0:
                return real(size, *rest)  # a null pointer (or the backend's error)
            result = real(reg.reserve_size(n), *rest)
            if result[0] == self.E.cudaSuccess and result[1]:
                reg.allocated(int(result[1]), n, name, program_site(2))
            return result

        return wrapper

    def cudaMallocPitch(self):  # noqa: N802 (the runtime's name)
        real = self.real["cudaMallocPitch"]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(width, height):
            w, h = int(width), int(height)
            if w * h == 0:
                return real(width, height)
            # The red zone goes after the last row: ask for extra rows.
            extra_rows = -(-reg.padding // w) if reg.padding else 0
            result = real(w, h + extra_rows)
            if result[0] == self.E.cudaSuccess and result[1]:
                reg.allocated(int(result[1]), int(result[2]) * h, "cudaMallocPitch",
                              program_site(2))
            return result

        return wrapper

    def free_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(devPtr, *rest):
            address = _address(devPtr)
            if not address:
                return real(devPtr, *rest)  # cudaFree(0) is a documented no-op
            verdict = reg.free(address, name, program_site(2))
            if verdict.violation is not None:
                self.session.host_violation(verdict.violation)
                return (self.E.cudaErrorInvalidValue,)
            for base in verdict.release:
                real(base, *rest)
            return (self.E.cudaSuccess,)

        return wrapper

    # -- copies and memsets -------------------------------------------------

    def range_wrapper(self, name: str, ranges: Ranges, sync: bool) -> Callable[..., Any]:
        """A call touching device ranges ``ranges(*args)`` -> [(address or None, bytes)]."""
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(*args):
            site = None
            for address, size in ranges(*args):
                if address is None or (reg.find(address) is None
                                       and reg.nearest(address) is None):
                    continue  # host memory, or device memory gpusafe does not track
                site = site or program_site(2)
                v = reg.check_range(address, size, name, site)
                if v is not None:
                    self.session.host_violation(v)
                    return (self.E.cudaErrorInvalidValue,)
            result = real(*args)
            if sync:
                self._drain()
            return result

        return wrapper

    def _copy_sides(self, dst: Any, dst_bytes: int, src: Any, src_bytes: int,
                    kind: Any) -> list[tuple[int | None, int]]:
        """The device side(s) of a copy of ``kind``; with ``cudaMemcpyDefault`` both
        sides, each judged by whether the registry tracks its address."""
        K = self.K
        sides = []
        if kind in (K.cudaMemcpyHostToDevice, K.cudaMemcpyDeviceToDevice, K.cudaMemcpyDefault):
            sides.append((_address(dst), dst_bytes))
        if kind in (K.cudaMemcpyDeviceToHost, K.cudaMemcpyDeviceToDevice, K.cudaMemcpyDefault):
            sides.append((_address(src), src_bytes))
        return sides

    def sync_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            self._drain()
            return result

        return wrapper

    def drain_before(self, name: str) -> Callable[..., Any]:
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(*args, **kwargs):
            self._drain()
            return real(*args, **kwargs)

        return wrapper

    # -- the table of wrapped functions ---------------------------------------

    def wrappers(self) -> dict[str, Callable[..., Any]]:
        w: dict[str, Callable[..., Any]] = {}

        def add(name: str, make: Callable[[], Callable[..., Any]]) -> None:
            if name in self.real:
                w[name] = make()

        for name in ("cudaMalloc", "cudaMallocManaged", "cudaMallocAsync"):
            add(name, functools.partial(self.alloc_wrapper, name))
        add("cudaMallocPitch", self.cudaMallocPitch)
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
            "cudaMemset": (lambda p, v, n: [(_address(p), int(n))], True),
            "cudaMemsetAsync": (lambda p, v, n, st: [(_address(p), int(n))], False),
            # cudaMemset2D(devPtr, pitch, value, width, height[, stream])
            "cudaMemset2D": (lambda p, pt, v, wd, h: [(_address(p), _extent(pt, wd, h))], True),
            "cudaMemset2DAsync": (
                lambda p, pt, v, wd, h, st: [(_address(p), _extent(pt, wd, h))], False),
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
