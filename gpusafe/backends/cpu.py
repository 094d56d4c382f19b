"""The CPU device as a backend: a fresh device of its own for the checked
process, whose memory applies no red zone and no quarantine, because the
engine's registry applies that policy (once) to every allocation."""

from __future__ import annotations

from ..cpu.driver import Driver
from ..cpu.runtime import Runtime


class CpuBackend:
    name = "cpu"
    synchronous = True

    def __init__(self) -> None:
        self.driver = Driver(red_zone=0, quarantine=0)
        self.runtime = Runtime(self.driver)
