"""The oracle reports every bad access of every category exactly once per
offending thread and dynamic access, suppresses it, and reports nothing for
correct kernels."""

from __future__ import annotations

import numpy as np
import pytest
from test_cpu_executor import BOTH, Device

from gpusafe.cpu.oracle import Oracle
from gpusafe_instrument.kinds import AccessKind, ViolationKind

GLOBAL_OOB = ViolationKind.GLOBAL_OUT_OF_BOUNDS


def run(dev: Device, kernel: str, grid, block, *args, shared: int = 0) -> list:
    oracle = Oracle(dev.memory)
    dev.launch(kernel, grid, block, *args, shared=shared, observers=[oracle])
    return oracle.violations


def threads_of(violations) -> list[int]:
    return sorted(v.thread[0] + 1000 * v.block[0] for v in violations)


@BOTH
def test_write_past_the_end_of_an_allocation(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = i;
    }""", options=options)
    out = dev.zeros(100)
    got = run(dev, "k", (2,), (64,), out, np.int32(103))
    assert [(v.kind, v.access, v.size, v.space) for v in got] == [
        (GLOBAL_OOB, AccessKind.WRITE, 4, "global")] * 3
    assert [(v.block, v.thread) for v in got] == [((1, 0, 0), (t, 0, 0)) for t in (36, 37, 38)]
    assert [v.address for v in got] == [out.address + 4 * i for i in (100, 101, 102)]
    assert all(v.kernel == "k" and v.ptx_line > 0 for v in got)
    assert all(v.allocation is not None and v.allocation.base == out.address for v in got)
    np.testing.assert_array_equal(dev.get(out), np.arange(100))


@BOTH
def test_read_before_the_start_of_an_allocation(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, const int* in) {
        int t = threadIdx.x;
        out[t] = in[t - 2];
    }""", options=options)
    inp = dev.array(np.arange(32, dtype=np.int32) + 1)
    out = dev.array(np.full(32, -7, np.int32))
    got = run(dev, "k", (1,), (32,), out, inp)
    assert [(v.kind, v.access, v.thread) for v in got] == [
        (GLOBAL_OOB, AccessKind.READ, (0, 0, 0)), (GLOBAL_OOB, AccessKind.READ, (1, 0, 0))]
    assert got[0].address == inp.address - 8
    result = dev.get(out)
    np.testing.assert_array_equal(result[:2], 0)  # a suppressed load yields zero
    np.testing.assert_array_equal(result[2:], np.arange(30) + 1)


@BOTH
def test_linear_overflow_toward_a_neighbouring_allocation(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* a, int n) {
        int i = threadIdx.x;
        if (i < n) a[i] = -1;
    }""", options=options)
    a = dev.zeros(64)
    b = dev.array(np.arange(64, dtype=np.int32))
    assert b.address - a.address <= 512  # neighbours
    got = run(dev, "k", (1,), (128,), a, np.int32(80))
    assert [v.thread[0] for v in got] == list(range(64, 80))
    assert {v.kind for v in got} == {GLOBAL_OOB}
    np.testing.assert_array_equal(dev.get(b), np.arange(64))  # the neighbour is untouched


@BOTH
def test_overflow_through_a_pointer_loaded_from_memory(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int** table, int n) {
        int t = threadIdx.x;
        int* p = table[t & 1];
        if (t < n) p[t >> 1] += 1;
    }""", options=options)
    x = dev.zeros(8)
    y = dev.zeros(8)
    table = dev.array(np.array([x.address, y.address], dtype=np.uint64))
    got = run(dev, "k", (1,), (32,), table, np.int32(20))
    # threads 16..19 index element 8 and 9 of x or y: one read and one write each
    assert threads_of(got) == [16, 16, 17, 17, 18, 18, 19, 19]
    assert [v.access for v in got] == [AccessKind.READ] * 4 + [AccessKind.WRITE] * 4 or \
        sorted(v.access for v in got) == sorted([AccessKind.READ] * 4 + [AccessKind.WRITE] * 4)
    np.testing.assert_array_equal(dev.get(x), 1)
    np.testing.assert_array_equal(dev.get(y), 1)


@BOTH
def test_static_shared_array_overflow(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out) {
        __shared__ int s[32];
        int t = threadIdx.x;
        s[t + 1] = t;
        __syncthreads();
        out[blockIdx.x * 32 + t] = s[t];
    }""", options=options)
    out = dev.zeros(64)
    got = run(dev, "k", (2,), (32,), out)
    assert [(v.kind, v.access, v.space, v.block, v.thread) for v in got] == [
        (ViolationKind.SHARED_OUT_OF_BOUNDS, AccessKind.WRITE, "shared", (b, 0, 0), (31, 0, 0))
        for b in (0, 1)]


@BOTH
def test_dynamic_shared_array_overflow(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(float* out) {
        extern __shared__ float dyn[];
        int t = threadIdx.x;
        dyn[t] = (float)t;
        __syncthreads();
        out[t] = dyn[t + 2];
    }""", options=options)
    out = dev.zeros(32, np.float32)
    got = run(dev, "k", (1,), (32,), out, shared=32 * 4)
    assert [(v.kind, v.access, v.thread[0]) for v in got] == [
        (ViolationKind.SHARED_OUT_OF_BOUNDS, AccessKind.READ, t) for t in (30, 31)]
    np.testing.assert_array_equal(dev.get(out), np.concatenate([np.arange(2, 32), [0, 0]]))


@BOTH
def test_local_array_overflow(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* out, const int* idx) {
        int t = threadIdx.x;
        int loc[16];
        for (int i = 0; i < 16; i++) loc[i] = i * t;
        out[t] = loc[idx[t]];
    }""", options=options)
    idx = np.arange(32, dtype=np.int32) % 16
    idx[5] = 16 + 100  # far past the thread's stack
    idx[9] = -40
    out = dev.zeros(32)
    got = run(dev, "k", (1,), (32,), out, dev.array(idx))
    assert [(v.kind, v.access, v.space, v.thread[0]) for v in got] == [
        (ViolationKind.LOCAL_OUT_OF_BOUNDS, AccessKind.READ, "local", t) for t in (5, 9)]


@BOTH
def test_misaligned_scalar_and_vector_accesses(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(char* p, float4* out) {
        int t = threadIdx.x;
        if (t == 0) *(int*)(p + 2) = 5;
        if (t == 1) out[0] = *(const float4*)(p + 8);
    }""", options=options)
    p = dev.zeros(64, np.uint8)
    out = dev.zeros(4, np.float32)
    got = run(dev, "k", (1,), (32,), p, out)
    assert [(v.kind, v.access, v.size, v.thread[0]) for v in got] == [
        (ViolationKind.MISALIGNED_ACCESS, AccessKind.WRITE, 4, 0),
        (ViolationKind.MISALIGNED_ACCESS, AccessKind.READ, 16, 1)]
    assert got[0].address == p.address + 2
    np.testing.assert_array_equal(dev.get(p), 0)


@BOTH
def test_use_after_free(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* stale, int* out) {
        int t = threadIdx.x;
        out[t] = stale[t];
        if (t < 4) stale[t] = 9;
    }""", options=options)
    stale = dev.zeros(16)
    dev.memory.free(stale.address)
    out = dev.array(np.full(16, 3, np.int32))
    got = run(dev, "k", (1,), (16,), stale, out)
    reads = [v for v in got if v.access == AccessKind.READ]
    writes = [v for v in got if v.access == AccessKind.WRITE]
    assert {v.kind for v in got} == {ViolationKind.USE_AFTER_FREE}
    assert [v.thread[0] for v in reads] == list(range(16))
    assert [v.thread[0] for v in writes] == list(range(4))
    assert all(v.allocation is not None and not v.allocation.live for v in got)
    np.testing.assert_array_equal(dev.get(out), 0)


@BOTH
def test_null_pointer(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* p, int* out) {
        int t = threadIdx.x;
        if (t % 2) out[t] = p[t];
    }""", options=options)
    out = dev.zeros(8)
    got = run(dev, "k", (1,), (8,), 0, out)
    assert [(v.kind, v.thread[0], v.address) for v in got] == [
        (ViolationKind.NULL_POINTER, t, 4 * t) for t in (1, 3, 5, 7)]


@BOTH
def test_every_dynamic_access_is_reported(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* p, int n) {
        int t = threadIdx.x;
        for (int r = 0; r < 3; r++) p[t + r * n] += 1;
    }""", options=options)
    p = dev.zeros(32)
    got = run(dev, "k", (1,), (32,), p, np.int32(16))
    # rounds 1 and 2 overflow for t >= 0 (t + 16 >= 32 for t >= 16; t + 32 always)
    per_thread = {t: sum(1 for v in got if v.thread[0] == t) for t in range(32)}
    assert per_thread == {t: (2 if t < 16 else 4) for t in range(32)}  # a read and a write each


@BOTH
def test_out_of_bounds_atomic_is_dropped_and_returns_zero(options) -> None:
    dev = Device(r"""
    extern "C" __global__ void k(int* counters, int* old) {
        int t = threadIdx.x;
        old[t] = atomicAdd(&counters[t % 6], 10);
    }""", options=options)
    counters = dev.array(np.array([1, 2, 3, 4], np.int32))
    old = dev.array(np.full(12, -1, np.int32))
    got = run(dev, "k", (1,), (12,), counters, old)
    assert [(v.kind, v.access, v.thread[0]) for v in got] == [
        (GLOBAL_OOB, AccessKind.ATOMIC, t) for t in (4, 5, 10, 11)]
    np.testing.assert_array_equal(dev.get(counters), [21, 22, 23, 24])
    np.testing.assert_array_equal(dev.get(old), [1, 2, 3, 4, 0, 0, 11, 12, 13, 14, 0, 0])


@BOTH
def test_module_variable_overflow(options) -> None:
    dev = Device(r"""
    __device__ int table[4];
    extern "C" __global__ void k(int n) {
        int t = threadIdx.x;
        if (t < n) table[t] = t;
    }""", options=options)
    got = run(dev, "k", (1,), (8,), np.int32(6))
    assert [(v.kind, v.thread[0]) for v in got] == [(GLOBAL_OOB, 4), (GLOBAL_OOB, 5)]
    address, size = dev.program.global_symbol("table")
    assert got[0].address == address + 16 and got[0].allocation.base == address


@BOTH
def test_correct_kernels_report_nothing(options) -> None:
    dev = Device(r"""
    __device__ __noinline__ float avg(const float* p) { return 0.5f * (p[0] + p[1]); }
    extern "C" __global__ void k(float* out, const float* in, int n) {
        __shared__ float s[129];
        extern __shared__ float dyn[];
        float loc[4];
        int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
        s[t] = i < n ? in[i] : 0.0f;
        if (t == 0) s[128] = 0.0f;
        dyn[t] = 1.0f;
        for (int j = 0; j < 4; j++) loc[j] = s[t] * j;
        __syncthreads();
        if (i < n) out[i] = avg(&s[t]) + avg(loc) + dyn[127 - t] + atomicAdd(&out[n], 1.0f) * 0.0f;
    }""", options=options)
    n = 300
    out = dev.zeros(n + 1, np.float32)
    got = run(dev, "k", (3,), (128,), out, dev.array(np.ones(n, np.float32)), np.int32(n),
              shared=128 * 4)
    assert got == []
    assert dev.get(out)[n] == n


def test_oracle_records_can_be_capped() -> None:
    dev = Device(r"""extern "C" __global__ void k(int* p) { p[threadIdx.x + 8] = 1; }""")
    oracle = Oracle(dev.memory, max_records=5)
    dev.launch("k", (1,), (256,), dev.zeros(8), observers=[oracle])
    assert len(oracle.violations) == 5 and oracle.dropped == 251


@pytest.mark.parametrize("width", [1, 2, 8])
def test_access_at_or_across_the_end_is_out_of_bounds(width: int) -> None:
    ctype = {1: "char", 2: "short", 8: "long long"}[width]
    dev = Device(rf"""
    extern "C" __global__ void k({ctype}* p, int n) {{ p[n] = 1; }}""")
    p = dev.memory.alloc(10)
    got = run(dev, "k", (1,), (1,), p, np.int32(10 // width))
    assert [(v.kind, v.size) for v in got] == [(GLOBAL_OOB, width)]
