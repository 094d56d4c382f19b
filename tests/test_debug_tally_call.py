"""A device function of a debug build counts in its tallies through the
runtime's ``__gpusafe_tally`` (``records._tally_call``), not inline: ptxas at
-O0 allocates a device function in R0-R15 and, past them, from R32 up, so
the inline tally took the corpus's ``table_sum`` (``device_global_ptr``
-G) from 24 registers to 43 and ``window_sum`` (``noinline_calls`` -G) to
44; behind the call, 34 and 40.  Optimised builds and kernels keep the
inline tally.

The register bounds fail with the inline tally; the differential runs (the
device's tallies against the CPU device's access oracle) prove the call
counts what the inline tally counted: every offender, the first four kept
with their caller's window descriptor."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_argument_windows import TWO_SITES, _records
from test_instrument_cpu import Buf, assert_same, differences, kinds, run_both

from gpusafe_instrument import layout
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

KERNELS = Path(__file__).parent / "kernels"


def _body(ptx: str, name: str) -> str:
    """The definition of function ``name`` (not a prototype: ``{`` before any ``;``)."""
    start = re.search(rf"\.func [^;{{]*?\b{re.escape(name)}\([^;{{]*\{{", ptx).start()
    return ptx[start:ptx.index("\n}", start)]


@pytest.mark.parametrize(("source", "kernel", "callee", "bound"), [
    ("memory_qualifiers.cu", "device_global_ptr", "_Z9table_sumPKfi", 34),
    ("calls.cu", "noinline_calls", "_Z10window_sumPKfi", 40),
])
def test_a_debug_callee_calls_the_tally_and_keeps_its_registers(source, kernel, callee,
                                                                 bound):
    text = (KERNELS / source).read_text()
    debug = instrument(nvrtc_compile(text, source, "compute_75", ("-G",))).ptx
    assert "call.uni \t__gpusafe_tally" in _body(debug, callee)
    assert ptxas(debug, "sm_75", verbose=True).registers()[kernel] <= bound
    optimised = instrument(nvrtc_compile(text, source, "compute_75")).ptx
    assert "call.uni \t__gpusafe_tally" not in optimised


def test_a_debug_callee_counts_every_offender_through_the_call():
    """``put`` at -G overflows ``a`` and ``b`` through one site past what a
    tally keeps: the count is exact and the four offenders kept name their
    own caller's allocation (the descriptor the call stores)."""
    found, tags, bufs = _records(TWO_SITES, "two_sites", 32, [31, 32], [2], ("-G",))
    assert sorted((v.address, v.tag, v.count) for v in found) == sorted([
        (bufs[0] + 124, tags[0], 1), (bufs[1] + 128, tags[1], 1),
        (bufs[1] + 132, tags[1], 1)])
    found, _, _ = _records(TWO_SITES, "two_sites", 40, [32, 32], [2], ("-G",))
    assert sum(v.count for v in found) == 18
    assert len(found) == layout.TALLY_OFFENDERS


LOCAL_WINDOW = r"""
__device__ __noinline__ int pick(int k)
{
    int t[4] = {k, k + 1, k + 2, k + 3};
    return t[k];  // k >= 4 reads past t: a window site of the callee's own
}

extern "C" __global__ void picks(int* out)
{
    out[threadIdx.x] = pick(threadIdx.x);
}
"""


def test_a_debug_callees_own_window_counts_through_the_call():
    """A window site of the callee's own local array (no descriptor: the
    call stores 0) at -G: every thread past the array is counted, and the
    offenders kept are ones the oracle saw."""
    ptx = nvrtc_compile(LOCAL_WINDOW, "k.cu", "compute_75", ("-G",))
    assert "call.uni \t__gpusafe_tally" in _body(instrument(ptx).ptx, "_Z4picki")
    o = run_both(None, "picks", (1, 1, 1), (8, 1, 1), [Buf(np.zeros(8, np.int32))],
                 ptx_text=ptx)
    assert kinds(o) == {"local-out-of-bounds"}
    assert o.occurrences == 4
    assert_same(o)


def test_a_debug_callees_slow_path_performs_a_good_access_itself():
    """A -G device function's slow path performs a good access with a copy of
    the instruction instead of branching back before it (``rewrite.
    FunctionRewriter._again``): ``sinf`` of ``math_f32`` -G sm_80 needed 48
    registers with the branch back, 42 without (the kernel: 35 plain)."""
    text = (KERNELS / "math.cu").read_text()
    debug = instrument(nvrtc_compile(text, "math.cu", "compute_80", ("-G",))).ptx
    assert "bra.uni \t$__gs_do" not in _body(debug, "sinf")
    assert ptxas(debug, "sm_80", verbose=True).registers()["math_f32"] <= 42


AGAIN = r"""
__device__ __noinline__ float get(float* const* slots, int t)
{
    return slots[t][0];  // a pointer loaded from memory: the runtime's lookup
}

extern "C" __global__ void again(float* out, float** slots, float* data)
{
    int t = threadIdx.x;
    slots[t] = data + t;
    out[t] = get(slots, t);
}
"""


@pytest.mark.parametrize("threads", [8, 10])
def test_a_debug_callees_good_access_from_its_slow_path(threads):
    """The copy performs the access the runtime's lookup found good (the
    outputs of the plain and checked runs agree), and refuses the two past
    ``data``."""
    ptx = nvrtc_compile(AGAIN, "k.cu", "compute_75", ("-G",))
    body = _body(instrument(ptx).ptx, "_Z3getPKPfi")
    assert "__gpusafe_check, (" in body and "bra.uni \t$__gs_do" not in body
    data = np.arange(1, 9, dtype=np.float32)
    o = run_both(None, "again", (1, 1, 1), (threads, 1, 1),
                 [Buf(np.zeros(threads, np.float32)), Buf(np.zeros(threads, np.uint64)),
                  Buf(data)], ptx_text=ptx)
    if threads == 8:
        assert kinds(o) == set()
        assert_same(o)
        assert list(np.frombuffer(o.checked_out[0], np.float32)) == list(data)
    else:
        assert kinds(o) == {"global-out-of-bounds"}
        assert o.occurrences == 2


def test_a_debug_callees_window_size_in_32_bits():
    """A -G device function without atomic accesses keeps its windows' sizes
    in 32 bits (``Emitter.narrow_windows``): ``table_sum`` of
    ``device_global_ptr`` -G sm_80 needed 40 registers with 64-bit sizes
    (the kernel: 26 plain); a module with a variable of 4 GiB keeps them."""
    text = (KERNELS / "memory_qualifiers.cu").read_text()
    debug = instrument(nvrtc_compile(text, "memory_qualifiers.cu", "compute_80", ("-G",))).ptx
    body = _body(debug, "_Z9table_sumPKfi")
    assert "min.u64" in body and ".reg .b32 \t%__gs_wn0g;" in body
    assert ptxas(debug, "sm_80", verbose=True).registers()["device_global_ptr"] <= 34
    big = nvrtc_compile(text, "memory_qualifiers.cu", "compute_80", ("-G",)).replace(
        ".address_size 64", ".address_size 64\n.visible .global .align 4 .b8 g_big[4294967296];")
    assert "g_big" in big
    assert "min.u64" not in _body(instrument(big).ptx, "_Z9table_sumPKfi")


NARROW = r"""
__device__ float g_vals[6];

__device__ __noinline__ float sum(const float* p, int k)
{
    float s = 0.0f;
    for (int j = 0; j <= k; ++j) s += p[j];  // past the window for k >= its size
    return s;
}

extern "C" __global__ void narrow(float* out, const float* a, int k)
{
    int t = threadIdx.x;
    if (t < 6) g_vals[t] = t;
    __syncthreads();
    out[t] = t & 1 ? sum(a, k + (t >> 1)) : sum(g_vals, k + (t >> 1));
}
"""


@pytest.mark.parametrize(("k", "occurrences"), [(4, 0), (7, 6)])
def test_a_debug_callees_32_bit_window_judges_exactly(k, occurrences):
    """A -G callee's 32-bit window, passed a root (8 floats) and a variable
    (6 floats) by turns: the accesses within both are good, every one past
    either is counted (k = 7: threads 0 and 2 read ``g_vals[6..7]`` and
    ``g_vals[6..8]``: 5; thread 3 reads ``a[8]``: 1), as the oracle saw."""
    ptx = nvrtc_compile(NARROW, "k.cu", "compute_75", ("-G",))
    assert ".reg .b32 \t%__gs_wn0g;" in _body(instrument(ptx).ptx, "_Z3sumPKfi")
    o = run_both(None, "narrow", (1, 1, 1), (4, 1, 1),
                 [Buf(np.zeros(4, np.float32)), Buf(np.arange(8, dtype=np.float32)),
                  np.int32(k)],
                 ptx_text=ptx)
    assert o.occurrences == occurrences
    if occurrences == 0:
        assert kinds(o) == set()
        assert_same(o)
    else:
        assert kinds(o) == {"global-out-of-bounds"}
        assert o.dropped == 0
        assert differences(o.oracle, o.device, o.counts, o.tallied) == []
