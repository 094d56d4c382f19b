"""The check optimisations and the kernel filter, each with a test that fails
if the optimisation drops a check that is needed.

* loop-invariant checks are made once before the loop into a predicate the
  checks inside the loop OR in: a bad access in the loop is still reported at
  every iteration, and a loop that never runs reports nothing;
* ``instrument(..., select=...)``: unselected kernels are left as they were and
  call the original device functions; selected ones are checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from corpus import nvrtc_compile, ptxas
from test_instrument_cpu import Buf, assert_same, kinds, run_both

from instrument import host, ptx
from instrument.checks import instrument
from instrument.runtime import CONTEXT_PARAM

pytest.importorskip("gpusafe.cpu.program")
from gpusafe.cpu.memory import DeviceMemory  # noqa: E402
from gpusafe.cpu.oracle import Oracle  # noqa: E402
from gpusafe.cpu.program import Program  # noqa: E402

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
    assert len(o.device) == 3 * 32  # every iteration of every thread
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
    assert len(o.device) == 2 * 4
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
    assert checked.params[-1].name == CONTEXT_PARAM
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
        launcher = host.Launcher(mem, sites)
        params, vaddr = launcher.prepare(kernel, params[:info.context_param_offset], allocs)
        Program(r_ptx, mem).launch(kernel, (1, 1, 1), (4, 1, 1), 0, params)
        found, _ = launcher.violations(vaddr)
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
