"""The running state of a launch: :class:`Launch` (what every chunk and frame
shares), :class:`Chunk` (a group of whole blocks run together, with their
shared windows and local stacks) and :class:`Frame` (one activation of a
function for a set of lanes of a chunk, with its registers and per-lane PCs).

Every register is a numpy array with one element per lane of its frame; an
instruction runs once for all the lanes ("active lanes", ``act``) that
execute it: ``act`` is :data:`ALL` or an int64 index array of frame lanes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TextIO

import numpy as np

from .decoded import FunctionCode, align_up
from .errors import LaunchTimeout, StackOverflow
from .events import LaunchInfo, Observer, ObserverBase
from .memory import LOCAL_STACK_BASE, DeviceMemory

ALL = slice(None)
"""``act`` value meaning every lane of the frame."""

RUN, BAR, WARP, CALL, DONE, EXIT = 0, 1, 2, 3, 4, 5
"""Lane states in a frame (``state < DONE``: alive).  WARP: waiting at a
warp-synchronous instruction; CALL: waiting at a call for the lanes that can
still reach it."""

CALLING = object()
"""What a call op returns as its lanes (``act``) once it has set the frame's
:attr:`Frame.call`: the scheduler runs the callee on its explicit stack and
resumes the caller where :meth:`PendingCall.result` says."""
CALL_FRAME_BYTES = 16
"""Stack bytes every call takes besides the callee's ``.local`` frame: the
return address and a saved register, the least ptxas gives a recursive
function (``depth(n)`` at ``-G``: a 16-byte frame).  With it a thread's
stack use is never above a GPU's for the same calls, so the CPU device fails
a deep recursion no earlier than a GPU would."""
MAX_LOCAL_PER_THREAD = 512 * 1024
"""Most local memory (stack) a thread may use, as on the GPU."""
MAX_CHUNK_LOCAL = 8 << 30
"""Most local memory all threads of a chunk may use together."""
NO_PC = int(np.iinfo(np.int32).max)
"""A PC no lane reaches (no stop, no waiting lane)."""


def as_index(act: Any, n: int) -> np.ndarray:
    """``act`` as an int64 index array."""
    if isinstance(act, slice):
        return np.arange(n, dtype=np.int64)
    return act


def lanes_by_size(sizes: np.ndarray, act: Any) -> Iterator[tuple[int, np.ndarray, Any]]:
    """The active lanes grouped by the bytes each moves (an instruction whose
    size is a register: a copy, a bulk copy), lanes moving none left out:
    ``(bytes, positions among the active lanes, the lanes themselves)``."""
    for v in np.unique(sizes):
        if v == 0:
            continue
        positions = np.flatnonzero(sizes == v)
        yield int(v), positions, positions if act is ALL else act[positions]


class PendingCall(Protocol):
    """A call a frame is making (:mod:`gpusafe.cpu.calls`): its callee frames,
    one after another, then where the calling lanes go."""

    def next_frame(self) -> Frame | None:
        """The next callee to run (the previous one's results copied back
        first), or None when every callee has returned."""

    def result(self) -> tuple[Any, int, int]:
        """``(act, nact, pc)`` of the caller's lanes after the call."""


class Launch:
    """Everything one kernel launch shares across its chunks and frames.

    ``stack_limit`` is the bytes of stack a thread may use
    (:func:`stack_use`); ``timeout`` the seconds the launch may run (None: no
    limit), checked by the scheduler once a round (:meth:`check_deadline`).
    ``workspace`` is the address of a cooperative launch's grid workspace
    (what ``%envreg1:%envreg2`` give a ``grid.sync()``; 0 for any other
    launch, whose ``grid.sync()`` traps as on a GPU); a launch with one runs
    all its blocks in one chunk, co-resident as the hardware guarantees.
    """

    def __init__(
        self,
        memory: DeviceMemory,
        kernel: FunctionCode,
        info: LaunchInfo,
        params: bytes,
        shared_offsets: dict[Any, int],
        observers: list[Observer],
        stdout: TextIO | None,
        grid_id: int,
        *,
        stack_limit: int = MAX_LOCAL_PER_THREAD,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        workspace: int = 0,
    ) -> None:
        self.memory = memory
        self.code = kernel
        self.info = info
        self.kernel = info.kernel
        self.grid = info.grid
        self.block = info.block
        self.tpb = info.threads_per_block
        self.dynamic_shared = info.dynamic_shared
        self.shared_window = info.shared_window
        self.shared_offsets = shared_offsets
        self.kparams = np.frombuffer(bytes(params) + bytes(16), dtype=np.uint8)
        self.observers = list(observers)
        # observers that look at memory events (an ObserverBase subclass that
        # does not override memory_access does not need them built)
        self.watchers = [
            o for o in observers
            if hasattr(o, "memory_access")
            and getattr(type(o), "memory_access", None) is not ObserverBase.memory_access
        ]
        self.stdout = stdout
        self.grid_id = grid_id
        self.start_ns = time.perf_counter_ns()
        self.count = 0
        self.reserved_shared = 0
        self.functions: dict = {}  # the module's functions by name (the JIT inlines calls)
        self.module_globals: frozenset = frozenset()  # its .global/.const variables
        self.global_addresses: dict[str, int] = {}  # where those with storage are (the JIT)
        self.stack_limit = stack_limit
        self.timeout = timeout
        self.clock = clock
        self.started = clock()
        self.deadline = None if timeout is None else self.started + timeout
        self.workspace = workspace
        self.engine_note = ""  # which engine ran it, and why not the JIT (GPUSAFE_CPU_ENGINE)

    def clock_bias(self) -> int:
        return self.count

    def check_deadline(self, fr: Frame, act: Any, pc: int) -> None:
        """Raise :class:`LaunchTimeout` once the launch has run past its timeout,
        naming a thread of ``act`` (lanes of ``fr`` at ``pc``) that was still running."""
        if self.deadline is None:
            return
        now = self.clock()
        if now < self.deadline:
            return
        lane = 0 if act is ALL or act is None or not len(act) else int(act[0])
        where = ""
        if 0 <= pc < len(fr.code.ops) and fr.code.ops[pc].instr is not None:
            where = f" at PTX line {fr.code.ops[pc].instr.line}"
        raise LaunchTimeout(
            f"kernel {self.kernel}: still running after {now - self.started:.2f} s (the "
            f"kernel timeout is {self.timeout:g} s); {fr.describe_lane(lane)} was running"
            f"{where}" + (f" in {fr.code.name}" if fr.code.name != self.kernel else "")
        )

    def out(self) -> TextIO:
        return self.stdout if self.stdout is not None else sys.stdout


class Chunk:
    """A group of whole blocks executed together; per-lane data of its threads."""

    def __init__(self, launch: Launch, first_block: int, nblocks: int, local_size: int) -> None:
        self.launch = launch
        tpb = launch.tpb
        self.first_block = first_block
        self.nblocks = nblocks
        self.n = n = nblocks * tpb
        self.first_global = first_block * tpb
        lane = np.arange(n, dtype=np.int64)
        self.lane_index = lane
        self.block_row = lane // tpb
        self.tid_lin = lane - self.block_row * tpb
        self.laneid = (self.tid_lin & 31).astype(np.uint32)
        self.warp_in_block = self.tid_lin >> 5
        self.warps_per_block = (tpb + 31) // 32
        self.warp_id = self.block_row * self.warps_per_block + self.warp_in_block
        self.nwarps = nblocks * self.warps_per_block
        self.warp_size = np.minimum(32, tpb - self.warp_in_block * 32)
        self.shared_stride = align_up(max(launch.shared_window, 16), 16)
        self.shared = np.zeros(nblocks * self.shared_stride, dtype=np.uint8)
        self.local_stride = align_up(max(local_size, 16), 16)
        self.local = np.zeros(n * self.local_stride, dtype=np.uint8)
        self.specials: dict[str, np.ndarray] = {}  # per-lane special registers, computed once

    def ensure_local(self, size: int) -> None:
        """Grow every thread's local stack to at least ``size`` bytes."""
        if size <= self.local_stride:
            return
        if size > MAX_LOCAL_PER_THREAD:
            raise StackOverflow(
                f"kernel {self.launch.kernel}: a thread needs {size} bytes of stack; the "
                f"device allows {MAX_LOCAL_PER_THREAD} (runaway recursion?)"
            )
        stride = min(max(align_up(size, 16), 2 * self.local_stride), MAX_LOCAL_PER_THREAD)
        if self.n * stride > MAX_CHUNK_LOCAL:
            stride = align_up(size, 16)
            if self.n * stride > MAX_CHUNK_LOCAL:
                raise StackOverflow(
                    f"kernel {self.launch.kernel}: {self.n} threads with {size} bytes of stack "
                    f"each do not fit the CPU device's {MAX_CHUNK_LOCAL >> 30} GiB of local memory"
                )
        grown = np.zeros(self.n * stride, dtype=np.uint8)
        grown.reshape(self.n, stride)[:, : self.local_stride] = self.local.reshape(
            self.n, self.local_stride
        )
        self.local = grown
        self.local_stride = stride


class Frame:
    """One activation of a function for a set of lanes of a chunk."""

    __slots__ = (
        "code", "launch", "chunk", "n", "lanes", "regs", "params", "state", "pc",
        "local_base", "local_top", "depth", "force", "bar_pc", "bar_id", "bar_count",
        "bar_value", "arrivals", "cache", "cc", "stop", "below",
        "yielded", "call", "spins",
    )

    def __init__(
        self,
        code: FunctionCode,
        launch: Launch,
        chunk: Chunk,
        lanes: np.ndarray | None,
        local_base: int,
        depth: int,
    ) -> None:
        self.code = code
        self.launch = launch
        self.chunk = chunk
        self.lanes = lanes
        self.n = n = chunk.n if lanes is None else len(lanes)
        self.regs = [np.zeros(n, dtype=dt) for dt in code.reg_dtypes]
        self.params = np.zeros((n, code.param_size), dtype=np.uint8) if code.param_size else None
        self.state = np.zeros(n, dtype=np.int8)
        self.pc = np.zeros(n, dtype=np.int32)
        self.local_base = local_base
        self.local_top = local_base + code.local_size
        chunk.ensure_local(self.local_top - LOCAL_STACK_BASE)
        self.depth = depth
        self.force = False
        self.bar_pc: np.ndarray | None = None
        self.bar_id: np.ndarray | None = None
        self.bar_count: np.ndarray | None = None
        self.bar_value: np.ndarray | None = None
        self.arrivals: np.ndarray | None = None
        self.cache: dict[str, np.ndarray] = {}
        self.cc: np.ndarray | None = None
        self.stop = NO_PC
        self.below = False
        self.yielded = False
        self.call: PendingCall | None = None  # the call this frame waits on
        self.spins = 0  # the scheduler's spin count, kept while a call runs

    def carry(self) -> np.ndarray:
        """The per-lane carry flag (CC.CF) of ``add.cc``/``addc`` chains."""
        if self.cc is None:
            self.cc = np.zeros(self.n, dtype=np.uint32)
        return self.cc

    # -- lane mappings --------------------------------------------------------

    def chunk_lanes(self, act: Any) -> np.ndarray:
        """Chunk lane index of each selected frame lane."""
        if self.lanes is None:
            return self.chunk.lane_index if act is ALL else act
        return self.lanes if act is ALL else self.lanes[act]

    def global_ids(self, act: Any) -> np.ndarray:
        return self.chunk_lanes(act) + self.chunk.first_global

    def per_lane(self, name: str, chunk_array: np.ndarray) -> np.ndarray:
        """A chunk-level per-lane array gathered to this frame's lanes (cached)."""
        if self.lanes is None:
            return chunk_array
        v = self.cache.get(name)
        if v is None:
            v = chunk_array[self.lanes]
            self.cache[name] = v
        return v

    def position(self) -> np.ndarray:
        """Frame lane index of every chunk lane (-1 where the lane is not in the frame)."""
        v = self.cache.get("@position")
        if v is None:
            if self.lanes is None:
                v = self.chunk.lane_index
            else:
                v = np.full(self.chunk.n, -1, dtype=np.int64)
                v[self.lanes] = np.arange(self.n, dtype=np.int64)
            self.cache["@position"] = v
        return v

    def alive(self) -> np.ndarray:
        return self.state < DONE

    def describe_lane(self, i: int) -> str:
        thread, block = self.launch.info.thread_of(int(self.global_ids(np.array([i]))[0]))
        return (f"block ({block[0]}, {block[1]}, {block[2]}), "
                f"thread ({thread[0]}, {thread[1]}, {thread[2]})")


def stack_use(fr: Frame) -> int:
    """Bytes of stack a thread of ``fr`` uses: the ``.local`` frames of the
    calls it is in (its own included) and :data:`CALL_FRAME_BYTES` a call."""
    return fr.local_top - LOCAL_STACK_BASE + fr.depth * CALL_FRAME_BYTES


def static_stack(kernel: str, code_of: Callable[[str], FunctionCode | None]) -> int:
    """The stack a kernel needs without recursion: the deepest chain of calls
    with each function counted once on it (what ptxas can size statically; a
    real driver grows the stack to it whatever the configured size).
    ``code_of`` gives a callee's decoded code (None: a function without a body)."""
    need: dict[str, int] = {}

    def frame_bytes(code: FunctionCode) -> int:
        return align_up(code.local_size, 16) + (0 if code.is_kernel else CALL_FRAME_BYTES)

    # iterative depth-first search: a call chain may be longer than Python's recursion
    root = code_of(kernel)
    if root is None:
        return 0
    on_path = {kernel}
    stack: list[tuple[FunctionCode, list[str], int]] = [(root, sorted(root.callees), 0)]
    while stack:
        code, todo, deepest = stack[-1]
        while todo:
            name = todo.pop()
            if name in need:
                deepest = max(deepest, need[name])
                continue
            callee = code_of(name) if name not in on_path else None
            if callee is not None:
                stack[-1] = (code, todo, deepest)
                on_path.add(name)
                stack.append((callee, sorted(callee.callees), 0))
                break
        else:
            stack.pop()
            on_path.discard(code.name)
            need[code.name] = frame_bytes(code) + deepest
            if stack:
                parent, ptodo, pdeep = stack[-1]
                stack[-1] = (parent, ptodo, max(pdeep, need[code.name]))
    return need[kernel]
