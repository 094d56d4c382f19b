"""Pinned lookups (``optimisation.LoopHoister._pin``, ``lookup.pinned_query``):
a loop's accesses through a base loaded from memory that the loop never
changes are checked as offsets against what one query of the base found.
Every bug the query does not cover still reaches the slow path and is
reported exactly as the oracle reports it."""

from __future__ import annotations

import numpy as np
import pytest

from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile, ptxas
from tests.test_instrument_cpu import Buf, PtrTable, assert_same, kinds, run_both

CHASE = r"""
struct Node { int next; float value; };
extern "C" __global__ void chase(float* out, const Node* const* lists, int steps, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const Node* list = lists[i % 4];
    int at = i % 8;
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
        const Node* node = &list[at];
        acc += node->value;
        at = node->next;
    }
    out[i] = acc;
}
"""

NODE = np.dtype([("next", np.int32), ("value", np.float32)])


def _list(n: int = 8, bad: dict[int, int] | None = None) -> Buf:
    nodes = [((k * 3 + 1) % n, float(k + 1)) for k in range(n)]
    for k, nxt in (bad or {}).items():
        nodes[k] = (nxt, nodes[k][1])
    return Buf(np.array(nodes, dtype=NODE))


def _args(threads: int, steps: int, lists: list[Buf], targets=None) -> list:
    targets = targets or [(4 + k % len(lists), 0) for k in range(4)]
    return [Buf(np.zeros(threads, np.float32)), PtrTable(targets), np.int32(steps),
            np.int32(threads), *lists]


def _chase(args: list, threads: int, ptx_text: str | None = None):
    return run_both(None if ptx_text else CHASE, "chase", (1, 1, 1), (threads, 1, 1), args,
                    ptx_text=ptx_text)


def _pinned(o) -> int:
    return o.stats["chase"]["removed"].get("pinned-lookup", 0)


def test_a_chase_in_bounds_is_quiet_and_its_loop_lookups_are_pinned():
    o = _chase(_args(32, 9, [_list() for _ in range(4)]), 32)
    assert _pinned(o) >= 1
    assert o.device == []
    assert_same(o)


def test_the_query_is_shared_by_the_lanes_of_a_warp_and_assembles():
    text = instrument(nvrtc_compile(CHASE, "k.cu", "compute_75")).ptx
    assert "match.any.sync.b64" in text and "shfl.sync.idx.b32" in text
    ptxas(text, "sm_75")


def test_a_next_index_past_the_list_is_reported():
    lists = [_list(bad={5: 8}), _list(), _list(), _list()]
    o = _chase(_args(32, 9, lists), 32)
    assert _pinned(o) >= 1
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


def test_a_negative_next_index_is_reported():
    lists = [_list(), _list(bad={4: -1}), _list(), _list()]
    o = _chase(_args(32, 9, lists), 32)
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


def test_a_freed_list_is_reported_as_use_after_free():
    lists = [_list(), _list(), _list(), _list()]
    lists[2].freed = True
    o = _chase(_args(32, 5, lists), 32)
    assert kinds(o) == {"use-after-free"}
    assert_same(o)


def test_a_base_inside_a_list_reaches_back_without_a_report():
    # lists[1] points at node 4 of a 16-node list whose next indices go as low as -4
    nodes = [((k % 8) - 4, float(k)) for k in range(16)]
    big = Buf(np.array(nodes, dtype=NODE))
    o = _chase(_args(8, 7, [_list(), big], targets=[(4, 0), (5, 32), (4, 0), (5, 32)]), 8)
    assert o.device == []
    assert_same(o)


def test_a_base_inside_a_list_that_reaches_before_it_is_reported():
    nodes = [((k % 8) - 6, float(k)) for k in range(16)]
    big = Buf(np.array(nodes, dtype=NODE))
    o = _chase(_args(8, 7, [_list(), big], targets=[(4, 0), (5, 32), (4, 0), (5, 32)]), 8)
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


def test_a_misaligned_base_is_reported():
    o = _chase(_args(8, 3, [_list(), _list()], targets=[(4, 0), (5, 2), (4, 0), (5, 2)]), 8)
    # node 7 of the shifted list also ends 2 bytes past the allocation
    assert kinds(o) == {"misaligned-access", "global-out-of-bounds"}
    assert_same(o)


def test_lanes_that_leave_early_do_not_stop_the_others_sharing_a_query():
    # list 2 has 4 nodes: its lanes start at node 2 or 6; a lane given another
    # list's query (8 nodes) would miss node 6
    lists = [_list(bad={1: 9}), _list(), _list(4), _list()]
    args = _args(29, 9, lists)  # 29 of 32 lanes get past `i >= n`
    o = run_both(CHASE, "chase", (1, 1, 1), (32, 1, 1), args)
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


def test_without_warp_collectives_each_thread_queries_its_base():
    text = nvrtc_compile(CHASE, "k.cu", "compute_75").replace(".target sm_75", ".target sm_60")
    checked = instrument(text).ptx
    assert "match.any" not in checked and "__gs_pin" in checked
    o = _chase(_args(32, 9, [_list(bad={5: 8}), _list(), _list(), _list()]), 32, ptx_text=text)
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


MOVING = r"""
struct Node { int next; float value; };
extern "C" __global__ void moving(float* out, const Node* const* lists, int steps, int n)
{
    int i = threadIdx.x;
    if (i >= n) return;
    int at = i % 8;
    float acc = 0.0f;
    for (int s = 0; s < steps; ++s) {
        const Node* node = &lists[(i + s) % 4][at];
        acc += node->value;
        at = node->next;
    }
    out[i] = acc;
}
"""


def test_a_base_the_loop_changes_is_not_pinned_and_still_checked():
    lists = [_list(), _list(bad={k: 9 for k in range(8)}), _list(), _list()]
    o = run_both(MOVING, "moving", (1, 1, 1), (16, 1, 1), _args(16, 9, lists))
    assert o.stats["moving"]["removed"].get("pinned-lookup", 0) == 0
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


def test_a_node_straddling_the_end_of_the_list_is_reported():
    # a 124-byte list: its node 15 has a next field but no value
    nodes = [(15 if k == 3 else (k + 1) % 8, float(k)) for k in range(16)]
    cut = Buf(np.array(nodes, dtype=NODE).view(np.uint8)[:124].copy())
    o = _chase(_args(8, 5, [_list(), cut]), 8)
    assert _pinned(o) >= 1
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)


ROWSUM = r"""
extern "C" __global__ void rowsum(float* out, const float* const* rows, const int* cols, int n,
                                  int k)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float* row = rows[r];
    float s = 0.f;
    for (int c = 0; c < k; ++c) s += row[cols[c]];
    out[r] = s;
}
"""


def _rowsum(cols: list[int], short: int = 8):
    # rows 0 and 2 hold 8 floats, rows 1 and 3 `short`; k = 7: four
    # unrolled steps (a grouped filter) and three of the remainder loop (one
    # filter each)
    args = [Buf(np.zeros(4, np.float32)), PtrTable([(5, 0), (6, 0), (5, 0), (6, 0)]),
            Buf(np.array(cols, np.int32)), np.int32(4), np.int32(len(cols)),
            Buf(np.arange(8, dtype=np.float32)), Buf(np.arange(short, dtype=np.float32))]
    return run_both(ROWSUM, "rowsum", (1, 1, 1), (4, 1, 1), args)


def test_a_row_read_in_a_loop_is_pinned_in_every_copy_of_the_loop():
    o = _rowsum([0, 1, 2, 3, 4, 5, 7])
    assert o.stats["rowsum"]["removed"].get("pinned-lookup", 0) >= 2
    assert o.device == []
    assert_same(o)


@pytest.mark.parametrize("cols, short", [
    ([0, 1, 2, 3, 4, 5, 7], 6),  # the remainder loop's last column is past the short rows
    ([0, 7, 2, 3, 4, 5, 1], 6),  # an unrolled step's column is
    ([0, 1, 2, 3, 4, -1, 2], 8),  # a negative column
])
def test_a_column_past_a_row_is_reported(cols, short):
    o = _rowsum(cols, short)
    assert kinds(o) == {"global-out-of-bounds"}
    assert_same(o)
