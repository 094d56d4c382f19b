"""Backends: what serves a checked program's CUDA calls.

A backend is an object that carries its properties; nothing branches on a
backend's name.  :class:`~gpusafe.backends.cpu.CpuBackend` is gpusafe's CPU
device (no GPU needed), :class:`~gpusafe.backends.cuda.CudaBackend` the real
driver.
"""

from __future__ import annotations

from typing import Any, Protocol


class Backend(Protocol):
    name: str  # "cpu" or "cuda": what the report's ``device`` field says of the kind
    synchronous: bool  # every launch has finished when its call returns
    driver: Any  # an object with cuda.bindings.driver's functions
    runtime: Any  # an object with cuda.bindings.runtime's functions


def open_backend(kind: str) -> Backend:
    """The backend for ``--device cpu`` or ``--device cuda``."""
    if kind == "cpu":
        from .cpu import CpuBackend

        return CpuBackend()
    from .cuda import CudaBackend

    return CudaBackend()
