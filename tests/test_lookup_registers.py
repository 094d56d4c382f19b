"""The inline lookup of pointers loaded from memory (``lookup.inline_lookup``)
keeps few values live beside the kernel's (issue 14, the runtime's callees):
the kind and the tag of a record are set on the way to it, the allocation's
state is a predicate, the judge keeps the offset and the size but not the
allocation's low end, and a heap block's size and its sum with the red zone
are not live at once.

Two kinds of test: ``ptxas -v`` on the corpus's pointer walkers bounds their
registers (before this change: ``linked_list_walk`` 32 at sm_75 and 38 at
``-G``, ``pointer_table`` 28 and 34), and a differential run proves that
every verdict of the lookup still reaches the record with its own kind and
the tag of the allocation it names.

Every way out of the lookup sets the lookup cache (the empty window unless
a good access found an allocation of 16 bytes or more), so that the cache it
was entered with is not live through the search: ``linked_list_walk`` 29 ->
25 at sm_75, -G 30 -> 26 (the bounds below fail with the cache kept there);
and the device heap's scan reads the heap's address from the launch context
at each block instead of keeping it: 25 -> 24, ``pointer_table`` 23 -> 21.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_instrument_cpu import GATHER, Buf, PtrTable, assert_same, f32, kinds, run_both

from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

GATHER_CU = (Path(__file__).parent / "kernels" / "gather.cu").read_text()


@pytest.mark.parametrize(("options", "bounds"), [
    ((), {"linked_list_walk": 24, "pointer_table": 21}),
    (("-G",), {"linked_list_walk": 26, "pointer_table": 23}),
], ids=["O3", "G"])
def test_pointer_walkers_keep_their_registers_bounded(options, bounds):
    ptx = nvrtc_compile(GATHER_CU, "gather.cu", "compute_75", options)
    checked = instrument(ptx)
    for kernel in bounds:
        assert checked.stats[kernel].to_dict()["checks"].get("lookup", 0) >= 1
    regs = ptxas(checked.ptx, "sm_75", verbose=True).registers()
    assert {k: regs[k] for k in bounds} == {k: min(regs[k], b) for k, b in bounds.items()}


def test_every_verdict_of_a_lookup_is_recorded_with_its_allocation():
    """One launch reaching each verdict of the inline lookup: a freed
    allocation (use after free, its tag), a misaligned address inside an
    allocation (its tag), an access that starts inside an allocation and
    ends past it (out of bounds, its tag), a null pointer (no tag).  Each
    verdict is a block of its own that sets the kind and the tag: one that
    set the wrong kind, or lost the tag, differs from the oracle."""
    args = [Buf(np.zeros(8, np.float32)),
            PtrTable([(3, 0), (4, 0), (3, 2), None, (3, 0), (3, 0), (3, 6), (3, 0)]),
            np.int32(8), Buf(f32(4)), Buf(f32(4, 100), freed=True)]
    o = run_both(GATHER, "gather", (1, 1, 1), (8, 1, 1), args)
    # table[1] = the freed buffer: element 1; table[2] = a + 2: element 2 at
    # a + 10; table[6] = a + 6: element 2 at a + 14, two bytes past the end
    assert kinds(o) == {"use-after-free", "misaligned-access", "null-pointer",
                        "global-out-of-bounds"}
    assert o.occurrences == 4
    assert_same(o)
    assert len(o.device_allocations) == 4
    assert o.device_allocations == o.oracle_allocations
    assert sum(1 for k in o.device_allocations if k[3]) == 3


WALK = r"""
extern "C" __global__ void walk(float* out, float* const* table, int n)
{
    float s = 0.0f;
    for (int k = 0; k < n; ++k) s += table[k][threadIdx.x];
    out[threadIdx.x] = s;
}
"""


def test_a_lookup_after_an_uncached_one_judges_afresh():
    """Each thread reads through five pointers in turn: a 32-byte
    allocation (cached), an 8-byte one (good for threads 0 and 1, past its
    end for 2 and 3: the cache emptied either way), the first again (looked
    up afresh), the first at 24 bytes in (past its end for threads 2 and 3:
    refused, the cache emptied), the first again.  The device finds what the
    oracle finds (count, offenders), and the good reads read what the plain
    kernel reads."""
    args = [Buf(np.zeros(4, np.float32)),
            PtrTable([(3, 0), (4, 0), (3, 0), (3, 24), (3, 0)]),
            np.int32(5), Buf(f32(8)), Buf(f32(2, 100))]
    o = run_both(WALK, "walk", (1, 1, 1), (4, 1, 1), args)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 4
    assert_same(o)
