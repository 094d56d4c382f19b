"""TEMPORARY stand-in until the CPU device has Driver instances."""

from __future__ import annotations

from ..cpu import driver as _driver
from ..cpu import runtime as _runtime


class CpuBackend:
    name = "cpu"
    synchronous = True

    def __init__(self) -> None:
        self.driver = _driver
        self.runtime = _runtime
