"""The CPU device as a backend: a fresh device of its own for the checked
process.  Under checking its memory applies no red zone and no quarantine,
because the engine's registry applies that policy (once) to every
allocation; with checking off (``--no-check``) it keeps its own, so a small
overrun behaves as on a GPU instead of faulting.

gpusafe's launch records live in the device's memory directly, outside every
context: a launch that faults makes its context's error sticky, and the
records written before the fault must still be read."""

from __future__ import annotations

from ..cpu.driver import Driver
from ..cpu.runtime import Runtime


class CpuBackend:
    name = "cpu"
    synchronous = True

    def __init__(self, *, pads: bool = True) -> None:
        self.driver = Driver(red_zone=0, quarantine=0) if pads else Driver()
        self.runtime = Runtime(self.driver)
        self.record_memory = self.driver.memory

    def fault_detail(self) -> str | None:
        return self.driver.last_error_detail()
