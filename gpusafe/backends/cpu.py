"""The CPU device as a backend: a fresh device of its own for the checked
process (``devices`` of them, in one address space, with ``--cpu-devices``).  Under checking its memory applies no red zone and no quarantine,
because the engine's registry applies that policy (once) to every
allocation; with checking off (``--no-check``) it keeps its own, so a small
overrun behaves as on a GPU instead of faulting.

gpusafe's launch records live in the device's memory directly, outside every
context: a launch that faults makes its context's error sticky, and the
records written before the fault must still be read."""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import CUresult
from cuda.bindings.runtime import cudaError_t

from gpusafe_instrument.sites import PROVEN_SUFFIX

from ..cpu.driver import Driver
from ..cpu.runtime import Runtime
from ..cpu.scheduler import INTERPRETED

_NOT_SUPPORTED = "CUDA_ERROR_NOT_SUPPORTED"


class _DeviceMemoryUnderLock:
    """The device's memory, used under the device's own lock: the program's
    threads call the driver while gpusafe places and reads its records."""

    def __init__(self, driver: Driver) -> None:
        self._memory = driver.memory
        self._lock = driver._lock  # the lock every driver call holds

    def alloc(self, size: int) -> int:
        with self._lock:
            return self._memory.alloc(size)

    def write(self, address: int, data: Any) -> None:
        with self._lock:
            self._memory.write(address, data)

    def read(self, address: int, size: int) -> bytes:
        with self._lock:
            return self._memory.read(address, size)

    def free(self, address: int) -> None:
        with self._lock:
            self._memory.free(address)


class CpuBackend:
    name = "cpu"
    synchronous = True
    unsupported_results = frozenset({CUresult.CUDA_ERROR_NOT_SUPPORTED,
                                     cudaError_t.cudaErrorNotSupported})
    """The CPU device answers a feature it lacks (a cubin, mapped host memory,
    an instruction it cannot run, ...) with NOT_SUPPORTED and says why in
    ``last_error_detail``."""

    def __init__(self, *, pads: bool = True, kernel_timeout: float | None = None,
                 devices: int = 1) -> None:
        if pads:
            self.driver = Driver(red_zone=0, quarantine=0, kernel_timeout=kernel_timeout,
                                 devices=devices)
        else:
            self.driver = Driver(kernel_timeout=kernel_timeout, devices=devices)
        self.runtime = Runtime(self.driver)
        self.record_memory = _DeviceMemoryUnderLock(self.driver)

    def fault_detail(self) -> str | None:
        return self.driver.last_error_detail()

    def notes(self) -> list[str]:
        """The kernels the JIT was asked to run and left to the interpreter
        (any kernel under ``GPUSAFE_CPU_ENGINE=jit``, a launch worth compiling
        under the default ``auto``): never silent, though the results are the
        same.  A kernel ``auto`` chose to interpret is not named.  A proven
        launch's entry is named as its kernel, which is what the user wrote."""
        named: dict[str, str] = {}
        for kernel, reason in INTERPRETED.items():
            named.setdefault(kernel.removesuffix(PROVEN_SUFFIX), reason)
        return [f"kernel {kernel} ran on the CPU device's interpreter, not its JIT: {reason}"
                for kernel, reason in named.items()]

    def grid_workspace(self) -> int | None:
        return self.driver.grid_workspace()

    def unsupported_reason(self) -> str:
        """The driver's reason (a runtime call fails through the driver, on
        the same thread, so the reason is the driver's too)."""
        detail = self.driver.last_error_detail() or ""
        if detail.startswith(_NOT_SUPPORTED + ": "):
            return detail.removeprefix(_NOT_SUPPORTED + ": ")
        return f"the CPU device answered {_NOT_SUPPORTED} without giving a reason"
