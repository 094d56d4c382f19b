"""Warps as vectors (``gpusafe.cpu.jit.lanes``): each kernel here runs on the
interpreter and on the JIT with the lanes lowering required
(``GPUSAFE_JIT_LANES=only``: a kernel it did not cover would run on the
interpreter, named, and the test fail), and outputs, exact instruction counts
and errors must be identical."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from test_cpu_jit import engine_notes

from gpusafe.cpu.errors import DeviceError
from gpusafe.cpu.jit.engine import STATS
from gpusafe.cpu.jit.lanes import lower_lanes, why_not_lanes
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe_testkit.bench_kernels import BENCH_KERNELS
from gpusafe_testkit.corpus import nvrtc_compile

pytestmark = pytest.mark.slow  # every test compiles a kernel (seconds each)

_PTX: dict[str, str] = {}


def _ptx(source: str) -> str:
    if source not in _PTX:
        _PTX[source] = nvrtc_compile(source, "k.cu", "compute_75", ())
    return _PTX[source]


def _run(engine: str, source: str, kernel: str, grid, block, arrays: list, scalars: bytes,
         monkeypatch) -> tuple[list[np.ndarray], int | None, str, BaseException | None]:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    monkeypatch.setenv("GPUSAFE_JIT_LANES", "only")
    mem = DeviceMemory()
    program = Program(_ptx(source), mem)
    bases = []
    for a in arrays:
        base = mem.alloc(a.nbytes)
        mem.write(base, a)
        bases.append(base)
    notes = engine_notes(monkeypatch)
    count, error = None, None
    try:
        result = program.launch(kernel, grid, block, 0,
                                struct.pack(f"<{len(bases)}Q", *bases) + scalars)
        count = result.instructions
    except DeviceError as e:
        error = e
    outs = [np.frombuffer(mem.read(b, a.nbytes), a.dtype).copy()
            for a, b in zip(arrays, bases, strict=True)]
    return outs, count, notes[0], error


def _same(source, kernel, grid, block, arrays, scalars, monkeypatch) -> list[np.ndarray]:
    ref, n_ref, _, e_ref = _run("interpreter", source, kernel, grid, block, arrays, scalars,
                                monkeypatch)
    got, n_got, note, e_got = _run("jit", source, kernel, grid, block, arrays, scalars,
                                   monkeypatch)
    assert note == "jit"
    assert e_ref is None and e_got is None, (e_ref, e_got)
    for r, g in zip(ref, got, strict=True):
        assert r.tobytes() == g.tobytes()
    assert n_got == n_ref
    return got


def _same_error(source, kernel, grid, block, arrays, scalars, monkeypatch) -> BaseException:
    _, _, _, e_ref = _run("interpreter", source, kernel, grid, block, arrays, scalars,
                          monkeypatch)
    fallbacks = len(STATS.fallbacks)  # a failed launch has no engine note
    _, _, _, e_got = _run("jit", source, kernel, grid, block, arrays, scalars, monkeypatch)
    assert len(STATS.fallbacks) == fallbacks
    assert e_ref is not None and e_got is not None
    assert type(e_got) is type(e_ref)
    assert str(e_got) == str(e_ref)
    return e_got


def test_the_bench_kernels_are_covered():
    from gpusafe_instrument.parser import parse
    module = parse(_ptx(BENCH_KERNELS))
    assert {f.name: why_not_lanes(f) for f in module.functions} == dict.fromkeys(
        ("vector_add", "matmul", "block_sum", "histogram"))


def test_the_block_sums_parameters_and_their_addresses_are_kept_scalar():
    # %rd1, %rd2 (parameters), %rd3 and %rd12 (their cvta), %rd7/%rd10 (the shared
    # array): one i64 each for the warp, not <32 x i64>; the thread-dependent ones
    # (%rd4-6, 8, 9, 11) and the unused %rd0 stay vectors
    from gpusafe_instrument.parser import parse
    block_sum = next(f for f in parse(_ptx(BENCH_KERNELS)).functions if f.name == "block_sum")
    ir = lower_lanes(block_sum).ir
    assert ir.count("alloca i64\n") == 6 + 1  # and the instruction counter
    assert ir.count("alloca <32 x i64>") == 7


def test_vector_add_with_a_short_last_warp(monkeypatch):
    a = np.linspace(-3, 3, 1000, dtype=np.float32)
    b = np.float32(1e-3) * np.arange(1000, dtype=np.float32)
    out = _same(BENCH_KERNELS, "vector_add", (10, 1, 1), (100, 1, 1), [a, b, np.zeros(1000, np.float32)],
                struct.pack("<i", 990), monkeypatch)
    assert np.array_equal(out[2][:990], (a + b)[:990]) and not out[2][990:].any()


def test_matmul(monkeypatch):
    rng = np.random.default_rng(3)
    n = 32
    a = rng.standard_normal(n * n).astype(np.float32)
    b = rng.standard_normal(n * n).astype(np.float32)
    _same(BENCH_KERNELS, "matmul", (2, 2, 1), (16, 16, 1), [a, b, np.zeros(n * n, np.float32)],
          struct.pack("<i", n), monkeypatch)


@pytest.mark.parametrize("block", [256, 48, 100])
def test_block_sum(monkeypatch, block):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(1000).astype(np.float32)
    grid = -(-1000 // block)
    _same(BENCH_KERNELS, "block_sum", (grid, 1, 1), (block, 1, 1), [x, np.zeros(1, np.float32)],
          struct.pack("<i", 1000), monkeypatch)


def test_histogram(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, 5000, dtype=np.uint8)
    out = _same(BENCH_KERNELS, "histogram", (4, 1, 1), (96, 1, 1), [x, np.zeros(256, np.uint32)],
                struct.pack("<i", 5000), monkeypatch)
    assert np.array_equal(out[1], np.bincount(x, minlength=256))


DIVERGE = r"""
extern "C" __global__ void diverge(int *out, const int *trips) {
    int t = threadIdx.x;
    int v = 0;
    if (t % 3 == 0) v = t * 5; else if (t % 3 == 1) v = -t; else v = t ^ 0x55;
    for (int k = 0; k < trips[t]; ++k) v = v * 3 + k;
    if (t == 7) return;
    out[t] = v;
}
"""


def test_divergent_if_else_loop_with_per_lane_trips_and_early_exit(monkeypatch):
    trips = (np.arange(77, dtype=np.int32) * 7) % 11
    out = _same(DIVERGE, "diverge", (1, 1, 1), (77, 1, 1), [np.zeros(77, np.int32), trips],
                b"", monkeypatch)
    assert out[0][7] == 0


SHUFFLES = r"""
extern "C" __global__ void shuffles(int *out, int delta) {
    const int width = WIDTH;
    int t = threadIdx.x;
    int v = t * 10 + 1;
    int a = __shfl_up_sync(0xffffffff, v, delta, width);
    int b = __shfl_down_sync(0xffffffff, v, delta, width);
    int c = __shfl_xor_sync(0xffffffff, v, delta, width);
    int d = __shfl_sync(0xffffffff, v, delta + 3, width);
    int e = __shfl_down_sync(0xffffffff, v, 5);
    unsigned ballot = __ballot_sync(0xffffffff, t % 3 == 1);
    int all = __all_sync(0xffffffff, t < 60), any = __any_sync(0xffffffff, t == 37);
    out[t * 8 + 0] = a; out[t * 8 + 1] = b; out[t * 8 + 2] = c; out[t * 8 + 3] = d;
    out[t * 8 + 4] = e; out[t * 8 + 5] = ballot; out[t * 8 + 6] = all; out[t * 8 + 7] = any;
}
"""


@pytest.mark.parametrize("width,delta", [(32, 1), (8, 3), (16, 9), (4, 2)])
def test_shuffles_votes_and_segments(monkeypatch, width, delta):
    # a constant width: computed at run time, the c operand takes a bfi
    _same(SHUFFLES.replace("WIDTH", str(width)), "shuffles", (1, 1, 1), (70, 1, 1),
          [np.zeros(70 * 8, np.int32)], struct.pack("<i", delta), monkeypatch)


BIT_FIELDS = r"""
extern "C" __global__ void fields(unsigned *out, const unsigned *a, const unsigned *b, int width) {
    int t = threadIdx.x;
    unsigned d32, pos = t * 7 % 40, len = t * 5 % 37;  // past the end and empty ones too
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(d32) : "r"(a[t]), "r"(b[t]), "r"(pos), "r"(len));
    unsigned long long d64, wa = (unsigned long long)a[t] << 32 | b[t];
    asm("bfi.b64 %0, %1, %2, %3, %4;" : "=l"(d64) : "l"(wa), "l"(~wa), "r"(pos * 2), "r"(len));
    out[3 * t] = d32;
    out[3 * t + 1] = (unsigned)(d64 >> 32) ^ (unsigned)d64;
    out[3 * t + 2] = __shfl_down_sync(0xffffffff, d32, 1, width);  // c operand: a bfi
}
"""


def test_bit_field_inserts_are_lanes(monkeypatch):
    """``bfi`` (also what a shuffle's width computed at run time compiles to)
    is lowered in lanes, per lane position and length, as the interpreter has it."""
    from gpusafe_instrument.parser import parse
    fields = parse(_ptx(BIT_FIELDS)).functions[0]
    assert "bfi.b32" in _ptx(BIT_FIELDS) and why_not_lanes(fields) is None
    rng = np.random.default_rng(7)
    a, b = (rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    for width in (32, 8):
        _same(BIT_FIELDS, "fields", (1, 1, 1), (64, 1, 1), [np.zeros(3 * 64, np.uint32), a, b],
              struct.pack("<i", width), monkeypatch)


OOB = r"""
extern "C" __global__ void oob(float *out, const float *in, int bad) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int j = t == bad ? t + (1 << 24) : t;
    out[t] = in[j] * 2.0f;
}
"""


@pytest.mark.parametrize("bad", [0, 45, 71])
def test_an_out_of_bounds_load_is_the_interpreters_error(monkeypatch, bad):
    # lane 0, a middle lane, the last lane of a short warp (72 threads: 32 + 32 + 8)
    e = _same_error(OOB, "oob", (1, 1, 1), (72, 1, 1),
                    [np.zeros(72, np.float32), np.ones(72, np.float32)],
                    struct.pack("<i", bad), monkeypatch)
    assert "PTX line" in str(e)


SAME_ADDRESS = r"""
extern "C" __global__ void same(int *out) {
    int t = threadIdx.x;
    if (t == 3 || t == 17 || t == 30) out[0] = t;
    out[1 + t / 8] = t * 3;
}
"""


def test_lanes_storing_to_one_address_leave_the_last_lanes_value(monkeypatch):
    out = _same(SAME_ADDRESS, "same", (1, 1, 1), (32, 1, 1), [np.zeros(5, np.int32)], b"",
                monkeypatch)
    assert out[0][0] == 30 and list(out[0][1:]) == [21, 45, 69, 93]


def test_by_default_kernels_with_warp_instructions_barriers_or_no_loops_take_the_lanes_lowering(
        monkeypatch):
    from gpusafe.cpu.jit.engine import compile_function, has_loops
    from gpusafe_instrument.parser import parse
    monkeypatch.delenv("GPUSAFE_JIT_LANES", raising=False)
    module = parse(_ptx(BENCH_KERNELS))
    assert {f.name: has_loops(f) for f in module.functions} == {
        "vector_add": False, "matmul": True, "block_sum": False, "histogram": True}
    kinds = {f.name: compile_function(f).lanes for f in module.functions}
    assert kinds == dict.fromkeys(("vector_add", "matmul", "block_sum", "histogram"), True)
    waiting = parse(_ptx(WAITING)).functions[0]
    assert has_loops(waiting) and compile_function(waiting).lanes  # shfl in a loop
    diverge = parse(_ptx(DIVERGE)).functions[0]  # a loop, no barrier: per thread
    assert has_loops(diverge) and not compile_function(diverge).lanes
    monkeypatch.setenv("GPUSAFE_JIT_LANES", "0")
    assert not compile_function(module.functions[2]).lanes  # block_sum
    monkeypatch.setenv("GPUSAFE_JIT_LANES", "sometimes")
    with pytest.raises(ValueError, match="GPUSAFE_JIT_LANES"):
        compile_function(module.functions[2])


def test_by_default_kernels_past_the_size_limit_stay_per_thread(monkeypatch):
    # the instrumented matmul (thousands of instructions: 301 s to compile as
    # lanes) per thread, the instrumented block sum and histogram as lanes
    from gpusafe.cpu.jit import engine
    from gpusafe.cpu.jit.engine import prefers_lanes, suspends_threads
    from gpusafe_instrument.checks import instrument
    from gpusafe_instrument.parser import parse
    plain = {f.name: f for f in parse(_ptx(BENCH_KERNELS)).functions}
    checked = {f.name: f for f in parse(instrument(_ptx(BENCH_KERNELS)).ptx).functions}
    assert all(prefers_lanes(f) for f in plain.values())
    assert prefers_lanes(checked["block_sum"]) and prefers_lanes(checked["histogram"])
    assert suspends_threads(checked["matmul"]) and not prefers_lanes(checked["matmul"])
    monkeypatch.setattr(engine, "LANES_MAX_INSTRUCTIONS", 10_000)
    assert prefers_lanes(checked["matmul"])  # the size alone decided


WAITING = r"""
extern "C" __global__ void waiting(int *out, const int *trips, int n) {
    int t = threadIdx.x;
    int v = t * 3, w = 0;
    for (int k = 0; k < n; ++k) {
        // the shuffling lanes wait for the others, which go on updating v
        if (t % 4 == 0) w += __shfl_down_sync(0xffffffff, v, 1);
        else v += 1000;
    }
    for (int k = 0; k < trips[t]; ++k) v += __shfl_xor_sync(0xffffffff, v, k & 7);
    if (t > 40) return;
    v += __shfl_xor_sync(0xffffffff, v, 3);  // lanes that left are not waited for
    out[t] = v + w;
}
"""


def test_warp_instructions_reached_by_part_of_a_warp_wait_as_the_interpreters(monkeypatch):
    trips = (np.arange(64, dtype=np.int32) * 5) % 4
    _same(WAITING, "waiting", (1, 1, 1), (64, 1, 1), [np.zeros(64, np.int32), trips],
          struct.pack("<i", 3), monkeypatch)


LEFT_EARLY = r"""
extern "C" __global__ void left(int *out) {
    int t = threadIdx.x;
    int c;
    if (t % 2) return;               // odd lanes leave before c is written
    asm volatile("mov.u32 %0, 7;" : "=r"(c));
    out[t] = __shfl_down_sync(0x55555555, c, 1) + __shfl_xor_sync(0x55555555, c, 2);
}
"""


def test_a_shuffle_reads_a_lane_that_left_before_writing_its_source(monkeypatch):
    _same(LEFT_EARLY, "left", (1, 1, 1), (32, 1, 1), [np.zeros(32, np.int32)], b"",
          monkeypatch)


UNIFORM = r"""
extern "C" __global__ void uniform(int *out, int n) {
    int t = threadIdx.x;
    int u, w;
    if (t % 3 == 0) asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(w));  // others read it unwritten
    if (t % 2) return;               // odd lanes leave before u is written
    asm volatile("mad.lo.s32 %0, %1, 3, %2;" : "=r"(u) : "r"(n), "r"(n));
    out[t] = __shfl_down_sync(0x55555555, u, 1) + w + u;
}
"""


def test_values_the_same_in_every_lane_are_not_taken_so_where_a_lane_reads_them_unwritten(
        monkeypatch):
    # u (from a parameter) and w (from %ntid) have one unguarded write each, but a
    # lane that left reads as 0 through the shuffle, and a lane that skipped w's write
    # reads its 0: neither is kept as one scalar for the warp
    out = _same(UNIFORM, "uniform", (1, 1, 1), (40, 1, 1), [np.zeros(40, np.int32)],
                struct.pack("<i", 5), monkeypatch)
    assert out[0][0] == 0 + 40 + 20 and out[0][2] == 0 + 0 + 20


def test_each_pick_switches_over_the_pcs_its_lanes_may_wait_at():
    # the block sum's first divergent branch (`i < n`) leaves lanes at its two
    # sides only: its pick is no switch over every join point of the kernel
    # (which made every register live at any of them live, and zeroed, from the
    # entry), and the release after the barrier finds its lanes after it only
    from gpusafe_instrument.parser import parse
    block_sum = next(f for f in parse(_ptx(BENCH_KERNELS)).functions if f.name == "block_sum")
    ir = lower_lanes(block_sum).ir

    def switch(label: str) -> str:
        return next(x for x in ir[ir.index(f"\n{label}:"):].split("\n") if "switch" in x)

    assert switch("PK9div").endswith("[i32 2147483647, label %done i32 10, label %L10 "
                                     "i32 14, label %L14]")
    assert switch("PKerel").endswith("[i32 2147483647, label %done i32 50, label %L50]")
    assert "\npick:" not in ir


PICKS = r"""
extern "C" __global__ void picks(int *out, const int *trips) {
    __shared__ int s[64];
    int t = threadIdx.x;
    int v = t;
    for (int k = 0; k < trips[t]; ++k) v = v * 3 + k;  // per-lane trips: yields, resumes
    s[t] = v;
    if (t % 3 == 0) { __syncthreads(); v += s[(t + 1) % 64]; }  // two barriers: released
    else { __syncthreads(); v -= s[(t + 5) % 64]; }             // to two places
    if (t % 4 == 1) v += __shfl_down_sync(0xffffffff, v, 1);     // forced: a part waits
    out[t] = v;
}
"""


def test_picks_after_yields_at_two_barriers_and_at_a_forced_shuffle(monkeypatch):
    trips = np.where(np.arange(64) % 5 == 2, 20000, np.arange(64) % 7).astype(np.int32)
    _same(PICKS, "picks", (1, 1, 1), (64, 1, 1), [np.zeros(64, np.int32), trips], b"",
          monkeypatch)


def test_over_the_edge_budget_every_pick_goes_to_one_shared_switch(monkeypatch):
    # a large (instrumented) kernel's picks would switch over thousands of PCs
    # each: past PICK_EDGES they all take the one shared switch, and the launch
    # is still the interpreter's (another source: no cached object of the above)
    from gpusafe.cpu.jit import lanes_picks
    from gpusafe_instrument.parser import parse
    monkeypatch.setattr(lanes_picks, "PICK_EDGES", 0)
    block_sum = next(f for f in parse(_ptx(BENCH_KERNELS)).functions if f.name == "block_sum")
    ir = lower_lanes(block_sum).ir
    assert "\nPK9div:\n  br label %pick\n" in ir and "\npick:" in ir
    trips = np.where(np.arange(64) % 5 == 2, 20000, np.arange(64) % 7).astype(np.int32)
    _same(PICKS.replace("t % 4 == 1", "t % 4 == 3"), "picks", (1, 1, 1), (64, 1, 1),
          [np.zeros(64, np.int32), trips], b"", monkeypatch)


GROUPED = r"""
extern "C" __global__ void grouped(float *out, const float *in, const double *wide,
                                   const signed char *bytes, int shift) {
    __shared__ float s[256];
    __shared__ double sw[64];
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int n = blockDim.x * blockDim.y * blockDim.z;
    for (int k = t; k < 256; k += n) s[k] = in[k];
    for (int k = t; k < 64; k += n) sw[k] = wide[k];
    __syncthreads();
    int x = threadIdx.x, y = threadIdx.y & 15;
    float v = s[y * 16 + x] + 2.0f * s[y * 16 + x + 1];  // a row of the tile a group
    v += s[y * 16 + 5];                                   // one value a group
    v += (float)sw[(y & 3) * 8 + (x & 7)];                // 8-byte rows
    if (x % 3 != 1) v += s[y * 16 + 15 - x];              // part of the warp, descending
    v += in[(t & ~7) + shift];                            // global, one a group
    v += (float)bytes[t + shift];                         // 1-byte global rows
    out[t] = v;
}
"""


def _grouped_args(threads: int, shift: int) -> tuple[list[np.ndarray], bytes]:
    rng = np.random.default_rng(6)
    arrays = [np.zeros(threads, np.float32), rng.standard_normal(256).astype(np.float32),
              rng.standard_normal(64), rng.integers(-100, 100, 160, dtype=np.int8)]
    return arrays, struct.pack("<i", shift)


@pytest.mark.parametrize("block", [(16, 4, 1), (8, 8, 1), (12, 4, 1), (3, 5, 7), (1, 40, 1)])
@pytest.mark.parametrize("shift", [0, 3])
def test_loads_in_groups_of_lanes_are_the_interpreters(monkeypatch, block, shift):
    # rows of 16 or 8 lanes: every group of 8 lanes one row (consecutive) or one
    # address, the grouped loads; rows of 12, 3 or 1: groups straddle rows, the
    # general path (and the warp's %tid with 1, 3 or 6 row wraps)
    threads = block[0] * block[1] * block[2]
    arrays, scalars = _grouped_args(threads, shift)
    _same(GROUPED, "grouped", (1, 1, 1), block, arrays, scalars, monkeypatch)


@pytest.mark.parametrize("shift", [-5000, 624, 1000])
def test_a_grouped_load_outside_device_memory_is_the_interpreters_error(monkeypatch, shift):
    # -5000 and 1000: every group's address outside device memory; 624: the
    # first warp's first two groups of `in` inside, the next ones past the
    # arena's end (lane 16 the first bad one)
    arrays, scalars = _grouped_args(64, shift)
    e = _same_error(GROUPED, "grouped", (1, 1, 1), (16, 4, 1), arrays, scalars, monkeypatch)
    assert "not device memory" in str(e)


def test_the_grouped_loads_run_in_the_test_above(monkeypatch):
    # the same launch with the grouped loads' values replaced by zeros differs
    # from the interpreter: the fast path, not the general one, served the loads
    from gpusafe.cpu.jit import engine, lanes_groups
    original = lanes_groups.GroupedLoads.grouped_load

    def zeroed(self, operand, width, lt, window):
        g = original(self, operand, width, lt, window)
        if g is not None:
            self.zeroed.append(g)
        return g

    def lower(self):
        self.zeroed = []
        ir = original_lower(self)
        for g in self.zeroed:
            ir = ir.replace(f"[%gcv{g}, %GC{g}]", f"[zeroinitializer, %GC{g}]")
            ir = ir.replace(f"[%gbv{g}, %GB{g}]", f"[zeroinitializer, %GB{g}]")
        return ir
    from gpusafe.cpu.jit.lanes import _LaneLowerer
    original_lower = _LaneLowerer.lower
    monkeypatch.setattr(lanes_groups.GroupedLoads, "grouped_load", zeroed)
    monkeypatch.setattr(_LaneLowerer, "lower", lower)
    monkeypatch.setattr(engine, "_CACHE", {})
    monkeypatch.setenv("GPUSAFE_JIT_CACHE", "0")
    arrays, scalars = _grouped_args(64, 0)
    ref = _run("interpreter", GROUPED, "grouped", (1, 1, 1), (16, 4, 1), arrays, scalars,
               monkeypatch)[0][0]
    got = _run("jit", GROUPED, "grouped", (1, 1, 1), (16, 4, 1), arrays, scalars,
               monkeypatch)[0][0]
    assert ref.tobytes() != got.tobytes()


TIDS = r"""
extern "C" __global__ void tids(int *out) {
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[t] = threadIdx.x | threadIdx.y << 10 | threadIdx.z << 20;
}
"""


@pytest.mark.parametrize("block", [(1, 33, 2), (3, 5, 7), (16, 16, 1), (5, 1, 9), (32, 2, 1),
                                   (7, 9, 1), (40, 1, 1)])
def test_each_lanes_thread_index_where_warps_wrap_rows_and_planes(monkeypatch, block):
    threads = block[0] * block[1] * block[2]
    out = _same(TIDS, "tids", (1, 1, 1), block, [np.zeros(threads, np.int32)], b"",
                monkeypatch)[0]
    z, rest = np.divmod(np.arange(threads), block[0] * block[1])
    y, x = np.divmod(rest, block[0])
    assert np.array_equal(out, x | y << 10 | z << 20)


ATOMICS = r"""
extern "C" __global__ void atomics(unsigned *g, int *gs, unsigned long long *g64, float *gf,
                                   double *gd, int *out) {
    // each address taken by one instruction between barriers: the interpreter
    // runs an instruction for every thread, the JIT a warp on to its barrier
    __shared__ unsigned s[24];
    __shared__ int ss[24];
    int t = threadIdx.x;
    if (t < 24) { s[t] = t * 3; ss[t] = -t; }
    __syncthreads();
    unsigned k = t % 8;
    out[t * 8 + 0] = atomicAdd(&g[k], t);
    out[t * 8 + 1] = atomicInc(&g[8 + k], 5);
    out[t * 8 + 2] = atomicDec(&g[16 + k], 3);
    out[t * 8 + 3] = atomicMin(&gs[k], 40 - t);
    out[t * 8 + 4] = atomicMax(&gs[8 + k], t * 7 - 100);
    out[t * 8 + 5] = atomicAnd(&g[24 + k], ~(1u << (t % 32)))
                   ^ atomicOr(&g[32 + k], 1u << (t % 32)) ^ atomicXor(&g[40 + k], t * 0x1234567u);
    out[t * 8 + 6] = atomicExch(&g[48 + k], t) + atomicCAS(&g[56 + k], t % 3, t);
    atomicAdd(&g64[k], (unsigned long long)t << 33);
    atomicAdd(&gf[k], t * 0.25f);
    atomicAdd(&gd[k], t * 0.125);
    if (t % 3 != 2)  // part of the warp
        out[t * 8 + 7] = atomicInc(&s[k], 9) + atomicCAS(&s[8 + k], t % 5, t)
                       + atomicMin(&ss[k], t - 20) + atomicMax(&ss[8 + k], 2 * t)
                       + atomicExch(&ss[16 + k], t) + atomicDec(&s[16 + k], 4);
    __syncthreads();
    if (t < 24) { out[70 * 8 + t] = s[t]; out[70 * 8 + 24 + t] = ss[t]; }
}
"""


def test_every_atomic_goes_lane_by_lane_as_the_interpreters(monkeypatch):
    # add/inc/dec/min/max/and/or/xor/exch/cas on global u32/s32, red on u64/f32/f64,
    # and shared ones under a partial mask: the old values and the memory after
    rng = np.random.default_rng(8)
    g = rng.integers(0, 7, 64, dtype=np.uint32)
    arrays = [g, rng.integers(-50, 50, 16, dtype=np.int32), np.zeros(8, np.uint64),
              np.zeros(8, np.float32), np.zeros(8, np.float64), np.zeros(70 * 8 + 48, np.int32)]
    _same(ATOMICS, "atomics", (1, 1, 1), (70, 1, 1), arrays, b"", monkeypatch)
