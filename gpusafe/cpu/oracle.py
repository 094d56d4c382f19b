"""The oracle: an independent check of every access the CPU device performs.

It observes memory events (:mod:`gpusafe.cpu.events`) and checks each lane's
access against

* the allocation map for global (and ``.const``) accesses: an access that
  does not start inside an allocation, or runs past its end, is
  ``global-out-of-bounds``; one inside a freed allocation is
  ``use-after-free``; one through an address in the null page is
  ``null-pointer``;
* the block's shared window (static variables, padding, dynamic size):
  ``shared-out-of-bounds``;
* the thread's local window (its stack of frames so far): ``local-out-of-bounds``;
* alignment: an address that is not a multiple of the access width (a whole
  vector for ``ld.v4``) is ``misaligned-access``.

One record per offending lane and dynamic access, one kind per record (the
first that applies, in the order above with alignment last), and the access
is suppressed: a load yields zero, a store or atomic does nothing.  The
oracle knows the allocation map only, not where a pointer came from: an
overflow that lands inside another allocation is not visible to it (the
device's red zones make linear overflows land outside every allocation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusafe_instrument.kinds import AccessKind, ViolationKind

from .events import LaunchInfo, MemoryEvent, ObserverBase
from .memory import NULL_PAGE, ArenaAllocation, DeviceMemory

_OK, _NULL, _OOB, _UAF, _MISALIGNED = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class OracleViolation:
    kind: ViolationKind
    access: AccessKind
    address: int  # the address the program used (generic when it used a generic pointer)
    size: int
    kernel: str
    ptx_line: int
    thread: tuple[int, int, int]
    block: tuple[int, int, int]
    space: str
    allocation: ArenaAllocation | None = None  # the allocation the address falls in, if any


class Oracle(ObserverBase):
    """Checks every memory access against the allocation map and the windows."""

    def __init__(self, memory: DeviceMemory, *, max_records: int | None = None) -> None:
        self.memory = memory
        self.violations: list[OracleViolation] = []
        self.max_records = max_records
        self.dropped = 0
        self._launch: LaunchInfo | None = None

    def kernel_begin(self, launch: LaunchInfo) -> None:
        self._launch = launch

    def kernel_end(self, launch: LaunchInfo) -> None:
        self._launch = None

    # -- the check -------------------------------------------------------------

    def memory_access(self, event: MemoryEvent) -> np.ndarray | None:
        a = event.addresses
        if a.size == 0:
            return None
        width = event.width
        space = event.space
        if space in ("global", "const"):
            kinds, alloc_index = self._check_global(a, width, event.alignment)
        elif space in ("shared", "local"):
            if event.window >= width:
                outside = a > np.uint64(event.window - width)
            else:
                outside = np.ones(a.shape, dtype=bool)
            if event.window_base:
                outside |= a < np.uint64(event.window_base)
            kinds = np.where(outside, _OOB, _OK).astype(np.int8)
            alloc_index = None
            misaligned = (a % np.uint64(event.alignment)) != 0
            kinds[(kinds == _OK) & misaligned] = _MISALIGNED
        else:
            return None
        bad = kinds != _OK
        if not bad.any():
            return None
        self._record(event, kinds, alloc_index)
        return bad

    def _check_global(self, a: np.ndarray, width: int,
                      align: int) -> tuple[np.ndarray, np.ndarray | None]:
        memory = self.memory
        ix = memory.index()
        w = np.uint64(width)
        al = np.uint64(align)
        lo = a.min()
        hi = a.max()
        if len(ix.bases) and lo >= np.uint64(NULL_PAGE):
            i = int(np.searchsorted(ix.bases, lo, side="right")) - 1
            if i >= 0 and ix.live[i] and hi + w <= ix.ends[i] and not (a % al).any():
                return np.zeros(a.shape, dtype=np.int8), None
        idx = memory.lookup(a)
        valid = idx >= 0
        safe = np.where(valid, idx, 0)
        ends = ix.ends[safe] if len(ix.ends) else np.zeros(a.shape, dtype=np.uint64)
        live = ix.live[safe] if len(ix.live) else np.zeros(a.shape, dtype=bool)
        starts_inside = valid & (a < ends)
        fits = starts_inside & (a + w <= ends)
        kinds = np.full(a.shape, _OK, dtype=np.int8)
        kinds[~fits] = _OOB
        kinds[starts_inside & ~live] = _UAF
        kinds[(kinds == _OK) & ((a % al) != 0)] = _MISALIGNED
        kinds[a < np.uint64(NULL_PAGE)] = _NULL
        # the allocation a report names: the one the access starts in, else the
        # nearest one (an overflow past its end or an underflow before its base)
        nearest = np.where(starts_inside, idx, -1)
        outside = np.flatnonzero(~starts_inside & (kinds != _NULL))
        if len(outside) and len(ix.bases):
            prev = idx[outside]
            nxt = prev + 1
            has_prev = prev >= 0
            has_next = nxt < len(ix.bases)
            gap_prev = np.where(has_prev, a[outside] - ix.ends[np.maximum(prev, 0)],
                                np.uint64(2**63))
            gap_next = np.where(has_next, ix.bases[np.minimum(nxt, len(ix.bases) - 1)] - a[outside],
                                np.uint64(2**63))
            nearest[outside] = np.where(gap_next < gap_prev, nxt, prev)
        return kinds, nearest

    def _record(self, event: MemoryEvent, kinds: np.ndarray,
                alloc_index: np.ndarray | None) -> None:
        launch = self._launch
        bad = np.flatnonzero(kinds != _OK)
        if self.max_records is not None:
            room = max(0, self.max_records - len(self.violations))
            self.dropped += max(0, len(bad) - room)
            bad = bad[:room]
        shown = event.generic if event.generic is not None else event.addresses
        space_kind = {
            "global": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
            "const": ViolationKind.GLOBAL_OUT_OF_BOUNDS,
            "shared": ViolationKind.SHARED_OUT_OF_BOUNDS,
            "local": ViolationKind.LOCAL_OUT_OF_BOUNDS,
        }[event.space]
        names = {
            _NULL: ViolationKind.NULL_POINTER, _OOB: space_kind,
            _UAF: ViolationKind.USE_AFTER_FREE, _MISALIGNED: ViolationKind.MISALIGNED_ACCESS,
        }
        line = event.instruction.line
        for i in bad:
            i = int(i)
            lane = int(event.lanes[i])
            if launch is not None:
                thread, block = launch.thread_of(lane)
            else:
                thread, block = (lane, 0, 0), (0, 0, 0)
            allocation = None
            if alloc_index is not None and alloc_index[i] >= 0:
                allocation = self.memory.allocation_at(int(alloc_index[i]))
            self.violations.append(OracleViolation(
                kind=names[int(kinds[i])], access=event.access, address=int(shown[i]),
                size=event.width, kernel=event.kernel, ptx_line=line, thread=thread,
                block=block, space=event.space, allocation=allocation,
            ))
