"""Prefetches and asynchronous copies: what the query layer says they access,
what the pass checks, and, for ``cp.async``, the instrumented run against
the oracle on the CPU device.

* ``prefetch``/``prefetchu`` are hints (no data moves, they cannot fault):
  nothing is checked and an out-of-range prefetch is not reported.
* ``cp.async`` writes cp-size bytes of shared memory and reads cp-size bytes
  (src-size when given, none when ignore-src is true) of global memory: two
  sites.  A bad destination skips the copy; a bad source copies zeros, as a
  bad load yields zero.
* ``cp.async.bulk`` (non-tensor): both ranges, ``size`` bytes each, checked
  by the runtime (the size is a register); a refused copy still completes its
  mbarrier transaction, so the waiting threads go on.  Tested through the site
  table and ptxas for sm_90, and run against the oracle on the CPU device.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_instrument_cpu import Buf, assert_same, kinds, run_both, same_violations

from gpusafe_instrument import ptx, query
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.kinds import AccessKind
from gpusafe_instrument.runtime import CONTEXT_PARAM
from gpusafe_testkit.corpus import nvrtc_compile, ptxas


def _context_last(fn) -> bool:
    """The launch context is the last hidden parameter but the check slots'
    limits (``emission.limits_as_params``) and the windows of pointer
    arguments (``arguments``)."""
    names = [p.name for p in fn.params if not p.name.startswith(("__gpusafe_lim",
                                                                 "__gpusafe_w"))]
    return names[-1] == CONTEXT_PARAM



def _instr(text: str) -> ptx.Instruction:
    module = ptx.parse(".version 8.0\n.target sm_90\n.address_size 64\n"
                       ".visible .entry k()\n{\n\t" + text + "\n}\n")
    body = module.function("k").body
    return next(s for s in body if isinstance(s, ptx.Instruction))


# --------------------------------------------------------------------------
# the query layer


def test_a_prefetch_makes_no_access():
    assert query.instruction_accesses(_instr("prefetch.global.L2 [%rd1];")) == ()
    assert query.instruction_accesses(_instr("prefetchu.L1 [%rd1];")) == ()
    assert query.unsupported(_instr("prefetch.global.L2::evict_last [%rd1];")) is None


def test_cp_async_writes_its_destination_then_reads_its_source():
    dst, src = query.instruction_accesses(_instr("cp.async.cg.shared.global [%r1], [%rd1], 16;"))
    assert (dst.space, dst.kind, dst.width, str(dst.address)) == (
        "shared", AccessKind.WRITE, 16, "[%r1]")
    assert (src.space, src.kind, src.width, str(src.address)) == (
        "global", AccessKind.READ, 16, "[%rd1]")


def test_an_immediate_src_size_is_the_width_read_and_zero_reads_nothing():
    _, src = query.instruction_accesses(_instr("cp.async.ca.shared.global [%r1], [%rd1], 16, 8;"))
    assert (src.width, src.alignment, src.size) == (8, 16, None)
    only = query.instruction_accesses(_instr("cp.async.ca.shared.global [%r1], [%rd1], 8, 0;"))
    assert [a.kind for a in only] == [AccessKind.WRITE]


def test_a_register_src_size_or_ignore_src_is_known_at_run_time():
    types = {"%r2": ".b32", "%p1": ".pred"}
    text = "cp.async.cg.shared.global.L2::cache_hint [%r1], [%rd1], 16, {}, %rd9;"
    _, src = query.instruction_accesses(_instr(text.format("%r2")), types=types)
    assert (src.width, src.size, src.ignored_when) == (16, ptx.Register("%r2"), None)
    _, src = query.instruction_accesses(_instr(text.format("%p1")), types=types)
    assert (src.size, src.ignored_when) == (None, ptx.Register("%p1"))


def test_group_and_mbarrier_bookkeeping_makes_no_access():
    for text in ("cp.async.commit_group;", "cp.async.wait_group 1;", "cp.async.wait_all;",
                 "cp.async.mbarrier.arrive.noinc.shared.b64 [%r1];",
                 "cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 0;",
                 "cp.async.bulk.prefetch.L2.global [%rd1], 256;",
                 "mbarrier.try_wait.shared::cta.b64 %p1, [%r3], %rd3;"):
        assert query.instruction_accesses(_instr(text)) == (), text


def test_bulk_copies_access_both_ranges_with_the_size_operand():
    dst, src = query.instruction_accesses(_instr(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%r2], [%rd2], %r1, [%r3];"))
    assert (dst.space, dst.kind, src.space, src.kind) == (
        "shared", AccessKind.WRITE, "global", AccessKind.READ)
    assert (dst.width, dst.size, dst.alignment) == (0, ptx.Register("%r1"), 16)
    dst, src = query.instruction_accesses(_instr(
        "cp.async.bulk.global.shared::cta.bulk_group [%rd2], [%r1], 256;"))
    assert (dst.space, src.space, dst.width, src.width) == ("global", "shared", 256, 256)


def test_what_the_query_layer_cannot_describe_is_named():
    tensor = ptx.Instruction(  # (the parser does not read [tensor-map, {coordinates}] yet)
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes",
        (ptx.Address(ptx.Register("%r1")), ptx.Address(ptx.Register("%rd1")),
         ptx.Address(ptx.Register("%r3"))))
    assert "tensor map" in query.unsupported(tensor)
    assert "multicast" in query.unsupported(_instr(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%r2], [%rd2], %r1, [%r3], %rs1;"))
    assert "ldmatrix" in query.unsupported(_instr(
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%r2];"))
    assert "cp-size" in query.unsupported(_instr("cp.async.ca.shared.global [%r1], [%rd1], 2;"))


# --------------------------------------------------------------------------
# cp.async on the CPU device: the instrumented run against the oracle

STAGE = r"""
#include <cuda_pipeline.h>
extern "C" __global__ void stage(float* out, const float* in, int shift)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = -1.0f;  // a copy skipped instead of zero-filled would leave this
    __syncthreads();
    __pipeline_memcpy_async(&s[t], &in[t + shift], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    out[t] = s[t] * 2.0f;
}

extern "C" __global__ void scatter(float* out, const float* in, int shift)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = -1.0f;
    __syncthreads();
    __pipeline_memcpy_async(&s[t + shift], &in[t], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    out[t] = s[t];
}
"""


def f32(n, start=0.0):
    return np.arange(start, start + n, dtype=np.float32)


def _stage(kernel: str, shift: int):
    return run_both(STAGE, kernel, (1, 1, 1), (64, 1, 1),
                    [Buf(np.zeros(64, np.float32)), Buf(f32(64, 1)), np.int32(shift)],
                    arch="compute_80")


def _cp_async_line() -> int:
    text = nvrtc_compile(STAGE, "k.cu", "compute_80")
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if "cp.async.ca" in line]
    return lines[0]


def test_an_in_bounds_cp_async_reports_nothing_and_copies_the_same():
    o = _stage("stage", 0)
    assert o.device == [] and o.oracle == []
    assert_same(o)
    assert np.array_equal(np.frombuffer(o.checked_out[0], np.float32), 2 * f32(64, 1))
    assert o.stats["stage"]["checks"] == {"window": 3, "root": 2}


def test_a_cp_async_reading_past_its_source_is_reported_at_its_line_and_copies_zeros():
    o = _stage("stage", 3)
    assert kinds(o) == {"global-out-of-bounds"}
    assert {k[1] for k in o.device} == {_cp_async_line()}
    assert [k[3] for k in o.device] == [(61, 0, 0), (62, 0, 0), (63, 0, 0)]
    assert_same(o)
    assert np.array_equal(np.frombuffer(o.checked_out[0], np.float32)[61:], np.zeros(3))


def test_a_cp_async_writing_past_its_shared_destination_is_reported_and_skipped():
    o = _stage("scatter", 2)
    assert kinds(o) == {"shared-out-of-bounds"}
    assert o.occurrences == 2
    assert_same(o)


ZFILL = r"""
extern "C" __global__ void zfill(int4* out, const int4* in, int n, int all)
{
    __shared__ int4 s[32];
    int t = threadIdx.x;
    unsigned d = (unsigned)__cvta_generic_to_shared(&s[t]);
    int bytes = (all || 4 * t + 4 <= n) ? 16 : 0;  // past n: zero-filled, the source unread
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(d), "l"(in + t), "r"(bytes));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    out[t] = s[t];
}
"""


def _zfill(all_: int):
    return run_both(ZFILL, "zfill", (1, 1, 1), (16, 1, 1),
                    [Buf(np.zeros(64, np.int32)), Buf(np.arange(1, 61, dtype=np.int32)),
                     np.int32(60), np.int32(all_)], arch="compute_80")


def test_a_src_size_of_zero_reads_nothing_so_its_address_is_not_reported():
    o = _zfill(0)
    assert o.device == [] and o.oracle == []
    assert_same(o)


def test_a_register_src_size_past_the_source_is_reported():
    o = _zfill(1)
    assert kinds(o) == {"global-out-of-bounds"}
    assert [k[3] for k in o.device] == [(15, 0, 0)]
    assert_same(o)


IGNORE_SRC = """
.version 7.5
.target sm_80
.address_size 64

.visible .entry ign(
	.param .u64 ign_param_0,
	.param .u32 ign_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;
	.shared .align 4 .b8 sm[128];

	ld.param.u64 	%rd1, [ign_param_0];
	ld.param.u32 	%r1, [ign_param_1];
	mov.u32 	%r2, %tid.x;
	mul.wide.u32 	%rd3, %r2, 4;
	add.s64 	%rd4, %rd1, %rd3;
	mov.u32 	%r3, sm;
	shl.b32 	%r4, %r2, 2;
	add.s32 	%r5, %r3, %r4;
	setp.ge.u32 	%p1, %r2, %r1;
	cp.async.ca.shared.global 	[%r5], [%rd4], 4, %p1;
	cp.async.wait_all;
	ret;
}
"""


def test_the_source_check_is_skipped_when_ignore_src_is_true():
    """(The CPU device reads ignore-src as a src-size: this form is checked
    through the emitted code and ptxas, not run.)"""
    r = instrument(IGNORE_SRC)
    assert [(s.access, s.space) for s in r.sites] == [("write", "shared"), ("read", "global")]
    text = r.ptx
    slow = text[text.index("$__gs_slow", text.index("cp.async.wait_all")):]
    src_slow = slow[slow.index("$__gs_slow", 1):]
    assert src_slow.splitlines()[1].strip().startswith("@%p1 bra")
    assert "cp.async.ca.shared.global \t[%r5], [%rd4], 4, 0;" in src_slow  # zeros instead
    ptxas(text, "sm_80")


# --------------------------------------------------------------------------
# a module mixing prefetches, cp.async and plain kernels

MIXED = r"""
#include <cuda_pipeline.h>
extern "C" __global__ void warm(const float* in, int ahead)
{
    asm volatile("prefetch.global.L2 [%0];" :: "l"(in + threadIdx.x + ahead));
}

extern "C" __global__ void copy_in(float* out, const float* in)
{
    __shared__ float s[32];
    __pipeline_memcpy_async(&s[threadIdx.x], &in[threadIdx.x], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    out[threadIdx.x] = s[threadIdx.x];
}

extern "C" __global__ void plain(float* out)
{
    out[threadIdx.x] = 1.0f;
}
"""


def test_every_kernel_of_a_module_with_prefetch_and_cp_async_is_instrumented():
    r = instrument(nvrtc_compile(MIXED, "k.cu", "compute_80"))
    assert r.sites.unchecked == {}
    assert set(r.sites.kernels) == {"warm", "copy_in", "plain"}
    m = ptx.parse(r.ptx)
    for name in ("warm", "copy_in", "plain"):
        assert _context_last(m.function(name))
    assert {s.function for s in r.sites} == {"copy_in", "plain"}  # the prefetch has none
    ptxas(r.ptx, "sm_80")


def test_an_out_of_range_prefetch_is_not_reported():
    o = run_both(MIXED, "warm", (1, 1, 1), (32, 1, 1), [Buf(f32(32)), np.int32(1 << 20)],
                 arch="compute_80")
    assert o.device == [] and o.oracle == []


# --------------------------------------------------------------------------
# cp.async.bulk (sm_90): instrumentation, site table and ptxas

BULK = """
.version 8.0
.target sm_90
.address_size 64

.visible .entry bulk_in(
	.param .u64 bulk_in_param_0,
	.param .u32 bulk_in_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	.shared .align 16 .b8 buf[1024];
	.shared .align 8 .b64 bar;

	ld.param.u64 	%rd1, [bulk_in_param_0];
	ld.param.u32 	%r1, [bulk_in_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r2, buf;
	mov.u32 	%r3, bar;
	mbarrier.init.shared::cta.b64 	[%r3], 1;
	mbarrier.arrive.expect_tx.shared::cta.b64 	%rd3, [%r3], %r1;
	cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes 	[%r2], [%rd2], %r1, [%r3];
$L_wait:
	mbarrier.try_wait.shared::cta.b64 	%p1, [%r3], %rd3;
	@!%p1 bra 	$L_wait;
	ret;
}

.visible .entry bulk_out(
	.param .u64 bulk_out_param_0,
	.param .u32 bulk_out_param_1
)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<3>;
	.shared .align 16 .b8 sbuf[512];

	ld.param.u64 	%rd1, [bulk_out_param_0];
	ld.param.u32 	%r1, [bulk_out_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r2, sbuf;
	add.s32 	%r3, %r2, %r1;
	cp.async.bulk.global.shared::cta.bulk_group 	[%rd2], [%r3], 256;
	cp.async.bulk.commit_group;
	cp.async.bulk.wait_group.read 	0;
	ret;
}

.visible .entry bulk_s2s(
	.param .u32 bulk_s2s_param_0
)
{
	.reg .b32 	%r<5>;
	.shared .align 16 .b8 src[256];
	.shared .align 16 .b8 dst[256];
	.shared .align 8 .b64 bar2;

	ld.param.u32 	%r1, [bulk_s2s_param_0];
	mov.u32 	%r2, src;
	mov.u32 	%r3, dst;
	mov.u32 	%r4, bar2;
	mbarrier.init.shared::cta.b64 	[%r4], 1;
	cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes 	[%r3], [%r2], %r1, [%r4];
	ret;
}
"""


@pytest.fixture(scope="module")
def bulk():
    return instrument(BULK)


def test_every_bulk_copy_gets_two_sites(bulk):
    lines = {i + 1: line for i, line in enumerate(BULK.splitlines())}
    by_line: dict[int, list] = {}
    for s in bulk.sites:
        by_line.setdefault(s.ptx_line, []).append((s.function, s.access, s.space))
    assert all("cp.async.bulk." in lines[n] for n in by_line)
    assert sorted(by_line.values()) == [
        [("bulk_in", "write", "shared"), ("bulk_in", "read", "global")],
        [("bulk_out", "write", "global"), ("bulk_out", "read", "shared")],
        [("bulk_s2s", "write", "shared"), ("bulk_s2s", "read", "shared")],
    ]
    assert bulk.sites.unchecked == {}
    assert set(bulk.sites.kernels) == {"bulk_in", "bulk_out", "bulk_s2s"}


def test_a_refused_bulk_copy_still_completes_its_mbarrier_transaction(bulk):
    text = bulk.ptx
    assert text.count("mbarrier.complete_tx.shared::cluster.b64 \t[%r3], %r1;") == 2
    assert text.count("mbarrier.complete_tx.shared::cluster.b64 \t[%r4], %r1;") == 2


def test_ptxas_accepts_the_checked_bulk_copies_for_sm_90(bulk):
    ptxas(bulk.ptx, "sm_90")


STAGED = r"""
__device__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

extern "C" __global__ void stage(float* out, const float* in, unsigned bytes)
{
    __shared__ alignas(16) float tile[256];
    __shared__ alignas(8) unsigned long long bar;
    unsigned b = smem(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
        asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
                     :: "r"(b), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1], %2, [%3];"
                     :: "r"(smem(tile)), "l"(in), "r"(bytes), "r"(b) : "memory");
    }
    __syncthreads();
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
                     " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(b) : "memory");
    out[threadIdx.x] = tile[threadIdx.x] * 2.0f;
}

extern "C" __global__ void publish(float* out, unsigned bytes)
{
    __shared__ alignas(16) float tile[256];
    tile[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(out), "r"(smem(tile)), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}
"""


def _staged(kernel: str, args: list):
    return run_both(STAGED, kernel, (1, 1, 1), (256, 1, 1), args, arch="compute_90")


def test_a_bulk_copy_into_shared_memory_runs_and_completes_its_mbarrier():
    o = _staged("stage", [Buf(np.zeros(256, np.float32)), Buf(f32(256)), np.uint32(1024)])
    assert o.device == [] and o.oracle == []
    assert_same(o)
    assert np.array_equal(np.frombuffer(o.checked_out[0], np.float32), 2 * f32(256))


def test_a_bulk_copy_reading_past_its_source_is_caught_and_still_releases_the_waiters():
    o = _staged("stage", [Buf(np.zeros(256, np.float32)), Buf(f32(252)), np.uint32(1024)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert same_violations(o) and o.occurrences == 1  # one copy, by thread 0


def test_a_bulk_copy_out_to_global_memory_runs_and_a_short_destination_is_caught():
    o = _staged("publish", [Buf(np.zeros(256, np.float32)), np.uint32(1024)])
    assert o.device == [] and o.oracle == []
    assert_same(o)
    assert np.array_equal(np.frombuffer(o.checked_out[0], np.float32), f32(256))
    short = _staged("publish", [Buf(np.zeros(128, np.float32)), np.uint32(1024)])
    assert kinds(short) == {"global-out-of-bounds"} and short.device == short.oracle


def test_a_tensor_map_copy_is_refused_by_name_on_the_cpu_device():
    from gpusafe.cpu.errors import UnsupportedInstruction
    from gpusafe.cpu.memory import DeviceMemory
    from gpusafe.cpu.program import Program

    text = (".version 8.0\n.target sm_90\n.address_size 64\n"
            ".visible .entry k(.param .u64 m)\n{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<2>;\n"
            "\tld.param.u64 %rd1, [m];\n"
            "\tcp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
            " [%r1], [%rd1, {%r2}], [%r1];\n\tret;\n}\n")
    with pytest.raises(UnsupportedInstruction, match="PTX line 9: cp.async.bulk.tensor.*tensor map"):
        Program(text, DeviceMemory()).launch("k", (1, 1, 1), (1, 1, 1), 0,
                                             np.zeros(8, np.uint8).tobytes())


def test_ptxas_accepts_the_checked_nvrtc_bulk_copies_for_sm_90():
    ptxas(instrument(nvrtc_compile(STAGED, "k.cu", "compute_90", ())).ptx, "sm_90")
