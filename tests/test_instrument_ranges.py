"""Range analysis (issue 14): checks of a loop's induction range made once
before the loop (``checks/ranges.py``), and lookups of loaded pointers
grouped per step (``optimisation.regions``).  Each
optimisation has a test where its proof does not hold (a bound past the
allocation, a guard on the wrong buffer, an off-by-one, a negative start, a
step that wraps) and the checked run must report exactly what the oracle
reports, on the CPU device.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_instrument_cpu import Buf, PtrTable, assert_same, kinds, run_both

from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

pytestmark = pytest.mark.slow  # NVRTC and two launches per test: about a second each

COPY = r"""
extern "C" __global__ void copy(float* y, const float* x, float a, int start, int n, int step)
{
    for (int i = start + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step * gridDim.x)
        y[i] = a * x[i] + y[i];
}
"""


def _copy(ny, nx, start, n, step, threads=32):
    return run_both(COPY, "copy", (1, 1, 1), (threads, 1, 1),
                    [Buf(np.zeros(ny, np.float32)), Buf(np.arange(nx, dtype=np.float32)),
                     np.float32(2.0), np.int32(start), np.int32(n), np.int32(step)])


def _induction(o, kernel):
    return o.stats[kernel]["removed"].get("induction-range", 0)


def test_a_grid_stride_loop_in_bounds_is_checked_once_and_reports_nothing():
    o = _copy(100, 100, 0, 100, 32)
    assert _induction(o, "copy") >= 1  # the optimisation applies to this loop
    assert o.device == [] and o.oracle == []
    assert_same(o)


@pytest.mark.parametrize("n", [101, 130])  # one past the end (off-by-one), far past
def test_a_bound_past_the_allocation_is_reported_at_each_bad_iteration(n):
    o = _copy(100, 100, 0, n, 32)
    assert _induction(o, "copy") >= 1
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 3 * (n - 100)  # two loads and the store of each bad index
    assert_same(o)


def test_a_guard_on_the_wrong_buffer_is_caught():
    # n bounds x (100 floats) but y holds 90: the stores past y's end are bad
    o = _copy(90, 100, 0, 100, 32)
    assert _induction(o, "copy") >= 1
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2 * 10  # the load and the store of y[90..99]
    assert_same(o)


def test_a_negative_start_is_caught():
    o = _copy(100, 100, -3, 100, 32)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 3 * 3
    assert_same(o)


def test_a_step_that_wraps_to_a_negative_index_is_caught():
    # i = 2, then 2 + INT_MAX wraps to -2147483647 (< n: the loop goes on),
    # then 0, then INT_MAX (the loop ends): the largest index before the
    # loop, 7, is in range; only the no-wrap premise fails
    o = _copy(8, 8, 2, 8, 2**31 - 1, threads=1)
    assert _induction(o, "copy") >= 1
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 3  # the accesses at index -2147483647
    assert_same(o)


SHARED_LOOP = r"""
extern "C" __global__ void clear(unsigned* out, int n)
{
    __shared__ unsigned s[64];
    for (int b = threadIdx.x; b < n; b += blockDim.x) s[b] = b;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


@pytest.mark.parametrize("n,bad", [(64, 0), (65, 1), (80, 16)])
def test_a_shared_array_filled_by_a_strided_loop(n, bad):
    o = run_both(SHARED_LOOP, "clear", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.uint32)), np.int32(n)])
    assert _induction(o, "clear") >= 1
    assert o.occurrences == bad
    if bad:
        assert kinds(o) == {"shared-out-of-bounds"}
    assert_same(o)


WRAP = r"""
extern "C" __global__ void wrap(float* out, unsigned k)
{
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + k) % MOD];
}
"""


@pytest.mark.parametrize("mod,bad", [(64, 0), (128, 32)])
def test_an_index_wrapped_by_a_mask_is_proven_only_inside_the_array(mod, bad):
    o = run_both(WRAP.replace("MOD", str(mod)), "wrap", (1, 1, 1), (64, 1, 1),
                 [Buf(np.zeros(64, np.float32)), np.uint32(32)])
    guarded = o.stats["wrap"]["removed"].get("guarded-in-bounds", 0)
    assert guarded == (1 if bad == 0 else 0)
    assert o.occurrences == bad
    if bad:
        assert kinds(o) == {"shared-out-of-bounds"}
    assert_same(o)


CHASE = r"""
struct Node { int next; float value; };
extern "C" __global__ void chase(float* out, const Node* const* lists, int steps)
{
    const Node* list = lists[threadIdx.x % 2];
    int at = threadIdx.x % 8;
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
        acc += list[at].value;
        at = list[at].next;
    }
    out[threadIdx.x] = acc;
}
"""


def _nodes(nexts):
    return np.array([(n, float(k)) for k, n in enumerate(nexts)],
                    dtype=[("next", np.int32), ("value", np.float32)])


@pytest.mark.parametrize("bad_next", [None, 8, -1])
def test_a_pointer_chase_grouped_per_step_still_catches_a_bad_link(bad_next):
    nexts = [(k + 3) % 8 for k in range(8)]
    if bad_next is not None:
        nexts[5] = bad_next  # one past the list, or before it
    o = run_both(CHASE, "chase", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.float32)), PtrTable([(3, 0), (4, 0)]), np.int32(12),
                  Buf(_nodes(nexts)), Buf(_nodes([(k + 1) % 8 for k in range(8)]))])
    assert o.stats["chase"]["removed"].get("grouped-in-block", 0) >= 2
    if bad_next is None:
        assert o.device == [] and o.oracle == []
    else:
        assert o.device and kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


def test_a_misaligned_list_is_reported_at_every_step():
    # the list pointer is 2 bytes into its buffer: every node read is
    # misaligned, while each node index is a multiple of 8 bytes: the check
    # of the list pointer's alignment, made once before the loop, must send
    # each read to its own slow path
    o = run_both(CHASE, "chase", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.float32)), PtrTable([(3, 2), (4, 0)]), np.int32(12),
                  Buf(_nodes([(k + 3) % 8 for k in range(8)])),
                  Buf(_nodes([(k + 1) % 8 for k in range(8)]))])
    assert o.stats["chase"]["removed"].get("hoisted-out-of-loop", 0) >= 1
    assert kinds(o) == {"misaligned-access"}
    assert o.occurrences == 4 * 12 * 2  # 4 threads use that list, 12 steps, 2 reads
    assert_same(o)


HALVES = r"""
extern "C" __global__ void halves(int* out, const char* const* tables)
{
    const char* p = tables[0];
    int a = *(const int*)p + *(const int*)(p + 4);  // aligned: the lookup cache is warm after
    const char* q = p + 2 * threadIdx.x;
    out[threadIdx.x] = a + *(const int*)q + *(const int*)(q + 8);
}
"""


def test_an_index_not_a_multiple_of_the_width_keeps_its_alignment_check():
    # p + 2 * t: p is aligned, the odd threads' reads are not; the second
    # pair's filter runs with the lookup cache warm, so only its alignment
    # condition can send the reads to their slow paths
    o = run_both(HALVES, "halves", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.int32)), PtrTable([(2, 0)]),
                  Buf(np.arange(16, dtype=np.int32))])
    assert o.stats["halves"]["removed"].get("grouped-in-block", 0) == 2  # a filter per pair
    assert kinds(o) == {"misaligned-access"}
    assert o.occurrences == 2 * 4
    assert_same(o)


COLUMN = r"""
extern "C" __global__ void column(float* out, const float* in, const float* w, int rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.f;
    for (int i = 0; i < rows; ++i) s += w[ROW * cols + j] * in[i];
    out[j] = s;
}
"""


def _column(w_len, rows=16, cols=32, row="i"):
    src = COLUMN.replace("ROW", row)
    o = run_both(src, "column", (1, 1, 1), (cols, 1, 1),
                 [Buf(np.zeros(cols, np.float32)), Buf(np.ones(rows, np.float32)),
                  Buf(np.arange(w_len, dtype=np.float32)), np.int32(rows), np.int32(cols)])
    return o


def _chained(o):
    return o.stats["column"]["removed"].get("chained", 0)


def test_a_column_walk_in_bounds_is_checked_at_its_ends():
    o = _column(16 * 32)
    assert _chained(o) >= 1  # the unrolled loop's stride additions form a chain
    assert o.device == [] and o.oracle == []
    assert_same(o)


def test_a_column_walk_whose_last_row_is_missing_is_caught():
    # one row short: the last step of each thread's walk is past the end
    o = _column(15 * 32)
    assert _chained(o) >= 1
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 32
    assert_same(o)


@pytest.mark.parametrize("w_len,bad", [(16 * 32, 0), (16 * 32 - 8, 8)])
def test_a_backward_column_walk_fails_the_chain_premise_and_is_checked(w_len, bad):
    # rows walked from the last: the step is negative, above the premise's
    # limit as unsigned; the region's slow copy checks each access
    o = _column(w_len, row="(rows - 1 - i)")
    assert o.occurrences == bad
    assert_same(o)


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_the_checked_loops_assemble(arch):
    for src in (COPY, SHARED_LOOP, CHASE, GATHER_LOOP, SYNC_LOOP, HALVES, COLUMN.replace("ROW", "i"), TREE.replace("TOP", "128").replace("GUARD_DIV", "1"),
                BYTES.replace("TYPE", "unsigned char").replace("SIZE", "256")):
        ptxas(instrument(nvrtc_compile(src, "k.cu", "compute_75")).ptx, arch)


TREE = r"""
extern "C" __global__ void tree(float* sums, const float* in)
{
    __shared__ float s[256];
    int t = threadIdx.x, u = threadIdx.x / GUARD_DIV;
    s[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    for (int w = TOP; w > 0; w >>= 1) {
        if (u < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) sums[blockIdx.x] = s[0];
}
"""


def _tree(top, guard_div=1):
    src = TREE.replace("TOP", str(top)).replace("GUARD_DIV", str(guard_div))
    return run_both(src, "tree", (2, 1, 1), (256, 1, 1),
                    [Buf(np.zeros(2, np.float32)), Buf(np.ones(512, np.float32))])


def _guarded(o):
    return o.stats["tree"]["removed"].get("guarded-in-bounds", 0)


def test_tree_reduction_steps_guarded_by_t_lt_w_are_not_checked():
    o = _tree(128)
    assert _guarded(o) >= 14  # s[t] and s[t + w] of each of the 8 steps, most of them
    assert o.device == [] and o.oracle == []
    assert_same(o)


def test_a_guard_that_lets_the_index_past_the_array_is_checked():
    # the first step reads s[t + 256] for every t < 256: all out of bounds
    o = _tree(256)
    assert kinds(o) == {"shared-out-of-bounds"}
    assert o.occurrences == 2 * 256  # one bad load per thread of each block
    assert_same(o)
    # s[t + 256] stays checked; s[t] of that step is proven like the others
    assert o.stats["tree"]["checks"]["window"] == _tree(128).stats["tree"]["checks"]["window"] + 1


def test_a_guard_on_another_register_proves_nothing():
    # u = t / 2 < 128 holds for every thread, but s[t + 128] is bad for t >= 128
    o = _tree(128, guard_div=2)
    assert kinds(o) == {"shared-out-of-bounds"}
    assert_same(o)


BYTES = r"""
extern "C" __global__ void bytes(unsigned* out, const TYPE* data)
{
    __shared__ unsigned local[SIZE];
    for (int b = threadIdx.x; b < SIZE; b += blockDim.x) local[b] = 0;
    __syncthreads();
    atomicAdd(&local[data[threadIdx.x]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < SIZE; b += blockDim.x) out[b] = local[b];
}
"""


@pytest.mark.parametrize("ctype,dtype,size,values,bad", [
    ("unsigned char", np.uint8, 256, [0, 255], 0),
    ("unsigned char", np.uint8, 200, [0, 255], 1),  # the array is smaller than a byte's range
    ("signed char", np.int8, 256, [0, -1], 1),  # a negative char indexes before the array
    ("unsigned short", np.uint16, 256, [0, 256], 1),  # 16 bits: not a byte's range
])
def test_an_index_loaded_as_a_byte_is_proven_only_inside_the_array(ctype, dtype, size, values,
                                                                   bad):
    data = np.array(values * 32, dtype)  # 64 threads, every other one with the large value
    o = run_both(BYTES.replace("TYPE", ctype).replace("SIZE", str(size)), "bytes", (1, 1, 1),
                 (64, 1, 1), [Buf(np.zeros(size, np.uint32)), Buf(data)])
    guarded = o.stats["bytes"]["removed"].get("guarded-in-bounds", 0)
    assert guarded == (0 if bad else 1)
    assert o.occurrences == 32 * bad
    if bad:
        assert kinds(o) == {"shared-out-of-bounds"}
    assert_same(o)


def _versioned(o, kernel):
    return o.stats[kernel]["removed"].get("loop-versioned", 0)


@pytest.mark.parametrize("ny,nx,start,n,step,bad", [
    (100, 100, 0, 100, 32, 0),  # in bounds: the unchecked copy runs
    (100, 100, 0, 101, 32, 3),  # off by one: the checked copy reports the last index
    (90, 100, 0, 100, 32, 20),  # the guard bounds the other buffer
    (8, 8, 2, 8, 2**31 - 1, 3),  # the step wraps: only the premise fails
])
def test_a_versioned_loop_runs_its_checked_copy_when_the_range_check_fails(ny, nx, start, n,
                                                                         step, bad):
    o = _copy(ny, nx, start, n, step, threads=1 if step > 32 else 32)
    assert _versioned(o, "copy") == 3  # every check of the loop is in its copy only
    assert o.occurrences == bad
    assert_same(o)


GATHER_LOOP = r"""
extern "C" __global__ void gather(float* y, const float* x, const int* idx, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        y[i] = x[idx[i]];
}
"""


def test_a_loop_with_a_check_left_inside_is_not_versioned():
    # x[idx[i]] depends on a loaded index: its check stays in the loop, so
    # the loop is emitted once; a bad index is reported
    o = run_both(GATHER_LOOP, "gather", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(64, np.float32)), Buf(np.ones(64, np.float32)),
                  Buf(np.array([5] * 63 + [64], np.int32)), np.int32(64)])
    assert _versioned(o, "gather") == 0
    assert _induction(o, "gather") >= 1
    assert kinds(o) == {"global-out-of-bounds"} and o.occurrences == 1
    assert_same(o)


SYNC_LOOP = r"""
extern "C" __global__ void synced(float* out, int n)
{
    __shared__ float s[64];
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) {
        s[threadIdx.x] = k;
        __syncthreads();
        acc += s[63 - threadIdx.x];
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}
"""


@pytest.mark.parametrize("threads,bad", [(64, 0), (65, 1)])
def test_a_loop_with_a_barrier_is_not_versioned(threads, bad):
    # threads of one block could take different copies of the loop, each
    # with its own bar.sync: the loop is emitted once, its checks hoisted
    o = run_both(SYNC_LOOP, "synced", (1, 1, 1), (threads, 1, 1),
                 [Buf(np.zeros(threads, np.float32)), np.int32(3)])
    assert o.stats["synced"]["removed"].get("hoisted-out-of-loop", 0) >= 1
    assert _versioned(o, "synced") == 0
    assert (o.occurrences > 0) == bool(bad)
    assert_same(o)
