"""Launch-time proofs (issue 14, ``checks/launch_proof.py``): a launch whose
values keep every access of the kernel in bounds runs its proven entry (the
original body, no checks);
a launch the proof does not cover (a bound past the allocation, a guard on
the wrong buffer, a grid whose threads skip no guard) runs the checked body
and reports exactly what the oracle reports, on the CPU device.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_instrument_cpu import Buf, assert_same, kinds, run_both, same_violations

from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

pytestmark = pytest.mark.slow  # NVRTC and two launches per test

VADD = r"""
extern "C" __global__ void vadd(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""

STENCIL = r"""
extern "C" __global__ void stencil(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > LOW && i < n - 2)
        out[i] = in[i - 2] + in[i - 1] + in[i] + in[i + 1] + in[i + 2];
}
"""

ENTRY = 0  # a proven launch runs the proven entry: the plain body, nothing added


def _vadd(n_out, n_in, n, threads=64):
    blocks = -(-max(n_out, n_in) // threads)
    return run_both(VADD, "vadd", (blocks, 1, 1), (threads, 1, 1),
                    [Buf(np.zeros(n_out, np.float32)), Buf(np.arange(n_in, dtype=np.float32)),
                     Buf(np.ones(n_in, np.float32)), np.int32(n)])


def test_a_proven_launch_runs_the_copy_without_checks():
    o = _vadd(256, 256, 256)
    assert o.device == [] and o.oracle == []
    assert_same(o)
    # exactly the plain kernel's instructions: the proven entry ran
    assert o.checked_instructions == o.plain_instructions + ENTRY * 256


def test_a_bound_past_the_allocation_runs_the_checked_body():
    o = _vadd(256, 256, 300, threads=64)
    # n = 300 but 256 threads: still in bounds, the proof bounds i by the grid
    assert o.device == [] and o.oracle == []
    assert o.checked_instructions == o.plain_instructions + ENTRY * 256
    o = _vadd(256, 320, 300, threads=64)  # 320 threads, out holds 256
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 300 - 256
    assert o.checked_instructions > o.plain_instructions + ENTRY * 320
    assert_same(o)


def test_a_guard_on_the_wrong_buffer_is_caught():
    # n bounds a and b (200 floats) but out holds 150
    o = _vadd(150, 200, 200)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 50
    assert_same(o)


@pytest.mark.parametrize("low", [1, 0])
def test_a_lower_guard_too_weak_for_the_offset_is_caught(low):
    # i > 1 keeps in[i - 2] in bounds: proven; i > 0 lets thread 1 read in[-1]
    source = STENCIL.replace("LOW", str(low))
    o = run_both(source, "stencil", (2, 1, 1), (64, 1, 1),
                 [Buf(np.zeros(128, np.float32)), Buf(np.arange(128, dtype=np.float32)),
                  np.int32(128)])
    assert_same(o)
    if low == 1:
        assert o.device == []
        assert o.checked_instructions == o.plain_instructions + ENTRY * 128
    else:
        assert kinds(o) == {"global-out-of-bounds"}
        assert o.occurrences == 1


def test_a_kernel_with_an_unprovable_access_has_no_proof():
    source = r"""
extern "C" __global__ void gather(float* out, const float* x, const int* idx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[idx[i]];
}
"""
    text = nvrtc_compile(source, "k.cu", "compute_75")
    info = instrument(text).sites.kernels["gather"]
    assert info.proof is None  # x[idx[i]]: the index is data


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_the_kernel_with_both_bodies_assembles(arch):
    text = nvrtc_compile(VADD, "k.cu", "compute_75")
    result = instrument(text)
    assert result.sites.kernels["vadd"].proof is not None
    ptxas(result.ptx, arch)


CLAMP = r"""
extern "C" __global__ void clamp(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i < n - K ? i + 1 : i];
}
"""


@pytest.mark.parametrize("k", [1, 0])
def test_a_selected_index_is_bounded_by_the_compare_that_chose_it(k):
    # i < n - 1 ? i + 1 : i stays below n (proven); i < n ? i + 1 : i reads in[n]
    o = run_both(CLAMP.replace("K", str(k)), "clamp", (2, 1, 1), (64, 1, 1),
                 [Buf(np.zeros(128, np.float32)), Buf(np.arange(128, dtype=np.float32)),
                  np.int32(128)])
    assert_same(o)
    if k == 1:
        assert o.device == []
        assert o.checked_instructions == o.plain_instructions + ENTRY * 128
    else:
        assert kinds(o) == {"global-out-of-bounds"}
        assert o.occurrences == 1


NORTH = r"""
extern "C" __global__ void north(float* out, const float* in, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= rows || c >= cols) return;
    int i = r * cols + c;
    const float* p = in + i;
    out[i] = r > LOW ? p[-cols] : p[0];
}
"""


@pytest.mark.parametrize("low", [0, -1])
def test_an_offset_added_to_a_derived_pointer_is_bounded(low):
    # p = in + i, then p - cols: proven under r > 0; r > -1 lets row 0 read above in
    o = run_both(NORTH.replace("LOW", str(low)), "north", (2, 2, 1), (8, 8, 1),
                 [Buf(np.zeros(256, np.float32)), Buf(np.arange(256, dtype=np.float32)),
                  np.int32(16), np.int32(16)])
    assert_same(o)
    if low == 0:
        assert o.device == []
        assert o.checked_instructions == o.plain_instructions + ENTRY * 256
    else:
        assert kinds(o) == {"global-out-of-bounds"}
        assert o.occurrences == 16


SMOOTH = r"""
extern "C" __global__ void smooth(float* out, const float* in, int n)
{
    __shared__ alignas(16) float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned s = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(s), "l"(in + i) : "memory");
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    if (i < n) out[i] = tile[threadIdx.x % 256];
}
"""


@pytest.mark.parametrize("threads", [256, 320])
def test_a_shared_tile_is_proven_for_the_launchs_block_size_only(threads):
    # tile[threadIdx.x] fits 256 threads a block; with 320 the copies of
    # threads 256..319 land past the tile
    o = run_both(SMOOTH, "smooth", (1, 1, 1), (threads, 1, 1),
                 [Buf(np.zeros(threads, np.float32)),
                  Buf(np.arange(threads, dtype=np.float32)), np.int32(threads)],
                 arch="compute_80")
    if threads == 256:
        assert_same(o)
        assert o.device == []
        assert o.checked_instructions == o.plain_instructions + ENTRY * threads
    else:
        assert kinds(o) == {"shared-out-of-bounds"}
        assert same_violations(o)


def _door_launch(n_buffer: int, threads: int, n: int, ex: bool = False):
    """vadd through the Python door's driver wrappers on a CPU device of
    its own: (the report's violation kinds, the functions the backend
    launched, the kernel's handle, its proven entry's handle)."""
    from cuda.bindings import driver as cuda_driver

    from gpusafe.backends.cpu import CpuBackend
    from gpusafe.doors.python_driver import DriverDoor
    from gpusafe.engine.checking import Engine, Policy
    from gpusafe.engine.findings import Findings
    from gpusafe.report import ReportBuilder

    backend = CpuBackend()
    drv = backend.driver
    launched = []

    def launch(f, *rest):
        launched.append(int(f))
        return drv.cuLaunchKernel(f, *rest)

    def launch_ex(config, f, *rest):
        launched.append(int(f))
        return drv.cuLaunchKernelEx(config, f, *rest)

    real = {name: getattr(drv, name) for name in dir(cuda_driver) if name.startswith("cu")
            and hasattr(drv, name)}
    real["cuLaunchKernel"], real["cuLaunchKernelEx"] = launch, launch_ex
    engine = Engine(backend, Findings(ReportBuilder(["app"], "cpu")), Policy())
    w = {**real, **DriverDoor(engine, real).wrappers()}

    def ok(result):
        assert int(result[0]) == 0, result
        return result[1] if len(result) == 2 else None

    ok(w["cuInit"](0))
    ctx = ok(w["cuCtxCreate"](None, 0, ok(w["cuDeviceGet"](0))))
    text = nvrtc_compile(VADD, "k.cu", "compute_75")
    module = ok(w["cuModuleLoadData"](text.encode() + b"\0"))
    fn = ok(w["cuModuleGetFunction"](module, b"vadd"))
    bufs = [ok(w["cuMemAlloc"](4 * n_buffer)) for _ in range(3)]
    args = [np.array([int(b)], np.uint64) for b in bufs] + [np.array([n], np.int32)]
    params = np.array([a.ctypes.data for a in args], np.uint64)
    if ex:
        config = cuda_driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = -(-n // threads), 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
        config.sharedMemBytes = 0
        ok(w["cuLaunchKernelEx"](config, fn, params.ctypes.data, 0))
    else:
        ok(w["cuLaunchKernel"](fn, -(-n // threads), 1, 1, threads, 1, 1, 0, 0,
                               params.ctypes.data, 0))
    ok(w["cuCtxSynchronize"]())
    engine.drain()
    report = engine.findings.report.build(exit_code=0).to_dict()
    proven = engine.modules.proven(int(fn))
    ok(w["cuCtxDestroy"](ctx))
    return ([v["kind"] for v in report["violations"]], launched, int(fn),
            None if proven is None else int(proven))


@pytest.mark.parametrize("ex", [False, True])  # cuLaunchKernel, cuLaunchKernelEx
def test_the_python_door_launches_the_proven_entry_of_a_proven_launch(ex):
    kinds_found, launched, fn, proven = _door_launch(256, 64, 256, ex)
    assert kinds_found == []
    assert proven is not None and launched == [proven]


@pytest.mark.parametrize("ex", [False, True])
def test_the_python_door_launches_the_checked_kernel_when_the_proof_fails(ex):
    kinds_found, launched, fn, proven = _door_launch(256, 64, 300, ex)  # 320 threads, 256 floats
    assert kinds_found == ["global-out-of-bounds"] * 3  # a[i], b[i] and out[i], i >= 256
    assert launched == [fn] and proven is not None


WRAP = r"""
extern "C" __global__ void wrap(float* out, int step, int n)
{
    int x = threadIdx.x * step;
    if (x + 1 < n) out[x] = 1.0f;
}
"""


def test_a_guard_on_x_plus_one_bounds_x_only_where_x_plus_one_cannot_wrap():
    # thread 1: x = INT_MAX, x + 1 wraps to INT_MIN < n: the guard passes and
    # out[INT_MAX] is written; the guard says x < n - 1 only without the wrap
    o = run_both(WRAP, "wrap", (1, 1, 1), (2, 1, 1),
                 [Buf(np.zeros(16, np.float32)), np.int32(2**31 - 1), np.int32(16)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert same_violations(o)


def test_a_guard_on_x_plus_one_proves_x_when_it_cannot_wrap():
    o = run_both(WRAP, "wrap", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(16, np.float32)), np.int32(2), np.int32(16)])
    assert_same(o)
    assert o.device == []
    assert o.checked_instructions == o.plain_instructions


NEGATIVE = r"""
extern "C" __global__ void after(float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > n) out[i - n - 1] = 1.0f;
}
"""


@pytest.mark.parametrize("n", [-1, 15])
def test_a_negative_bound_is_read_as_the_compare_reads_it(n):
    # n = -1: every thread passes i > n and writes out[i], 32 threads, 16 floats
    o = run_both(NEGATIVE, "after", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(16, np.float32)), np.int32(n)])
    assert_same(o)
    if n == -1:
        assert kinds(o) == {"global-out-of-bounds"}
        assert o.occurrences == 16
    else:
        assert o.device == []
        assert o.checked_instructions == o.plain_instructions


STRIDE = r"""
extern "C" __global__ void copy(float* y, const float* x, int start, int n, int step)
{
    for (int i = start + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step * gridDim.x)
        y[i] = x[i] + 1.0f;
}
"""


@pytest.mark.parametrize("start, n, step, threads, bad", [
    (0, 100, 32, 32, 0),  # proven: every i in [0, 99]
    (0, 101, 32, 32, 1),  # one past the end
    (-3, 100, 32, 32, 3),  # a negative start
    (2, 8, 2**31 - 1, 1, 1),  # 2 + INT_MAX wraps to a negative index that passes i < n
])
def test_a_loop_counter_is_bounded_by_its_start_step_and_exit_compare(start, n, step,
                                                                        threads, bad):
    o = run_both(STRIDE, "copy", (1, 1, 1), (threads, 1, 1),
                 [Buf(np.zeros(100, np.float32)), Buf(np.arange(100, dtype=np.float32)),
                  np.int32(start), np.int32(n), np.int32(step)])
    assert same_violations(o)
    assert o.occurrences == 2 * bad  # the load and the store of each bad index
    if not bad:
        assert_same(o)
        assert o.checked_instructions == o.plain_instructions


REENTERED = r"""
extern "C" __global__ void again(float* y, int n, int reps, int step)
{
    int i = threadIdx.x;
    for (int r = 0; r < reps; ++r) {
        #pragma unroll 1
        do { y[i] = 1.0f; i += step * gridDim.x; } while (i < n);
    }
}
"""


@pytest.mark.parametrize("reps", [1, 2])
def test_a_loop_entered_again_with_its_last_counter_is_not_bounded_by_its_start(reps):
    # the second time round, i starts where the loop left it, past n
    o = run_both(REENTERED, "again", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(64, np.float32)), np.int32(64), np.int32(reps), np.int32(32)])
    assert same_violations(o)
    assert o.occurrences == (reps - 1) * 32


AGAIN_PTX = """\
.version 7.0
.target sm_75
.address_size 64

.visible .entry again(.param .u64 y, .param .u32 n, .param .u32 reps)
{
    .reg .pred %p<3>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<5>;
    .reg .f32 %f<2>;
    ld.param.u64 %rd1, [y];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r2, [reps];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, 0;
    mov.f32 %f1, 0f3F800000;
$OUTER:
    add.s32 %r4, %r4, 1;
$INNER:
    mul.wide.s32 %rd3, %r3, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.f32 [%rd4], %f1;
    add.s32 %r3, %r3, 32;
    setp.lt.s32 %p1, %r3, %r1;
    @%p1 bra $INNER;
    setp.lt.s32 %p2, %r4, %r2;
    @%p2 bra $OUTER;
    ret;
}
"""


@pytest.mark.parametrize("reps", [1, 2])
def test_a_one_block_loop_entered_again_with_its_last_counter_is_not_proven(reps):
    # the counter is set once, before an outer loop: the second time round the
    # inner loop starts where it stopped, at n, and writes past y
    o = run_both(None, "again", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(64, np.float32)), np.int32(64), np.int32(reps)],
                 ptx_text=AGAIN_PTX)
    assert same_violations(o)
    assert o.occurrences == (reps - 1) * 32


TWICE = r"""
extern "C" __global__ void twice(unsigned* bins, const unsigned char* data, int n, int nb)
{
    __shared__ unsigned local[256];
    for (int b = threadIdx.x; b < FIRST; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < nb; b += blockDim.x) atomicAdd(&bins[b], local[b & 255]);
}
"""


@pytest.mark.parametrize("first, nb, bad", [
    (256, 256, 0),  # proven: both b loops start from threadIdx.x's one register
    (257, 256, 1),  # the first loop clears one past local
    (256, 260, 4),  # the last loop adds past bins
])
def test_a_loop_started_from_a_register_a_later_loop_counts_on_is_bounded(first, nb, bad):
    # NVRTC keeps threadIdx.x in the last loop's counter, so the register the
    # first loop starts from is written twice; only its first definition
    # reaches that start
    source = TWICE.replace("FIRST", str(first))
    text = nvrtc_compile(source, "k.cu", "compute_75")
    counted = [ln.split()[1].rstrip(",") for ln in text.splitlines()
               if "%tid.x;" in ln and ln.split()[0] == "mov.u32"]
    assert any(text.count(f"{r}, {r},") for r in counted)  # the counter is the tid register
    o = run_both(source, "twice", (1, 1, 1), (64, 1, 1),
                 [Buf(np.zeros(256, np.uint32)), Buf(np.arange(512, dtype=np.uint8)),
                  np.int32(512), np.int32(nb)])
    assert same_violations(o)
    assert o.occurrences == bad
    if not bad:
        assert_same(o)
        assert o.checked_instructions == o.plain_instructions


STEPPED_PTX = """\
.version 7.0
.target sm_75
.address_size 64

.visible .entry stepped(.param .u64 y, .param .u64 x, .param .u32 n, .param .u32 stride)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<9>;
    .reg .f32 %f<3>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [x];
    ld.param.u32 %r1, [n];
    ld.param.u32 %r2, [stride];
    cvta.to.global.u64 %rd3, %rd2;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, 0;
    mov.f32 %f1, 0f00000000;
$LOOP:
    mul.wide.s32 %rd4, %r3, 4;
    add.s64 %rd5, %rd3, %rd4;
    ld.global.f32 %f2, [%rd5];
    add.f32 %f1, %f1, %f2;
    add.s32 %r3, %r3, %r2;
    add.s32 %r4, %r4, 1;
    setp.lt.s32 %p1, %r4, %r1;
    @%p1 bra $LOOP;
    cvta.to.global.u64 %rd6, %rd1;
    mov.u32 %r5, %tid.x;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd6, %rd7;
    st.global.f32 [%rd8], %f1;
    ret;
}
"""


@pytest.mark.parametrize("n, stride, bad", [
    (8, 32, 0),  # proven: j = tid + 32 k reaches 255 in its 8th pass
    (0, 32, 0),  # proven: the do-while's one pass
    (9, 32, 32),  # the 9th pass reads x[256..287]
    (2, -1, 1),  # thread 0's second pass reads x[-1]
    (2, 2**31 - 1, 32),  # tid + INT_MAX wraps to a negative index (or is past x)
])
def test_a_register_stepped_beside_the_loop_counter_is_bounded_by_its_passes(n, stride, bad):
    # matmul's tile loop steps its row and column indices beside its counter
    o = run_both(None, "stepped", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(np.arange(256, dtype=np.float32)),
                  np.int32(n), np.int32(stride)], ptx_text=STEPPED_PTX)
    assert same_violations(o)
    assert o.occurrences == bad
    if not bad:
        assert_same(o)
        assert o.checked_instructions == o.plain_instructions


BACKPROP = r"""
extern "C" __global__ void layer_forward(float* hidden, const float* input,
                                         const float* weights, int in_n, int out_n)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out_n) return;
    float s = 0.f;
    for (int i = 0; i < in_n; ++i) s += weights[i * out_n + j] * input[i];
    hidden[j] = 1.f / (1.f + __expf(-s));
}
"""


def _backprop(in_n, out_n, n_input, n_weights, ptx_text=None):
    rng = np.random.default_rng(3)
    return run_both(BACKPROP if ptx_text is None else None, "layer_forward", (1, 1, 1),
                    (64, 1, 1),
                    [Buf(np.zeros(out_n, np.float32)), Buf(rng.random(n_input, np.float32)),
                     Buf(rng.random(n_weights, np.float32)), np.int32(in_n), np.int32(out_n)],
                    ptx_text=ptx_text)


@pytest.mark.parametrize("in_n, n_input, n_weights, bad", [
    (64, 64, 64 * 64, 0),  # proven: 16 unrolled passes, the remainder loop not entered
    (66, 66, 66 * 64, 0),  # proven: 16 passes, then 2 remainder passes from i = 64
    (67, 67, 67 * 64, 0),  # proven: 3 remainder passes
    (64, 63, 64 * 64, 64),  # the last unrolled pass reads input[63]
    (66, 65, 66 * 64, 64),  # the remainder's last pass reads input[65]
    (64, 64, 64 * 64 - 1, 1),  # the last thread's last row is one past weights
    (67, 67, 67 * 64 - 64, 64),  # the remainder's last row is past weights
])
def test_an_unrolled_pointer_loop_is_bounded_by_its_trip_count(in_n, n_input, n_weights, bad):
    # NVRTC unrolls the loop into a counter n - (n & 3) going down by 4 to
    # != 0, stepping input by 16 and weights by 4 * out_n through a chain of
    # registers, then a remainder loop counting n & 3 down from the last index
    o = _backprop(in_n, 64, n_input, n_weights)
    assert same_violations(o)
    assert o.occurrences == bad
    assert_same(o)
    if not bad:
        assert o.checked_instructions == o.plain_instructions
    else:
        assert kinds(o) == {"global-out-of-bounds"}


def test_an_unrolled_loop_the_proof_cannot_count_runs_the_checked_kernel():
    # in_n = 3: the main loop is skipped, but its counter starts at 0 (it
    # would count through the wrap if entered): no proof, no violation
    o = _backprop(3, 64, 3, 3 * 64)
    assert o.device == o.oracle == []
    assert_same(o)
    assert o.checked_instructions > o.plain_instructions


@pytest.mark.parametrize("start, in_n, bad", [
    (0, 66, 0),  # as NVRTC wrote it: proven
    (1, 66, 64),  # the remainder starts one past where the main loop stopped: input[66]
    (1, 67, 64),  # the remainder's last pass reads input[67]
    (1, 64, 0),  # proven: the remainder loop, whose start is wrong, is not entered
])
def test_a_remainder_loop_started_past_the_main_loop_is_caught(start, in_n, bad):
    text = nvrtc_compile(BACKPROP, "k.cu", "compute_75")
    lines = text.splitlines()
    # the index the main loop steps starts at 0 in the loop's preheader (the
    # second such move: the first is for the path that skips the main loop)
    moves = [i for i, ln in enumerate(lines) if ln.split()[:1] == ["mov.u32"]
             and ln.rstrip().endswith(", 0;")]
    assert len(moves) == 2
    lines[moves[1]] = lines[moves[1]].replace(", 0;", f", {start};")
    o = _backprop(in_n, 64, in_n, in_n * 64 + 64, ptx_text="\n".join(lines) + "\n")
    assert same_violations(o)
    assert o.occurrences == bad
    assert_same(o)
    if not bad:
        assert o.checked_instructions == o.plain_instructions


@pytest.mark.parametrize("c0, d, guarded, expect", [
    (16, 4, False, (0, 3)),  # 16 counted down by 4: passes 0..3
    (4, 4, False, (0, 0)),
    (6, 4, False, None),  # not a multiple: it counts through the wrap
    (-4, 4, False, None),  # negative: through the wrap
    (0, 4, False, None),  # entered at 0, it wraps
    (0, 1, True, "unreached"),  # its entry saw the counter non-zero: not entered
    ((8, 12), 4, False, None),  # a counter that differs between threads
])
def test_the_passes_of_a_down_counting_loop(c0, d, guarded, expect):
    from gpusafe_instrument import launch_bounds as lb

    ev = lb._Evaluator(None, b"", (1, 1, 1), (1, 1, 1))
    leaf = ["k", c0] if isinstance(c0, int) else ["k_range", *c0]
    node = ["passes", leaf, d, guarded]
    if expect == "unreached":
        with pytest.raises(lb._Unreached):
            ev.interval(node)
    elif expect is None:
        with pytest.raises(lb._Unproven):
            ev.interval(node)
    else:
        assert ev.interval(node) == expect


def test_a_join_of_a_stepped_index_is_the_hull_of_its_definitions():
    # the remainder's start: 0 (main loop skipped) or 4 (k + 1) after pass k
    from gpusafe_instrument import launch_bounds as lb

    ev = lb._Evaluator(None, b"", (1, 1, 1), (1, 1, 1))
    after = ["add", ["k", 0], ["mul", ["add", ["passes", ["k", 64], 4, False], ["k", 1], 32],
                                ["k", 4], 32], 32]
    assert ev.interval(["hull", ["k", 0], after]) == (0, 64)
    assert ev.interval(["band", ["k", 66], 3]) == (2, 2)
    assert ev.interval(["band", ["k_range", 64, 66], 3]) == (0, 3)
    # an operand whose value would wrap: x & 3 is still in [0, 3]
    assert ev.interval(["band", ["mul", ["k", 1 << 30], ["k", 4], 32], 3]) == (0, 3)


KMEANS = r"""
extern "C" __global__ void kmeans_assign(int* membership, const float* points,
                                         const float* centers, int n, int k, int dims)
{
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    int best = 0;
    float best_d = 3.4e38f;
    for (int c = 0; c < k; ++c) {
        float d = 0.f;
        for (int f = 0; f < dims; ++f) {
            float x = points[p * dims + f] - centers[c * dims + f];
            d += x * x;
        }
        if (d < best_d) { best_d = d; best = c; }
    }
    membership[p] = best;
}
"""


@pytest.mark.parametrize("k, dims, n_points, n_centers, bad", [
    (5, 8, 64 * 8, 5 * 8, 0),  # proven: 2 unrolled passes, the remainder not reached
    (5, 7, 64 * 7, 5 * 7, 0),  # proven: 1 unrolled pass, 3 remainder features
    (5, 6, 64 * 6, 5 * 6, 0),  # proven: the remainder's third feature is not reached
    (3, 2, 64 * 2, 3 * 2, None),  # not proven: the unrolled loop's counter starts at 0
    (5, 8, 64 * 8 - 1, 5 * 8, 5),  # the last thread's last feature, once a centre
    (5, 7, 64 * 7, 5 * 7 - 1, 64),  # the last centre's last remainder feature
    (5, 6, 64 * 6, 5 * 6 - 1, 64),  # the remainder's second feature of the last centre
    (6, 8, 64 * 8, 5 * 8, 64 * 8),  # k = 6 centres of 5: the cluster counter's bound
])
def test_an_unrolled_loop_in_a_loop_of_several_blocks_is_bounded(k, dims, n_points, n_centers,
                                                                   bad):
    # the cluster loop (several blocks) counts c up to k; its inner loop is
    # unrolled by 4 and its remainder unrolled into 3 accesses under
    # dims & 3 != 0, != 1, != 2
    rng = np.random.default_rng(5)
    o = run_both(KMEANS, "kmeans_assign", (1, 1, 1), (64, 1, 1),
                 [Buf(np.zeros(64, np.int32)), Buf(rng.random(n_points, np.float32)),
                  Buf(rng.random(n_centers, np.float32)), np.int32(64), np.int32(k),
                  np.int32(dims)])
    assert same_violations(o)
    assert o.occurrences == (bad or 0)
    assert_same(o)
    if bad is None:  # (skipped, it would count through the wrap): the checked kernel ran
        assert o.checked_instructions > o.plain_instructions
    elif not bad:
        assert o.checked_instructions == o.plain_instructions


def test_unrolled_loops_agree_with_the_oracle_over_a_sweep_of_counts_and_sizes():
    # every count from -1 (no pass) to 9 (both loops), each buffer exact or
    # one element short: the launch is proven or checked, never silent
    proven = 0
    for in_n, slack_in, slack_w in itertools.product(range(-1, 10), (-1, 0), (-1, 0)):
        n_in, n_w = max(in_n, 0) + slack_in, max(in_n, 0) * 64 + slack_w
        if min(n_in, n_w) < 1:
            continue
        o = _backprop(in_n, 64, n_in, n_w)
        assert same_violations(o), (in_n, slack_in, slack_w)
        proven += o.checked_instructions == o.plain_instructions
    rng = np.random.default_rng(2)
    for dims, slack_p, slack_c in itertools.product(range(0, 10), (-1, 0), (-1, 0)):
        n_p, n_c = 64 * dims + slack_p, 2 * dims + slack_c
        if min(n_p, n_c) < 1:
            continue
        o = run_both(KMEANS, "kmeans_assign", (1, 1, 1), (64, 1, 1),
                     [Buf(np.zeros(64, np.int32)), Buf(rng.random(n_p, np.float32)),
                      Buf(rng.random(n_c, np.float32)), np.int32(64), np.int32(2),
                      np.int32(dims)])
        assert same_violations(o), (dims, slack_p, slack_c)
        proven += o.checked_instructions == o.plain_instructions
    assert proven >= 10  # the exact-size launches with a count of 4 or more
