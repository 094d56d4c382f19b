"""Interposition of ``cuda.bindings.driver``: driver calls in, registry and
launch operations out.

Like AddressSanitizer's interceptors, the wrappers hold no policy: they
translate a call into questions to the registry (is this free, this copy,
this argument good?) and to the launch machinery (instrument this module,
build this launch's context), act on the answer, and call the backend — the
real driver, or the CPU device's driver surface, which has the same API.

The module's attributes are replaced in place before the program runs, so
every import style sees the wrappers: ``from cuda.bindings import driver``,
``import cuda.bindings.driver as cuda``, ``from cuda.bindings.driver import
cuMemAlloc``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .host_checks import HostChecks
from .registry import program_site

_INSTALLED: dict[str, Any] = {}


def _backend(device: str) -> ModuleType:
    if device == "cpu":
        from .cpu import driver

        return driver
    from cuda.bindings import driver

    return driver


def _unimplemented(name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{name} is not implemented by gpusafe's CPU device; run with a GPU "
            "(--device cuda) to use it")

    call.__name__ = name
    return call


class Interposer(HostChecks):
    """The checking layer between the program and a backend driver module."""

    def __init__(self, session, backend: ModuleType, real: dict[str, Any]) -> None:
        from .launch import LaunchManager

        super().__init__(session, real, backend.CUresult.CUDA_SUCCESS,
                         backend.CUresult.CUDA_ERROR_INVALID_VALUE)
        self.launches = LaunchManager(session, backend, real)

    def drain(self) -> None:
        self.launches.drain()

    def host_alloc_wrapper(self, name: str) -> Callable[..., Any]:
        """Pinned host memory: with unified addressing a kernel may read it."""
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(bytesize, *rest):
            result = real(bytesize, *rest)
            if result[0] == self.ok and int(bytesize) > 0:
                self.registry.mapped(int(result[1]), int(bytesize), name, program_site(2))
            return result

        return wrapper

    def host_free_wrapper(self) -> Callable[..., Any]:
        real = self.real["cuMemFreeHost"]

        @functools.wraps(real)
        def wrapper(p):
            result = real(p)
            if result[0] == self.ok:
                self.registry.unmapped([int(p)])
            return result

        return wrapper

    # -- the table of wrapped functions ---------------------------------------

    def wrappers(self) -> dict[str, Callable[..., Any]]:
        w: dict[str, Callable[..., Any]] = {}
        have = self.real

        def add(name: str, make: Callable[[], Callable[..., Any]]) -> None:
            if name in have:
                w[name] = make()

        for name in ("cuMemAlloc", "cuMemAllocManaged", "cuMemAllocAsync"):
            add(name, functools.partial(self.alloc_wrapper, name))
        add("cuMemAllocPitch", functools.partial(self.pitch_wrapper, "cuMemAllocPitch"))
        for name in ("cuMemAllocHost", "cuMemHostAlloc"):
            add(name, functools.partial(self.host_alloc_wrapper, name))
        add("cuMemFreeHost", self.host_free_wrapper)
        for name in ("cuMemFree", "cuMemFreeAsync"):
            add(name, functools.partial(self.free_wrapper, name))

        def dst(n_index: int, width: int = 1):
            return lambda *a: [(int(a[0]), int(a[n_index]) * width)]

        copies = {
            "cuMemcpyHtoD": (lambda *a: [(int(a[0]), int(a[2]))], True),
            "cuMemcpyHtoDAsync": (lambda *a: [(int(a[0]), int(a[2]))], False),
            "cuMemcpyDtoH": (lambda *a: [(int(a[1]), int(a[2]))], True),
            "cuMemcpyDtoHAsync": (lambda *a: [(int(a[1]), int(a[2]))], False),
            "cuMemcpyDtoD": (lambda *a: [(int(a[0]), int(a[2])), (int(a[1]), int(a[2]))], True),
            "cuMemcpyDtoDAsync": (
                lambda *a: [(int(a[0]), int(a[2])), (int(a[1]), int(a[2]))], False),
            "cuMemsetD8": (dst(2, 1), True),
            "cuMemsetD16": (dst(2, 2), True),
            "cuMemsetD32": (dst(2, 4), True),
            "cuMemsetD8Async": (dst(2, 1), False),
            "cuMemsetD16Async": (dst(2, 2), False),
            "cuMemsetD32Async": (dst(2, 4), False),
        }
        for name, (ranges, sync) in copies.items():
            add(name, functools.partial(self.range_wrapper, name, ranges, sync))
        for name in ("cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
                     "cuStreamQuery", "cuEventQuery"):
            add(name, functools.partial(self.sync_wrapper, name))
        w.update(self.launches.wrappers())
        return w


_ACTIVE: Interposer | None = None


def install(session) -> None:
    """Replace the functions of ``cuda.bindings.driver`` with checked ones."""
    global _ACTIVE
    try:
        from cuda.bindings import driver as module
    except ImportError:
        return  # this Python has no cuda-python: nothing the program can call
    backend = _backend(session.options.device)
    names = [n for n in dir(module) if n.startswith("cu") and callable(getattr(module, n))
             and not isinstance(getattr(module, n), type)]
    real: dict[str, Any] = {}
    for name in names:
        impl = getattr(backend, name, None)
        real[name] = impl if impl is not None else _unimplemented(name)
    table = dict(real)
    if session.options.check:
        _ACTIVE = Interposer(session, backend, real)
        table.update(_ACTIVE.wrappers())
    for name, fn in table.items():
        _INSTALLED[name] = getattr(module, name)
        setattr(module, name, fn)
    from .interposer_runtime import install_runtime

    install_runtime(session, _ACTIVE)  # the cuda.bindings.runtime calls, same registry


def drain_all(session) -> None:
    if _ACTIVE is not None:
        _ACTIVE.launches.drain()
