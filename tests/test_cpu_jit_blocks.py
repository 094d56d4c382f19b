"""The JIT engine with barriers, shared and local memory, and atomics: the
same outputs, instruction counts, errors and violation records as the
interpreter, bit for bit."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from test_cpu_jit import _launch, engine_notes, on_both_engines

from gpusafe.cpu.errors import IllegalAddress, MisalignedAddress
from gpusafe.cpu.jit.lower import lower_kernel
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe_testkit.corpus import nvrtc_compile

_PTX: dict[str, str] = {}


def _ptx(source: str) -> str:
    if source not in _PTX:
        # redux.sync needs sm_80, elect.sync sm_90
        arch = ("compute_90" if "elect.sync" in source else
                "compute_80" if "__reduce" in source else "compute_75")
        _PTX[source] = nvrtc_compile(source, "k.cu", arch, ())
    return _PTX[source]


def _run(engine: str, source: str, kernel: str, grid, block, arrays: list, scalars: bytes,
         monkeypatch, shared: int = 0) -> tuple[list[np.ndarray], int, str]:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    mem = DeviceMemory()
    program = Program(_ptx(source), mem)
    bases = []
    for a in arrays:
        base = mem.alloc(a.nbytes)
        mem.write(base, a)
        bases.append(base)
    notes = engine_notes(monkeypatch)
    result = program.launch(kernel, grid, block, shared,
                            struct.pack(f"<{len(bases)}Q", *bases) + scalars)
    outs = [np.frombuffer(mem.read(b, a.nbytes), a.dtype) for a, b in zip(arrays, bases,
                                                                          strict=True)]
    return outs, result.instructions, notes[0]


def _same(source, kernel, grid, block, arrays, scalars, monkeypatch,
          shared: int = 0) -> list[np.ndarray]:
    ref, n_ref, _ = _run("interpreter", source, kernel, grid, block, arrays, scalars,
                         monkeypatch, shared)
    got, n_got, note = _run("jit", source, kernel, grid, block, arrays, scalars, monkeypatch,
                            shared)
    assert note == "jit"
    for r, g in zip(ref, got, strict=True):
        assert r.tobytes() == g.tobytes()
    assert n_got == n_ref
    return got


REVERSE = r"""
extern "C" __global__ void rev(int* out, const int* in)
{
    __shared__ int s[64];
    int base = blockIdx.x * 64;
    s[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = s[63 - threadIdx.x];
}
"""


def test_barrier_and_static_shared_memory(monkeypatch):
    src = np.arange(192, dtype=np.int32) * 7
    out = _same(REVERSE, "rev", (3, 1, 1), (64, 1, 1), [np.zeros(192, np.int32), src], b"",
                monkeypatch)
    assert np.array_equal(out[0], src.reshape(3, 64)[:, ::-1].ravel())


MATMUL = r"""
#define TILE 8
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}
"""


def test_tiled_matmul_with_barriers_in_a_loop(monkeypatch):
    rng = np.random.default_rng(0)
    n = 24
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    out = _same(MATMUL, "matmul", (3, 3, 1), (8, 8, 1),
                [a.ravel(), b.ravel(), np.zeros(n * n, np.float32)], struct.pack("<i", n),
                monkeypatch)
    np.testing.assert_allclose(out[2].reshape(n, n), a @ b, rtol=1e-4, atol=1e-4)


DIVERGENT = r"""
extern "C" __global__ void div(int* out, int stop)
{
    __shared__ int s[128];
    __shared__ int r[128];
    int t = threadIdx.x;
    s[t] = t * 3;
    r[t] = t;
    if (t >= stop) return;             // these threads leave before the barriers
    if (t & 1) {                       // two different barrier instructions
        __syncthreads();
        r[t] += s[t ^ 1];
    } else {
        __syncthreads();
        r[t] -= s[(t + 9) % 128];
    }
    if (t < 8) {                       // a barrier only some threads reach: it opens
        __syncthreads();               // once the others have left
        out[t] = r[(t + 13) % 128] * 1000 + r[t];
    } else {
        out[t] = s[(t + 5) % 128] * 1000 + r[t];
    }
}
"""


@pytest.mark.parametrize("stop", [128, 100, 0])
def test_divergent_barriers_behave_as_the_interpreter(monkeypatch, stop):
    _same(DIVERGENT, "div", (2, 1, 1), (128, 1, 1), [np.full(128, -1, np.int32)],
          struct.pack("<i", stop), monkeypatch)


HISTOGRAM = r"""
extern "C" __global__ void hist(const unsigned char* in, unsigned int* bins, int n)
{
    extern __shared__ unsigned int local[];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[in[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}
"""


def test_dynamic_shared_histogram(monkeypatch):
    x = np.random.default_rng(1).integers(0, 256, 5000).astype(np.uint8)
    out = _same(HISTOGRAM, "hist", (4, 1, 1), (96, 1, 1), [x, np.zeros(256, np.uint32)],
                struct.pack("<i", 5000), monkeypatch, shared=1024)
    assert np.array_equal(out[1], np.bincount(x, minlength=256))


ATOMICS = r"""
extern "C" __global__ void atoms(unsigned int* g, int* s32, unsigned long long* g64,
                                 float* f, double* d, unsigned int* old)
{
    __shared__ unsigned int sh[8];
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < 8) sh[threadIdx.x] = 100u * threadIdx.x;
    __syncthreads();
    unsigned int* o = old + 20 * t;
    o[0] = atomicAdd(&g[0], t);
    o[1] = atomicMin(&g[1], t * 7919u % 1000u);
    o[2] = atomicMax(&g[2], t * 7919u % 1000u);
    o[3] = (unsigned)atomicMin(&s32[0], (int)(t * 7919u % 1000u) - 500);
    o[4] = (unsigned)atomicMax(&s32[1], (int)(t * 7919u % 1000u) - 500);
    o[5] = atomicAnd(&g[3], ~(1u << (t % 32)));
    o[6] = atomicOr(&g[4], 1u << (t % 32));
    o[7] = atomicXor(&g[5], t * 2654435761u);
    o[8] = atomicExch(&g[6], t);
    o[9] = atomicCAS(&g[7], t % 5, t + 1);
    o[10] = atomicInc(&g[8], 9u);
    o[11] = atomicDec(&g[9], 7u);
    o[12] = __float_as_uint(atomicAdd(&f[0], 0.1f * t));
    o[13] = (unsigned)__double_as_longlong(atomicAdd(&d[0], 0.3 * t));
    o[14] = (unsigned)atomicAdd(&g64[0], 0x100000001ull * t);
    o[15] = (unsigned)atomicMax(&g64[1], (unsigned long long)t << 33);
    o[16] = atomicAdd(&sh[t % 2], t);        // each instruction its own addresses: the
    o[17] = atomicCAS(&sh[2 + t % 2], 200u + 100u * (t % 2), t);  // interpreter's lane
    o[18] = atomicExch(&sh[4 + t % 2], t);   // order is then the JIT's thread order
    o[19] = atomicInc(&sh[6 + t % 2], 1000u);
    __syncthreads();
    if (threadIdx.x < 8) atomicAdd(&g[10 + threadIdx.x], sh[threadIdx.x]);
}
"""


def test_every_atomic_operation_on_global_and_shared(monkeypatch):
    n = 3 * 64
    g = np.array([0, 0xFFFFFFFF, 0, 0xFFFFFFFF, 0, 0x12345678, 5, 0, 3, 2] + [0] * 8, np.uint32)
    _same(ATOMICS, "atoms", (3, 1, 1), (64, 1, 1),
          [g, np.array([0, 0], np.int32), np.array([1, 0], np.uint64),
           np.array([0.5], np.float32), np.array([0.25], np.float64),
           np.zeros(20 * n, np.uint32)], b"", monkeypatch)


LOCAL = r"""
extern "C" __global__ void loc(int* out, const int* idx)
{
    int a[24];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 24; ++k) a[k] = k * t + 1;
    __syncthreads();
    out[t] = a[idx[t] % 24] + a[(idx[t] + 7) % 24];
}
"""


def test_local_arrays_survive_a_barrier(monkeypatch):
    idx = np.random.default_rng(2).integers(0, 1000, 128).astype(np.int32)
    _same(LOCAL, "loc", (2, 1, 1), (64, 1, 1), [np.zeros(128, np.int32), idx], b"",
          monkeypatch)


GENERIC = r"""
extern "C" __global__ void gen(int* out, int pick)
{
    __shared__ int s[32];
    int t = threadIdx.x;
    s[t] = t + 100;
    __syncthreads();
    int* p = (t & pick) ? s : out;   // a generic pointer into shared or global memory
    p[(t + 1) % 32] += 1;
    __syncthreads();
    out[32 + t] = s[t];
}
"""


def test_generic_pointers_into_shared_memory(monkeypatch):
    _same(GENERIC, "gen", (1, 1, 1), (32, 1, 1), [np.zeros(64, np.int32)],
          struct.pack("<i", 1), monkeypatch)


OVERRUN = r"""
extern "C" __global__ void over(int* out, int k)
{
    extern __shared__ int s[];
    s[threadIdx.x * k] = 1;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


@pytest.mark.parametrize("k, error", [(8, IllegalAddress)])
def test_a_shared_overrun_is_the_interpreters_error(monkeypatch, k, error):
    messages = []
    counts = []
    for _, mem, program in on_both_engines(_ptx(OVERRUN), monkeypatch):
        out = mem.alloc(4 * 32)
        with pytest.raises(error) as e:
            program.launch("over", (1, 1, 1), (32, 1, 1), 256, struct.pack("<Qi", out, k))
        messages.append(str(e.value))
        counts.append(e.value.ptx_line)
    assert messages[0] == messages[1]
    assert "shared" in messages[0]
    assert counts[0] == counts[1]


MISALIGNED = r"""
extern "C" __global__ void mis(int* out, int k)
{
    __shared__ int s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = *(int*)((char*)s + 4 * threadIdx.x + k);
}
"""


def test_a_misaligned_shared_read_is_the_interpreters_error(monkeypatch):
    messages = []
    for _, mem, program in on_both_engines(_ptx(MISALIGNED), monkeypatch):
        out = mem.alloc(4 * 32)
        with pytest.raises(MisalignedAddress) as e:
            program.launch("mis", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Qi", out, 2))
        messages.append(str(e.value))
    assert messages[0] == messages[1]


SHUFFLE = r"""
extern "C" __global__ void shuf(int* out)
{
    out[threadIdx.x] = __shfl_down_sync(0xffffffff, (int)threadIdx.x, 1);
}
"""

COUNTED = r"""
extern "C" __global__ void counted(int* out)
{
    __shared__ int s[64];
    s[threadIdx.x] = threadIdx.x;
    asm volatile("bar.sync 1, 64;");
    out[threadIdx.x] = s[63 - threadIdx.x];
}
"""


@pytest.mark.parametrize("source, kernel, reason", [
    (COUNTED, "counted", "thread count")])
def test_what_the_jit_does_not_cover_falls_back_with_the_reason(monkeypatch, source, kernel,
                                                                reason):
    outs, _, note = _launch("jit", _ptx(source), kernel, (1, 1, 1), (64, 1, 1),
                            [np.zeros(64, np.int32)], b"", monkeypatch)
    assert note.startswith("interpreter: ") and reason in note
    ref, _, _ = _launch("interpreter", _ptx(source), kernel, (1, 1, 1), (64, 1, 1),
                        [np.zeros(64, np.int32)], b"", monkeypatch)
    assert outs[0].tobytes() == ref[0].tobytes()


SHARED_OVERRUN = r"""
extern "C" __global__ void over(int* out, int n)
{
    __shared__ int s[32];
    s[threadIdx.x] = threadIdx.x;      // 40 threads: 8 write past s
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x % 32] + n;
}
"""


def _instrumented_overrun(engine: str, monkeypatch) -> tuple[list, bytes, int]:
    from gpusafe.engine.launches import LaunchPipeline
    from gpusafe_instrument import host
    from gpusafe_instrument.checks import instrument

    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    result = instrument(_ptx(SHARED_OVERRUN))
    mem = DeviceMemory()
    out = mem.alloc(4 * 40)
    program = Program(result.ptx, mem)
    allocations = [host.AllocationRecord(x.tag, x.base, x.size, x.live) for x in mem.allocations]
    pipeline = LaunchPipeline(mem)
    launch = pipeline.prepare(result.sites, "over", struct.pack("<Qi", out, 5), allocations,
                              dynamic_shared=0)
    notes = engine_notes(monkeypatch)
    ran = program.launch("over", (2, 1, 1), (40, 1, 1), 0, launch.params)
    device, dropped = pipeline.collect(launch)
    assert notes == (["jit"] if engine == "jit" else [""])
    keys = [(str(v.kind), v.site.ptx_line, v.address, v.thread, v.block, v.count)
            for v in device]
    return keys + [("dropped", dropped)], mem.read(out, 4 * 40), ran.instructions


@pytest.mark.slow  # instrumenting and compiling: about 2 s
def test_instrumented_shared_overrun_records_the_same_violations(monkeypatch):
    ref = _instrumented_overrun("interpreter", monkeypatch)
    got = _instrumented_overrun("jit", monkeypatch)
    # 16 bad stores at one site: its tally keeps the first offenders, counts all
    assert sum(k[5] for k in ref[0][:-1]) == 16 and ref[0][0][0] == "shared-out-of-bounds"
    assert got == ref


WARPS = r"""
extern "C" __global__ void warps(int* out, const int* in, int live)
{
    __shared__ int s[96];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x >= live) return;     // a partial last warp: lanes missing
    int v = in[t];
    int* o = out + 19 * t;
    o[0] = __shfl_down_sync(0xffffffff, v, 3);
    o[1] = __shfl_up_sync(0xffffffff, v, 5, 16);
    o[2] = __shfl_xor_sync(0xffffffff, v, 9);
    o[3] = __shfl_sync(0xffffffff, v, (v & 7) + 20, 8);
    o[4] = __float_as_int(__shfl_down_sync(0xffffffff, __int_as_float(v) * 0.5f, 16));
    o[5] = __ballot_sync(0xffffffff, v & 1);
    o[6] = __all_sync(0xffffffff, v > 10);
    o[7] = __any_sync(0x0000ffff, v > 990);
    o[8] = __ballot_sync(0xffff0000, v & 2);
    s[threadIdx.x] = v;
    __syncwarp();
    unsigned int lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    o[9] = s[threadIdx.x ^ 1] + 1000 * (int)lane;
    __syncthreads();
    int sum = v;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffff, sum, off);
    o[10] = sum;
    o[11] = __shfl_sync(0xffffffff, sum, 0);
    int g, b;                          // predicated-off lanes take part all the same
    asm("{\n\t.reg .pred q, r;\n\tsetp.ne.u32 q, %2, 0;\n\tsetp.gt.u32 r, %3, 500;\n\t"
        "mov.u32 %0, -1;\n\tmov.u32 %1, -1;\n\t"
        "@q shfl.sync.idx.b32 %0, %3, 3, 31, -1;\n\t"
        "@q vote.sync.ballot.b32 %1, r, -1;\n\t}"
        : "=r"(g), "=r"(b) : "r"(v & 1), "r"(v));
    o[12] = g;
    o[13] = b;
    o[14] = __reduce_add_sync(0xffffffff, v * 77777);
    o[15] = __reduce_min_sync(0xffffffff, (unsigned)v * 3u);
    o[16] = __reduce_max_sync(0xffffffff, v - 500);
    o[17] = __reduce_xor_sync(0xffffffff, v);
    if (v & 4) o[18] = __activemask();
}
"""


@pytest.mark.parametrize("live", [96, 77])
def test_warp_shuffles_votes_and_syncwarp(monkeypatch, live):
    """With lanes 77-95 gone, lanes 64-76 of each block reach the first
    shuffle while the others have not yet executed their ``ret``: the
    interpreter makes them wait and runs it again, counting it once."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 1000, 192).astype(np.int32)
    _same(WARPS, "warps", (2, 1, 1), (96, 1, 1), [np.zeros(19 * 192, np.int32), x],
          struct.pack("<i", live), monkeypatch)



DIVERGENT_VOTES = r"""
extern "C" __global__ void votes(unsigned int* out, const int* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    unsigned int m = __activemask();
    unsigned int r;
    if (threadIdx.x % 3 == 0)
        r = __ballot_sync(__activemask(), v > 500);
    else
        r = __ballot_sync(__activemask(), v < 250) ^ 0x10000000u;
    unsigned int a = __all_sync(m, v < n) ? 1u : 0u;
    unsigned int y = __any_sync(m, v == 7) ? 2u : 0u;
    out[i] = r;
    out[blockDim.x * gridDim.x + i] = a | y | (__ballot_sync(m, v & 1) << 2);
}
"""


def test_lanes_of_one_warp_at_different_votes_get_their_own_answers(monkeypatch):
    """Lanes of a warp wait at two ballots in the same round (the branch
    splits every warp) and the last warp of each block is short (80
    threads): each lane's answer is its group's, as the interpreter's,
    although ``@warp_bits`` answers once a warp and instruction."""
    rng = np.random.default_rng(11)
    x = rng.integers(0, 1000, 240).astype(np.int32)
    x[[5, 77, 130]] = 7
    out = _same(DIVERGENT_VOTES, "votes", (3, 1, 1), (80, 1, 1),
                [np.zeros(480, np.uint32), x], struct.pack("<i", 990), monkeypatch)
    first = np.arange(240) % 80 % 3 == 0
    ballots = out[0][:240]
    assert len(set(ballots[first].tolist())) > 2  # answers differ by warp
    assert not set(ballots[first].tolist()) & set(ballots[~first].tolist())

BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float* in, float* total, int n)
{
    __shared__ float warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
        if (lane == 0) atomicAdd(total, v);
    }
}
"""


def test_shuffle_block_sum(monkeypatch):
    x = np.random.default_rng(6).random(1000).astype(np.float32)
    out = _same(BLOCK_SUM, "block_sum", (4, 1, 1), (256, 1, 1), [x, np.zeros(1, np.float32)],
                struct.pack("<i", 1000), monkeypatch)
    np.testing.assert_allclose(out[1][0], x.sum(dtype=np.float64), rtol=1e-5)


SPECIALS = r"""
extern "C" __global__ void specials(unsigned int* out)
{
    extern __shared__ int dyn[];
    unsigned int r[10];
    asm("mov.u32 %0, %%warpid;" : "=r"(r[0]));
    asm("mov.u32 %0, %%smid;" : "=r"(r[1]));
    asm("mov.u32 %0, %%lanemask_eq;" : "=r"(r[2]));
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(r[3]));
    asm("mov.u32 %0, %%lanemask_le;" : "=r"(r[4]));
    asm("mov.u32 %0, %%lanemask_ge;" : "=r"(r[5]));
    asm("mov.u32 %0, %%lanemask_gt;" : "=r"(r[6]));
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r[7]));
    asm("mov.u32 %0, %%total_smem_size;" : "=r"(r[8]));
    asm("mov.u32 %0, %%nwarpid;" : "=r"(r[9]));
    dyn[threadIdx.x] = 1;
    unsigned int t = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    for (int k = 0; k < 10; ++k) out[10 * t + k] = r[k];
}
"""


def test_special_registers_of_lanes_warps_and_the_launch(monkeypatch):
    out = _same(SPECIALS, "specials", (3, 2, 1), (48, 1, 1), [np.zeros(10 * 288, np.uint32)],
                b"", monkeypatch, shared=200)
    assert out[0].reshape(288, 10)[:, 7].tolist() == [200] * 288


BAR_RED = r"""
extern "C" __global__ void votes(int* out, const int* in, int live)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x >= live) return;    // gone threads are not counted
    int v = in[t];
    int c = __syncthreads_count(v > 500);
    int a = __syncthreads_and(v > 20);
    int o = __syncthreads_or(v > 990);
    out[t] = c * 100 + a * 10 + o;
}
"""


@pytest.mark.parametrize("live", [80, 51])
def test_barrier_reductions(monkeypatch, live):
    x = np.random.default_rng(7).integers(0, 1000, 160).astype(np.int32)
    _same(BAR_RED, "votes", (2, 1, 1), (80, 1, 1), [np.zeros(160, np.int32), x],
          struct.pack("<i", live), monkeypatch)



BAR_COUNTS = r"""
extern "C" __global__ void counts(int* out, const int* in, int n, int reps)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    int c = 0;
#pragma unroll 1
    for (int k = 0; k < reps; k++) c = c * 1000 + __syncthreads_count(v > 300 * k);
    int d = __syncthreads_and(v > 2) * 10 + __syncthreads_or(v > 990);
    out[t] = c;
    out[n + t] = d;
}
"""


def test_a_barrier_count_in_a_loop_is_counted_each_time(monkeypatch):
    """The same ``bar.red`` reached again with other predicates: its count,
    kept once a block (``blocks._BLOCK_MEMO``), is counted again after every
    snapshot; ``and``/``or`` use both memos (``@block_count``, ``@block_here``)."""
    assert _ptx(BAR_COUNTS).count("bar.red.popc") == 1  # one instruction, three rounds
    x = np.random.default_rng(12).integers(0, 1000, 192).astype(np.int32)
    out = _same(BAR_COUNTS, "counts", (2, 1, 1), (96, 1, 1), [np.zeros(384, np.int32), x],
                struct.pack("<ii", 192, 3), monkeypatch)
    counts = out[0][:192]
    assert len(set(counts.tolist())) == 2  # one a block
    assert all(c // 10**6 > c // 1000 % 1000 > c % 1000 > 0 for c in counts.tolist())

BAR_RED_SPLIT = r"""
extern "C" __global__ void split(int* out, const int* in)
{
    int t = threadIdx.x;
    int v = in[t];
    int c;
    if (t < 40) c = __syncthreads_count(v > 500) * 10 + __syncthreads_and(v > 20);
    else c = __syncthreads_count(v > 100) * 10 + __syncthreads_and(v > 50) + 100000;
    out[t] = c;
}
"""


def test_threads_at_two_barrier_reductions_of_one_id_are_reduced_together(monkeypatch):
    """Undefined on a GPU, but the engines agree: the interpreter reduces over
    the lanes released together by barrier id, so the JIT counts the threads
    waiting at either ``bar.red`` of id 0, not those at its own instruction."""
    assert _ptx(BAR_RED_SPLIT).count("bar.red.popc") == 2
    x = np.random.default_rng(5).integers(0, 1000, 96).astype(np.int32)
    out = _same(BAR_RED_SPLIT, "split", (1, 1, 1), (96, 1, 1), [np.zeros(96, np.int32), x],
                b"", monkeypatch)
    both = (x[:40] > 500).sum() + (x[40:] > 100).sum()
    assert (out[0] % 100000 // 10 == both).all()


CALLEE_SYNC = r"""
__device__ __noinline__ int swap(unsigned mask, int v) { return __shfl_xor_sync(mask, v, 1); }
__device__ __noinline__ int votes(int v) { return __popc(__ballot_sync(0xffffffffu, v > 500)); }
__device__ __noinline__ int stage(int* s, int v)
{
    int b = blockIdx.x * blockDim.x;
    s[b + threadIdx.x] = v;
    __syncthreads();
    return s[b + (threadIdx.x + 1) % blockDim.x];
}

extern "C" __global__ void calls(int* out, const int* in, int* s)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    int lane = threadIdx.x % 32;
    int r;
    if (lane < 16) r = swap(0x0000ffffu, v);            // two call sites of one callee,
    else r = swap(0xffff0000u, v * 2) + 1000;         // each half of the warp at its own
    r += votes(v) * 100000;
    out[t] = r + stage(s, v) * 7;
}
"""


def test_warp_instructions_and_barriers_inside_called_functions(monkeypatch):
    """A device function with a shuffle, a vote or a barrier is inlined at each
    call site; the lanes meet at the instruction of their own copy, as the
    interpreter gathers them at the call: the halves of a warp that call
    ``swap`` from different sites exchange within their half."""
    ptx = _ptx(CALLEE_SYNC)
    assert ptx.count("call.uni") + ptx.count("call ") >= 4  # the calls stay calls
    x = np.random.default_rng(9).integers(0, 1000, 192).astype(np.int32)
    out = _same(CALLEE_SYNC, "calls", (2, 1, 1), (96, 1, 1),
                [np.zeros(192, np.int32), x, np.zeros(192, np.int32)], b"", monkeypatch)
    lane = np.arange(192) % 32
    partner = np.arange(192) ^ 1
    swapped = np.where(lane < 16, x[partner], x[partner] * 2 + 1000)
    ring = x.reshape(2, 96)[:, (np.arange(96) + 1) % 96].ravel()
    warps = (x > 500).reshape(6, 32).sum(axis=1).repeat(32)
    assert (out[0] == swapped + warps * 100000 + ring * 7).all()


SPIN = r"""
extern "C" __global__ void spin(int* flag, int* out)
{
    if (threadIdx.x == 0) {            // waits for a thread that runs after it
        while (atomicAdd(flag, 0) == 0) {}
        out[0] = atomicAdd(flag, 0);
    }
    if (threadIdx.x == 63) { out[1] = 7; atomicExch(flag, 5); }
    __syncthreads();
    out[2 + threadIdx.x] = out[1];
}
"""


def test_a_thread_spinning_for_a_later_thread_yields_to_it(monkeypatch):
    """The outputs are the interpreter's; the instruction counts are not
    compared: each engine spins its own number of rounds."""
    arrays = [np.zeros(1, np.int32), np.zeros(66, np.int32)]
    ref, _, _ = _run("interpreter", SPIN, "spin", (1, 1, 1), (64, 1, 1), arrays, b"",
                     monkeypatch)
    got, _, note = _run("jit", SPIN, "spin", (1, 1, 1), (64, 1, 1), arrays, b"", monkeypatch)
    assert note == "jit"
    assert [r.tobytes() for r in ref] == [g.tobytes() for g in got]
    assert got[0][0] == 5 and got[1][0] == 5 and (got[1][2:] == 7).all()


LONG_LOOP = r"""
extern "C" __global__ void long_loop(unsigned int* out, int n)
{
    unsigned int h = threadIdx.x;
    int trips = threadIdx.x == 3 ? n : 3;   // one lane loops past the yield threshold
    #pragma unroll 1
    for (int i = 0; i < trips; ++i) h = h * 1664525u + 1013904223u;
    for (int off = 16; off > 0; off >>= 1) h += __shfl_down_sync(0xffffffff, h, off);
    out[threadIdx.x] = h;
}
"""


def test_a_yield_inside_a_divergent_loop_keeps_the_warp_together(monkeypatch):
    """Lane 3 yields in its loop while the other 31 lanes of its warp wait at
    the first shuffle: they must not go on without it."""
    _same(LONG_LOOP, "long_loop", (1, 1, 1), (64, 1, 1), [np.zeros(64, np.uint32)],
          struct.pack("<i", 5000), monkeypatch)


MATCH = r"""
extern "C" __global__ void match(unsigned int* out, const int* in)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    unsigned int* o = out + 5 * t;
    o[0] = __match_any_sync(0xffffffff, v & 3);
    o[1] = __match_any_sync(0x0f0f0f0f, (long long)(v & 1) << 40);
    int pred;
    o[2] = __match_all_sync(0xffffffff, v >> 10, &pred);
    o[3] = pred;
    if (v & 8) {                          // a partial warp elects its lowest lane
        unsigned int leader, mine;
        asm("{\n\t.reg .pred p;\n\telect.sync %0|p, %2;\n\tselp.u32 %1, 1, 0, p;\n\t}"
            : "=r"(leader), "=r"(mine) : "r"(0xfffffff0u));
        o[4] = leader * 10 + mine;
    }
}
"""


def test_match_and_elect(monkeypatch):
    """The lanes inside the ``if`` reach ``elect.sync`` while their warp-mates
    are still alive elsewhere; the interpreter makes them wait and runs the
    instruction again once the others have finished (counting it once)."""
    x = np.random.default_rng(8).integers(0, 1000, 128).astype(np.int32)
    x[64:96] = 7 << 10                    # one warp all equal for match.all
    _same(MATCH, "match", (2, 1, 1), (64, 1, 1), [np.zeros(5 * 128, np.uint32), x], b"",
          monkeypatch)


FOREVER = r"""
extern "C" __global__ void spin(const int* flag, int* count)
{
    while (flag[0] == 0)
        atomicAdd(count, 1);
}
"""


def test_a_launch_past_its_timeout_is_stopped_in_compiled_code(monkeypatch):
    """The watchdog: a kernel that never ends stops at its timeout on the JIT
    too (not by falling back to the interpreter), naming the block."""
    from gpusafe.cpu.errors import LaunchTimeout
    from gpusafe.cpu.jit.engine import STATS

    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
    mem = DeviceMemory()
    program = Program(_ptx(FOREVER), mem)
    flag, count = mem.alloc(4), mem.alloc(4)
    mem.write(flag, np.zeros(1, np.int32))
    mem.write(count, np.zeros(1, np.int32))
    fallbacks = len(STATS.fallbacks)
    with pytest.raises(LaunchTimeout, match=r"kernel spin: still running after [0-9.]+ s \(the "
                       r"kernel timeout is 0\.3 s\); block \(0, 0, 0\) was running \(compiled"):
        program.launch("spin", (1, 1, 1), (32, 1, 1), 0, struct.pack("<2Q", flag, count),
                       timeout=0.3)
    assert len(STATS.fallbacks) == fallbacks
    assert np.frombuffer(mem.read(count, 4), np.int32)[0] > 0


NANS = r"""
extern "C" __global__ void nans(unsigned* bits, const float* x, const float* y, float* f,
                                double* d)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    float a = x[t], b = y[t];
    float p = a * b;                   // inf * 0, NaN operands with payloads
    float q = fmaf(a, b, p);           // a chain of f32 results
    float r = q - a + b;
    s[t] = r;
    __syncthreads();                   // q and r live across a barrier
    bits[t] = __float_as_uint(q);
    bits[64 + t] = __float_as_uint(r + s[63 - t]);
    f[t] = t & 1 ? q : r;
    f[64 + t] = q < r ? r : q;         // a compare
    f[128 + t] = __shfl_down_sync(0xffffffffu, q, 1);
    d[t] = (double)q;                  // a conversion carries the payload
}
"""


def test_nan_results_are_canonical_wherever_they_are_read(monkeypatch):
    """f32 results are kept raw along a chain of arithmetic and canonicalised
    where read otherwise (``Values.lazy_slots``): every reader (a store of
    the bits, a select, a compare, a shuffle, a conversion to f64, a barrier in
    between) sees the interpreter's bits."""
    special = [0x7FC00001, 0xFFC12345, 0x7F800001, 0x7F800000, 0xFF800000, 0, 0x80000000,
               0x3F800000, 0x00000001, 0xBF000000, 0x7F7FFFFF]
    rng = np.random.default_rng(7)
    x = np.array([special[k % len(special)] for k in range(64)], np.uint32)
    y = np.array([special[k % len(special)] for k in rng.permutation(64)], np.uint32)
    _same(NANS, "nans", (1, 1, 1), (64, 1, 1),
          [np.zeros(128, np.uint32), x.view(np.float32), y.view(np.float32),
           np.zeros(192, np.float32), np.zeros(64, np.float64)], b"", monkeypatch)


RUN = r"""
extern "C" __global__ void run(float* out, int shift)
{
    __shared__ float s[64];
    for (int k = 0; k < 64; ++k) s[k] = k * 0.5f;
    __syncthreads();
    const float* p = (const float*)((const char*)s + shift);
    float a = p[0];
    float b = p[8];
    float c = a * b;
    float d = p[16];
    float e = p[-4];
    out[0] = a + b + c + d + e;
}
"""


@pytest.mark.parametrize("shift, error", [
    (16, None), (0, IllegalAddress), (200, IllegalAddress), (240, IllegalAddress),
    (-8, IllegalAddress), (226, MisalignedAddress)])
def test_shared_loads_checked_once_per_run_fault_where_the_interpreter_does(
        monkeypatch, shift, error):
    """The four loads of ``p`` (one base register) are checked together at
    the first (``RunChecks._precheck_run``); whichever of them is bad
    (the 4th, 3rd, 2nd, 1st, misaligned) is the interpreter's error, PTX
    line and message."""
    program = Program(_ptx(RUN), DeviceMemory())
    function = next(f for f in program.module.functions if f.name == "run")
    assert "%RF" in lower_kernel(function).ir  # the run's check is there
    if error is None:
        _same(RUN, "run", (1, 1, 1), (1, 1, 1), [np.zeros(1, np.float32)],
              struct.pack("<i", shift), monkeypatch)
        return
    seen = []
    for _, mem, program in on_both_engines(_ptx(RUN), monkeypatch):
        out = mem.alloc(4)
        notes = engine_notes(monkeypatch)
        with pytest.raises(error) as e:
            program.launch("run", (1, 1, 1), (1, 1, 1), 0, struct.pack("<Qi", out, shift))
        seen.append((str(e.value), e.value.ptx_line))
    assert notes == [""]  # the JIT ran it and failed (a fallback says "interpreter: ...")
    assert seen[0] == seen[1]


STALE = r"""
extern "C" __global__ void stale(unsigned* out)
{
    unsigned x;
    // t is read before it is written and lives across the barrier: it lives
    // in the thread's frame, which the previous block's thread left behind
    asm volatile("{\n\t.reg .u32 t;\n\tadd.u32 %0, t, 1;\n\tbar.sync 0;\n"
                 "\tadd.u32 t, t, %1;\n\tadd.u32 %0, %0, t;\n\t}"
                 : "=r"(x) : "r"(threadIdx.x + 100 * blockIdx.x));
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""


def test_registers_live_at_a_barrier_start_at_zero_in_every_block(monkeypatch):
    """Registers live at a suspension live in the thread's frame (reused from
    block to block); one a thread reads before writing is zeroed at its start,
    as the interpreter's registers are."""
    out = _same(STALE, "stale", (3, 1, 1), (32, 1, 1), [np.zeros(96, np.uint32)], b"",
                monkeypatch)
    assert list(out[0][:3]) == [1, 2, 3]


@pytest.mark.slow  # instrumenting and lowering a kernel: about 1 s
def test_yield_points_are_the_loops_back_edges_not_branches_back_in_the_text():
    # a loop (its back edge), and a slow path placed after the code that
    # branches back to it (no cycle): only the loop's edge is a yield point
    from gpusafe.cpu.jit.regions import back_edges
    succ = {0: [1], 1: [2, 5], 2: [3], 3: [1, 4], 4: [7], 5: [6], 6: [2], 7: [8]}
    assert back_edges(8, lambda i: succ[i]) == {(3, 1)}
    # the instrumented tiled matmul: 79 branches go back in its text (its
    # slow paths' returns), one is its loop's: the per-thread lowering
    # yields there only
    from gpusafe_instrument.checks import instrument
    from gpusafe_instrument.parser import parse
    from gpusafe_testkit.bench_kernels import BENCH_KERNELS
    ptx = instrument(nvrtc_compile(BENCH_KERNELS, "bench.cu", "compute_90")).ptx
    matmul = next(f for f in parse(ptx).functions if f.name == "matmul")
    assert len(re.findall(r"%y\d+h = icmp eq i32", lower_kernel(matmul).ir)) == 1
