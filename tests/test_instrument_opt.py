"""The check optimisations and the kernel filter, each with a test that fails
if the optimisation drops a check that is needed.

* loop-invariant checks are made once before the loop into a predicate the
  checks inside the loop OR in: a bad access in the loop is still reported at
  every iteration, and a loop that never runs reports nothing;
* a filter whose conditions a dominating filter's imply ("dominated") branches
  on that filter's predicate: a failed dominating check still sends the
  dominated access to its own slow path; a redefined register, a range not
  covered, or a loop's induction variable is not covered;
* ``instrument(..., select=...)``: unselected kernels are left as they were and
  call the original device functions; selected ones are checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_instrument_cpu import Buf, assert_same, kinds, run_both

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host, ptx
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.runtime import CONTEXT_PARAM
from gpusafe_testkit.corpus import nvrtc_compile, ptxas


def _context_last(fn) -> bool:
    """The launch context is the last hidden parameter but the check slots'
    limits (``emission.limits_as_params``) and the windows of pointer
    arguments (``arguments``)."""
    names = [p.name for p in fn.params if not p.name.startswith(("__gpusafe_lim",
                                                                 "__gpusafe_w"))]
    return names[-1] == CONTEXT_PARAM


VADD = r"""
extern "C" __global__ void vadd(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""


INVARIANT = r"""
extern "C" __global__ void inv(float* out, const float* x, int n, int j, int k)
{
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    volatile float* vs = s;
    for (int i = 0; i < n; ++i)  // the store to out may alias x: x[j] is reloaded
        out[threadIdx.x] = out[threadIdx.x] * 0.5f + vs[k] + x[j];
}
"""


def _inv(n, j, k):
    return run_both(INVARIANT, "inv", (1, 1, 1), (32, 1, 1),
                    [Buf(np.zeros(32, np.float32)), Buf(np.arange(16, dtype=np.float32)),
                     np.int32(n), np.int32(j), np.int32(k)])


def test_invariant_checks_are_hoisted_and_quiet_in_bounds():
    o = _inv(3, 5, 7)
    assert o.device == [] and o.oracle == []
    assert o.stats["inv"]["removed"].get("hoisted-out-of-loop", 0) >= 2
    assert_same(o)


@pytest.mark.parametrize("j,k,kind", [(16, 3, "global-out-of-bounds"),
                                      (-1, 3, "global-out-of-bounds"),
                                      (2, 32, "shared-out-of-bounds"),
                                      (2, -3, "shared-out-of-bounds")])
def test_a_bad_invariant_access_is_reported_at_every_iteration(j, k, kind):
    o = _inv(3, j, k)
    assert kinds(o) == {kind}
    assert o.occurrences == 3 * 32  # every iteration of every thread
    assert_same(o)


def test_a_loop_that_never_runs_reports_nothing_even_with_a_bad_index():
    o = _inv(0, 99, 99)
    assert o.device == [] and o.oracle == []
    assert_same(o)


def test_checks_of_registers_the_loop_writes_are_not_hoisted():
    src = r"""
extern "C" __global__ void walk(float* out, const float* x, int n)
{
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc += x[i];
    out[threadIdx.x] = acc;
}
"""
    o = run_both(src, "walk", (1, 1, 1), (4, 1, 1),
                 [Buf(np.zeros(4, np.float32)), Buf(np.ones(8, np.float32)), np.int32(10)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2 * 4
    assert_same(o)


# --------------------------------------------------------------------------
# kernel filter

FILTERED = r"""
__device__ __noinline__ void put(float* p, int i, float v) { p[i] = v; }
__device__ __noinline__ float twice(float* p, int i) { put(p, i, p[i] * 2.0f); return p[i]; }
extern "C" __global__ void checked(float* x, int i) { x[threadIdx.x] = twice(x, i); }
extern "C" __global__ void unchecked(float* x, int i) { put(x, i, 1.0f); twice(x, i + 1); }
"""


@pytest.fixture(scope="module")
def filtered():
    text = nvrtc_compile(FILTERED, "k.cu")
    return text, instrument(text, select=lambda name: name == "checked")


def test_filter_lists_only_selected_kernels_and_ptxas_accepts(filtered):
    text, r = filtered
    assert set(r.sites.kernels) == {"checked"}
    assert "unchecked" not in r.stats
    assert {s.function for s in r.sites.sites} == {"_Z3putPfif", "_Z5twicePfi", "checked"}
    ptxas(r.ptx, "sm_75")


def test_unselected_kernels_and_original_functions_are_left_as_they_were(filtered):
    text, r = filtered
    before = ptx.parse(text)
    after = ptx.parse(r.ptx)
    for name in ("unchecked", "_Z3putPfif", "_Z5twicePfi"):
        old = next(f for f in before.functions if f.name == name and f.body is not None)
        new = next(f for f in after.functions if f.name == name and f.body is not None)
        assert new.params == old.params
        assert [p.name for p in new.params][-1] != CONTEXT_PARAM
        assert [s.canonical() for s in new.body if hasattr(s, "canonical")] == \
            [s.canonical() for s in old.body if hasattr(s, "canonical")]
    checked = next(f for f in after.functions if f.name == "checked")
    assert _context_last(checked)
    calls = [s.canonical() for s in checked.body if hasattr(s, "statements")
             for s in s.statements if getattr(s, "op", "") == "call"]
    user = [c for c in calls if "__gpusafe_check" not in c]
    assert user and all("__gpusafe__Z5twicePfi" in c for c in user)
    # the exact text of the unselected kernel is kept
    start = text.index(".visible .entry unchecked")
    assert text[start:text.index("\n}", start)] in r.ptx


def _launch(r_ptx, sites, kernel, n, i, checked):
    mem = DeviceMemory()
    x = np.arange(n, dtype=np.float32)
    base = mem.alloc(x.nbytes)
    mem.write(base, x.tobytes())
    params = base.to_bytes(8, "little") + int(i).to_bytes(4, "little", signed=True) + bytes(4)
    oracle = Oracle(mem)
    found = []
    if checked:
        info = sites.kernels[kernel]
        allocs = [host.AllocationRecord(a.tag, a.base, a.size, a.live) for a in mem.allocations]
        pipeline = LaunchPipeline(mem)
        launch = pipeline.prepare(sites, kernel, params[:info.context_param_offset], allocs)
        Program(r_ptx, mem).launch(kernel, (1, 1, 1), (4, 1, 1), 0, launch.params)
        found, _ = pipeline.collect(launch)
    else:
        Program(r_ptx, mem).launch(kernel, (1, 1, 1), (4, 1, 1), 0, params[:12],
                                   observers=[oracle])
    return mem.read(base, x.nbytes), found, oracle.violations


def test_unselected_kernel_runs_unchanged_and_unchecked(filtered):
    text, r = filtered
    plain_out, _, plain_bad = _launch(text, None, "unchecked", 8, 9, False)
    out, _, bad = _launch(r.ptx, None, "unchecked", 8, 9, False)
    assert out == plain_out
    assert len(bad) == len(plain_bad) > 0  # the oracle sees the bug; nothing stopped it


def test_selected_kernel_is_checked(filtered):
    text, r = filtered
    out, found, _ = _launch(r.ptx, r.sites, "checked", 8, 9, True)
    assert found and {v.kind.value for v in found} == {"global-out-of-bounds"}
    assert {v.site.function for v in found} <= {"_Z3putPfif", "_Z5twicePfi", "checked"}
    good, none, _ = _launch(r.ptx, r.sites, "checked", 8, 3, True)
    assert none == []


def test_no_filter_and_select_all_check_the_same_accesses():
    text = nvrtc_compile(FILTERED, "k.cu")
    a = instrument(text)
    b = instrument(text, select=lambda name: True)
    assert set(a.sites.kernels) == set(b.sites.kernels) == {"checked", "unchecked"}
    assert len(a.sites.sites) == len(b.sites.sites)
    ptxas(b.ptx, "sm_75")


def test_selecting_nothing_leaves_every_kernel_alone():
    text = nvrtc_compile(FILTERED, "k.cu")
    r = instrument(text, select=lambda name: False)
    assert r.sites.kernels == {} and len(r.sites.sites) == 0
    assert "__gpusafe__Z" not in r.ptx
    ptxas(r.ptx, "sm_75")


# --------------------------------------------------------------------------
# checks implied by a dominating check ("dominated")
#
# Hand-written PTX, so the shape is exactly the one meant: a dominating access
# A, then a branch, then in another basic block an access B through the same
# registers.  Each variant that must NOT be optimised is run with a bad index
# and has to report exactly what the oracle reports.

_DOM_HEAD = """
.version 7.0
.target sm_75
.address_size 64

.visible .entry dom(.param .u64 out, .param .u32 k, .param .u32 flag, .param .u32 n)
{
    .reg .pred %p<8>;
    .reg .b32 %r<16>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [k];
    ld.param.u32 %r2, [flag];
    ld.param.u32 %r7, [n];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r3, %tid.x;
    add.s32 %r4, %r3, %r1;
    setp.ne.s32 %p2, %r2, 2;
"""

DOMINATED = _DOM_HEAD + """
    mul.wide.s32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    setp.eq.s32 %p1, %r2, 0;
    @%p1 bra DONE;
    add.f32 %f1, %f1, 0f3F800000;
    st.global.f32 [%rd4], %f1;
    atom.global.add.f32 %f2, [%rd4], %f1;
DONE:
    ret;
}
"""

# B's offset register is written again between A and B
REDEFINED = _DOM_HEAD + """
    mul.wide.s32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    setp.eq.s32 %p1, %r2, 0;
    @%p1 bra DONE;
    add.s64 %rd3, %rd3, 64;
    add.s64 %rd4, %rd2, %rd3;
    st.global.f32 [%rd4], %f1;
DONE:
    ret;
}
"""

# A is predicated (off when flag == 2): its filter still runs and still decides
PREDICATED = _DOM_HEAD + """
    mul.wide.s32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    @%p2 ld.global.f32 %f1, [%rd4];
    setp.eq.s32 %p1, %r2, 0;
    @%p1 bra DONE;
    st.global.f32 [%rd4], %r3;
DONE:
    ret;
}
"""

# B's range [4, 8) (and an 8-byte access at 0) is not inside A's [0, 4); the
# 4-byte store at 0, in a block of its own, is (the one "dominated")
NOT_COVERING = _DOM_HEAD + """
    mul.wide.s32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    setp.eq.s32 %p1, %r2, 0;
    @%p1 bra DONE;
    ld.global.u32 %r8, [%rd4+4];
    setp.eq.s32 %p3, %r2, 3;
    @%p3 bra DONE;
    ld.global.u64 %rd5, [%rd4];
    setp.eq.s32 %p4, %r2, 5;
    @%p4 bra DONE;
    st.global.u32 [%rd4], %r3;
DONE:
    ret;
}
"""

# A in a loop whose offset register is the induction variable (two
# definitions): B after the loop is not covered
LOOP_INDUCTION = _DOM_HEAD + """
    mul.wide.s32 %rd3, %r4, 4;
    mov.u32 %r5, 0;
LOOP:
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.s64 %rd3, %rd3, 128;
    add.s32 %r5, %r5, 1;
    setp.lt.s32 %p1, %r5, %r7;
    @%p1 bra LOOP;
    add.s64 %rd4, %rd2, %rd3;
    st.global.f32 [%rd4], %f1;
    ret;
}
"""

# the offset register has one definition, inside the loop before A: the last
# iteration's A covers B after the loop (its predicate is that iteration's)
LOOP_LAST = _DOM_HEAD + """
    mov.u32 %r5, 0;
LOOP:
    add.s32 %r6, %r4, %r5;
    mul.wide.s32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.s32 %r5, %r5, 32;
    setp.lt.s32 %p1, %r5, %r7;
    @%p1 bra LOOP;
    st.global.f32 [%rd4], %f1;
    ret;
}
"""


def _dom(text, k, flag, n=1, size=32):
    return run_both(None, "dom", (1, 1, 1), (32, 1, 1),
                    [Buf(np.arange(size, dtype=np.float32)), np.int32(k), np.int32(flag),
                     np.int32(n)], ptx_text=text)


def _removed(o, why):
    return o.stats["dom"]["removed"].get(why, 0)


def test_a_check_implied_by_a_dominating_check_is_dropped():
    o = _dom(DOMINATED, 0, 1)
    # the store and the atomic share one filter (same block), which reuses A's
    assert _removed(o, "grouped-in-block") == 1 and _removed(o, "dominated") == 1
    assert o.device == [] and o.oracle == []
    assert_same(o)
    r = instrument(DOMINATED)
    ptxas(r.ptx, "sm_75")


@pytest.mark.parametrize("k,flag", [(16, 1), (-3, 1), (16, 0), (40, 1)])
def test_a_failed_dominating_check_still_checks_the_dominated_accesses(k, flag):
    # A's slow path skips only A: B and the atomic run after it and must be
    # reported too (each bad thread: 3 violations with flag, 1 without)
    o = _dom(DOMINATED, k, flag)
    bad = sum(1 for t in range(32) if not 0 <= t + k < 32)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == bad * (3 if flag else 1)
    assert_same(o)


@pytest.mark.parametrize("k", [0, 12, 40])
def test_a_redefined_offset_register_is_not_covered(k):
    o = _dom(REDEFINED, k, 1)
    assert _removed(o, "dominated") == 0
    assert o.device  # out[t + k + 16] leaves the buffer for some threads
    assert_same(o)


@pytest.mark.parametrize("k,flag", [(0, 2), (16, 2), (16, 1), (0, 1)])
def test_a_predicated_dominating_access_still_decides(k, flag):
    # with flag 2 the guard is off: A performs nothing and reports nothing,
    # but its filter ran, so B (unguarded) is still covered or still checked
    o = _dom(PREDICATED, k, flag)
    assert _removed(o, "dominated") == 1
    assert bool(o.device) == (k != 0)
    assert_same(o)


@pytest.mark.parametrize("k,flag", [(0, 1), (0, 4), (1, 4), (-1, 4)])
def test_a_range_the_dominating_check_does_not_cover_is_checked(k, flag):
    o = _dom(NOT_COVERING, k, flag)
    assert _removed(o, "dominated") == 1  # only the 4-byte store at [rd4]
    assert o.device  # the last thread's [rd4+4] (and 8-byte load) leave the buffer
    assert_same(o)


@pytest.mark.parametrize("k,n,bad", [(0, 1, False), (0, 3, True), (-1, 1, True),
                                     (40, 2, True), (20, 2, True)])
def test_a_check_in_a_loop_does_not_cover_the_induction_variable_after_it(k, n, bad):
    # (0, 3): every A in bounds, B after the loop at out[t + 96] out of bounds
    o = _dom(LOOP_INDUCTION, k, 1, n=n, size=32 * 3)
    assert _removed(o, "dominated") == 0
    assert bool(o.device) == bad
    assert_same(o)


@pytest.mark.parametrize("k,n", [(0, 32), (0, 64), (5, 64), (-2, 32), (40, 32)])
def test_the_last_iteration_of_a_loop_covers_an_access_after_it(k, n):
    o = _dom(LOOP_LAST, k, 1, n=n, size=64)
    assert _removed(o, "dominated") == 1
    assert bool(o.device) == (k != 0)
    assert_same(o)
