"""Errors of the CPU device.

A :class:`DeviceError` is what a launch on the CPU device raises when the GPU
would have failed the launch; ``result`` names the ``CUresult`` the driver API
returns for it (``gpusafe.cpu.driver`` maps the name to the enum member).
:class:`InvalidAddress` is a misuse of the memory API by the host (a free of a
pointer that is not an allocation's base, a copy outside an allocation); the
driver turns it into ``CUDA_ERROR_INVALID_VALUE``.
"""

from __future__ import annotations


class DeviceError(Exception):
    """A failure of a kernel launch on the CPU device.  ``ptx_line`` is the
    line of the instruction that failed, where one did: the launch adds the
    source line it was compiled from to the message (the PTX line alone
    points into a module the user may never have seen, the instrumented one)."""

    result = "CUDA_ERROR_UNKNOWN"
    ptx_line: int | None = None


class TrapError(DeviceError):
    """A thread executed ``trap``; the message names the kernel and the PTX line."""

    result = "CUDA_ERROR_LAUNCH_FAILED"


class AssertError(TrapError):
    """A device-side ``assert`` failed (``__assertfail``)."""

    result = "CUDA_ERROR_ASSERT"


class IllegalAddress(DeviceError):
    """An access outside every piece of device memory (no oracle was watching)."""

    result = "CUDA_ERROR_ILLEGAL_ADDRESS"


class MisalignedAddress(DeviceError):
    """An access whose address is not a multiple of its width (no oracle was watching)."""

    result = "CUDA_ERROR_MISALIGNED_ADDRESS"


class StackOverflow(DeviceError):
    """A thread needs more stack than the launch has (a deep or runaway
    recursion): the context's ``CU_LIMIT_STACK_SIZE``, or the device's most."""

    result = "CUDA_ERROR_LAUNCH_FAILED"


class LaunchTimeout(DeviceError):
    """The launch ran longer than the device's kernel timeout (a watchdog)."""

    result = "CUDA_ERROR_LAUNCH_TIMEOUT"


class UnsupportedInstruction(DeviceError):
    """A PTX construct the CPU device cannot execute; never skipped."""

    result = "CUDA_ERROR_NOT_SUPPORTED"

    def __init__(self, kernel: str, ptx_line: int, opcode: str, reason: str = "") -> None:
        self.kernel = kernel
        self.ptx_line = ptx_line
        self.opcode = opcode
        self.reason = reason
        text = f"kernel {kernel}: PTX line {ptx_line}: {opcode} is not supported by the CPU device"
        if reason:
            text += f" ({reason})"
        super().__init__(text)


class LaunchConfigError(DeviceError):
    """A bad launch configuration: grid, block, shared memory size or parameter size."""

    result = "CUDA_ERROR_INVALID_VALUE"


class OutOfMemory(DeviceError):
    """An allocation larger than what is left of the device's reported capacity."""

    result = "CUDA_ERROR_OUT_OF_MEMORY"


class InvalidAddress(Exception):
    """A host-side memory API call on an address that is not valid for it."""
