"""The cuda-python runtime API (``cuda.bindings.runtime``) on the CPU device.

A program written for ``cuda.bindings.runtime`` runs unchanged on the CPU
device when it imports this module instead::

    from gpusafe.cpu import runtime          # instead of: from cuda.bindings import runtime

It is a thin layer over :mod:`gpusafe.cpu.driver`, as the real runtime is a
layer over the real driver: a :class:`Runtime` serves the ``cuda*`` functions
on one :class:`~gpusafe.cpu.driver.Driver` (``Runtime(drv)``), so they share
one device memory, a pointer from ``cudaMalloc`` is a ``CUdeviceptr`` that
``drv.cuLaunchKernel`` accepts, and the runtime works in whatever context is
current to the calling thread.  The module's own ``cuda*`` functions are
those of a default runtime on the driver module's default driver.

Conventions are cuda-python's (13.x): every call returns ``(cudaError_t,
*outputs)``, the outputs ``None`` on failure; the types and enums
(``cudaError_t``, ``cudaMemcpyKind``, ``cudaStream_t``, ``cudaEvent_t``,
``cudaDeviceProp``, ...) *are* cuda-python's: every non-function name of
``cuda.bindings.runtime`` is re-exported from here.

Decisions:

* **Implicit primary context.** A call that needs a context, made on a thread
  with no current context, initialises the driver (``cuInit``), retains the
  device's primary context and makes it current (``cuDevicePrimaryCtxRetain``
  + ``cuCtxSetCurrent``), as the real runtime does. A context the program made
  current through the driver API is used as it is. ``cudaSetDevice(d)`` makes
  device d's primary context current (retained once per device);
  ``cudaDeviceReset`` resets it
  (``cuDevicePrimaryCtxReset``: its allocations, modules and streams go).
* **Errors.** A driver ``CUresult`` becomes the ``cudaError_t`` of the same
  value (the runtime's codes were aligned with the driver's: invalid value,
  out of memory -> ``cudaErrorMemoryAllocation``, invalid handle ->
  ``cudaErrorInvalidResourceHandle``, invalid PTX, illegal address, ...);
  a code without a runtime twin is ``cudaErrorUnknown``. Every failing call
  sets the thread's last error (``cudaGetLastError`` reads and clears it,
  ``cudaPeekAtLastError`` only reads it).
  The driver's ``last_error_detail`` explains the failure.
* ``cudaMalloc(0)`` succeeds with a null pointer and ``cudaFree(0)`` does
  nothing (the runtime's documented behaviour; ``cudaFree(0)`` is the usual way
  to force context creation).
* ``cudaMallocPitch`` rounds the row width up to 512 bytes (the real devices'
  texture pitch alignment).
* ``cudaMemcpy*`` follows ``kind``; ``cudaMemcpyDefault`` infers each side from
  the address (unified addressing), as ``cuMemcpy`` does. Host buffers are
  what cuda-python accepts (``int`` addresses, buffer-protocol objects); a
  buffer shorter than ``count`` is ``cudaErrorInvalidValue``.
* **Memory kinds**: managed memory (``cudaMallocManaged``: one pointer for
  host and kernels), mapped and registered host memory
  (``cudaHostAlloc``, ``cudaHostRegister``, ``cudaHostGetDevicePointer``)
  and memory pools (``cudaMallocAsync``, ``cudaMemPool*``) are the driver's
  (:mod:`gpusafe.cpu.driver.memory_kinds`, :mod:`gpusafe.cpu.driver.pools`).
* **Unimplemented functions are absent**, as in :mod:`gpusafe.cpu.driver`:
  the library APIs, mipmapped arrays, ... raise
  ``AttributeError`` naming the function; under ``gpusafe run`` the
  interposer turns them into ``NotImplementedError``. ``IMPLEMENTED`` lists
  what is implemented.

Modules by job: :mod:`.base` (the driver under it, last errors, the implicit
context, a method as a cuda-python call), :mod:`.devices` (errors, versions,
the device), :mod:`.memory_calls` (allocations, copies, sets),
:mod:`.streams` (streams and events), :mod:`.graphs` (CUDA graphs built
explicitly, on the driver's), :mod:`.graph_nodes` (cloning, child and event
nodes, updates), :mod:`.capture` (stream capture, on the driver's), :mod:`.textures`
(arrays, 2D/3D copies, texture and surface objects, on the driver's). cuda-bindings 13 has no ``cudaLaunchKernel``; kernels
  are launched through the driver API (``cuModuleLoadData`` +
  ``cuLaunchKernel``) with runtime pointers as arguments.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import runtime as _real

from ..bindings import implemented, missing, reexport
from ..driver import Driver, default_driver
from .base import REAL_FUNCTIONS
from .base import to_cuda_error as to_cuda_error
from .capture import CaptureCalls
from .devices import DeviceCalls
from .graph_nodes import GraphNodeCalls
from .graphs import GraphCalls
from .memory_calls import PITCH_ALIGNMENT as PITCH_ALIGNMENT
from .memory_calls import MemoryCalls
from .memory_kinds import MemoryKindCalls
from .pools import PoolCalls
from .streams import StreamCalls
from .textures import TextureCalls

# every non-function name of cuda.bindings.runtime (types, enums, constants)
reexport(_real, "cuda", globals())

class Runtime(DeviceCalls, MemoryCalls, MemoryKindCalls, PoolCalls, StreamCalls, GraphCalls,
              GraphNodeCalls, CaptureCalls, TextureCalls):
    """cuda-python's runtime API on one CPU device (the driver ``driver``)."""

    IMPLEMENTED: frozenset[str] = frozenset()
    """The cuda.bindings.runtime functions a runtime implements."""

    def __init__(self, driver: Driver) -> None:
        super().__init__(driver)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(missing(f"{type(self).__name__!r} object", name, REAL_FUNCTIONS,
                                     "cuda.bindings.runtime", "Runtime.IMPLEMENTED"))


Runtime.IMPLEMENTED = implemented(Runtime)

#: The cuda.bindings.runtime functions the CPU device implements.
IMPLEMENTED = Runtime.IMPLEMENTED

_DEFAULT = Runtime(default_driver())


def default_runtime() -> Runtime:
    """The runtime behind this module's own functions (on the driver module's default)."""
    return _DEFAULT


for _name in IMPLEMENTED:
    globals()[_name] = getattr(_DEFAULT, _name)
del _name


def __getattr__(name: str) -> Any:
    raise AttributeError(missing(f"module {__name__!r}", name, REAL_FUNCTIONS,
                                 "cuda.bindings.runtime", f"{__name__}.IMPLEMENTED"))


def __dir__() -> list[str]:
    return sorted(n for n in globals() if not n.startswith("_"))
