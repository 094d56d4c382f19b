"""What the executor tells its observers (Oclgrind style): the core knows
nothing of checking; the oracle and counters subscribe to these events.

``Observer`` is a protocol: an observer implements the methods it cares
about; :class:`ObserverBase` gives no-op defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gpusafe_instrument.kinds import AccessKind

if TYPE_CHECKING:
    from gpusafe_instrument.nodes import Instruction


@dataclass(frozen=True)
class LaunchInfo:
    """One kernel launch."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    static_shared: int  # bytes of the kernel's static .shared variables
    dynamic_shared: int  # bytes asked for at launch
    shared_window: int  # size of each block's shared window (static, padding, dynamic)
    local_size: int  # bytes of the kernel's own .local frame

    @property
    def threads_per_block(self) -> int:
        x, y, z = self.block
        return x * y * z

    def thread_of(self, lane: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(thread index, block index) of a global linear thread id."""
        per_block = self.threads_per_block
        block_linear, t = divmod(int(lane), per_block)
        bx, by, _ = self.block
        gx, gy, _ = self.grid
        thread = (t % bx, (t // bx) % by, t // (bx * by))
        block = (block_linear % gx, (block_linear // gx) % gy, block_linear // (gx * gy))
        return thread, block


@dataclass
class MemoryEvent:
    """One memory instruction executed by a group of lanes, in one state space.

    ``addresses`` are addresses *in ``space``*: a global address, a shared
    offset in the block's window, a local offset in the thread's window.
    ``generic`` holds the generic addresses the program used when it accessed
    the memory through a generic pointer (None otherwise).  ``window`` is the
    end of the valid window for shared (the block's) and local (the thread's
    current stack: its frames so far) accesses, ``window_base`` its start.
    ``width`` is the bytes each lane accesses (a whole vector for ``ld.v4``);
    ``align`` the alignment the address needs, when it is not the width (a
    ``cp.async`` that reads only its src-size bytes of a cp-size copy).
    ``lanes`` are global linear thread ids.
    """

    space: str  # "global" | "shared" | "local" | "const"
    access: AccessKind
    width: int
    addresses: np.ndarray  # uint64
    lanes: np.ndarray  # int64 global linear thread ids
    instruction: Instruction
    kernel: str
    generic: np.ndarray | None = None
    window: int = 0
    window_base: int = 0
    align: int = 0  # 0: the width

    @property
    def alignment(self) -> int:
        return self.align or self.width

    @property
    def ptx_line(self) -> int:
        return self.instruction.line


class Observer(Protocol):
    def kernel_begin(self, launch: LaunchInfo) -> None: ...

    def memory_access(self, event: MemoryEvent) -> np.ndarray | None:
        """Return a boolean mask (per lane of the event) of accesses to suppress."""
        ...

    def instructions(self, count: int) -> None: ...

    def kernel_end(self, launch: LaunchInfo) -> None: ...


class ObserverBase:
    """No-op implementations of every :class:`Observer` method."""

    def kernel_begin(self, launch: LaunchInfo) -> None:
        pass

    def memory_access(self, event: MemoryEvent) -> np.ndarray | None:
        return None

    def instructions(self, count: int) -> None:
        pass

    def kernel_end(self, launch: LaunchInfo) -> None:
        pass


class InstructionCounter(ObserverBase):
    """Counts thread-instructions over every launch it watches."""

    def __init__(self) -> None:
        self.count = 0

    def instructions(self, count: int) -> None:
        self.count += count
