"""What every group of ``cuda*`` calls shares: the driver under the runtime,
the calling thread's last error, the implicit primary context, and
:func:`api`, which makes a method a cuda-python call returning
``(cudaError_t, *outputs)``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from cuda.bindings import runtime as _real
from cuda.bindings.driver import CUdevice, CUevent, CUresult, CUstream
from cuda.bindings.runtime import cudaError_t, cudaEvent_t, cudaStream_t

from ...cudaapi import args as _args
from ..bindings import api_functions, implements
from ..driver import Driver

REAL_FUNCTIONS: frozenset[str] = api_functions(_real, "cuda")
"""Names of the functions of cuda.bindings.runtime (implemented here or not)."""

_OK = cudaError_t.cudaSuccess


class Fail(Exception):
    """Ends a runtime call with ``error``."""

    def __init__(self, error: cudaError_t) -> None:
        super().__init__(error.name)
        self.error = error


def to_cuda_error(result: CUresult) -> cudaError_t:
    """The runtime's error code for a driver ``CUresult``."""
    try:
        return cudaError_t(int(result))
    except ValueError:
        return cudaError_t.cudaErrorUnknown


def check(result: tuple[Any, ...]) -> Any:
    """The outputs of a driver call, or Fail with its runtime error."""
    if result[0] != CUresult.CUDA_SUCCESS:
        raise Fail(to_cuda_error(result[0]))
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def handle(value: Any, kind: type = cudaStream_t) -> int:
    """A stream (or, with ``kind=cudaEvent_t``, an event) argument as
    cuda-python converts it: None is 0, a handle object its value, anything
    else through the handle type (so a str is the same TypeError)."""
    if isinstance(value, _DRIVER_TWINS[kind]):
        return int(value)  # the runtime takes the driver's handle objects too
    return _args.handle_value(value, kind)


_DRIVER_TWINS = {cudaStream_t: CUstream, cudaEvent_t: CUevent}


def device_ordinal(device: Any) -> int:
    return _args.c_int(device, "int", "device")


def api(n_out: int, records: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make a ``cuda*`` method with ``n_out`` outputs; a failure sets the thread's
    last error unless ``records`` is false (the error queries themselves)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = fn.__name__
        if name not in REAL_FUNCTIONS:
            raise TypeError(f"{name} is not a function of cuda.bindings.runtime")

        @functools.wraps(fn)
        def wrapper(self: RuntimeBase, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
            try:
                out = fn(self, *args, **kwargs)
            except Fail as f:
                if records:
                    self._tls.last_error = f.error
                return (f.error,) + (None,) * n_out
            if n_out == 0:
                return (_OK,)
            if n_out == 1:
                return (_OK, out)
            return (_OK, *out)

        implements(wrapper, _real, name, "gpusafe.cpu.runtime")
        return wrapper

    return deco


class RuntimeBase:
    """The runtime of one CPU device: the driver it calls and per-thread errors."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self._tls = threading.local()
        self._held_primaries: dict[int, Any] = {}  # device -> its primary context

    def _last_error(self) -> cudaError_t:
        return getattr(self._tls, "last_error", _OK)

    def _init(self) -> None:
        check(self.driver.cuInit(0))

    def _ensure_context(self) -> None:
        """The runtime's implicit context: the current one, else the primary context."""
        self._init()
        current = check(self.driver.cuCtxGetCurrent())
        if int(current) == 0:
            self._make_primary_current(0)

    def _make_primary_current(self, device: int) -> None:
        check(self.driver.cuCtxSetCurrent(self._primary(device)))

    def _primary(self, device: int) -> Any:
        """``device``'s primary context, retained once by the runtime (as the
        real runtime holds each device's primary context it has used)."""
        drv = self.driver
        held = self._held_primaries
        _flags, active = check(drv.cuDevicePrimaryCtxGetState(CUdevice(device)))
        if device not in held or not active:
            held[device] = check(drv.cuDevicePrimaryCtxRetain(CUdevice(device)))
        return held[device]
