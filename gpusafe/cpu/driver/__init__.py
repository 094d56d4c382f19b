"""The cuda-python driver API on the CPU device.

A program written for ``cuda.bindings.driver`` runs unchanged on the CPU device
when it imports this module instead::

    from gpusafe.cpu import driver          # instead of: from cuda.bindings import driver

Each :class:`Driver` is one CPU device with its own memory, contexts, handles
and errors; several live side by side in one process (``Driver(red_zone=0,
quarantine=0)`` is a device whose memory leaves padding and quarantine to an
engine above it).  Every implemented ``cu*`` function is a method of the
instance (``drv.cuMemAlloc(1024)``) with cuda-python's parameter names, so
keyword calls work as with cuda-python.  The module's own ``cu*`` functions,
``reset``, ``last_error_detail`` and the other gpusafe-specific functions are
those of a default instance (:func:`default_driver`), for programs and tests
that use the module as cuda-python's.

Names, argument conventions and return tuples are cuda-python's (13.x, the
pinned ``cuda-bindings``): every call returns ``(CUresult, *outputs)``, the
outputs being ``None`` when the result is not ``CUDA_SUCCESS``. The handle,
enum and struct types *are* cuda-python's (``CUdevice``, ``CUcontext``,
``CUmodule``, ``CUfunction``, ``CUstream``, ``CUevent``, ``CUdeviceptr``,
``CUresult``, ``CUdevice_attribute``, ``CUjit_option``, ...): every non-function
name of ``cuda.bindings.driver`` is re-exported from here.

Decisions (see also :mod:`gpusafe.cpu.driver_profile` for the device profile):

* **Unimplemented functions are absent.** A ``cuda.bindings.driver`` function
  the CPU device does not implement is not an attribute of the module (nor of
  a :class:`Driver`): using one raises
  ``AttributeError`` naming the function and saying the CPU device does not
  implement it. It never reaches the real driver, and ``hasattr`` answers
  honestly for feature probes. ``IMPLEMENTED`` lists what is implemented.
* **Errors are CUresults**, as from the real driver: an invalid handle is
  ``CUDA_ERROR_INVALID_HANDLE`` (``CUDA_ERROR_INVALID_CONTEXT`` for contexts),
  a call before ``cuInit`` is ``CUDA_ERROR_NOT_INITIALIZED``, a bad value or a
  device range outside its allocation is ``CUDA_ERROR_INVALID_VALUE``, PTX the
  parser rejects is ``CUDA_ERROR_INVALID_PTX``, a device fault is the
  ``.result`` of the executor's ``DeviceError``. Arguments are converted as
  cuda-python converts them (:mod:`gpusafe.cudaapi.args`; a float grid size
  is truncated, an enum is read by its ``.value``), and what it cannot
  convert raises the exception cuda-python raises, with its message
  (``TypeError``, ``OverflowError``, ``ValueError``, ``AttributeError``,
  ``BufferError``); ``tests/test_cpu_argument_conversion.py`` holds both to
  the same answers. :func:`last_error_detail` gives the
  text behind the last failing call (the PTX parse error with its line, the
  faulting access, ...) for gpusafe's own reports.
* **Sticky errors.** After a launch fails with an error the real driver treats
  as fatal to the context (illegal address, trap/assert, misaligned address,
  illegal instruction, ...), every later call that uses that context returns
  the same error. ``cuCtxDestroy`` (or ``cuDevicePrimaryCtxReset`` for the
  primary context) discards it; a new context starts clean.
* **Stack and watchdog.** A thread's stack is the context's
  ``CU_LIMIT_STACK_SIZE`` (1024 bytes by default, grown to what the kernel
  needs without recursion, as a real driver does); a recursion deeper than it
  fails the launch with ``CUDA_ERROR_LAUNCH_FAILED`` naming the depth.  With
  ``Driver(kernel_timeout=...)`` a launch that runs longer fails with
  ``CUDA_ERROR_LAUNCH_TIMEOUT`` naming a thread still running; both are
  sticky, as on a GPU.
* **Execution is synchronous.** Streams and events exist and are validated;
  every operation has finished when its call returns; ``cuEventRecord`` stores
  a host timestamp, so ``cuEventElapsedTime`` gives real milliseconds.
  A launch that faults returns its error from ``cuLaunchKernel`` itself (a
  real driver may report it at the next synchronising call instead; a
  program checking either sees it).
* **Host buffers** are what cuda-python accepts: ``None``, an ``int`` address,
  a ``CUdeviceptr`` (taken as an address), or any contiguous buffer-protocol
  object (numpy arrays, ``bytes``, ``bytearray``, ``memoryview``, ctypes
  objects). A ``str`` is a ``TypeError``, as in cuda-python. When the buffer's
  length is known and is smaller than the byte count, the copy fails with
  ``CUDA_ERROR_INVALID_VALUE`` instead of reading or writing past it.
* **Module images** are PTX text only: bytes, a numpy char array, any buffer,
  or an ``int`` address of a NUL-terminated string (``str`` is a TypeError, as
  in cuda-python). An ELF cubin or a fatbin cannot run on the CPU device:
  ``CUDA_ERROR_NOT_SUPPORTED``, with the reason in :func:`last_error_detail`.
* **Memory kinds.** Pinned memory (every ``cuMemHostAlloc``, as under
  unified addressing) and managed memory are host pages at their arena
  address: host code and kernels use one pointer.  Registered memory gets a
  device pointer of its own onto the program's bytes.  Pools and virtual
  memory management work on device memory of device 0 (see
  :mod:`.memory_kinds`, :mod:`.pools`, :mod:`.vmm`); what cannot exist on
  the CPU device (read-only mappings, IPC handles, host pools) is
  ``CUDA_ERROR_NOT_SUPPORTED`` naming it, and its attribute says 0.
* **Devices.** A driver has ``devices`` CPU devices (default 1; ``gpusafe
  run --cpu-devices N``), ordinals 0..N-1, with one device memory shared by
  all of them and all their contexts (unified addressing: allocations of
  different devices never overlap).  Allocations, modules, streams and
  events belong to the context that made them and go away with it; each
  allocation is memory of its context's device (a pool block: of its
  pool's device).  Any two devices can enable peer access; a kernel that
  reaches another device's memory without it faults with
  ``CUDA_ERROR_ILLEGAL_ADDRESS``, as on GPUs (:mod:`.contexts`).
* Function attributes: ``NUM_REGS``, ``LOCAL_SIZE_BYTES``,
  ``SHARED_SIZE_BYTES`` and ``MAX_THREADS_PER_BLOCK`` come from the PTX
  (``KernelLayout``); ``CONST_SIZE_BYTES`` is 0 (not tracked); register counts
  do not limit launches (no ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``).

gpusafe-specific functions (not in cuda-python): :func:`last_error_detail`,
:func:`last_error_exception`, :func:`last_launch_result`,
:func:`set_launch_observers`, :func:`set_launch_stdout`, :func:`device_memory`,
:func:`reset` (methods of a :class:`Driver`; ``Driver.memory`` is its memory).

Modules by job: :mod:`.state` (the device's state and shared checks),
:mod:`.api` (a method as a cuda-python call), :mod:`.devices` (init, versions,
device attributes), :mod:`.contexts`, :mod:`.memory_calls` (allocations),
:mod:`.copies` (copies and sets), :mod:`.modules`, :mod:`.functions`
(function attributes, occupancy), :mod:`.launches`, :mod:`.streams` (streams
and events), :mod:`.memory_kinds` (managed and registered host memory),
:mod:`.pools` (stream-ordered allocation, memory pools), :mod:`.vmm`
(virtual memory management), :mod:`.pointers` (pointer attributes), :mod:`.graphs` (CUDA graphs built
explicitly; their nodes run through :meth:`Driver.set_graph_calls`), :mod:`.graph_nodes`
(cloning, child and event nodes, executable-graph updates), :mod:`.capture` and
:mod:`.capture_work` (stream capture; the capture-aware calls come first in
:class:`Driver`'s bases, so they see a call before the group that runs it),
:mod:`.arrays` (CUDA arrays, 2D/3D copies), :mod:`.textures` (texture and surface objects).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as _real

from ..bindings import implemented, missing, reexport
from ..memory import QUARANTINE, RED_ZONE, DeviceMemory
from .api import REAL_FUNCTIONS
from .capture_work import CaptureWorkCalls
from .contexts import ContextCalls
from .copies import CopyCalls
from .devices import DeviceCalls
from .memory_kinds import MemoryKindCalls
from .modules import ModuleCalls
from .pointers import PointerCalls
from .pools import PoolCalls
from .streams import StreamCalls
from .textures import TextureCalls
from .vmm import VmmCalls

# every non-function name of cuda.bindings.driver (types, enums, constants)
reexport(_real, "cu", globals())


class Driver(CaptureWorkCalls, DeviceCalls, ContextCalls, MemoryKindCalls, PoolCalls, CopyCalls,
             ModuleCalls, StreamCalls, VmmCalls, PointerCalls, TextureCalls):
    """One CPU device behind cuda-python's driver API.

    ``red_zone`` and ``quarantine`` (bytes) are its memory's padding after
    each allocation and freed bytes kept; an engine that applies that policy
    itself asks for 0 of each.  ``kernel_timeout`` (seconds, None: no limit)
    is a watchdog: a launch that runs longer stops with
    ``CUDA_ERROR_LAUNCH_TIMEOUT``, which its context keeps as a sticky error.
    ``devices``: how many CPU devices it has, in one address space.
    """

    IMPLEMENTED: frozenset[str] = frozenset()
    """The cuda.bindings.driver functions a driver implements."""

    def __init__(self, red_zone: int = RED_ZONE, quarantine: int = QUARANTINE,
                 kernel_timeout: float | None = None, devices: int = 1) -> None:
        super().__init__(red_zone=red_zone, quarantine=quarantine,
                         kernel_timeout=kernel_timeout, devices=devices)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(missing(f"{type(self).__name__!r} object", name, REAL_FUNCTIONS,
                                     "cuda.bindings.driver", "Driver.IMPLEMENTED"))


Driver.IMPLEMENTED = implemented(Driver)

#: The cuda.bindings.driver functions the CPU device implements.
IMPLEMENTED = Driver.IMPLEMENTED

_DEFAULT = Driver()


def default_driver() -> Driver:
    """The driver behind this module's own functions."""
    return _DEFAULT


for _name in IMPLEMENTED:
    globals()[_name] = getattr(_DEFAULT, _name)
del _name

last_error_detail = _DEFAULT.last_error_detail
last_error_exception = _DEFAULT.last_error_exception
last_launch_result = _DEFAULT.last_launch_result
set_launch_observers = _DEFAULT.set_launch_observers
set_launch_stdout = _DEFAULT.set_launch_stdout
reset = _DEFAULT.reset


def device_memory() -> DeviceMemory:
    """The default device's DeviceMemory."""
    return _DEFAULT.memory


def __getattr__(name: str) -> Any:
    raise AttributeError(missing(f"module {__name__!r}", name, REAL_FUNCTIONS,
                                 "cuda.bindings.driver", f"{__name__}.IMPLEMENTED"))


def __dir__() -> list[str]:
    return sorted(n for n in globals() if not n.startswith("_"))
