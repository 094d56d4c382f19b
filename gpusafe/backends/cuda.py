"""The real CUDA driver and runtime (cuda-python) as a backend: launches are
asynchronous, so violation records are read at synchronisation points.

The doors replace the functions of ``cuda.bindings.driver`` and ``.runtime``
in place, so the backend keeps a snapshot of both modules taken before that:
what it calls are always the real functions."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

from cuda.bindings import driver as _driver
from cuda.bindings import runtime as _runtime


def _snapshot(module: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(**{n: getattr(module, n) for n in dir(module)
                              if not n.startswith("__")})


class CudaBackend:
    name = "cuda"
    synchronous = False
    record_memory = None  # through the driver API, in the launch's context
    unsupported_results: frozenset = frozenset()  # the GPU's answers are the program's

    def __init__(self) -> None:
        self.driver = _snapshot(_driver)
        self.runtime = _snapshot(_runtime)

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
