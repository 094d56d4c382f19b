"""Kernels the pass cannot check are left unchecked, never the module refused:
such a kernel keeps its signature and body, ``SiteTable.unchecked`` says why
(the PTX line and the instruction), and every other kernel of the module is
checked as usual, through checked copies of the device functions it shares
with the unchecked ones."""

from __future__ import annotations

import numpy as np
import pytest
from test_instrument_cpu import Buf, assert_same, kinds, run_both

from gpusafe_instrument import ptx
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.runtime import CONTEXT_PARAM, PREFIX
from gpusafe_testkit.corpus import nvrtc_compile, ptxas


def _context_last(fn) -> bool:
    """The launch context is the last hidden parameter but the check slots'
    limits (``emission.limits_as_params``) and the windows of pointer
    arguments (``arguments``)."""
    names = [p.name for p in fn.params if not p.name.startswith(("__gpusafe_lim",
                                                                 "__gpusafe_w"))]
    return names[-1] == CONTEXT_PARAM


MIXED = r"""
__device__ __noinline__ float get(const float* p, int i) { return p[i]; }

__device__ __noinline__ unsigned tile_row(const unsigned short* tile)
{
    unsigned r;
    unsigned a = (unsigned)__cvta_generic_to_shared(tile + 8 * (threadIdx.x % 8));
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(a));
    return r;
}

extern "C" __global__ void tiles(unsigned* out, const float* in)
{
    __shared__ unsigned short tile[64];
    tile[threadIdx.x] = threadIdx.x;
    tile[threadIdx.x + 32] = threadIdx.x;
    __syncwarp();
    out[threadIdx.x] = tile_row(tile) + (unsigned)get(in, threadIdx.x);
}

extern "C" __global__ void gather(float* out, const float* in, int k)
{
    out[threadIdx.x] = get(in, threadIdx.x + k);
}

typedef float (*getter)(const float*, int);
__device__ getter table[1] = { get };

extern "C" __global__ void indirect(float* out, const float* in, int k)
{
    out[threadIdx.x] = table[k](in, threadIdx.x);
}

extern "C" __global__ void braces(int* out, const int* in)
{
    int v;
    asm volatile("{ .reg .u64 a; add.u64 a, %1, 4; ld.global.u32 %0, [a]; }" : "=r"(v) : "l"(in));
    out[threadIdx.x] = v;
}
"""


@pytest.fixture(scope="module")
def source() -> str:
    return nvrtc_compile(MIXED, "k.cu")


@pytest.fixture(scope="module")
def result(source):
    return instrument(source)


def _line_of(text: str, needle: str) -> int:
    return next(i + 1 for i, line in enumerate(text.splitlines()) if needle in line)


def test_a_kernel_calling_a_device_function_the_pass_cannot_check_is_unchecked(result, source):
    line = _line_of(source, "ldmatrix.sync")
    assert result.sites.unchecked["tiles"] == (
        f"calls _Z8tile_rowPKt, which gpusafe cannot check: PTX line {line}: cannot check "
        f"`ldmatrix.sync.aligned.m8n8.x1.shared.b16 \t{{%r1}}, [%r2];`: 'ldmatrix' reaches "
        f"memory through an address operand")


def test_an_indirect_call_that_may_need_the_context_leaves_its_kernel_unchecked(result, source):
    why = result.sites.unchecked["indirect"]
    assert why.startswith(f"PTX line {_line_of(source, '.callprototype') + 1}: cannot check `call")
    assert "indirect call" in why


def test_a_memory_access_inside_inline_assembly_braces_leaves_its_kernel_unchecked(result):
    assert "nested { } block" in result.sites.unchecked["braces"]


def test_unchecked_kernels_keep_their_signature_and_body(result, source):
    before, after = ptx.parse(source), ptx.parse(result.ptx)
    for name in ("tiles", "indirect", "braces"):
        assert after.function(name).params == before.function(name).params
        assert after.function(name).body == before.function(name).body
    # the device functions they call (or point to) are the originals, unchanged
    assert after.function("_Z3getPKfi").params == before.function("_Z3getPKfi").params


def test_the_other_kernels_are_checked_through_copies_and_the_module_assembles(result):
    assert set(result.sites.kernels) == {"gather"}
    m = ptx.parse(result.ptx)
    assert _context_last(m.function("gather"))
    copy = m.function(PREFIX + "_Z3getPKfi")
    assert _context_last(copy)
    assert {s.function for s in result.sites} == {"gather", "_Z3getPKfi"}
    ptxas(result.ptx, "sm_75")


def test_the_checked_kernel_reports_as_the_oracle_does():
    o = run_both(MIXED, "gather", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(np.arange(32, dtype=np.float32)),
                  np.int32(2)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert [k[3] for k in o.device] == [(30, 0, 0), (31, 0, 0)]
    assert_same(o)


def test_with_a_kernel_filter_the_unchecked_kernels_are_still_named(source):
    r = instrument(source, select=lambda name: name in ("tiles", "gather"))
    assert set(r.sites.unchecked) == {"tiles"}
    assert set(r.sites.kernels) == {"gather"}
    ptxas(r.ptx, "sm_75")
