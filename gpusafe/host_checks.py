"""The wrappers the driver and runtime interposers share.

``cuMemAlloc`` and ``cudaMalloc``, ``cuMemFree`` and ``cudaFree``, the copies
and memsets of both APIs ask the same registry the same questions; only the
result codes and the argument positions differ.  :class:`HostChecks` holds the
one implementation of each wrapper; :mod:`gpusafe.interposer` and
:mod:`gpusafe.interposer_runtime` give it their API's codes and say which
functions get which wrapper.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

from .registry import program_site

Ranges = Callable[..., list[tuple[int | None, int]]]
"""``ranges(*args)``: the device ranges ``[(address or None, bytes)]`` a call touches."""


def address(value: Any) -> int | None:
    """A device address argument as an int; None for a host buffer object."""
    if value is None:
        return 0
    if isinstance(value, numbers.Integral):
        return int(value)
    if hasattr(value, "getPtr"):  # cuda-python handle types: CUdeviceptr, ...
        return int(value)
    return None


class HostChecks:
    """Registry checks around an API's allocation, free, copy and sync calls."""

    null_free_passes = False
    """Whether freeing address 0 goes to the backend unjudged (the runtime
    documents ``cudaFree(0)`` as a no-op)."""

    def __init__(self, session, real: dict[str, Any], ok: Any, invalid: Any) -> None:
        self.session = session
        self.registry = session.registry
        self.real = real  # name -> backend function
        self.ok = ok  # the API's success code
        self.invalid = invalid  # the API's invalid-value code: what a refused call returns

    def drain(self) -> None:
        """Read back finished launches' records (at synchronisation points)."""

    # -- allocation and free -------------------------------------------------

    def alloc_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(bytesize, *rest):
            size = int(bytesize)
            if size == 0:
                return real(bytesize, *rest)  # the backend's own answer to an empty request
            result = real(reg.reserve_size(size), *rest)
            if result[0] == self.ok and result[1]:
                reg.allocated(int(result[1]), size, name, program_site(2))
            return result

        return wrapper

    def pitch_wrapper(self, name: str) -> Callable[..., Any]:
        """``(width, height, *rest) -> (err, ptr, pitch)``: the red zone goes
        after the last row, as extra rows."""
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(width, height, *rest):
            w, h = int(width), int(height)
            if w * h == 0:
                return real(width, height, *rest)
            extra_rows = -(-reg.padding // w) if reg.padding else 0
            result = real(w, h + extra_rows, *rest)
            if result[0] == self.ok and result[1]:
                reg.allocated(int(result[1]), int(result[2]) * h, name, program_site(2))
            return result

        return wrapper

    def free_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(pointer, *rest):
            where = address(pointer)
            if where is None or (where == 0 and self.null_free_passes):
                return real(pointer, *rest)
            verdict = reg.free(where, name, program_site(2))
            if verdict.violation is not None:
                self.session.host_violation(verdict.violation)
                return (self.invalid,)
            for base in verdict.release:
                real(base, *rest)
            return (self.ok,)

        return wrapper

    # -- copies, memsets and synchronisation ----------------------------------

    def range_wrapper(self, name: str, ranges: Ranges, sync: bool) -> Callable[..., Any]:
        real = self.real[name]
        reg = self.registry

        @functools.wraps(real)
        def wrapper(*args):
            site = None
            for where, size in ranges(*args):
                if where is None or (reg.find(where) is None and reg.nearest(where) is None):
                    continue  # host memory, or device memory gpusafe does not track
                site = site or program_site(2)
                v = reg.check_range(where, size, name, site)
                if v is not None:
                    self.session.host_violation(v)
                    return (self.invalid,)
            result = real(*args)
            if sync:
                self.drain()
            return result

        return wrapper

    def sync_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            self.drain()
            return result

        return wrapper

    def drain_before(self, name: str) -> Callable[..., Any]:
        real = self.real[name]

        @functools.wraps(real)
        def wrapper(*args, **kwargs):
            self.drain()
            return real(*args, **kwargs)

        return wrapper
