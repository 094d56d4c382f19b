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
    record_memory: Any
    """Memory for gpusafe's own launch records (``alloc``/``write``/``read``/
    ``free``) that stays readable after a launch faults and from any thread,
    or None: then the records go through the driver API, in the context of
    the launch."""

    unsupported_results: frozenset[Any]
    """Result codes by which the backend says it lacks what a call asked for
    (the CPU device's ``CUDA_ERROR_NOT_SUPPORTED``): such a call is reported
    as unimplemented.  Empty for a GPU, whose own answers are the program's."""

    def fault_detail(self) -> str | None:
        """What the backend knows of the last failed call (where a fault
        happened), if anything."""

    def unsupported_reason(self) -> str:
        """Why the last call answered with one of ``unsupported_results``."""

    def notes(self) -> list[str]:
        """How the backend ran the program's kernels, where the report should
        say so (the report's ``notes``)."""

    def grid_workspace(self) -> int | None:
        """The device address of the grid workspace cooperative launches use
        (the driver's memory that ``grid.sync()`` counts arrivals in), or
        None when gpusafe cannot know it: a checked cooperative launch needs
        it in the allocation table."""


def open_backend(kind: str, *, pads: bool, kernel_timeout: float | None = None,
                 cpu_devices: int = 1) -> Backend:
    """The backend for ``--device cpu`` or ``--device cuda``; ``pads``: the
    engine applies red zones and quarantine itself (checking is on);
    ``kernel_timeout``: seconds a kernel may run where the backend can stop
    it (the CPU device; a GPU's own watchdog is the driver's);
    ``cpu_devices``: how many devices the CPU device backend has (a GPU
    machine has the devices it has)."""
    if kind == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(pads=pads, kernel_timeout=kernel_timeout, devices=cpu_devices)
    from .cuda import CudaBackend

    return CudaBackend()
