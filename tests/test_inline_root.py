"""Root checks decide inline (no runtime call): the host resolves every
pointer argument at launch (an allocation, else a device-heap block of an
earlier launch), and a root in none of them has the empty window, so the
kernel never looks an address up.  The common kernels then reach no call at
all, and ptxas does not charge them the runtime's registers.

The differential runs (instrumented vs the CPU device's access oracle) prove
the bugs the inline path must still catch are caught: a pointer one past the
end of its buffer, a pointer outside every allocation."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_instrument_cpu import GATHER, VADD, Buf, assert_same, f32, kinds, run_both

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.layout import TALLY_OFFENDERS
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

MATMUL = r"""
#define T 16
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n)
{
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    float s = 0;
    for (int k0 = 0; k0 < n; k0 += T) {
        As[threadIdx.y][threadIdx.x] = A[r * n + k0 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + c];
        __syncthreads();
        for (int k = 0; k < T; ++k) s += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[r * n + c] = s;
}
"""


def _body(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}")
    end = re.compile(r"^}", re.M).search(ptx, start)
    assert end is not None
    return ptx[start:end.start()]


@pytest.mark.parametrize(("source", "kernel", "check"),
                         [(VADD, "vadd", "root"), (MATMUL, "matmul", "root"),
                          (GATHER, "gather", "lookup")])
def test_common_kernels_call_no_runtime_and_ptxas_accepts_them(source, kernel, check):
    result = instrument(nvrtc_compile(source, "k.cu", "compute_75"))
    checks = result.stats[kernel].to_dict()["checks"]
    assert checks.get(check, 0) >= 1
    body = _body(result.ptx, kernel)
    assert not re.search(r"\bcall\b", body)
    for arch in ("sm_75", "sm_90"):
        ptxas(result.ptx, arch)  # raises when ptxas rejects it


def test_a_root_one_past_the_end_reports_every_access():
    a = f32(32)
    o = run_both(VADD, "vadd", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(a, offset=a.nbytes), Buf(f32(32)),
                  np.int32(32)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 32
    assert_same(o)


def _vadd_with_a_wild_root(offset: int):
    """vadd with ``a`` pointing ``offset`` bytes from a buffer's start: the
    records, the allocation of that buffer and the pointer passed."""
    result = instrument(nvrtc_compile(VADD, "k.cu", "compute_75"))
    mem = DeviceMemory()
    out, a, b = (mem.alloc(128) for _ in range(3))
    mem.write(a, f32(32).tobytes())
    mem.write(b, f32(32).tobytes())
    info = result.sites.kernels["vadd"]
    params = bytearray(info.context_param_offset)
    for (_, at, size), value in zip(info.params, (out, a + offset, b, 32), strict=True):
        params[at:at + size] = value.to_bytes(size, "little")
    pipeline = LaunchPipeline(mem)
    records = [host.AllocationRecord(x.tag, x.base, x.size, x.live) for x in mem.allocations]
    launch = pipeline.prepare(result.sites, "vadd", bytes(params), records)
    Program(result.ptx, mem).launch("vadd", (1, 1, 1), (32, 1, 1), 0, launch.params)
    found, dropped = pipeline.collect(launch)
    assert dropped == 0
    return found, mem, out, a + offset


def test_a_root_outside_every_allocation_reports_every_access_against_no_allocation():
    found, mem, out, p = _vadd_with_a_wild_root(1 << 20)
    assert {v.kind.value for v in found} == {"global-out-of-bounds"}
    # every access counted, the first ones kept (a site tally, issue 14)
    assert sum(v.count for v in found) == 32
    assert sorted(v.address for v in found) == [p + 4 * i for i in range(TALLY_OFFENDERS)]
    assert {v.tag for v in found} == {0}
    # the refused loads yield zero: out = 0 + b
    assert np.array_equal(np.frombuffer(mem.read(out, 128), np.float32), f32(32))


def test_a_root_outside_every_allocation_is_reported_even_where_it_reaches_one():
    """A pointer argument below its buffer (a 1-based array's ``a - 1``) is
    in no allocation: gpusafe reports every access through it, also those
    that land inside the buffer (the address-only oracle would pass those;
    C++ makes such a pointer argument invalid, and no allocation can be named
    as what it points into)."""
    found, _, _, p = _vadd_with_a_wild_root(-4)
    assert {v.kind.value for v in found} == {"global-out-of-bounds"}
    assert sum(v.count for v in found) == 32 and {v.tag for v in found} == {0}


@pytest.mark.parametrize(("source", "arch", "kernel", "bound"), [
    ("structs.cu", "compute_75", "vector_types", 18),
    ("arith_types.cu", "compute_80", "arith_f32", 20),
])
def test_a_root_slow_path_reads_the_high_end_after_judging_the_low(source, arch, kernel,
                                                                   bound):
    """The root's low end is compared before its high end is read: the two
    are never live at once beside the kernel's values (read together first:
    ``vector_types`` 22 registers at sm_75, ``arith_f32`` 22 at sm_80)."""
    text = (Path(__file__).parent / "kernels" / source).read_text()
    checked = instrument(nvrtc_compile(text, source, arch)).ptx
    pairs = re.findall(r"ld\.global\.u64 \t%__gs_lo, \[%__gs_ctx\+(\d+)\];\n"
                       r"\tsetp\.lt\.u64 \t%__gs_bad, %\w+, %__gs_lo;\n"
                       r"\t@%__gs_bad bra \t\$__gs_\w+;\n"
                       r"\tld\.global\.u64 \t%__gs_hi, \[%__gs_ctx\+(\d+)\];", checked)
    assert pairs and all(int(hi) == int(lo) + 8 for lo, hi in pairs)
    sm = "sm_" + arch.removeprefix("compute_")
    assert ptxas(checked, sm, verbose=True).registers()[kernel] <= bound
