"""``cp.async`` on the CPU device reads what the PTX ISA says it reads: with
a src-size, only src-size bytes of the source (the rest of the cp-size
destination is zero-filled); with the ignore-src predicate true, nothing (the
destination is all zeros).  The oracle sees exactly those reads, so it neither
misses an overrun nor reports bytes that were never read."""

from __future__ import annotations

import numpy as np
import pytest

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe.cpu.program import Program
from gpusafe_instrument.kinds import ViolationKind

# thread t copies 16 bytes from src + 16t into its shared slot, then to out + 16t;
# SRC_SIZE / IGNORE is the copy's fourth operand
KERNEL = r"""
.version 7.5
.target sm_80
.address_size 64

.visible .entry copy(.param .u64 out, .param .u64 src, .param .u64 arg)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<12>;
    .shared .align 16 .b8 tile[512];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    ld.param.u64 %rd3, [arg];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 16;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.u32 %r2, [%rd6];
    setp.ne.u32 %p1, %r2, 0;
    add.s64 %rd7, %rd2, %rd4;
    mov.u64 %rd8, tile;
    add.s64 %rd9, %rd8, %rd4;
    cp.async.ca.shared.global [%rd9], [%rd7], 16, OPERAND;
    cp.async.wait_all;
    ld.shared.v4.u32 {%r3, %r4, %r5, %r6}, [%rd9];
    add.s64 %rd10, %rd1, %rd4;
    st.global.v4.u32 [%rd10], {%r3, %r4, %r5, %r6};
    ret;
}
"""

SRC_SIZE = "%r2"  # the per-thread value of arg[t] is the src-size
IGNORE = "%p1"  # arg[t] != 0: ignore the source
KEEP = "!%p1"  # arg[t] == 0: ignore the source


def run(operand: str, args: list[int], src_bytes: int,
        oracle: bool = False) -> tuple[np.ndarray, np.ndarray, list]:
    """Launch one thread per entry of ``args`` over a ``src_bytes`` source of
    bytes 1, 2, 3 ...; returns the rows copied, the source, and what the oracle found."""
    memory = DeviceMemory()
    program = Program(KERNEL.replace("OPERAND", operand), memory)
    n = len(args)
    source = (np.arange(src_bytes) % 251 + 1).astype(np.uint8)
    src = memory.alloc(src_bytes)
    memory.write(src, source)
    out = memory.alloc(16 * n)
    arg = memory.alloc(4 * n)
    memory.write(arg, np.array(args, dtype=np.uint32))
    observers = [Oracle(memory)] if oracle else []
    params = np.array([out, src, arg], dtype=np.uint64).tobytes()
    program.launch("copy", (1, 1, 1), (n, 1, 1), 0, params, observers=observers)
    rows = np.frombuffer(memory.read(out, 16 * n), np.uint8).reshape(n, 16)
    return rows, source, observers[0].violations if oracle else []


def expected(source: np.ndarray, sizes: list[int]) -> np.ndarray:
    rows = np.zeros((len(sizes), 16), np.uint8)
    for t, size in enumerate(sizes):
        rows[t, :size] = source[16 * t: 16 * t + size]
    return rows


def test_src_size_reads_that_many_bytes_and_zero_fills_the_rest() -> None:
    sizes = [16, 8, 3, 0, 16, 12]
    rows, source, _ = run(SRC_SIZE, sizes, 16 * len(sizes))
    np.testing.assert_array_equal(rows, expected(source, sizes))


def test_a_src_size_read_that_stays_inside_its_allocation_is_not_reported() -> None:
    # 56 bytes: thread 3 copies 16 bytes of which only the 8 inside are read
    rows, source, found = run(SRC_SIZE, [16, 16, 16, 8], 56, oracle=True)
    assert found == []
    np.testing.assert_array_equal(rows, expected(source, [16, 16, 16, 8]))


def test_a_src_size_read_past_its_allocation_is_reported_with_its_size() -> None:
    _, _, found = run(SRC_SIZE, [16, 16, 16, 12], 56, oracle=True)
    assert [(v.kind, v.size, v.thread) for v in found] == [
        (ViolationKind.GLOBAL_OUT_OF_BOUNDS, 12, (3, 0, 0))]


def test_a_src_size_read_aligned_to_the_copy_is_not_misaligned() -> None:
    # 12 bytes at a 16-byte aligned address: the copy's alignment is cp-size's
    _, _, found = run(SRC_SIZE, [12, 12], 32, oracle=True)
    assert found == []


@pytest.mark.parametrize("operand, flags", [(IGNORE, [0, 1, 0, 1]), (KEEP, [1, 0, 1, 0])],
                         ids=["ignore-src", "negated"])
def test_ignore_src_true_reads_nothing_and_writes_zeros(operand: str, flags: list[int]) -> None:
    rows, source, _ = run(operand, flags, 64)
    copied = [16, 0, 16, 0]
    np.testing.assert_array_equal(rows, expected(source, copied))


def test_an_ignored_source_out_of_bounds_is_not_reported() -> None:
    # threads 2 and 3 point past the 32-byte source but ignore it
    rows, source, found = run(IGNORE, [0, 0, 1, 1], 32, oracle=True)
    assert found == []
    np.testing.assert_array_equal(rows, expected(source, [16, 16, 0, 0]))
