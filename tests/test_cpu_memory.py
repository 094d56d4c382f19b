"""The CPU device's memory keeps its allocation index as it goes: gpusafe
allocates and frees its own records at every launch and every record is kept
forever, so the work of an allocation, a free or an access must not grow with
the number of allocations ever made.  Work is counted (entries written into
the index), never timed."""

from __future__ import annotations

import numpy as np
import pytest

from gpusafe.cpu.errors import InvalidAddress
from gpusafe.cpu.events import MemoryEvent
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe_instrument import nodes
from gpusafe_instrument.kinds import AccessKind, ViolationKind

LAUNCHES = 5000


def launch_records(memory: DeviceMemory) -> None:
    """What gpusafe does around one launch: two records placed, read, freed."""
    violations = memory.alloc(4096)
    context = memory.alloc(96)
    memory.write(context, bytes(96))
    memory.segments(np.array([violations, context], dtype=np.uint64), 8)
    memory.read(violations, 64)
    memory.free(context)
    memory.free(violations)


def test_the_index_is_updated_in_place_not_rebuilt_as_records_accumulate() -> None:
    memory = DeviceMemory(red_zone=0, quarantine=0)
    user = memory.alloc(1000)
    launch_records(memory)
    first = memory.index().written
    for _ in range(LAUNCHES - 1):
        launch_records(memory)
    per_launch = (memory.index().written - first) / (LAUNCHES - 1)
    # two allocations of 5 entries each (a segment's start and end, an
    # allocation's base, end and state), each entry written once and copied
    # under twice by the capacity doublings (amortised), and two frees
    assert per_launch <= 2 * 5 * (1 + 2) + 2
    assert memory.find(user).live


def test_the_index_agrees_with_the_records_after_growing() -> None:
    memory = DeviceMemory(red_zone=64)
    bases = [memory.alloc(100 + i, align=256 << (i % 3)) for i in range(300)]
    for base in bases[::3]:
        memory.free(base)
    index = memory.index()
    records = memory.allocations
    np.testing.assert_array_equal(index.bases, [a.base for a in records])
    np.testing.assert_array_equal(index.ends, [a.end for a in records])
    np.testing.assert_array_equal(index.live, [a.live for a in records])
    assert len(index.seg_starts) == len(index.seg_ends)
    np.testing.assert_array_equal(index.seg_starts[1:], index.seg_ends[:-1])  # no gaps
    assert [memory.find(b + 5) for b in bases] == records


def test_the_oracle_sees_a_free_made_after_the_index_grew() -> None:
    memory = DeviceMemory(red_zone=0, quarantine=0)
    for _ in range(200):  # past the first doublings of every column
        memory.free(memory.alloc(32))
    stale = memory.alloc(64)
    fresh = memory.alloc(64)
    memory.free(stale)
    assert memory.lookup(np.array([stale + 8], np.uint64))[0] == 200
    oracle = Oracle(memory)
    instruction = nodes.Instruction("ld.global.u32", line=7)
    for address in (stale + 8, fresh + 8):
        oracle.memory_access(MemoryEvent(
            space="global", access=AccessKind.READ, width=4,
            addresses=np.array([address], np.uint64), lanes=np.zeros(1, np.int64),
            instruction=instruction, kernel="k"))
    [found] = oracle.violations
    assert found.kind == ViolationKind.USE_AFTER_FREE
    assert found.allocation is not None and found.allocation.base == stale


def test_a_double_free_is_refused_after_many_records() -> None:
    memory = DeviceMemory(red_zone=0, quarantine=0)
    for _ in range(300):
        memory.free(memory.alloc(16))
    base = memory.alloc(16)
    memory.free(base)
    with pytest.raises(InvalidAddress, match="already freed"):
        memory.free(base)
