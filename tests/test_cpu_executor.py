"""Semantics of the CPU device's executor, one behaviour per test, each with
the CUDA C++ of its kernel (compiled by NVRTC) inline."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from gpusafe.cpu.errors import (
    AssertError,
    IllegalAddress,
    LaunchConfigError,
    MisalignedAddress,
    TrapError,
    UnsupportedInstruction,
)
from gpusafe.cpu.events import InstructionCounter
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe_testkit.corpus import nvrtc_compile


class DeviceArray:
    def __init__(self, address: int, like: np.ndarray) -> None:
        self.address = address
        self.shape = like.shape
        self.dtype = like.dtype
        self.nbytes = like.nbytes


class Device:
    """A module on a fresh CPU device, with numpy-friendly helpers."""

    def __init__(self, source: str, *, options: tuple[str, ...] = (), arch: str = "compute_75",
                 ptx: str | None = None) -> None:
        self.memory = DeviceMemory()
        self.ptx = ptx if ptx is not None else nvrtc_compile(source, "test.cu", arch, options)
        self.program = Program(self.ptx, self.memory)

    def array(self, data) -> DeviceArray:
        a = np.ascontiguousarray(data)
        address = self.memory.alloc(max(a.nbytes, 1))
        self.memory.write(address, a)
        return DeviceArray(address, a)

    def zeros(self, n: int, dtype=np.int32) -> DeviceArray:
        return self.array(np.zeros(n, dtype))

    def get(self, arr: DeviceArray) -> np.ndarray:
        return np.frombuffer(self.memory.read(arr.address, arr.nbytes), arr.dtype).reshape(arr.shape)

    def params(self, kernel: str, *args) -> bytes:
        info = self.program.kernels[kernel]
        raw = bytearray(info.param_size)
        for arg, layout in zip(args, info.params, strict=True):
            if isinstance(arg, DeviceArray):
                data = struct.pack("<Q", arg.address)
            elif isinstance(arg, (np.generic, np.ndarray)):
                data = np.asarray(arg).tobytes()
            elif isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, int):
                data = (arg & ((1 << (8 * layout.size)) - 1)).to_bytes(layout.size, "little")
            else:
                raise TypeError(arg)
            raw[layout.offset:layout.offset + len(data)] = data
        return bytes(raw)

    def launch(self, kernel: str, grid, block, *args, shared: int = 0, observers=(),
               stdout=None):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        return self.program.launch(kernel, grid, block, shared, self.params(kernel, *args),
                                   observers=observers, stdout=stdout)


BOTH = pytest.mark.parametrize("options", [(), ("-G",)], ids=["O3", "G"])


# ---------------------------------------------------------------------------
# threads, blocks, special registers


@BOTH
def test_special_registers_in_3d_grid_and_block(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void ids(unsigned* out) {
        unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        unsigned g = bx * blockDim.x * blockDim.y * blockDim.z + t;
        unsigned lane, warp, lt;
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        asm("mov.u32 %0, %%warpid;" : "=r"(warp));
        asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
        unsigned* o = out + 8 * g;
        o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
        o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
        o[6] = lane; o[7] = lt;
    }""", options=options)
    grid, block = (3, 2, 2), (5, 4, 3)
    n = 12 * 60
    out = dev.zeros(8 * n, np.uint32)
    dev.launch("ids", grid, block, out)
    got = dev.get(out).reshape(n, 8)
    g = np.arange(n)
    t = g % 60
    b = g // 60
    lane = t % 32
    expected = np.stack([t % 5, (t // 5) % 4, t // 20, b % 3, (b // 3) % 2, b // 6, lane,
                         (1 << lane) - 1], axis=1)
    np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------------------
# SIMT control flow


@BOTH
def test_divergent_branches_reconverge_for_a_full_warp_shuffle(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        int t = threadIdx.x;
        int v;
        if (t & 1) { v = t * 10; for (int i = 0; i < t; i++) v += i; }
        else       { v = -t; }
        out[t] = __shfl_xor_sync(0xffffffffu, v, 1);
    }""", options=options)
    out = dev.zeros(64)
    dev.launch("k", (1,), (64,), out)
    v = np.array([t * 10 + t * (t - 1) // 2 if t & 1 else -t for t in range(64)])
    np.testing.assert_array_equal(dev.get(out), v[np.arange(64) ^ 1])


@BOTH
def test_data_dependent_loops_and_early_return(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        int s = 0;
        for (int j = 0; j < i % 37; j++) { if (j == 20) break; s += j * j; }
        out[i] = s;
    }""", options=options)
    n = 500
    out = dev.zeros(512)
    dev.launch("k", (4,), (128,), out, np.int32(n))
    ref = np.array([sum(j * j for j in range(min(i % 37, 20))) for i in range(n)] + [0] * 12)
    np.testing.assert_array_equal(dev.get(out), ref)


@BOTH
def test_switch_with_jump_table(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, const int* in) {
        int t = threadIdx.x;
        int r;
        switch (in[t]) {
            case 0: r = 11; break;  case 1: r = 22; break;  case 2: r = 33; break;
            case 3: r = 44; break;  case 4: r = 55; break;  case 5: r = 66; break;
            case 6: r = 77; break;  case 7: r = 88; break;  default: r = -1;
        }
        out[t] = r;
    }""", options=options)
    inp = np.arange(64, dtype=np.int32) % 10
    out = dev.zeros(64)
    dev.launch("k", (1,), (64,), out, dev.array(inp))
    np.testing.assert_array_equal(dev.get(out), np.where(inp < 8, (inp + 1) * 11, -1))


# ---------------------------------------------------------------------------
# barriers


@BOTH
def test_syncthreads_orders_shared_memory_between_warps(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        __shared__ int s[256];
        int t = threadIdx.x;
        s[t] = t * 3 + blockIdx.x;
        __syncthreads();
        out[blockIdx.x * 256 + t] = s[255 - t];
    }""", options=options)
    out = dev.zeros(4 * 256)
    dev.launch("k", (4,), (256,), out)
    t = np.arange(256)
    np.testing.assert_array_equal(dev.get(out).reshape(4, 256), (255 - t) * 3 + np.arange(4)[:, None])


@BOTH
def test_barrier_does_not_wait_for_exited_threads(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        __shared__ int s[128];
        int t = threadIdx.x;
        if (t >= 100) return;
        s[t] = t;
        __syncthreads();
        out[t] = s[99 - t];
    }""", options=options)
    out = dev.zeros(128)
    dev.launch("k", (1,), (128,), out)
    np.testing.assert_array_equal(dev.get(out)[:100], 99 - np.arange(100))


@BOTH
def test_syncthreads_count_and_or(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, const int* in) {
        int t = threadIdx.x;
        int v = in[blockIdx.x * blockDim.x + t];
        int c = __syncthreads_count(v > 0);
        int a = __syncthreads_and(v > -5);
        int o = __syncthreads_or(v > 8);
        if (t == 0) { out[3 * blockIdx.x] = c; out[3 * blockIdx.x + 1] = a; out[3 * blockIdx.x + 2] = o; }
    }""", options=options)
    inp = (np.arange(3 * 96) % 13 - 4).astype(np.int32)
    out = dev.zeros(9)
    dev.launch("k", (3,), (96,), out, dev.array(inp))
    blocks = inp.reshape(3, 96)
    ref = np.stack([(blocks > 0).sum(1), (blocks > -5).all(1), (blocks > 8).any(1)], 1).reshape(-1)
    np.testing.assert_array_equal(dev.get(out), ref)


# ---------------------------------------------------------------------------
# warp-level operations


@BOTH
def test_shuffles_with_width_and_clamping(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, const int* in) {
        int t = threadIdx.x;
        int v = in[t];
        out[4 * t + 0] = __shfl_up_sync(0xffffffffu, v, 3, 16);
        out[4 * t + 1] = __shfl_down_sync(0xffffffffu, v, 5, 8);
        out[4 * t + 2] = __shfl_xor_sync(0xffffffffu, v, 7);
        out[4 * t + 3] = __shfl_sync(0xffffffffu, v, t + 2, 4);
    }""", options=options)
    inp = (np.arange(64) * 7 + 1).astype(np.int32)
    out = dev.zeros(256)
    dev.launch("k", (1,), (64,), out, dev.array(inp))
    got = dev.get(out).reshape(64, 4)
    lane = np.arange(64) % 32
    base = np.arange(64) - lane
    up = np.where(lane % 16 >= 3, np.arange(64) - 3, np.arange(64))
    down = np.where(lane % 8 + 5 < 8, np.arange(64) + 5, np.arange(64))
    xor = base + (lane ^ 7)
    idx = base + (lane & ~3) + ((lane + 2) & 3)
    np.testing.assert_array_equal(got, inp[np.stack([up, down, xor, idx], 1)])


@BOTH
def test_votes_and_ballot_in_a_partial_warp(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(unsigned* out, const int* in) {
        int t = threadIdx.x;
        unsigned m = __activemask();
        unsigned b = __ballot_sync(m, in[t] > 0);
        out[4 * t] = m; out[4 * t + 1] = b;
        out[4 * t + 2] = __all_sync(m, in[t] > -100); out[4 * t + 3] = __any_sync(m, in[t] > 50);
    }""", options=options)
    inp = np.array([(i * 37) % 61 - 20 for i in range(40)], dtype=np.int32)
    out = dev.zeros(160, np.uint32)
    dev.launch("k", (1,), (40,), out, dev.array(inp))
    got = dev.get(out).reshape(40, 4)
    for lo, hi in [(0, 32), (32, 40)]:
        seg = inp[lo:hi]
        mask = (1 << (hi - lo)) - 1
        ballot = sum(1 << i for i, v in enumerate(seg) if v > 0)
        np.testing.assert_array_equal(got[lo:hi, 0], mask)
        np.testing.assert_array_equal(got[lo:hi, 1], ballot)
        np.testing.assert_array_equal(got[lo:hi, 2], 1)
        np.testing.assert_array_equal(got[lo:hi, 3], int((seg > 50).any()))


@BOTH
def test_match_any_groups_equal_keys(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(unsigned* out, const int* keys) {
        out[threadIdx.x] = __match_any_sync(0xffffffffu, keys[threadIdx.x]);
    }""", options=options)
    keys = (np.arange(32) % 5).astype(np.int32)
    out = dev.zeros(32, np.uint32)
    dev.launch("k", (1,), (32,), out, dev.array(keys))
    ref = [sum(1 << j for j in range(32) if keys[j] == keys[i]) for i in range(32)]
    np.testing.assert_array_equal(dev.get(out), ref)


def test_redux_sync_on_sm80() -> None:
    dev = Device(r"""
    extern "C" __global__ void k(unsigned* out, const unsigned* in) {
        unsigned v = in[threadIdx.x];
        out[2 * threadIdx.x] = __reduce_add_sync(0xffffffffu, v);
        out[2 * threadIdx.x + 1] = __reduce_max_sync(0xffffffffu, v);
    }""", arch="compute_80")
    assert "redux.sync" in dev.ptx
    inp = (np.arange(64) * 2654435761 % 1000).astype(np.uint32)
    out = dev.zeros(128, np.uint32)
    dev.launch("k", (1,), (64,), out, dev.array(inp))
    got = dev.get(out).reshape(2, 32, 2)
    segs = inp.reshape(2, 32)
    np.testing.assert_array_equal(got[:, :, 0], np.repeat(segs.sum(1)[:, None], 32, 1))
    np.testing.assert_array_equal(got[:, :, 1], np.repeat(segs.max(1)[:, None], 32, 1))


@BOTH
def test_syncwarp_between_halves_of_a_warp(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        __shared__ int s[32];
        int t = threadIdx.x;
        if (t < 16) s[t] = t * t; else s[t] = -t;
        __syncwarp();
        out[t] = s[31 - t];
    }""", options=options)
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), out)
    t = np.arange(32)
    s = np.where(t < 16, t * t, -t)
    np.testing.assert_array_equal(dev.get(out), s[31 - t])


# ---------------------------------------------------------------------------
# calls


@pytest.mark.slow
@BOTH
def test_recursion_gives_each_call_its_own_frame(options) -> None:
    dev = Device(r"""
    __device__ int walk(int n, int depth) {
        int local[4];
        for (int i = 0; i < 4; i++) local[i] = n * 4 + i + depth;
        int r = (n <= 1) ? n : walk(n - 1, depth + 1) + walk(n - 2, depth + 1);
        volatile int* v = local;
        return r + v[n & 3] - (n * 4 + (n & 3) + depth);
    }
    extern "C" __global__ void k(int* out) { out[threadIdx.x] = walk(threadIdx.x % 12, 0); }
    """, options=options)
    out = dev.zeros(40)
    dev.launch("k", (1,), (40,), out)
    fib = [0, 1]
    for _ in range(12):
        fib.append(fib[-1] + fib[-2])
    np.testing.assert_array_equal(dev.get(out), [fib[t % 12] for t in range(40)])


@BOTH
def test_struct_arguments_and_results_of_noinline_calls(options) -> None:
    dev = Device(r"""
    struct V { float x, y, z; int tag; };
    __device__ __noinline__ V scale(V v, float s) { V r = {v.x * s, v.y * s, v.z * s, v.tag + 1}; return r; }
    extern "C" __global__ void k(float* out, V base) {
        int t = threadIdx.x;
        V r = scale(base, (float)t);
        out[4 * t] = r.x; out[4 * t + 1] = r.y; out[4 * t + 2] = r.z; out[4 * t + 3] = (float)r.tag;
    }""", options=options)
    out = dev.zeros(4 * 32, np.float32)
    dev.launch("k", (1,), (32,), out, struct.pack("<fffi", 1.0, 2.0, 0.5, 9))
    t = np.arange(32, dtype=np.float32)
    ref = np.stack([t, 2 * t, 0.5 * t, np.full(32, 10.0)], 1).reshape(-1)
    np.testing.assert_array_equal(dev.get(out), ref)


@BOTH
def test_virtual_calls_through_function_pointers(options) -> None:
    dev = Device(r"""
    typedef int (*op_t)(int);
    __device__ int twice(int x) { return 2 * x; }
    __device__ int square(int x) { return x * x; }
    __device__ int negate(int x) { return -x; }
    __device__ op_t table[3] = {twice, square, negate};
    extern "C" __global__ void k(int* out) {
        int t = threadIdx.x;
        out[t] = table[t % 3](t);
    }""", options=options)
    out = dev.zeros(48)
    dev.launch("k", (1,), (48,), out)
    t = np.arange(48)
    np.testing.assert_array_equal(dev.get(out), np.choose(t % 3, [2 * t, t * t, -t]))


@BOTH
def test_exit_inside_a_device_function_ends_the_thread(options) -> None:
    dev = Device(r"""
    __device__ __noinline__ void maybe_exit(int t) { if (t % 3 == 0) asm volatile("exit;"); }
    extern "C" __global__ void k(int* out) {
        int t = threadIdx.x;
        out[t] = 1;
        maybe_exit(t);
        out[t] = 2;
    }""", options=options)
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), out)
    np.testing.assert_array_equal(dev.get(out), np.where(np.arange(32) % 3 == 0, 1, 2))


# ---------------------------------------------------------------------------
# atomics


@BOTH
def test_atomic_add_returns_old_values_in_lane_order(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* counter, int* old, float* fsum) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        old[i] = atomicAdd(counter, 1);
        atomicAdd(fsum, 0.25f);
    }""", options=options)
    counter = dev.zeros(1)
    old = dev.zeros(2048)
    fsum = dev.zeros(1, np.float32)
    dev.launch("k", (8,), (256,), counter, old, fsum)
    assert dev.get(counter)[0] == 2048
    np.testing.assert_array_equal(dev.get(old), np.arange(2048))
    assert dev.get(fsum)[0] == 512.0


@BOTH
def test_atomic_cas_inc_exch_and_minmax(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(unsigned* w, int* mm, unsigned* got) {
        int t = threadIdx.x;
        got[t] = atomicInc(&w[0], 9);          // wraps to 0 after 9
        atomicCAS(&w[1], (unsigned)t, (unsigned)t + 1);   // a chain: 0->1->...->n
        atomicExch(&w[2], (unsigned)t);
        atomicMin(&mm[0], 100 - t);
        atomicMax(&mm[1], t * 3 - 50);
    }""", options=options)
    w = dev.zeros(3, np.uint32)
    mm = dev.array(np.array([1000, -1000], np.int32))
    got = dev.zeros(100, np.uint32)
    dev.launch("k", (1,), (100,), w, mm, got)
    np.testing.assert_array_equal(dev.get(got), np.arange(100) % 10)
    np.testing.assert_array_equal(dev.get(w), [100 % 10, 100, 99])
    np.testing.assert_array_equal(dev.get(mm), [1, 247])


@pytest.mark.slow
@BOTH
def test_spin_lock_across_blocks(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* lock, int* total, int* order) {
        if (threadIdx.x != 0) return;
        while (atomicCAS(lock, 0, 1) != 0) { }
        int v = *(volatile int*)total;
        order[blockIdx.x] = v;
        *(volatile int*)total = v + 1;
        __threadfence();
        atomicExch(lock, 0);
    }""", options=options)
    lock = dev.zeros(1)
    total = dev.zeros(1)
    order = dev.zeros(16)
    dev.launch("k", (16,), (32,), lock, total, order)
    assert dev.get(total)[0] == 16
    assert sorted(dev.get(order)) == list(range(16))


@BOTH
def test_shared_memory_atomics_histogram(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* hist, const int* vals) {
        __shared__ int h[16];
        int t = threadIdx.x;
        if (t < 16) h[t] = 0;
        __syncthreads();
        atomicAdd(&h[vals[blockIdx.x * blockDim.x + t] & 15], 1);
        __syncthreads();
        if (t < 16) atomicAdd(&hist[t], h[t]);
    }""", options=options)
    vals = (np.arange(4 * 128) * 2654435761 % 97).astype(np.int32)
    hist = dev.zeros(16)
    dev.launch("k", (4,), (128,), hist, dev.array(vals))
    np.testing.assert_array_equal(dev.get(hist), np.bincount(vals & 15, minlength=16))


# ---------------------------------------------------------------------------
# memory spaces and generic addressing


@BOTH
def test_generic_pointers_to_every_space(options) -> None:
    dev = Device(r"""
    __device__ __noinline__ int sum3(const int* p) { return p[0] + p[1] + p[2]; }
    __device__ __noinline__ int where(const void* p) {
        return __isGlobal(p) ? 1 : __isShared(p) ? 2 : __isLocal(p) ? 3 : 0;
    }
    extern "C" __global__ void k(int* out, const int* g) {
        __shared__ int s[3 * 32];
        int t = threadIdx.x;
        int loc[3] = {t, 2 * t, 3 * t};
        for (int i = 0; i < 3; i++) s[3 * t + i] = 10 * t + i;
        __syncthreads();
        volatile int* vl = loc;
        int* lp = (int*)vl;
        out[6 * t + 0] = sum3(g + 3 * t);
        out[6 * t + 1] = sum3(s + 3 * t);
        out[6 * t + 2] = sum3(lp);
        out[6 * t + 3] = where(g);
        out[6 * t + 4] = where(s);
        out[6 * t + 5] = where(lp);
    }""", options=options)
    g = np.arange(96, dtype=np.int32)
    out = dev.zeros(6 * 32)
    dev.launch("k", (1,), (32,), out, dev.array(g))
    t = np.arange(32)
    ref = np.stack([9 * t + 3, 30 * t + 3, 6 * t, np.full(32, 1), np.full(32, 2), np.full(32, 3)], 1)
    np.testing.assert_array_equal(dev.get(out).reshape(32, 6), ref)


@BOTH
def test_dynamic_shared_memory_sized_at_launch(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        extern __shared__ int dyn[];
        __shared__ int fixed[4];
        int t = threadIdx.x;
        unsigned size;
        asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
        if (t < 4) fixed[t] = 100 + t;
        dyn[t] = t;
        __syncthreads();
        out[t] = dyn[blockDim.x - 1 - t] + fixed[t % 4] + (int)size;
    }""", options=options)
    out = dev.zeros(64)
    dev.launch("k", (1,), (64,), out, shared=256)
    t = np.arange(64)
    np.testing.assert_array_equal(dev.get(out), 63 - t + 100 + t % 4 + 256)


@BOTH
def test_module_variables_with_initializers_and_constant_memory(options) -> None:
    dev = Device(r"""
    __constant__ float coeffs[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    __device__ int table[4] = {7, 8, 9, 10};
    __device__ int* ptr = &table[2];
    __device__ int counter;
    extern "C" __global__ void k(float* out) {
        int t = threadIdx.x;
        out[t] = coeffs[t % 4] + (float)*ptr;
        if (t == 0) counter = 42;
    }""", options=options)
    out = dev.zeros(8, np.float32)
    dev.launch("k", (1,), (8,), out)
    np.testing.assert_array_equal(dev.get(out), np.tile([9.5, 10.5, 11.5, 12.5], 2))
    address, size = dev.program.global_symbol("counter")
    assert size == 4
    assert int.from_bytes(dev.memory.read(address, 4), "little") == 42


@BOTH
def test_vector_loads_and_stores(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(float4* out, const float4* in, double2* d) {
        int t = threadIdx.x;
        float4 v = in[t];
        out[t] = make_float4(v.w, v.z, v.y, v.x);
        double2 e = d[t];
        d[t] = make_double2(e.y, e.x);
    }""", options=options)
    inp = np.arange(128, dtype=np.float32)
    d = np.arange(64, dtype=np.float64)
    out = dev.zeros(128, np.float32)
    din = dev.array(d)
    dev.launch("k", (1,), (32,), out, dev.array(inp), din)
    np.testing.assert_array_equal(dev.get(out), inp.reshape(32, 4)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(dev.get(din), d.reshape(32, 2)[:, ::-1].reshape(-1))


# ---------------------------------------------------------------------------
# printf, trap, assert, errors


@BOTH
def test_printf_prints_in_thread_order(options) -> None:
    dev = Device(r"""
    #include <cstdio>
    extern "C" __global__ void k(int n) {
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        if (g < n) printf("thread %d of %d: %5.2f %s %c|%x\n", g, n, g * 0.5, "ok", 'A' + g, 255 + g);
    }""".replace("#include <cstdio>", ""), options=options)
    out = io.StringIO()
    dev.launch("k", (2,), (8,), np.int32(12), stdout=out)
    expected = "".join(f"thread {g} of 12: {g * 0.5:5.2f} ok {chr(65 + g)}|{255 + g:x}\n"
                       for g in range(12))
    assert out.getvalue() == expected


@BOTH
def test_trap_fails_the_launch_naming_kernel_and_line(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        out[threadIdx.x] = 1;
        if (threadIdx.x == 5) __trap();
    }""", options=options)
    with pytest.raises(TrapError, match=r"kernel k: trap at PTX line \d+ .*thread \(5, 0, 0\)"):
        dev.launch("k", (1,), (32,), dev.zeros(32))
    assert TrapError.result == "CUDA_ERROR_LAUNCH_FAILED"


def test_assert_prints_and_fails_the_launch() -> None:
    dev = Device(r"""
    #include <assert.h>
    extern "C" __global__ void k(const int* v) { assert(v[threadIdx.x] < 3); }
    """.replace("#include <assert.h>", "extern \"C\" __device__ void __assertfail(const char*, const char*, unsigned, const char*, unsigned long);\n#define assert(e) ((e) ? (void)0 : __assertfail(#e, \"test.cu\", __LINE__, __func__, 1))"))
    out = io.StringIO()
    with pytest.raises(AssertError, match="Assertion `v\\[threadIdx.x\\] < 3` failed"):
        dev.launch("k", (1,), (8,), dev.array(np.arange(8, dtype=np.int32)), stdout=out)
    assert out.getvalue().count("failed.") == 5
    assert "block: [0,0,0], thread: [3,0,0]" in out.getvalue()


UNSUPPORTED_PTX = r"""
.version 7.0
.target sm_75
.address_size 64

.visible .entry uses_ldmatrix(.param .u64 out, .param .u64 tile)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [tile];
    mov.u32 %r2, 1;
    ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%rd2];
    st.global.u32 [%rd1], %r1;
    ret;
}

.visible .entry plain(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, 7;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


def test_unsupported_instruction_stops_only_its_kernel() -> None:
    dev = Device("", ptx=UNSUPPORTED_PTX)
    out = dev.zeros(1)
    with pytest.raises(UnsupportedInstruction) as info:
        dev.launch("uses_ldmatrix", (1,), (1,), out, 0)
    assert info.value.kernel == "uses_ldmatrix"
    assert info.value.opcode == "ldmatrix.sync.aligned.m8n8.x1.shared.b16"
    assert info.value.ptx_line == 13
    assert dev.get(out)[0] == 0  # nothing ran
    dev.launch("plain", (1,), (1,), out)
    assert dev.get(out)[0] == 7


def test_wild_pointer_without_oracle_is_an_illegal_address() -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* p) { p[threadIdx.x * 1000000] = 1; }""")
    p = dev.zeros(4)
    with pytest.raises(IllegalAddress, match="kernel k: PTX line"):
        dev.launch("k", (1,), (32,), p)


def test_misaligned_access_without_oracle_fails_the_launch() -> None:
    dev = Device(r"""
    extern "C" __global__ void k(char* p) { *(int*)(p + 2) = 1; }""")
    with pytest.raises(MisalignedAddress):
        dev.launch("k", (1,), (1,), dev.zeros(16))


def test_bad_launch_configurations() -> None:
    dev = Device(r"""extern "C" __global__ void k(int* p) { p[0] = 1; }""")
    p = dev.zeros(1)
    good = dev.params("k", p)
    for grid, block, shared, params in [
        ((0, 1, 1), (1, 1, 1), 0, good), ((1, 1, 1), (1025, 1, 1), 0, good),
        ((1, 1, 1), (32, 32, 2), 0, good), ((1, 1, 1), (1, 1, 65), 0, good),
        ((1, 1, 1), (1, 1, 1), 1 << 20, good), ((1, 1, 1), (1, 1, 1), 0, good + b"\0"),
    ]:
        with pytest.raises(LaunchConfigError):
            dev.program.launch("k", grid, block, shared, params)


def test_instruction_count_reaches_observers() -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* p, int n) { int i = threadIdx.x; if (i < n) p[i] = i; }""")
    counter = InstructionCounter()
    result = dev.launch("k", (1,), (64,), dev.zeros(64), np.int32(10), observers=[counter])
    assert counter.count == result.instructions > 64


def test_a_million_thread_launch_runs_vectorised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter's large-grid path (the auto engine would compile it)."""
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "interp")
    dev = Device(r"""
    extern "C" __global__ void add(float* c, const float* a, const float* b, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) c[i] = a[i] + b[i];
    }""")
    n = 1 << 20
    a = np.arange(n, dtype=np.float32)
    c = dev.zeros(n, np.float32)
    dev.launch("add", (n // 256,), (256,), c, dev.array(a), dev.array(2 * a), np.int32(n))
    np.testing.assert_array_equal(dev.get(c), 3 * a)


# ---------------------------------------------------------------------------
# more control and synchronisation


def test_deep_recursion() -> None:
    dev = Device(r"""
    __device__ long long sum_to(int n) { return n == 0 ? 0 : n + sum_to(n - 1); }
    extern "C" __global__ void k(long long* out) { out[threadIdx.x] = sum_to(300 + threadIdx.x); }
    """, options=("-G",))
    out = dev.zeros(4, np.int64)
    dev.launch("k", (1,), (4,), out)
    n = 300 + np.arange(4)
    np.testing.assert_array_equal(dev.get(out), n * (n + 1) // 2)


@BOTH
def test_named_barrier_between_producer_and_consumer_warps(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        __shared__ int s[32];
        int t = threadIdx.x;
        if (t >= 32) {
            asm volatile("bar.sync 1, 64;" ::: "memory");
            out[t - 32] = s[t - 32];
        } else {
            s[t] = t * t + 1;
            asm volatile("bar.arrive 1, 64;" ::: "memory");
        }
    }""", options=options)
    out = dev.zeros(32)
    dev.launch("k", (1,), (64,), out)
    np.testing.assert_array_equal(dev.get(out), np.arange(32) ** 2 + 1)


@BOTH
def test_shuffle_inside_a_device_function_called_by_part_of_a_warp(options) -> None:
    dev = Device(r"""
    __device__ __noinline__ int half_sum(int v) {
        for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, off);
        return v;
    }
    extern "C" __global__ void k(int* out) {
        int t = threadIdx.x;
        out[t] = (t < 16) ? half_sum(t) : -1;
    }""", options=options)
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), out)
    np.testing.assert_array_equal(dev.get(out), [120] * 16 + [-1] * 16)


def test_atomics_on_one_address_follow_lane_order() -> None:
    """Many lanes on a few addresses: the old values are those of applying the
    updates one lane at a time, in lane order, for every atomic operation."""
    from gpusafe.cpu.atomics import atomic_update, update_fn

    rg = np.random.default_rng(0)
    for op in ["add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec"]:
        for trial in range(12):
            n = int(rg.integers(1, 300))
            view = rg.integers(0, 20, 8).astype(np.uint32)
            idx = rg.integers(0, int(rg.integers(1, 6)), n)
            vals = (rg.integers(0, 25, n) if trial % 2 else np.full(n, rg.integers(0, 25))).astype(np.uint32)
            args = [rg.integers(0, 25, n).astype(np.uint32), vals] if op == "cas" else [vals]
            update, accumulate = update_fn(op, "u32")
            got_view = view.copy()
            got = atomic_update(got_view, idx, args, update, accumulate)
            ref_view = view.copy()
            ref = np.empty(n, np.uint32)
            for j in range(n):
                old = ref_view[idx[j]:idx[j] + 1].copy()
                ref[j] = old[0]
                ref_view[idx[j]] = update(old, *[a[j:j + 1] for a in args])[0]
            np.testing.assert_array_equal(got, ref, err_msg=op)
            np.testing.assert_array_equal(got_view, ref_view, err_msg=op)


@BOTH
def test_malloc_and_free_on_the_device(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(long long* out) {
        int t = threadIdx.x;
        int* p = (int*)malloc(16 * sizeof(int));
        for (int i = 0; i < 16; i++) p[i] = t * i;
        long long s = 0;
        for (int i = 0; i < 16; i++) s += p[i];
        free(p);
        out[t] = s;
    }""", options=options)
    out = dev.zeros(8, np.int64)
    before = dev.memory.used
    dev.launch("k", (1,), (8,), out)
    np.testing.assert_array_equal(dev.get(out), np.arange(8) * 120)
    assert dev.memory.used == before


def test_memcpy_async_with_a_cuda_barrier() -> None:
    """cp.async into shared memory completing on an mbarrier (cuda::barrier)."""
    dev = Device(r"""
    #include <cuda/barrier>
    #include <cooperative_groups.h>
    namespace cg = cooperative_groups;
    extern "C" __global__ void k(int* out, const int* in) {
        __shared__ cuda::barrier<cuda::thread_scope_block> bar;
        __shared__ int s[128];
        auto block = cg::this_thread_block();
        if (block.thread_rank() == 0) init(&bar, block.size());
        block.sync();
        cuda::memcpy_async(block, s, in + blockIdx.x * 128, sizeof(int) * 128, bar);
        bar.arrive_and_wait();
        out[blockIdx.x * 128 + threadIdx.x] = s[127 - threadIdx.x];
        block.sync();
        cuda::barrier<cuda::thread_scope_block>::arrival_token t = bar.arrive();
        bar.wait(std::move(t));
    }""", arch="compute_80")
    assert "mbarrier.test_wait" in dev.ptx and "cp.async" in dev.ptx
    inp = np.arange(256, dtype=np.int32) * 3
    out = dev.zeros(256)
    dev.launch("k", (2,), (128,), out, dev.array(inp))
    np.testing.assert_array_equal(dev.get(out), inp.reshape(2, 128)[:, ::-1].reshape(-1))


def test_cp_async_pipeline_with_commit_and_wait_groups() -> None:
    dev = Device(r"""
    #include <cuda_pipeline.h>
    extern "C" __global__ void k(float* out, const float* in) {
        __shared__ float s[2][64];
        int t = threadIdx.x;
        float acc = 0;
        __pipeline_memcpy_async(&s[0][t], &in[t], sizeof(float));
        __pipeline_commit();
        for (int stage = 1; stage < 4; stage++) {
            __pipeline_memcpy_async(&s[stage & 1][t], &in[stage * 64 + t], sizeof(float));
            __pipeline_commit();
            __pipeline_wait_prior(1);
            __syncthreads();
            acc += s[(stage - 1) & 1][63 - t];
            __syncthreads();
        }
        __pipeline_wait_prior(0);
        __syncthreads();
        out[t] = acc + s[1][63 - t];
    }""", arch="compute_80")
    inp = np.arange(256, dtype=np.float32)
    out = dev.zeros(64, np.float32)
    dev.launch("k", (1,), (64,), out, dev.array(inp))
    np.testing.assert_array_equal(dev.get(out), inp.reshape(4, 64)[:, ::-1].sum(0))


@BOTH
def test_grid_constant_parameter_through_a_generic_pointer(options) -> None:
    dev = Device(r"""
    struct P { int v[8]; };
    __device__ __noinline__ int pick(const int* p, int i) { return p[i]; }
    extern "C" __global__ void k(int* out, const __grid_constant__ P p) {
        out[threadIdx.x] = pick(p.v, threadIdx.x % 8);
    }""", options=options)
    assert "cvta.param" in dev.ptx
    out = dev.zeros(16)
    dev.launch("k", (1,), (16,), out, struct.pack("<8i", *range(10, 18)))
    np.testing.assert_array_equal(dev.get(out), np.arange(16) % 8 + 10)


def test_predicated_off_lanes_still_take_part_in_a_shuffle() -> None:
    dev = Device("", ptx=r"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, -1;
    and.b32 %r3, %r1, 1;
    setp.eq.u32 %p1, %r3, 0;
    @%p1 shfl.sync.idx.b32 %r2, %r1, 31, 31, -1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}
""")
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), out)
    np.testing.assert_array_equal(dev.get(out), np.where(np.arange(32) % 2 == 0, 31, -1))


def test_labels_are_scoped_by_blocks() -> None:
    """Inline asm with a local label, inlined twice: each copy branches to its own."""
    dev = Device(r"""
    __device__ __forceinline__ int clamp_add(int x, int y) {
        int r;
        asm("{\n\t.reg .pred p;\n\tadd.s32 %0, %1, %2;\n\tsetp.lt.s32 p, %0, 100;\n\t"
            "@p bra DONE;\n\tmov.s32 %0, 100;\nDONE:\n\t}" : "=r"(r) : "r"(x), "r"(y));
        return r;
    }
    extern "C" __global__ void k(int* out) {
        int t = threadIdx.x;
        out[2 * t] = clamp_add(t, 90);
        out[2 * t + 1] = clamp_add(t * 10, 5);
    }""")
    assert dev.ptx.count("DONE:") == 2
    out = dev.zeros(64)
    dev.launch("k", (1,), (32,), out)
    t = np.arange(32)
    np.testing.assert_array_equal(dev.get(out).reshape(32, 2),
                                  np.stack([np.minimum(t + 90, 100), np.minimum(10 * t + 5, 100)], 1))


def test_machine_special_registers() -> None:
    dev = Device(r"""
    extern "C" __global__ void k(unsigned long long* out) {
        extern __shared__ int dyn[];
        __shared__ int fixed[10];
        unsigned smid, nsmid, nwarpid, dsmem, tsmem, env;
        unsigned long long grid, c0, c1, timer;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
        asm volatile("mov.u32 %0, %%nwarpid;" : "=r"(nwarpid));
        asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dsmem));
        asm volatile("mov.u32 %0, %%total_smem_size;" : "=r"(tsmem));
        asm volatile("mov.u32 %0, %%envreg3;" : "=r"(env));
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0));
        fixed[threadIdx.x % 10] = dyn[threadIdx.x];
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1));
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(timer));
        unsigned long long* o = out + 8 * (blockIdx.x * blockDim.x + threadIdx.x);
        o[0] = smid; o[1] = nsmid; o[2] = nwarpid; o[3] = dsmem; o[4] = tsmem;
        __syncthreads();
        o[5] = grid; o[6] = c1 - c0; o[7] = timer + env + (unsigned)fixed[(threadIdx.x + 1) % 10];
    }""")
    out = dev.zeros(8 * 64, np.uint64)
    dev.launch("k", (2,), (32,), out, shared=128)
    first = dev.get(out).reshape(64, 8)
    dev.launch("k", (2,), (32,), out, shared=128)
    got = dev.get(out).reshape(64, 8)
    assert (got[:, 0] < got[:, 1]).all() and got[0, 1] >= 1
    assert got[0, 2] >= 2  # at least the warps of one block
    np.testing.assert_array_equal(got[:, 3], 128)
    assert (got[:, 4] >= 168).all()  # 40 static + 128 dynamic bytes at least
    assert got[0, 5] > first[0, 5]  # every launch has its own grid id
    assert (got[:, 6] > 0).all() and (got[:, 6] < 2**40).all()  # the clock advances
    assert got[0, 7] > 1_600_000_000 * 10**9  # nanoseconds since 1970


# -- calls after divergence: lanes that can still reach a call run it together --

_BCAST_PTX = r"""
.version 8.0
.target sm_75
.address_size 64
.func (.param .b32 r) bcast(.param .b32 v)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [v];
    shfl.sync.idx.b32 %r2, %r1, 0, 31, -1;
    st.param.b32 [r], %r2;
    ret;
}
.visible .entry k(.param .u64 k_param_0)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_param_0];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    setp.gt.u32 %p1, %r1, 27;
    mov.u32 %r2, 100;
    @%p1 bra $OUT;
$BACK:
    add.u32 %r3, %r2, %r1;
    {
    .param .b32 a0;
    st.param.b32 [a0], %r3;
    .param .b32 r0;
    call.uni (r0), bcast, (a0);
    ld.param.b32 %r4, [r0];
    }
$STORE:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
$OUT:
    mov.u32 %r2, 200;
    bra.uni $BACK;
}
"""


def test_shuffle_in_a_callee_after_divergence_that_rejoins_before_the_call() -> None:
    """Lanes 28-31 branch forward to an out-of-line block and back (as -G code
    and the slow path of a check do); lanes 0-27 reach the call first and wait
    for them, so the shuffle in the callee sees the whole warp."""
    dev = Device("", ptx=_BCAST_PTX)
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), out)
    np.testing.assert_array_equal(dev.get(out), [100] * 32)


def test_shuffle_in_a_callee_called_from_two_sites_sees_only_its_callers() -> None:
    """Lanes that diverge and call from different sites never meet: a full-mask
    shuffle in the callee does not wait for lanes that are not in the call
    (undefined on a GPU); it runs with the lanes there, and a lane whose source
    lane is absent reads its own value."""
    ptx = _BCAST_PTX.replace("""$OUT:
    mov.u32 %r2, 200;
    bra.uni $BACK;""", """$OUT:
    add.u32 %r3, %r1, 200;
    {
    .param .b32 a1;
    st.param.b32 [a1], %r3;
    .param .b32 r1;
    call.uni (r1), bcast, (a1);
    ld.param.b32 %r4, [r1];
    }
    bra.uni $STORE;""")
    dev = Device("", ptx=ptx)
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), out)
    np.testing.assert_array_equal(dev.get(out), [100] * 28 + [228, 229, 230, 231])


def test_shuffle_in_a_callee_when_the_other_lanes_have_returned() -> None:
    ptx = _BCAST_PTX.replace("""$OUT:
    mov.u32 %r2, 200;
    bra.uni $BACK;""", """$OUT:
    ret;""")
    dev = Device("", ptx=ptx)
    out = dev.array(np.full(32, -1, np.int32))
    dev.launch("k", (1,), (32,), out)
    np.testing.assert_array_equal(dev.get(out), [100] * 28 + [-1] * 4)


def test_barrier_in_a_callee_counts_the_block_after_divergence_that_rejoins() -> None:
    """Two warps; the last four lanes of each take a detour before the call.
    The whole block calls together, so ``bar.sync`` in the callee orders every
    thread's store before every thread's load."""
    dev = Device("", ptx=r"""
.version 8.0
.target sm_75
.address_size 64
.shared .align 4 .b32 buf[64];
.func (.param .b32 r) neighbour(.param .b32 v, .param .b32 t)
{
    .reg .b32 %r<9>;
    ld.param.u32 %r1, [v];
    ld.param.u32 %r2, [t];
    mov.u32 %r4, buf;
    shl.b32 %r3, %r2, 2;
    add.u32 %r5, %r4, %r3;
    st.shared.u32 [%r5], %r1;
    bar.sync 0;
    add.u32 %r6, %r2, 1;
    and.b32 %r6, %r6, 63;
    shl.b32 %r6, %r6, 2;
    add.u32 %r6, %r4, %r6;
    ld.shared.u32 %r7, [%r6];
    st.param.b32 [r], %r7;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    and.b32 %r5, %r1, 31;
    setp.gt.u32 %p1, %r5, 27;
    mov.u32 %r2, 100;
    @%p1 bra $OUT;
$BACK:
    add.u32 %r3, %r2, %r1;
    {
    .param .b32 a0;
    st.param.b32 [a0], %r3;
    .param .b32 a1;
    st.param.b32 [a1], %r1;
    .param .b32 r0;
    call.uni (r0), neighbour, (a0, a1);
    ld.param.b32 %r4, [r0];
    }
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
$OUT:
    mov.u32 %r2, 200;
    bra.uni $BACK;
}
""")
    out = dev.zeros(64)
    dev.launch("k", (1,), (64,), out)
    n = (np.arange(64) + 1) % 64
    np.testing.assert_array_equal(dev.get(out), np.where(n % 32 > 27, 200, 100) + n)


@BOTH
def test_lock_around_a_call_with_every_lane_contending(options) -> None:
    """Every lane of two blocks takes one lock in turn and calls a function
    while holding it: lanes held back at the call must not wait forever for
    lanes spinning on the lock."""
    dev = Device(r"""
    __device__ __noinline__ void bump(int* total) { *(volatile int*)total += 1; }
    extern "C" __global__ void k(int* lock, int* total) {
        bool done = false;
        while (!done) {
            if (atomicCAS(lock, 0, 1) == 0) {
                bump(total);
                __threadfence();
                atomicExch(lock, 0);
                done = true;
            }
        }
    }""", options=options)
    lock = dev.zeros(1)
    total = dev.zeros(1)
    dev.launch("k", (2,), (32,), lock, total)
    assert dev.get(total)[0] == 64


@pytest.mark.slow
def test_lane_held_at_a_call_is_released_for_lanes_spinning_before_it() -> None:
    """The lock holder waits at the call for the lanes that could still reach
    it; those spin on the lock it holds.  After ``SPIN_LIMIT`` turns the
    held lanes go ahead."""
    dev = Device("", ptx=r"""
.version 8.0
.target sm_75
.address_size 64
.func bump(.param .b64 p)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ld.volatile.global.u32 %r1, [%rd1];
    add.u32 %r2, %r1, 1;
    st.volatile.global.u32 [%rd1], %r2;
    ret;
}
.visible .entry k(.param .u64 lock, .param .u64 total)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [lock];
    ld.param.u64 %rd2, [total];
$SPIN:
    atom.global.cas.b32 %r1, [%rd1], 0, 1;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $SPIN;
    {
    .param .b64 a0;
    st.param.b64 [a0], %rd2;
    call.uni bump, (a0);
    }
    membar.gl;
    atom.global.exch.b32 %r2, [%rd1], 0;
    ret;
}
""")
    lock = dev.zeros(1)
    total = dev.zeros(1)
    dev.launch("k", (2,), (32,), lock, total)
    assert dev.get(total)[0] == 64


def test_lanes_held_at_a_call_go_ahead_when_the_awaited_lanes_spin() -> None:
    """Lane 0 reaches the call first and waits for lanes 1-31, which could
    still reach it from their out-of-line block; but they spin there until
    the callee, run by lane 0, sets a flag.  The held lane goes ahead once
    they have spun ``SPIN_LIMIT`` times."""
    dev = Device("", ptx=r"""
.version 8.0
.target sm_75
.address_size 64
.func signal(.param .b64 p)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 1;
    st.volatile.global.u32 [%rd1], %r1;
    ret;
}
.visible .entry k(.param .u64 flag, .param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $OUT;
$BACK:
    {
    .param .b64 a0;
    st.param.b64 [a0], %rd1;
    call.uni signal, (a0);
    }
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    mov.u32 %r3, 1;
    st.global.u32 [%rd4], %r3;
    ret;
$OUT:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra $OUT;
    bra.uni $BACK;
}
""")
    flag = dev.zeros(1)
    out = dev.zeros(32)
    dev.launch("k", (1,), (32,), flag, out)
    np.testing.assert_array_equal(dev.get(out), [1] * 32)
