"""The state of one CPU device behind the driver API: its memory, its handles
(contexts, modules, functions, streams, events), each thread's context stack
and last error, and the helpers every group of ``cu*`` calls shares.

:class:`DriverBase` holds it; the groups of calls are mixins over it
(:mod:`.devices`, :mod:`.contexts`, ...) and :class:`gpusafe.cpu.driver.Driver`
puts them together.  Nothing here is global: two drivers are two devices.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from cuda.bindings.driver import (
    CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
    CUcontext,
    CUdevice,
    CUfunc_cache,
    CUresult,
)

from ...cudaapi import args as _args
from .. import driver_profile as _profile
from ..events import Observer
from ..memory import QUARANTINE, RED_ZONE, DeviceMemory
from ..program import KernelLayout, LaunchResult, Program

E = CUresult  # shorthand for the driver modules

DEFAULT_STREAMS = (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)
"""Stream handles that name the context's default stream."""

_INSTANCES = itertools.count()


class Fail(Exception):
    """Ends an API call with ``result``; ``detail`` goes to last_error_detail()."""

    def __init__(self, result: CUresult, detail: str | None = None,
                 exc: BaseException | None = None):
        super().__init__(detail or result.name)
        self.result = result
        self.detail = detail or _profile.ERROR_STRINGS.get(result.name, result.name)
        self.exc = exc


def invalid_address(e: BaseException, what: str) -> Fail:
    """A device range the memory refused (outside its allocation, freed, ...)."""
    return Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: {e}", e)


def device_ordinal(dev: Any) -> int:
    return _args.handle_value(dev, CUdevice)


class Context:
    def __init__(self, handle: int, flags: int, primary: bool, device: int = 0):
        self.handle = handle
        self.flags = flags
        self.primary = primary
        self.device = device
        self.peers: dict[int, Context] = {}  # peer access enabled: peer device -> its context
        self.alive = True
        self.sticky: CUresult | None = None
        self.sticky_detail = ""
        self.modules: dict[int, LoadedModule] = {}
        self.streams: dict[int, Stream] = {}
        self.events: dict[int, Event] = {}
        self.allocations: set[int] = set()
        self.host_allocations: set[int] = set()
        self.limits = dict(_profile.DEFAULT_LIMITS)


class HostAllocation:
    """Pinned or registered host memory: its host base, its device base (the
    same address for pinned memory), size, flags and context."""

    def __init__(self, host: int, device: int, size: int, flags: int, ctx: Context) -> None:
        self.host = host
        self.device = device
        self.size = size
        self.flags = flags
        self.ctx = ctx


class MemPool:
    """A memory pool (``cuMemPool*``): its attributes and what it has handed
    out.  Freed blocks go back at once (none is kept for reuse, so a stale
    pointer never meets a newer block), so what it reserves is what is used."""

    def __init__(self, handle: int, default: bool, max_size: int, device: int = 0) -> None:
        self.handle = handle
        self.default = default
        self.device = device
        self.max_size = max_size  # 0: no limit
        self.alive = True
        self.reuse = {"FOLLOW_EVENT_DEPENDENCIES": 1, "ALLOW_OPPORTUNISTIC": 1,
                      "ALLOW_INTERNAL_DEPENDENCIES": 1}
        self.release_threshold = 0
        self.used = 0
        self.used_high = 0
        self.reserved_high = 0

    def took(self, size: int) -> None:
        self.used += size
        self.used_high = max(self.used_high, self.used)
        self.reserved_high = max(self.reserved_high, self.used)


class LoadedModule:
    def __init__(self, handle: int, ctx: Context, program: Program,
                 ptx_version: tuple[int, int], target: int):
        self.handle = handle
        self.ctx = ctx
        self.program = program
        self.ptx_version = ptx_version
        self.target = target
        self.functions: dict[str, Function] = {}


class Function:
    def __init__(self, handle: int, module: LoadedModule, name: str, info: KernelLayout):
        self.handle = handle
        self.module = module
        self.name = name
        self.info = info
        static = int(info.static_shared or 0)
        self.max_dynamic_shared = max(0, _profile.DEFAULT_SHARED_PER_BLOCK - static)
        self.carveout = -1
        self.cache_config = CUfunc_cache.CU_FUNC_CACHE_PREFER_NONE


class Stream:
    def __init__(self, handle: int, ctx: Context, flags: int, priority: int):
        self.handle = handle
        self.ctx = ctx
        self.flags = flags
        self.priority = priority


class Event:
    def __init__(self, handle: int, ctx: Context, flags: int):
        self.handle = handle
        self.ctx = ctx
        self.flags = flags
        self.time: float | None = None


class DriverBase:
    """One CPU device: its state and the helpers of its ``cu*`` calls.

    ``red_zone`` and ``quarantine`` are its :class:`DeviceMemory`'s: an engine
    that pads allocations and keeps freed memory itself asks for 0 of each.
    ``kernel_timeout`` (seconds, None: no limit) is its watchdog: a launch
    that runs longer fails with ``CUDA_ERROR_LAUNCH_TIMEOUT``.  ``devices``
    is how many devices it has (ordinals 0..devices-1): they share one
    address space (unified addressing), each allocation belonging to one.
    """

    def __init__(self, red_zone: int = RED_ZONE, quarantine: int = QUARANTINE,
                 kernel_timeout: float | None = None, devices: int = 1) -> None:
        if kernel_timeout is not None and not kernel_timeout > 0:
            raise ValueError(f"the kernel timeout must be positive seconds, not {kernel_timeout}")
        if not 1 <= devices <= _profile.MAX_DEVICES:
            raise ValueError(f"a CPU driver has 1 to {_profile.MAX_DEVICES} devices, "
                             f"not {devices}")
        self.devices = devices
        self.red_zone = red_zone
        self.quarantine = quarantine
        self.kernel_timeout = kernel_timeout
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._generation = 0
        # handles of different drivers never coincide: one device's handle is
        # an invalid handle to another
        self._handle_base = 0x5AFE_0000_0000 + (next(_INSTANCES) << 32)
        self._start(None)

    def _start(self, memory: DeviceMemory | None) -> None:
        self._initialized = False
        self._memory = memory if memory is not None else DeviceMemory(
            red_zone=self.red_zone, quarantine=self.quarantine)
        self._handles: dict[int, object] = {}
        self._next_handle = self._handle_base
        self._primary: dict[int, Context] = {}  # device -> its primary context
        self._primary_refcount = [0] * self.devices
        self._primary_flags = [0] * self.devices
        self._alloc_owner: dict[int, Context] = {}
        self._host_allocs: dict[int, HostAllocation] = {}  # pinned: base -> record
        self._registered: dict[int, HostAllocation] = {}  # registered: host base -> record
        self._default_pools: dict[int, MemPool] = {}  # device -> its default pool
        self._current_pools: dict[int, MemPool] = {}  # device -> cuDeviceSetMemPool's
        self._pool_of: dict[int, MemPool] = {}  # base of a pool block -> its pool
        self._reservations: dict[int, int] = {}  # cuMemAddressReserve: base -> size
        self._mappings: dict[int, Any] = {}  # cuMemMap: base -> vmm.Mapping
        self._advice: dict[int, Any] = {}  # managed base -> advice.RangeAdvice
        self._observers: tuple[Observer, ...] = ()
        self._stdout: TextIO | None = None
        self._last_launch: LaunchResult | None = None

    # -- gpusafe-specific entry points (not in cuda-python) ----------------------

    @property
    def memory(self) -> DeviceMemory:
        """The device's memory: its allocation map and global arena."""
        return self._memory

    def last_error_detail(self) -> str | None:
        """Text explaining the calling thread's last failed call (None if none failed).

        For ``CUDA_ERROR_INVALID_PTX`` it is the parser's message with the PTX line;
        for a device fault, the executor's description of the access. Successful
        calls do not clear it.
        """
        self._stack()
        f = self._tls.error
        return None if f is None else f"{f.result.name}: {f.detail}"

    def last_error_exception(self) -> BaseException | None:
        """The exception behind the last failed call (a ParseError, a DeviceError, ...), if any."""
        self._stack()
        f = self._tls.error
        return None if f is None else f.exc

    def last_launch_result(self) -> LaunchResult | None:
        """The ``LaunchResult`` of the last successful ``cuLaunchKernel`` (None before any)."""
        return self._last_launch

    def set_launch_observers(self, observers: Sequence[Observer]) -> tuple[Observer, ...]:
        """Observers passed to every later launch (see docs/cpu-device.md); returns the old ones."""
        with self._lock:
            old, self._observers = self._observers, tuple(observers)
            return old

    def set_launch_stdout(self, stream: TextIO | None) -> TextIO | None:
        """Where device ``printf`` output goes (None: standard output); returns the old one."""
        with self._lock:
            old, self._stdout = self._stdout, stream
            return old

    def reset(self, memory: DeviceMemory | None = None) -> None:
        """Forget all state, as a new device would start (for tests and gpusafe runs).

        ``memory``: a DeviceMemory to use instead of a fresh one.
        """
        with self._lock:
            for obj in list(self._handles.values()):
                if isinstance(obj, LoadedModule):
                    try:
                        obj.program.unload()
                    except Exception:  # noqa: BLE001 - the state is discarded either way
                        pass
            if memory is not self._memory:
                self._memory.close()
            self._start(memory)
            self._generation += 1

    # -- per-thread state ------------------------------------------------------

    def _stack(self) -> list[Context]:
        """The calling thread's context stack."""
        tls = self._tls
        if getattr(tls, "generation", None) != self._generation:
            tls.generation = self._generation
            tls.stack = []
            tls.error = None
        return tls.stack

    def _record_error(self, f: Fail) -> None:
        self._stack()
        self._tls.error = f

    # -- handles and checks ----------------------------------------------------

    def _new_handle(self, obj: object) -> int:
        self._next_handle += 0x100
        self._handles[self._next_handle] = obj
        return self._next_handle

    def _require_init(self) -> None:
        if not self._initialized:
            raise Fail(E.CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called")

    def _check_device(self, d: int) -> None:
        if not 0 <= d < self.devices:
            have = "0" if self.devices == 1 else f"0 to {self.devices - 1}"
            raise Fail(E.CUDA_ERROR_INVALID_DEVICE,
                       f"device {d} does not exist (the CPU devices are {have})")

    def _barred(self, ctx: Context) -> frozenset[int] | None:
        """The devices whose memory a kernel of ``ctx`` may not reach: every
        other device it has no peer access to (None: it reaches all)."""
        if self.devices == 1:
            return None
        reached = {ctx.device} | {d for d, peer in ctx.peers.items() if peer.alive}
        barred = frozenset(range(self.devices)) - reached
        return barred or None

    @staticmethod
    def _check_ctx(ctx: Context) -> Context:
        if not ctx.alive:
            raise Fail(E.CUDA_ERROR_CONTEXT_IS_DESTROYED, "the context has been destroyed")
        if ctx.sticky is not None:
            raise Fail(ctx.sticky, f"sticky error of this context, from an earlier launch: "
                                   f"{ctx.sticky_detail}")
        return ctx

    def _current(self, check: bool = True) -> Context:
        self._require_init()
        st = self._stack()
        if not st:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, "no context is current to the calling thread")
        return self._check_ctx(st[-1]) if check else st[-1]

    def _lookup(self, value: int, cls: type, result: CUresult, what: str) -> Any:
        obj = self._handles.get(value)
        if not isinstance(obj, cls):
            raise Fail(result, f"{what} {value:#x} is not a valid handle")
        return obj

    def _ctx_arg(self, ctx: Any) -> Context:
        h = _args.handle_value(ctx, CUcontext)
        obj = self._handles.get(h)
        if not isinstance(obj, Context) or not obj.alive:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, f"context {h:#x} is not a valid context")
        return obj

    def _stream(self, value: int, ctx: Context) -> Stream | None:
        if value in DEFAULT_STREAMS:
            return None
        s = self._lookup(value, Stream, E.CUDA_ERROR_INVALID_HANDLE, "stream")
        if s.ctx is not ctx:
            raise Fail(E.CUDA_ERROR_INVALID_HANDLE, "the stream belongs to another context")
        return s

    # -- lifetimes -------------------------------------------------------------

    def _new_context(self, flags: int, primary: bool, device: int = 0) -> Context:
        ctx = Context(0, flags, primary, device)
        ctx.handle = self._new_handle(ctx)
        return ctx

    def _destroy_context(self, ctx: Context, replacement: Context | None = None) -> None:
        """Free everything ``ctx`` owns; take it off every stack of the calling
        thread (or put ``replacement`` in its place)."""
        for mod in list(ctx.modules.values()):
            self._unload_module(mod)
        mem = self._memory
        for addr in list(ctx.allocations):
            try:
                mem.free(addr)
            except Exception:  # noqa: BLE001 - already freed through another path
                pass
            self._alloc_owner.pop(addr, None)
        for addr in list(ctx.host_allocations):
            record = self._host_allocs.pop(addr, None) or self._registered.pop(addr, None)
            if record is not None:
                try:
                    mem.free(record.device)
                except Exception:  # noqa: BLE001 - already freed through another path
                    pass
        for h in [*ctx.streams, *ctx.events]:
            self._handles.pop(h, None)
        ctx.allocations.clear()
        ctx.host_allocations.clear()
        ctx.streams.clear()
        ctx.events.clear()
        ctx.peers.clear()
        ctx.alive = False
        self._handles.pop(ctx.handle, None)
        st = self._stack()
        if replacement is None:
            while ctx in st:
                st.remove(ctx)
        else:
            st[:] = [replacement if c is ctx else c for c in st]

    def _unload_module(self, mod: LoadedModule) -> None:
        for fn in mod.functions.values():
            self._handles.pop(fn.handle, None)
        mod.functions.clear()
        self._handles.pop(mod.handle, None)
        mod.ctx.modules.pop(mod.handle, None)
        mod.program.unload()
