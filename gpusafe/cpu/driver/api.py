"""How a driver method becomes a cuda-python call: :func:`api` wraps an
implementation that returns its outputs (or raises :class:`~.state.Fail`)
into a method that returns cuda-python's tuple ``(CUresult, *outputs)``, under
the device's lock, recording the failure for ``last_error_detail``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as _real
from cuda.bindings.driver import CUresult

from ..bindings import api_functions, implements
from .state import DriverBase, Fail

REAL_FUNCTIONS: frozenset[str] = api_functions(_real, "cu")
"""Names of the functions of cuda.bindings.driver (implemented here or not)."""

_OK = CUresult.CUDA_SUCCESS


def api(n_out: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make a ``cu*`` method of a driver with ``n_out`` outputs."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = fn.__name__
        if name not in REAL_FUNCTIONS:
            raise TypeError(f"{name} is not a function of cuda.bindings.driver")

        @functools.wraps(fn)
        def wrapper(self: DriverBase, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
            with self._lock:
                try:
                    out = fn(self, *args, **kwargs)
                except Fail as f:
                    self._record_error(f)
                    return (f.result,) + (None,) * n_out
            if n_out == 0:
                return (_OK,)
            if n_out == 1:
                return (_OK, out)
            return (_OK, *out)

        implements(wrapper, _real, name, "gpusafe.cpu.driver")
        return wrapper

    return deco
