"""The real CUDA driver and runtime (cuda-python) as a backend: launches are
asynchronous, so violation records are read at synchronisation points.

The doors replace the functions of ``cuda.bindings.driver`` and ``.runtime``
in place, so the backend keeps a snapshot of both modules taken before that:
what it calls are always the real functions."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

from cuda.bindings import driver as _driver
from cuda.bindings import runtime as _runtime


def _snapshot(module: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(**{n: getattr(module, n) for n in dir(module)
                              if not n.startswith("__")})


def _stand_in_gate() -> tuple[Callable[[], None], Callable[[], None]] | None:
    """gpusafe's stand-in driver's ``gpusafe_backend_enter``/``leave`` when
    this process's cuda.bindings reaches the driver through it (a Python
    program on a GPU under ``gpusafe run``: the program's calls are checked
    there, and gpusafe's own, marked by these, go on to the real driver)."""
    path = os.environ.get("GPUSAFE_CHECKED_DRIVER")
    if not path or not os.environ.get("GPUSAFE_REAL_DRIVER"):
        return None
    try:
        # loaded now, before cuda.bindings opens the driver by its soname
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW)
        return lib.gpusafe_backend_enter, lib.gpusafe_backend_leave
    except (OSError, AttributeError):
        return None


def _gated(functions: SimpleNamespace,
           gate: tuple[Callable[[], None], Callable[[], None]]) -> SimpleNamespace:
    """Each function marked, for the stand-in driver, as gpusafe's own call."""
    enter, leave = gate

    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            enter()
            try:
                return function(*args, **kwargs)
            finally:
                leave()
        return call

    return SimpleNamespace(**{n: mark(f) if callable(f) and not isinstance(f, type) else f
                              for n, f in vars(functions).items()})


class CudaBackend:
    name = "cuda"
    synchronous = False
    record_memory = None  # through the driver API, in the launch's context
    unsupported_results: frozenset = frozenset()  # the GPU's answers are the program's

    def __init__(self) -> None:
        self.driver = _snapshot(_driver)
        self.runtime = _snapshot(_runtime)
        gate = _stand_in_gate()
        if gate is not None:
            self.driver = _gated(self.driver, gate)
            self.runtime = _gated(self.runtime, gate)
            from ..native.frameworks import install_gpu_hooks

            install_gpu_hooks()  # frameworks that call the driver from C hand it PTX

    def fault_detail(self) -> str | None:
        return None

    def unsupported_reason(self) -> str:
        return ""

    def notes(self) -> list[str]:
        return []

    def grid_workspace(self) -> int | None:
        """Unknown: the driver places it and tells only the kernel (in
        ``%envreg1:%envreg2``), so a checked kernel's cooperative launch is
        refused as unimplemented."""
        return None
