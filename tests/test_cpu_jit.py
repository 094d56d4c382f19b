"""The JIT engine (GPUSAFE_CPU_ENGINE=jit) against the interpreter: identical
outputs, instruction counts and violation records for kernels it covers, a
named fallback for one it does not."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpusafe.cpu import scheduler
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile

VADD = r"""
extern "C" __global__ void vadd(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""

SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
"""

ROWSUM = r"""
extern "C" __global__ void rowsum(double* out, const float* m, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double acc = 0.0;
    unsigned int h = 0;
    for (int c = 0; c < cols; ++c) {
        float v = m[(long)r * cols + c];
        acc += (double)v * 0.5;
        h = h * 31u + ((unsigned int)(int)v >> 2);
    }
    out[r] = acc + (double)(h & 0xff);
}
"""

BARRIER = r"""
extern "C" __global__ void rev(int* out, const int* in)
{
    __shared__ int s[64];
    s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}
"""


def on_both_engines(ptx: str, monkeypatch):
    """``(engine, memory, program)`` on the interpreter, then on the JIT, each
    with ``GPUSAFE_CPU_ENGINE`` set and a fresh memory: what a test compares
    between the engines (the JIT test modules share it)."""
    for engine in ("interpreter", "jit"):
        monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
        mem = DeviceMemory()
        yield engine, mem, Program(ptx, mem)


def engine_notes(monkeypatch) -> list[str]:
    """Collects each launch's ``engine_note`` (which engine ran it, and why),
    a failed launch's too (the JIT test modules share it)."""
    notes: list[str] = []
    real = scheduler.run_launch

    def spy(launch):
        try:
            real(launch)
        finally:
            notes.append(launch.engine_note)

    monkeypatch.setattr("gpusafe.cpu.program.run_launch", spy)
    return notes


def _launch(engine: str, ptx: str, kernel: str, grid, block, arrays: list, scalars: bytes,
            monkeypatch) -> tuple[list[np.ndarray], int, str]:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    mem = DeviceMemory()
    program = Program(ptx, mem)
    bases = []
    for a in arrays:
        base = mem.alloc(a.nbytes)
        mem.write(base, a)
        bases.append(base)
    params = struct.pack(f"<{len(bases)}Q", *bases) + scalars
    notes = engine_notes(monkeypatch)
    result = program.launch(kernel, grid, block, 0, params)
    outs = [np.frombuffer(mem.read(b, a.nbytes), a.dtype) for a, b in zip(arrays, bases,
                                                                          strict=True)]
    return outs, result.instructions, notes[0]


def _same(source, kernel, grid, block, arrays, scalars, monkeypatch) -> list[np.ndarray]:
    ptx = nvrtc_compile(source, "k.cu", "compute_75", ())
    ref, n_ref, _ = _launch("interpreter", ptx, kernel, grid, block, arrays, scalars, monkeypatch)
    got, n_got, note = _launch("jit", ptx, kernel, grid, block, arrays, scalars, monkeypatch)
    assert note == "jit"
    for r, g in zip(ref, got, strict=True):
        assert r.tobytes() == g.tobytes()
    assert n_got == n_ref
    return got


def test_vector_add_is_bit_identical(monkeypatch):
    a = np.linspace(-3, 3, 1000, dtype=np.float32)
    b = np.float32(1e-3) * np.arange(1000, dtype=np.float32)
    out = _same(VADD, "vadd", (4, 1, 1), (256, 1, 1), [np.zeros(1000, np.float32), a, b],
                struct.pack("<i", 1000), monkeypatch)
    assert np.array_equal(out[0], a + b)


def test_saxpy_grid_stride_is_bit_identical(monkeypatch):
    rng = np.random.default_rng(1)
    y = rng.standard_normal(5000).astype(np.float32)
    x = rng.standard_normal(5000).astype(np.float32)
    x[:3] = [np.inf, -np.inf, np.nan]
    _same(SAXPY, "saxpy", (3, 1, 1), (128, 1, 1), [y, x], struct.pack("<fi", 1.7, 5000),
          monkeypatch)


def test_loop_carried_reduction_is_bit_identical(monkeypatch):
    rng = np.random.default_rng(2)
    m = (rng.standard_normal((70, 33)) * 1000).astype(np.float32)
    _same(ROWSUM, "rowsum", (2, 1, 1), (64, 1, 1), [np.zeros(70, np.float64), m.ravel()],
          struct.pack("<ii", 70, 33), monkeypatch)


def test_barrier_kernel_runs_compiled(monkeypatch):
    """Barriers and shared memory are covered now (tests/test_cpu_jit_blocks.py)."""
    src = np.arange(64, dtype=np.int32)
    out = _same(BARRIER, "rev", (1, 1, 1), (64, 1, 1), [np.zeros(64, np.int32), src], b"",
                monkeypatch)
    assert np.array_equal(out[0], src[::-1])


def test_illegal_address_is_the_interpreters_error(monkeypatch):
    from gpusafe.cpu.errors import IllegalAddress
    ptx = nvrtc_compile(VADD, "k.cu", "compute_75", ())
    messages = []
    for _, mem, program in on_both_engines(ptx, monkeypatch):
        base = mem.alloc(64)
        with pytest.raises(IllegalAddress) as e:
            program.launch("vadd", (1, 1, 1), (1, 1, 1), 0,
                           struct.pack("<QQQi", 0x10, base, base, 1))
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def _instrumented(engine: str, monkeypatch) -> tuple[list, bytes]:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    text = nvrtc_compile(VADD, "k.cu", "compute_75", ())
    result = instrument(text)
    mem = DeviceMemory()
    n = 64
    out = mem.alloc(4 * (n - 1))  # one element short: thread 63 writes past the end
    a = mem.alloc(4 * n)
    b = mem.alloc(4 * n)
    mem.write(a, np.arange(n, dtype=np.float32))
    mem.write(b, np.ones(n, np.float32))
    program = Program(result.ptx, mem)
    allocations = [host.AllocationRecord(x.tag, x.base, x.size, x.live) for x in mem.allocations]
    pipeline = LaunchPipeline(mem)
    params = struct.pack("<QQQi", out, a, b, n)
    launch = pipeline.prepare(result.sites, "vadd", params, allocations, dynamic_shared=0)
    notes = engine_notes(monkeypatch)
    program.launch("vadd", (2, 1, 1), (32, 1, 1), 0, launch.params)
    device, dropped = pipeline.collect(launch)
    keys = [(str(v.kind), v.site.ptx_line, v.address, v.thread, v.block) for v in device]
    assert notes == (["jit"] if engine == "jit" else [""])
    return keys + [("dropped", dropped)], mem.read(out, 4 * (n - 1))


@pytest.mark.slow  # instrumenting the module and compiling it: about 2 s
def test_instrumented_off_by_one_records_the_same_violations(monkeypatch):
    ref, ref_out = _instrumented("interpreter", monkeypatch)
    got, got_out = _instrumented("jit", monkeypatch)
    assert len(ref) == 2 and ref[0][0] == "global-out-of-bounds"
    assert got == ref
    assert got_out == ref_out


SEMANTICS = r"""
extern "C" __global__ void ops(unsigned int* out, const float* f, const double* d,
                               const unsigned int* u, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = f[i], y = f[(i + 1) % n];
    double p = d[i], q = d[(i + 3) % n];
    unsigned int a = u[i], s = u[(i + 5) % n] & 63u;
    unsigned int r[14];
    r[0] = __float_as_uint(__fmaf_rn(x, y, x));
    r[1] = (unsigned int)__float2int_rz(x);
    r[2] = __float2uint_rz(y);
    r[3] = __float_as_uint((float)(p * q + p));
    r[4] = (unsigned int)(long long)q;
    asm("shl.b32 %0, %1, %2;" : "=r"(r[5]) : "r"(a), "r"(s));
    asm("shr.s32 %0, %1, %2;" : "=r"(r[6]) : "r"(a), "r"(s));
    asm("shr.u32 %0, %1, %2;" : "=r"(r[7]) : "r"(a), "r"(s));
    r[8] = __umulhi(a, s * 977u) ^ (unsigned int)(((unsigned long long)a * (s + 1)) >> 7);
    r[9] = x < y ? 11u : 5u;
    r[12] = x != y ? 7u : 3u;
    r[13] = p >= q ? ((int)a < (int)s ? 1u : 2u) : 9u;
    r[10] = min((int)a, (int)s * -3) + max(a, s);
    r[11] = __float_as_uint(x * y - (float)(int)a) ^ __float_as_uint((float)a);
    for (int k = 0; k < 14; ++k) out[i * 14 + k] = r[k];
}
"""


def test_arithmetic_edge_cases_are_bit_identical(monkeypatch):
    specials = [0.0, -0.0, 1.5, -2.5, 3e38, -3e38, 1e-45, 2.0**31, -(2.0**31) - 512, 2.0**32,
                float("inf"), float("-inf"), float("nan"), 7.0, -1e-3, 123456.789]
    n = len(specials) * 4
    rng = np.random.default_rng(3)
    f = np.array(specials * 4, np.float32)
    d = np.array(specials * 4, np.float64) * rng.choice([1.0, -1.0], n)
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    u[::7] = [0, 1, 31, 32, 33, 63, 0xFFFFFFFF, 0x80000000, 40, 64][: len(u[::7])]
    _same(SEMANTICS, "ops", (2, 1, 1), (32, 1, 1), [np.zeros(n * 14, np.uint32), f, d, u],
          struct.pack("<i", n), monkeypatch)


def test_misaligned_access_is_the_interpreters_error(monkeypatch):
    from gpusafe.cpu.errors import MisalignedAddress
    ptx = nvrtc_compile(VADD, "k.cu", "compute_75", ())
    messages = []
    for _, mem, program in on_both_engines(ptx, monkeypatch):
        base = mem.alloc(64)
        with pytest.raises(MisalignedAddress) as e:
            program.launch("vadd", (1, 1, 1), (2, 1, 1), 0,
                           struct.pack("<QQQi", base, base + 2, base, 2))
        messages.append(str(e.value))
    assert messages[0] == messages[1]


COUNT = r"""
extern "C" __global__ void count(unsigned int* bins, unsigned int* slots, const int* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&bins[x[i] & 7], 1u);                // red.global.add
        slots[i] = atomicAdd(&bins[8], (unsigned)i);   // atom.global.add, old value used
    }
}
"""


def test_global_atomic_add_is_identical(monkeypatch):
    x = np.random.default_rng(4).integers(0, 1000, 300).astype(np.int32)
    out = _same(COUNT, "count", (3, 1, 1), (128, 1, 1),
                [np.zeros(9, np.uint32), np.zeros(300, np.uint32), x],
                struct.pack("<i", 300), monkeypatch)
    assert np.array_equal(out[0][:8], np.bincount(x & 7, minlength=8))


HALF_ATOMIC = r"""
extern "C" __global__ void half(unsigned short* h, unsigned short* old)
{
    unsigned short o;
    asm volatile("atom.global.add.noftz.f16 %0, [%1], %2;"
                 : "=h"(o) : "l"(h), "h"((unsigned short)0x3c00));
    old[threadIdx.x] = o;
}
"""


def test_atomics_the_jit_does_not_cover_fall_back_with_the_reason(monkeypatch):
    ptx = nvrtc_compile(HALF_ATOMIC, "k.cu", "compute_75", ())
    outs, _, note = _launch("jit", ptx, "half", (1, 1, 1), (32, 1, 1),
                            [np.zeros(1, np.uint16), np.zeros(32, np.uint16)], b"",
                            monkeypatch)
    assert note.startswith("interpreter: ") and "atom" in note
    assert outs[0][0] == np.float16(32).view(np.uint16)


SETP_BOOL = r"""
extern "C" __global__ void pick(int* out, const int* a, const int* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int r;
    asm("{\n\t.reg .pred %%p, %%q, %%c;\n\t"
        "setp.gt.s32 %%c, %1, 0;\n\t"
        "setp.lt.or.s32 %%p|%%q, %1, %2, %%c;\n\t"
        "@%%q bra.uni DONE;\n\t"
        "selp.s32 %0, 1, 2, %%p;\n\t"
        "bra.uni END;\n"
        "DONE:\n\t"
        "selp.s32 %0, 3, 4, %%p;\n"
        "END:\n\t"
        "}" : "=r"(r) : "r"(a[i]), "r"(b[i]));
    out[i] = r;
}
"""


def test_scoped_asm_blocks_and_setp_with_a_boolean_op(monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.integers(-5, 5, 200).astype(np.int32)
    b = rng.integers(-5, 5, 200).astype(np.int32)
    out = _same(SETP_BOOL, "pick", (2, 1, 1), (128, 1, 1), [np.zeros(200, np.int32), a, b],
                struct.pack("<i", 200), monkeypatch)
    t = a < b
    c = a > 0
    p, q = t | c, ~t | c
    assert np.array_equal(out[0], np.where(q, np.where(p, 3, 4), np.where(p, 1, 2)))


BITOPS = r"""
extern "C" __global__ void bits(unsigned int* out, const unsigned int* u,
                                const unsigned long long* v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int a = u[i], s = u[(i + 5) % n];
    unsigned long long w = v[i];
    unsigned short h = (unsigned short)a, r16;
    unsigned int r[33];
    asm("shr.u16 %0, %1, %2;" : "=h"(r16) : "h"(h), "r"(s));
    r[0] = r16;
    asm("shr.s16 %0, %1, %2;" : "=h"(r16) : "h"(h), "r"(s));
    r[1] = r16;
    asm("shl.b16 %0, %1, %2;" : "=h"(r16) : "h"(h), "r"(s));
    r[2] = r16;
    asm("popc.b32 %0, %1;" : "=r"(r[3]) : "r"(a));
    asm("popc.b64 %0, %1;" : "=r"(r[4]) : "l"(w));
    asm("clz.b32 %0, %1;" : "=r"(r[5]) : "r"(a));
    asm("clz.b64 %0, %1;" : "=r"(r[6]) : "l"(w));
    float f = __uint_as_float(a), fa;
    asm("abs.f32 %0, %1;" : "=f"(fa) : "f"(f));
    r[7] = __float_as_uint(fa);
    double g = __longlong_as_double((long long)w), ga;
    asm("abs.f64 %0, %1;" : "=d"(ga) : "d"(g));
    r[8] = (unsigned int)(__double_as_longlong(ga) >> 32);
    int ia;
    asm("abs.s32 %0, %1;" : "=r"(ia) : "r"((int)a));
    r[9] = (unsigned int)ia;
    short sa;
    asm("abs.s16 %0, %1;" : "=h"(sa) : "h"((short)h));
    r[10] = (unsigned short)sa;
    long long la;
    asm("abs.s64 %0, %1;" : "=l"(la) : "l"((long long)w));
    r[11] = (unsigned int)la ^ (unsigned int)(la >> 32);
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r[12]) : "f"(f));
    asm("cvt.rmi.s32.f32 %0, %1;" : "=r"(r[13]) : "f"(f));
    asm("cvt.rpi.u32.f32 %0, %1;" : "=r"(r[14]) : "f"(f));
    long long q;
    asm("cvt.rni.s64.f64 %0, %1;" : "=l"(q) : "d"(g));
    r[15] = (unsigned int)q ^ (unsigned int)(q >> 32);
    asm("brev.b32 %0, %1;" : "=r"(r[16]) : "r"(a));
    unsigned long long b;
    asm("brev.b64 %0, %1;" : "=l"(b) : "l"(w));
    r[17] = (unsigned int)b ^ (unsigned int)(b >> 40);
    float fq;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(fq) : "f"(f), "f"(__uint_as_float(s)));
    r[18] = __float_as_uint(fq);
    asm("div.full.f32 %0, %1, %2;" : "=f"(fq) : "f"(f), "f"(__uint_as_float(s)));
    r[19] = __float_as_uint(fq);
    double gq;
    asm("div.rn.f64 %0, %1, %2;" : "=d"(gq) : "d"(g), "d"(__longlong_as_double(v[(i + 7) % n])));
    r[20] = (unsigned int)__double_as_longlong(gq) ^ (unsigned int)(__double_as_longlong(gq) >> 32);
    asm("sqrt.rn.f32 %0, %1;" : "=f"(fq) : "f"(f));
    r[21] = __float_as_uint(fq);
    asm("sqrt.approx.f32 %0, %1;" : "=f"(fq) : "f"(f));
    r[22] = __float_as_uint(fq);
    asm("rcp.rn.f32 %0, %1;" : "=f"(fq) : "f"(f));
    r[23] = __float_as_uint(fq);
    asm("sqrt.rn.f64 %0, %1;" : "=d"(gq) : "d"(g));
    r[24] = (unsigned int)__double_as_longlong(gq) ^ (unsigned int)(__double_as_longlong(gq) >> 32);
    asm("rcp.rn.f64 %0, %1;" : "=d"(gq) : "d"(g));
    r[25] = (unsigned int)__double_as_longlong(gq) ^ (unsigned int)(__double_as_longlong(gq) >> 32);
    asm("neg.f32 %0, %1;" : "=f"(fq) : "f"(f));
    r[26] = __float_as_uint(fq);
    asm("neg.f64 %0, %1;" : "=d"(gq) : "d"(g));
    r[27] = (unsigned int)(__double_as_longlong(gq) >> 32);
    asm("bfind.u32 %0, %1;" : "=r"(r[28]) : "r"(a));
    asm("bfind.shiftamt.s32 %0, %1;" : "=r"(r[29]) : "r"((int)a));
    asm("bfind.s64 %0, %1;" : "=r"(r[30]) : "l"((long long)w));
    asm("sad.s32 %0, %1, %2, %3;" : "=r"(r[31]) : "r"((int)a), "r"((int)s), "r"(r[3]));
    asm("sad.u32 %0, %1, %2, %3;" : "=r"(r[32]) : "r"(a), "r"(s), "r"(0xFFFFFFF0u));
    for (int k = 0; k < 33; ++k) out[i * 33 + k] = r[k];
}
"""


def test_sub_word_shifts_bit_counts_and_abs_are_bit_identical(monkeypatch):
    """Shift amounts of a 16-bit shift are compared as u32 before narrowing
    (65536 shifts everything out); clz of 0 is the width; abs and neg keep a
    NaN's payload and leaves the most negative integer as it is; cvt.rni/rmi/rpi
    round (ties to even), saturate and give 0 for NaN; float division is
    correctly rounded with the canonical NaN."""
    n = 64
    rng = np.random.default_rng(11)
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    u[:16] = [0, 1, 15, 16, 17, 31, 65536, 65551, 0xFFFFFFFF, 0x80000000, 0x7FC00001,
              0xFFC12345, 0x8000, 0x7FFF, 0xFFFF8000, 0x00800000]
    u[16:24] = [0x3FC00000, 0x40200000, 0xBFC00000, 0xC0200000, 0x4F000000, 0xCF000001,
                0x4F800000, 0x3F000000]  # 1.5, 2.5, -1.5, -2.5, 2^31, < -2^31, 2^32, 0.5
    v = (u.astype(np.uint64) << np.uint64(32)) | np.roll(u, 3).astype(np.uint64)
    v[:4] = [0, 1, 0x8000000000000000, 0x7FF8000000000001]
    out = _same(BITOPS, "bits", (2, 1, 1), (32, 1, 1), [np.zeros(n * 33, np.uint32), u, v],
                struct.pack("<i", n), monkeypatch)[0].reshape(n, 33)
    assert out[0, 5] == 32  # clz(0)
    assert list(out[1, :3]) == [0, 0, 0]  # 1 shifted by 65536: not a shift by 0
    assert list(out[16:20, 12]) == [2, 2, 2**32 - 2, 2**32 - 2]  # ties to even
    assert out[0, 28] == 0xFFFFFFFF and out[1, 28] == 0 and out[8, 29] == 0xFFFFFFFF


CALLS = r"""
struct P { int a; float b; };
__device__ __noinline__ P make(int x, const float* q) { P p; p.a = x * 3; p.b = q[x] + 1.0f; return p; }
__device__ __noinline__ long long twice(long long v) { return v * 2 - 7; }
__device__ __noinline__ void put(int* o, int i, int v) { o[i] = v + (int)twice(i); }
__device__ __noinline__ float scale(float v, double s) { return (float)(v * s); }
extern "C" __global__ void calls(int* out, const float* q, float* f, long long* w, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    P p = make(i, q);
    put(out, i, p.a);
    f[i] = scale(p.b, 0.5) + scale(q[i], -3.25);
    w[i] = twice((long long)i << 33) + (i & 1 ? twice(p.a) : 0);
}
extern "C" __global__ void flat(int* out, const float* q, float* f, long long* w, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    put(out, i, i * 3);
    f[i] = scale(q[i], 0.5) + scale(q[i], -3.25);
    w[i] = twice((long long)i << 33) + (i & 1 ? twice(i) : 0);
}
"""


@pytest.mark.parametrize(("options", "kernel"), [((), "calls"), (("-G",), "calls"),
                                                 (("-G",), "flat")], ids=["O3", "G", "G-flat"])
def test_device_function_calls_are_bit_identical(options, kernel, monkeypatch):
    """Calls inlined by the JIT: arguments by value and by pointer, a struct
    and a .b64 returned, a nested call, a callee used several times, a
    guarded call: outputs and instruction counts are the interpreter's."""
    ptx = nvrtc_compile(CALLS, "k.cu", "compute_75", options)
    n = 70
    rng = np.random.default_rng(5)
    arrays = [np.zeros(n, np.int32), rng.standard_normal(n).astype(np.float32),
              np.zeros(n, np.float32), np.zeros(n, np.int64)]
    scalars = struct.pack("<i", n - 3)
    ref, n_ref, _ = _launch("interpreter", ptx, kernel, (2, 1, 1), (40, 1, 1), arrays,
                            scalars, monkeypatch)
    got, n_got, note = _launch("jit", ptx, kernel, (2, 1, 1), (40, 1, 1), arrays, scalars,
                               monkeypatch)
    if options and kernel == "calls":  # -G: make() keeps its struct in a .local frame
        assert note.startswith("interpreter: ") and ".local variables" in note, note
        return
    assert note == "jit"
    for r, g in zip(ref, got, strict=True):
        assert r.tobytes() == g.tobytes()
    assert n_got == n_ref
    assert ref[3][5] == (5 << 34) - 7 + (2 * 15 - 7 if kernel == "calls" else 2 * 5 - 7)


RECURSIVE = r"""
__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
extern "C" __global__ void rec(int* out) { out[threadIdx.x] = fib(threadIdx.x % 7); }
"""


def test_recursive_call_falls_back_with_the_reason(monkeypatch):
    ptx = nvrtc_compile(RECURSIVE, "k.cu", "compute_75", ())
    arrays = [np.zeros(8, np.int32)]
    ref, n_ref, _ = _launch("interpreter", ptx, "rec", (1, 1, 1), (8, 1, 1), arrays, b"",
                            monkeypatch)
    got, n_got, note = _launch("jit", ptx, "rec", (1, 1, 1), (8, 1, 1), arrays, b"",
                               monkeypatch)
    assert note.startswith("interpreter: ") and "recursive call of" in note, note
    assert ref[0].tobytes() == got[0].tobytes() and n_got == n_ref
    assert list(ref[0]) == [0, 1, 1, 2, 3, 5, 8, 0]


BARRIER_CALLS = r"""
extern "C" __global__ void bcalls(int* p)
{
    __shared__ int s[128];
    int t = threadIdx.x;
    s[t] = t * 3;
    __syncthreads();  // p and t live across it, into and past the inlined calls
    int o = atomicExch(&s[(t + 1) & 63], -t);
    p[t + 64] = o + atomicExch(p + t, 5);
}
"""


@pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "G"])
def test_calls_after_a_barrier_keep_live_registers(options, monkeypatch):
    """Registers live across a barrier stay live through an inlined callee
    (its return is no thread exit); in -G, atomicExch is a nested call."""
    ptx = nvrtc_compile(BARRIER_CALLS, "k.cu", "compute_75", options)
    arrays = [np.arange(128, dtype=np.int32)]
    ref, n_ref, _ = _launch("interpreter", ptx, "bcalls", (1, 1, 1), (64, 1, 1), arrays, b"",
                            monkeypatch)
    got, n_got, note = _launch("jit", ptx, "bcalls", (1, 1, 1), (64, 1, 1), arrays, b"",
                               monkeypatch)
    assert note == "jit"
    assert ref[0].tobytes() == got[0].tobytes() and n_got == n_ref


MODULE_VARS = r"""
__constant__ float c_lut[8] = {0.5f, -1.0f, 2.0f, 3.5f, -0.0f, 1e-3f, 7.0f, 9.25f};
__device__ int g_bias = 17;
__device__ int g_table[64];
__device__ int* g_ptr;
__device__ __noinline__ int at(const int* p, int i) { return p[i]; }
extern "C" __global__ void mvars(float* out, int* iout, int* buf, int n, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) g_ptr = buf;
    if (i >= n) return;
    g_table[i & 63] = i * 3 + g_bias;
    out[i] = c_lut[i & 7] * (float)i + c_lut[(i + k) & 7];
    iout[i] = at(g_table, i & 63) + (int)(&g_table[i & 63] - g_table);
    if (k > 100) iout[i] += c_lut[k] > 0.0f;  // past the table: the interpreter's error
}
"""


def _module_vars(engine: str, ptx: str, k: int, monkeypatch, programs: int = 1):
    """Runs ``mvars`` in the last of ``programs`` modules loaded from the same
    text (each places its variables elsewhere); outputs, count, note and the
    module variables' contents."""
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    mem = DeviceMemory()
    n = 48
    for _ in range(programs):
        program = Program(ptx, mem)
    out, iout, buf = mem.alloc(4 * n), mem.alloc(4 * n), mem.alloc(16)
    notes = engine_notes(monkeypatch)
    result = program.launch("mvars", (2, 1, 1), (32, 1, 1), 0,
                            struct.pack("<QQQii", out, iout, buf, n, k))
    table, ptr = (program.global_symbol(name)[0] for name in ("g_table", "g_ptr"))
    return (mem.read(out, 4 * n), mem.read(iout, 4 * n), mem.read(table, 256),
            int(np.frombuffer(mem.read(ptr, 8), np.uint64)[0]) - buf, result.instructions,
            notes[0])


@pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "G"])
def test_module_variables_are_the_interpreters(options, monkeypatch):
    """``__constant__`` and ``__device__`` variables (``ld.const``/``ld.global``
    by name and offset, their address taken, passed to a callee, a pointer
    variable written) read and write where the interpreter placed them; the
    addresses come at each launch, so a second module with the same text
    (compiled code from the cache) uses its own."""
    ptx = nvrtc_compile(MODULE_VARS, "k.cu", "compute_75", options)
    ref = _module_vars("interpreter", ptx, 3, monkeypatch)
    for programs in (1, 2):
        got = _module_vars("jit", ptx, 3, monkeypatch, programs)
        assert got[-1] == "jit"
        assert got[:-1] == ref[:-1]
    assert list(np.frombuffer(ref[1], np.int32)[:2]) == [17, 3 + 17 + 1] and ref[3] == 0


def test_module_variable_overrun_is_the_interpreters_error(monkeypatch):
    from gpusafe.cpu.errors import DeviceError
    ptx = nvrtc_compile(MODULE_VARS, "k.cu", "compute_75", ())
    messages = []
    for engine in ("interpreter", "jit"):
        with pytest.raises(DeviceError) as e:
            _module_vars(engine, ptx, 1 << 20, monkeypatch)
        messages.append((type(e.value), str(e.value)))
    assert messages[0] == messages[1]


FOURTH = r"""
#define ASM1(op, t, r, a) asm(op : "=" t(r) : t(a))
extern "C" __global__ void fourth(unsigned int* out, unsigned long long* wide, const unsigned int* u,
                                  const unsigned long long* v, const float* f, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int a = u[i], b = u[(i + 1) % n], c = u[(i + 2) % n], r[32];
    unsigned long long p = v[i], q = v[(i + 5) % n], w[12];
    float x = f[i], y = f[(i + 3) % n], g;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r[0]) : "r"(a), "r"(b), "r"(c));
    asm("prmt.b32 %0, %1, %2, 0x9e3b;" : "=r"(r[1]) : "r"(a), "r"(b));
    asm("prmt.b32.f4e %0, %1, %2, %3;" : "=r"(r[2]) : "r"(a), "r"(b), "r"(c));
    asm("prmt.b32.b4e %0, %1, %2, %3;" : "=r"(r[3]) : "r"(a), "r"(b), "r"(c));
    asm("prmt.b32.rc8 %0, %1, %2, %3;" : "=r"(r[4]) : "r"(a), "r"(b), "r"(c));
    asm("prmt.b32.ecl %0, %1, %2, %3;" : "=r"(r[5]) : "r"(a), "r"(b), "r"(c));
    asm("prmt.b32.ecr %0, %1, %2, %3;" : "=r"(r[6]) : "r"(a), "r"(b), "r"(c));
    asm("prmt.b32.rc16 %0, %1, %2, %3;" : "=r"(r[7]) : "r"(a), "r"(b), "r"(c));
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r[8]) : "r"(a), "r"(b & 0x3f), "r"(c & 0x3f));
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r[9]) : "r"(a), "r"(b & 0x3f), "r"(c & 0x3f));
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r[10]) : "r"(a), "r"(b), "r"(c));
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r[11]) : "r"(a), "r"(b), "r"(c & 0x3f), "r"(a >> 26));
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r[12]) : "r"(a), "r"(b), "r"(c), "r"(a));
    asm("cvt.rz.f32.s32 %0, %1;" : "=f"(g) : "r"(a)); r[13] = __float_as_uint(g);
    asm("cvt.rm.f32.s32 %0, %1;" : "=f"(g) : "r"(a)); r[14] = __float_as_uint(g);
    asm("cvt.rp.f32.u32 %0, %1;" : "=f"(g) : "r"(a)); r[15] = __float_as_uint(g);
    asm("cvt.rz.f32.u64 %0, %1;" : "=f"(g) : "l"(p)); r[16] = __float_as_uint(g);
    asm("cvt.rp.f32.s64 %0, %1;" : "=f"(g) : "l"(p)); r[17] = __float_as_uint(g);
    asm("cvt.sat.f32.f32 %0, %1;" : "=f"(g) : "f"(x)); r[18] = __float_as_uint(g);
    asm("cvt.rni.ftz.sat.f32.f32 %0, %1;" : "=f"(g) : "f"(x)); r[19] = __float_as_uint(g);
    asm("cvt.rmi.f32.f32 %0, %1;" : "=f"(g) : "f"(x)); r[20] = __float_as_uint(g);
    r[21] = __float_as_uint(fminf(x, y)); r[22] = __float_as_uint(fmaxf(x, y));
    asm("min.ftz.f32 %0, %1, %2;" : "=f"(g) : "f"(x), "f"(y)); r[23] = __float_as_uint(g);
    asm("rsqrt.approx.f32 %0, %1;" : "=f"(g) : "f"(x)); r[28] = __float_as_uint(g);
    asm("div.approx.f32 %0, %1, %2;" : "=f"(g) : "f"(x), "f"(y)); r[30] = __float_as_uint(g);
    asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(g) : "f"(y), "f"(x)); r[31] = __float_as_uint(g);
    asm("div.full.ftz.f32 %0, %1, %2;" : "=f"(g) : "f"(x), "f"(y)); r[13] ^= __float_as_uint(g);
    asm("div.rn.ftz.f32 %0, %1, %2;" : "=f"(g) : "f"(y), "f"(x)); r[14] ^= __float_as_uint(g);
    float h = __uint_as_float(c), z[12];
    double cs;
    asm("add.rz.f32 %0, %1, %2;" : "=f"(z[0]) : "f"(x), "f"(y));
    asm("add.rm.f32 %0, %1, %2;" : "=f"(z[1]) : "f"(x), "f"(h));
    asm("add.rp.f32 %0, %1, %2;" : "=f"(z[2]) : "f"(h), "f"(y));
    asm("sub.rm.f32 %0, %1, %2;" : "=f"(z[3]) : "f"(x), "f"(x));
    asm("sub.rz.f32 %0, %1, %2;" : "=f"(z[4]) : "f"(y), "f"(h));
    asm("mul.rz.f32 %0, %1, %2;" : "=f"(z[5]) : "f"(x), "f"(h));
    asm("mul.rm.f32 %0, %1, %2;" : "=f"(z[6]) : "f"(h), "f"(y));
    asm("mul.rp.f32 %0, %1, %2;" : "=f"(z[7]) : "f"(x), "f"(y));
    asm("fma.rz.f32 %0, %1, %2, %3;" : "=f"(z[8]) : "f"(x), "f"(y), "f"(h));
    asm("fma.rm.f32 %0, %1, %2, %3;" : "=f"(z[9]) : "f"(h), "f"(x), "f"(y));
    asm("fma.rp.f32 %0, %1, %2, %3;" : "=f"(z[10]) : "f"(x), "f"(h), "f"(y));
    asm("fma.rm.f32 %0, %1, %2, %3;" : "=f"(z[11]) : "f"(x), "f"(y), "f"(-x * y));
    for (int k = 0; k < 12; ++k) r[k] ^= __float_as_uint(z[k]) * (2u * k + 1u);
    asm("add.ftz.f32 %0, %1, %2;" : "=f"(z[0]) : "f"(x), "f"(h));
    asm("sub.rn.ftz.f32 %0, %1, %2;" : "=f"(z[1]) : "f"(h), "f"(y));
    asm("mul.ftz.f32 %0, %1, %2;" : "=f"(z[2]) : "f"(x), "f"(y));
    asm("mul.rz.ftz.f32 %0, %1, %2;" : "=f"(z[3]) : "f"(h), "f"(y));
    asm("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(z[4]) : "f"(x), "f"(y), "f"(h));
    asm("mad.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(z[5]) : "f"(h), "f"(x), "f"(y));
    asm("fma.rm.ftz.f32 %0, %1, %2, %3;" : "=f"(z[6]) : "f"(h), "f"(y), "f"(x));
    asm("abs.ftz.f32 %0, %1;" : "=f"(z[7]) : "f"(h));
    asm("neg.ftz.f32 %0, %1;" : "=f"(z[8]) : "f"(x));
    asm("{ .reg .pred t; setp.lt.ftz.f32 t, %1, %2; selp.f32 %0, 1.0, 2.0, t; }" : "=f"(z[9])
        : "f"(h), "f"(y));
    asm("{ .reg .pred t; setp.equ.and.ftz.f32 t, %1, %2, 1; selp.f32 %0, 3.0, 4.0, t; }"
        : "=f"(z[10]) : "f"(x), "f"(h));
    asm("add.f32 %0, %1, 0.1;" : "=f"(z[11]) : "f"(x));  // decimal immediates, rounded
    for (int k = 0; k < 12; ++k) r[20 + k] ^= __float_as_uint(z[k]) * (2u * k + 1u);
    asm("mul.f64 %0, %1, -0.1;" : "=d"(cs) : "d"(__longlong_as_double(q)));
    w[10] = __double_as_longlong(cs);
    asm("copysign.f32 %0, %1, %2;" : "=f"(g) : "f"(h), "f"(x)); r[15] ^= __float_as_uint(g);
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(g) : "f"(h)); r[17] ^= __float_as_uint(g);
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(g) : "f"(h)); r[18] ^= __float_as_uint(g);
    asm("rcp.rn.ftz.f32 %0, %1;" : "=f"(g) : "f"(x)); r[19] ^= __float_as_uint(g);
    asm("copysign.f64 %0, %1, %2;" : "=d"(cs) : "d"(__longlong_as_double(p)),
        "d"(__longlong_as_double(q)));
    w[11] = __double_as_longlong(cs);
    unsigned tp = 0, one;
    asm("{ .reg .pred t; testp.finite.f32 t, %1; selp.u32 %0, 1, 0, t; }" : "=r"(one) : "f"(h));
    tp |= one;
    asm("{ .reg .pred t; testp.infinite.f32 t, %1; selp.u32 %0, 2, 0, t; }" : "=r"(one) : "f"(x));
    tp |= one;
    asm("{ .reg .pred t; testp.number.f32 t, %1; selp.u32 %0, 4, 0, t; }" : "=r"(one) : "f"(h));
    tp |= one;
    asm("{ .reg .pred t; testp.notanumber.f32 t, %1; selp.u32 %0, 8, 0, t; }" : "=r"(one) : "f"(x));
    tp |= one;
    asm("{ .reg .pred t; testp.normal.f32 t, %1; selp.u32 %0, 16, 0, t; }" : "=r"(one) : "f"(h));
    tp |= one;
    asm("{ .reg .pred t; testp.subnormal.f32 t, %1; selp.u32 %0, 32, 0, t; }" : "=r"(one) : "f"(x));
    tp |= one;
    asm("{ .reg .pred t; testp.subnormal.f64 t, %1; selp.u32 %0, 64, 0, t; }" : "=r"(one)
        : "d"(__longlong_as_double(p)));
    tp |= one;
    asm("{ .reg .pred t; testp.normal.f64 t, %1; selp.u32 %0, 128, 0, t; }" : "=r"(one)
        : "d"(__longlong_as_double(q)));
    r[16] ^= tp | one << 8;
    asm("{ .reg .b16 h, l; mov.b32 {l, h}, %1; mov.b32 %0, {h, l}; }" : "=r"(r[29]) : "r"(a));
    asm("{ .reg .b32 h, l; mov.b64 {l, h}, %1; mov.b64 %0, {h, 7}; }" : "=l"(w[0]) : "l"(p));
    asm("bfe.u64 %0, %1, %2, %3;" : "=l"(w[1]) : "l"(p), "r"(b & 0x7f), "r"(c & 0x7f));
    asm("bfe.s64 %0, %1, %2, %3;" : "=l"(w[2]) : "l"(p), "r"(b & 0x7f), "r"(c & 0x7f));
    asm("bfi.b64 %0, %1, %2, %3, %4;" : "=l"(w[3]) : "l"(p), "l"(q), "r"(b & 0x7f), "r"(c));
    double e;
    asm("cvt.rz.f64.u64 %0, %1;" : "=d"(e) : "l"(p)); w[4] = __double_as_longlong(e);
    asm("cvt.rp.f64.u64 %0, %1;" : "=d"(e) : "l"(p)); w[5] = __double_as_longlong(e);
    asm("cvt.rm.f64.s64 %0, %1;" : "=d"(e) : "l"(p)); w[6] = __double_as_longlong(e);
    asm("cvt.rp.f32.u64 %0, %1;" : "=f"(g) : "l"(p)); w[7] = __float_as_uint(g);
    asm("cvt.rni.f64.f64 %0, %1;" : "=d"(e) : "d"(__longlong_as_double(q)));
    w[8] = __double_as_longlong(e);
    asm("cvt.sat.f64.f64 %0, %1;" : "=d"(e) : "d"(__longlong_as_double(q)));
    w[9] = __double_as_longlong(e);
    for (int k = 0; k < 32; ++k) out[i * 32 + k] = r[k];
    for (int k = 0; k < 12; ++k) wide[i * 12 + k] = w[k];
}
"""


@pytest.mark.slow  # one kernel of about 700 instructions to compile: 1.6 s
def test_fourth_slice_instructions_are_bit_identical(monkeypatch):
    """prmt in every mode (selectors in registers, sign replication), bfe/bfi
    with positions and lengths past the width, vector mov packing and
    unpacking, int-to-float cvt rounded toward zero/down/up (ties, 2^64 from
    a u64 rounded up), f32 add/sub/mul/fma rounded toward zero, down and up
    (overflow, subnormals, the sign of an exact zero) and with .ftz, float cvt with
    .sat/.rni/.ftz, copysign and testp, rcp/sqrt/abs/neg/setp with .ftz, f32
    min/max with NaN
    and signed zeros, ``rsqrt.approx`` and ``div.approx`` (a divisor
    above 2^126 gives a signed zero) on edge values, ``.ftz`` divisions: the
    interpreter's bits."""
    n = 96
    rng = np.random.default_rng(13)
    u = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    u[:24] = [0, 1, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0x01000001, 0x01000003, 0xFEFFFFFF,
              16777217, 0x80000001, 31, 32, 33, 255, 256, 0x3210, 0x7654, 0xFFFF, 8, 0x88,
              0x7F800000, 0xFF800000, 0x00800000, 0x807FFFFF]
    v = rng.integers(0, 2**63, n, dtype=np.uint64) << np.uint64(1)
    v[:12] = [0, 1, 2**64 - 1, 2**63, 2**63 - 1, 2**53 + 1, (2**24 + 1) << 30, 2**64 - 2**39,
              0x7FF0000000000001, 0xFFF8000000000000, 0x000FFFFFFFFFFFFF, 0x0010000000000000]
    f = np.array([0.0, -0.0, 0.5, -0.0, 0.0, -0.5, 1.5, 2.5, 1.0, 1.0000001, 2.0**-127, -(2.0**-130),
                  float("nan"), float("inf"), float("-inf"), 128.0, -150.0, 1e30, 3.14159265,
                  -2.71828, 0.99999994, 100.5, 1e-40, 6.0, -1e-38, 7e5, 3e38, 1.0, -2.0**127,
                  2.0**126, 5.0, 2.0**126 * 1.0000001, float("inf"), 1e-39, 1e-30, 2.0, 3.0,
                  1e10, 1e-20, 7.0, 8.0, 1e-20], np.float32)
    f = np.concatenate([f, rng.standard_normal(n - len(f)).astype(np.float32) * 40])
    _same(FOURTH, "fourth", (3, 1, 1), (32, 1, 1),
          [np.zeros(n * 32, np.uint32), np.zeros(n * 12, np.uint64), u, v, f],
          struct.pack("<i", n), monkeypatch)


JUMPS = r"""
extern "C" __global__ void jumps(int* out, const unsigned* sel, int n, unsigned mask)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned s = sel[i] & mask;
    int r = 0;
    asm("{\n\t.reg .pred p;\n\t.reg .u32 k;\n\tmov.u32 k, %1;\n"
        "TOP:\n\t"
        "ts: .branchtargets J0, J1, TOP2, J3;\n\t"
        "brx.idx k, ts;\n"
        "J0:\n\tadd.s32 %0, %0, 100;\n\tbra.uni JEND;\n"
        "J1:\n\tadd.s32 %0, %0, 201;\n\tmembar.gl;\n\tbra.uni JEND;\n"
        "TOP2:\n\tadd.s32 %0, %0, 7;\n\tmov.u32 k, 3;\n"
        "\tsetp.ne.s32 p, %0, 0;\n\t@p brx.idx k, ts;\n\tbra.uni TOP;\n"
        "J3:\n\tadd.s32 %0, %0, 403;\n\tfence.acq_rel.gpu;\n"
        "JEND:\n\t}"
        : "+r"(r) : "r"(s));
    out[i] = r + (int)s;
}
"""


def test_indexed_branch_is_the_interpreters(monkeypatch):
    """``brx.idx`` over a ``.branchtargets`` table (a guarded one too, and a
    target that jumps back to the table), ``membar``/``fence`` between: the
    interpreter's outputs and count; an index past the table is its trap."""
    from gpusafe.cpu.errors import TrapError
    sel = np.arange(90, dtype=np.uint32) * 7 + 1
    _same(JUMPS, "jumps", (3, 1, 1), (32, 1, 1), [np.zeros(90, np.int32), sel],
          struct.pack("<iI", 90, 3), monkeypatch)
    ptx = nvrtc_compile(JUMPS, "k.cu", "compute_75", ())
    messages = []
    for _, mem, program in on_both_engines(ptx, monkeypatch):
        out, s = mem.alloc(360), mem.alloc(360)
        mem.write(s, sel)
        notes = engine_notes(monkeypatch)
        with pytest.raises(TrapError) as e:
            program.launch("jumps", (1, 1, 1), (32, 1, 1), 0,
                           struct.pack("<QQiI", out, s, 90, 7))
        messages.append((str(e.value), e.value.ptx_line, notes[0]))
    # a compiled launch that faults keeps an empty note; a fallback says "interpreter: ..."
    assert messages[0][:2] == messages[1][:2] and messages[1][2] == ""
    assert "out of range (table of 4)" in messages[0][0]


VECTOR_PARAMS = r"""
struct S { float a, b; unsigned char c[4]; double d; };
extern "C" __global__ void vparams(float* out, S s, float2 v, uchar4 u)
{
    int i = threadIdx.x;
    out[i] = s.a * i + s.b + v.x * v.y + (float)(s.c[i & 3] + u.w) + (float)s.d;
}
"""


def test_vector_loads_of_kernel_parameters_are_bit_identical(monkeypatch):
    """``ld.param.v2.f32``/``v4.u8`` of structs passed by value."""
    ptx = nvrtc_compile(VECTOR_PARAMS, "k.cu", "compute_75", ())
    assert "ld.param.v2" in ptx or "ld.param.v4" in ptx
    scalars = (struct.pack("<ff4Bxxxxd", 1.5, -2.25, 1, 2, 3, 250, 1e3)
               + struct.pack("<ff4B", 0.5, 3.0, 9, 8, 7, 6))
    out = _same(VECTOR_PARAMS, "vparams", (1, 1, 1), (8, 1, 1), [np.zeros(8, np.float32)],
                scalars, monkeypatch)[0]
    assert out[1] == np.float32(1.5 - 2.25 + 1.5 + 2 + 6 + 1e3)


PRINTF = r"""
__device__ const char* g_names[2] = {"even", "odd"};
extern "C" __global__ void say(int* out, const float* x, int n)
{
    __shared__ char tag[4];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) { tag[0] = 'b'; tag[1] = '0' + blockIdx.x; tag[2] = 0; }
    __syncthreads();
    if (i >= n) return;
    char local[6] = {'t', 'h', 'r', (char)('a' + i % 26), 0, 0};
    int k = printf("%d %s %5.2f %lld %c|%s|%s|%x\n", i, g_names[i & 1], x[i], (long long)i << 40,
                   'A' + i % 26, local, tag, (unsigned)i * 2654435761u);
    out[i] = k + (i % 3 == 0 ? printf("") : 0);
}
"""


@pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "G"])
def test_printf_runs_compiled_with_the_interpreters_text(options, monkeypatch):
    """``vprintf`` from compiled code: the interpreter's text (integers,
    floats, %s of global, local and shared strings, %c), its length as the
    result, its instruction count; lines in another order (another schedule)."""
    import io
    ptx = nvrtc_compile(PRINTF, "k.cu", "compute_75", options)
    x = np.linspace(-2, 5, 40).astype(np.float32)
    results = []
    for _, mem, program in on_both_engines(ptx, monkeypatch):
        out, xs = mem.alloc(160), mem.alloc(160)
        mem.write(xs, x)
        notes = engine_notes(monkeypatch)
        text = io.StringIO()
        r = program.launch("say", (2, 1, 1), (32, 1, 1), 0, struct.pack("<QQi", out, xs, 40),
                           stdout=text)
        results.append((sorted(text.getvalue().splitlines()), mem.read(out, 160),
                        r.instructions, notes[0]))
    assert results[1][3] == "jit"
    assert results[0][:3] == results[1][:3]
    assert "5 odd" in " ".join(results[0][0]) and "|thrf|b0|" in " ".join(results[0][0])


APPROX = r"""
extern "C" __global__ void approx(unsigned int* out, const float* f, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = f[i], g;
    asm("sin.approx.f32 %0, %1;" : "=f"(g) : "f"(x)); out[4 * i] = __float_as_uint(g);
    asm("cos.approx.ftz.f32 %0, %1;" : "=f"(g) : "f"(x)); out[4 * i + 1] = __float_as_uint(g);
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(g) : "f"(x)); out[4 * i + 2] = __float_as_uint(g);
    asm("lg2.approx.f32 %0, %1;" : "=f"(g) : "f"(x)); out[4 * i + 3] = __float_as_uint(g);
}
"""


def test_approximate_functions_are_the_interpreters(monkeypatch):
    """sin/cos/ex2/lg2.approx: the C library's function in f64, rounded once,
    bit for bit the interpreter's numpy, on edge values (huge arguments,
    subnormals, infinities, NaN, overflow of ex2); where numpy may take SVML
    (AVX-512) the JIT refuses them with that reason and the launch falls back."""
    from gpusafe.cpu.jit.floats import LIBM_IS_NUMPY
    rng = np.random.default_rng(17)
    f = np.array([0.0, -0.0, 1e-40, -1e-45, 1e30, -3e38, 1e5, 3.14159265, -1.5707964, 128.0,
                  127.99999, -126.0, -150.0, 0.5, 2.0, float("inf"), float("-inf"), float("nan"),
                  1.0, -1.0, 1e-20, 6.2831855, 100.25, 0.69314718, -127.5, -140.0], np.float32)
    f = np.concatenate([f, (rng.standard_normal(70) * 60).astype(np.float32)])
    n = len(f)
    arrays = [np.zeros(4 * n, np.uint32), f]
    ptx = nvrtc_compile(APPROX, "k.cu", "compute_75", ())
    ref, n_ref, _ = _launch("interpreter", ptx, "approx", (3, 1, 1), (32, 1, 1), arrays,
                            struct.pack("<i", n), monkeypatch)
    got, n_got, note = _launch("jit", ptx, "approx", (3, 1, 1), (32, 1, 1), arrays,
                               struct.pack("<i", n), monkeypatch)
    assert ref[0].tobytes() == got[0].tobytes() and n_ref == n_got
    if LIBM_IS_NUMPY:
        assert note == "jit"
    else:
        assert note.startswith("interpreter: ") and "SVML" in note, note


HALVES = r"""
#define H2(ptx) asm(ptx " %0, %1, %2;" : "=h"(r[k++]) : "h"(a), "h"(b))
#define H3(ptx) asm(ptx " %0, %1, %2, %3;" : "=h"(r[k++]) : "h"(a), "h"(b), "h"(c))
#define H1(ptx) asm(ptx " %0, %1;" : "=h"(r[k++]) : "h"(a))
#define F1(ptx) asm(ptx " %0, %1;" : "=h"(r[k++]) : "f"(f))
#define P2(ptx) asm("{.reg .pred p;\n\t" ptx " p, %1, %2;\n\tselp.u16 %0, 1, 0, p;}" \
                    : "=h"(r[k++]) : "h"(a), "h"(b))
#define W2(ptx) asm(ptx " %0, %1, %2;" : "=r"(w[j++]) : "r"(x), "r"(y))
#define W3(ptx) asm(ptx " %0, %1, %2, %3;" : "=r"(w[j++]) : "r"(x), "r"(y), "r"(z))
#define W1(ptx) asm(ptx " %0, %1;" : "=r"(w[j++]) : "r"(x))
#define G1(ptx, v) asm(ptx " %0, %1;" : "=f"(g) : "h"(v)); w[j++] = __float_as_uint(g)

extern "C" __global__ void halves(unsigned short* out, unsigned* wide, const unsigned short* ha,
                                  const unsigned short* hb, const unsigned short* hc,
                                  const float* fs, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned short a = ha[i], b = hb[i], c = hc[i], r[48];
    float f = fs[i], g;
    unsigned x = a | ((unsigned)c << 16), y = b | ((unsigned)a << 16), z = c | ((unsigned)b << 16);
    unsigned w[16];
    int k = 0, j = 0;
    H2("add.f16"); H2("add.ftz.f16"); H2("add.sat.f16"); H2("sub.f16"); H2("sub.rn.ftz.sat.f16");
    H2("mul.f16"); H2("mul.ftz.f16"); H2("mul.sat.f16");
    H3("fma.rn.f16"); H3("fma.rn.ftz.f16"); H3("fma.rn.sat.f16"); H3("fma.rn.relu.f16");
    H3("fma.rn.ftz.relu.f16");
    H1("neg.f16"); H1("neg.ftz.f16"); H1("abs.f16"); H1("abs.ftz.f16");
    H2("add.rn.bf16"); H2("sub.bf16"); H2("mul.bf16"); H3("fma.rn.bf16"); H3("fma.rn.relu.bf16");
    H1("neg.bf16"); H1("abs.bf16");
    P2("setp.lt.f16"); P2("setp.geu.ftz.f16"); P2("setp.ne.bf16"); P2("setp.nan.bf16");
    P2("setp.equ.f16");
    F1("cvt.rn.f16.f32"); F1("cvt.rz.f16.f32"); F1("cvt.rm.f16.f32"); F1("cvt.rp.f16.f32");
    F1("cvt.rn.ftz.f16.f32"); F1("cvt.rn.sat.f16.f32"); F1("cvt.rn.relu.f16.f32");
    F1("cvt.rn.bf16.f32"); F1("cvt.rz.bf16.f32"); F1("cvt.rm.bf16.f32"); F1("cvt.rp.bf16.f32");
    F1("cvt.rn.relu.bf16.f32"); F1("cvt.rz.ftz.f16.f32"); F1("cvt.rp.ftz.f16.f32");
    F1("cvt.rn.ftz.bf16.f32"); F1("cvt.rm.ftz.bf16.f32");
    W2("add.f16x2"); W2("mul.ftz.f16x2"); W3("fma.rn.relu.f16x2"); W2("sub.bf16x2");
    W3("fma.rn.bf16x2"); W1("neg.f16x2"); W1("abs.bf16x2");
    G1("cvt.f32.f16", a); G1("cvt.f32.bf16", b); G1("cvt.ftz.f32.bf16", c);
    for (int q = 0; q < k; ++q) out[i * 48 + q] = r[q];
    for (int q = 0; q < j; ++q) wide[i * 16 + q] = w[q];
}
"""

_HALF_EDGES = [0, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x0200, 0x3C00, 0x3C01, 0xBC00,
               0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE01, 0x7FFF, 0x3555, 0x1000,
               0x3BFF, 0x4000, 0x5800, 0x0080, 0x007F, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7F81,
               0x7FC0, 0x3F80, 0xBF80, 0x3F81, 0x0101, 0x8080]
"""16-bit patterns at the edges of f16 and bf16: zeros, subnormals, the smallest
normal, one and its neighbours, the largest finite, infinities, NaNs (signalling,
negative, payloads)."""

_F32_EDGES = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, -65520.0, 65536.0, 2.0**-24,
              2.0**-25, 1.5 * 2.0**-25, 3 * 2.0**-26, -(2.0**-25), 1 + 2.0**-11,
              1 + 3 * 2.0**-11, -(1 + 2.0**-11), 1 + 2.0**-11 + 2.0**-23, 2.0**-14,
              2.0**-14 - 2.0**-25, 1e-40, -1e-40, 3.0e38, float("inf"), float("-inf"),
              1.00390625, 1.01171875, 2.0**-133, 1.5 * 2.0**-133, 0.99999994, 0.5, 2.0,
              1.5 * 2.0**-26, -1.9 * 2.0**-26, 2.0**-126 * 0.75, -(2.0**-149), 2.0**-148]


@pytest.mark.slow  # one kernel of about 1500 instructions to compile: about 3 s
def test_sixteen_bit_floats_are_bit_identical(monkeypatch):
    """f16, bf16 and their pairs: add/sub/mul/fma with .ftz, .sat and .relu,
    neg/abs, setp, cvt from f32 in every rounding mode (ties, overflow to
    the infinity or the largest finite value, subnormals, NaN payloads) and
    back, on edge values and random bits: the interpreter's bits."""
    n = 320
    rng = np.random.default_rng(16)
    ha, hb, hc = (rng.integers(0, 2**16, n, dtype=np.uint32).astype(np.uint16) for _ in range(3))
    edges = np.array(_HALF_EDGES, np.uint16)
    m = len(edges)
    ha[:m * 3] = np.repeat(edges, 3)[:m * 3]
    hb[:m * 3] = np.tile(edges, 3)[:m * 3]
    hc[:m] = edges[::-1]
    # bf16 fma whose product 7 * 37 = 259 is a tie at 8 bits, moved off it by a
    # tiny addend that f64 loses: only a rounding to odd gets 258 / 260 right
    ha[-4:], hb[-4:], hc[-4:] = 0x40E0, 0x4214, [0x8001, 0x0001, 0x0080, 0x8080]
    small = rng.integers(0, 2**16, n // 4, dtype=np.uint32).astype(np.uint16) & 0x87FF
    ha[-len(small) - 4:-4] = small  # f16 subnormals and small normals: products that round
    f = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32).copy()
    f[:len(_F32_EDGES)] = _F32_EDGES
    f[len(_F32_EDGES):len(_F32_EDGES) + 4] = np.array(
        [0x7F800001, 0xFFC00000, 0x7FA00000, 0x3F808000], np.uint32).view(np.float32)
    f[-64:] = (rng.standard_normal(64) * 1000).astype(np.float32)
    ptx = nvrtc_compile(HALVES, "k.cu", "compute_90", ())
    arrays = [np.zeros(n * 48, np.uint16), np.zeros(n * 16, np.uint32), ha, hb, hc, f]
    ref, n_ref, _ = _launch("interpreter", ptx, "halves", (5, 1, 1), (64, 1, 1), arrays,
                            struct.pack("<i", n), monkeypatch)
    got, n_got, note = _launch("jit", ptx, "halves", (5, 1, 1), (64, 1, 1), arrays,
                               struct.pack("<i", n), monkeypatch)
    assert note == "jit"
    for r, g in zip(ref, got, strict=True):
        r, g = r.view(f"u{r.itemsize}"), g.view(f"u{g.itemsize}")
        bad = np.nonzero(r != g)[0]
        assert bad.size == 0, (bad[:8], r[bad[:8]], g[bad[:8]])
    assert n_got == n_ref


VOLATILE = r"""
extern "C" __global__ void vol(int* out, int* buf, const int* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    volatile int* v = buf;
    volatile const int* w = in;
    v[i] = v[i] * 3 + w[(i * 7) % n];
    int acc = 0;
    for (int k = 0; k < 3; ++k) acc += v[i] + w[(i + k) % n];
    out[i] = acc;
}

extern "C" __global__ void vol_shared(int* out, const int* in)
{
    __shared__ int s[64];
    volatile int* v = s;
    v[threadIdx.x] = in[threadIdx.x];
    if (threadIdx.x < 32) v[threadIdx.x] += v[threadIdx.x + 32];
    out[threadIdx.x] = v[threadIdx.x];
}

extern "C" __global__ void vol_cas(int* acc, const int* vals)
{
    int old = *((volatile int*)acc), assumed;
    do {
        assumed = old;
        old = atomicCAS(acc, assumed, assumed + vals[threadIdx.x]);
    } while (old != assumed);
}
"""


@pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "G"])
def test_volatile_global_accesses_are_the_interpreters(options, monkeypatch):
    """``ld/st.volatile`` through global (-O3) and generic (-G) addresses stay
    LLVM volatile accesses and give the interpreter's outputs and count; in
    shared memory (warp-synchronous code) and beside ``atom.cas`` (a retry
    loop) they fall back with the reason."""
    from gpusafe.cpu.jit.lower import Unsupported, lower_kernel
    ptx = nvrtc_compile(VOLATILE, "k.cu", "compute_75", options)
    n = 150
    buf = (np.arange(n, dtype=np.int32) * 37 - 2000).astype(np.int32)
    src = (np.arange(n, dtype=np.int32) ** 2 % 1001).astype(np.int32)
    ref, n_ref, _ = _launch("interpreter", ptx, "vol", (3, 1, 1), (64, 1, 1),
                            [np.zeros(n, np.int32), buf, src], struct.pack("<i", n), monkeypatch)
    got, n_got, note = _launch("jit", ptx, "vol", (3, 1, 1), (64, 1, 1),
                               [np.zeros(n, np.int32), buf, src], struct.pack("<i", n),
                               monkeypatch)
    assert note == "jit" and n_got == n_ref
    for r, g in zip(ref, got, strict=True):
        assert r.tobytes() == g.tobytes()
    functions = {f.name: f for f in Program(ptx, DeviceMemory()).module.functions}
    ir = lower_kernel(functions["vol"], functions).ir
    assert "load volatile i32" in ir and "store volatile i32" in ir
    for kernel, why in (("vol_shared", "warp-synchronous"), ("vol_cas", "atom.cas")):
        with pytest.raises(Unsupported, match=why):
            lower_kernel(functions[kernel], functions)
