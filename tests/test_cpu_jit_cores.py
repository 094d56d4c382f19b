"""Blocks of a JIT launch over several OS threads (gpusafe/cpu/jit/cores.py):
outputs, instruction counts, violation records (as sets) and the error of a
faulting launch are those of one thread."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpusafe.cpu.errors import IllegalAddress, MisalignedAddress
from gpusafe.cpu.jit import cores, engine
from gpusafe.cpu.jit.lower import lower_kernel
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile

KERNELS = r"""
extern "C" __global__ void mix(unsigned int* out, unsigned int* bins, const unsigned int* x,
                               int n)
{
    int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int v = x[i];
    for (int k = 0; k < (int)(v & 7); ++k) v = v * 2654435761u + (unsigned int)k;
    out[i] = v;
    atomicAdd(&bins[v & 15], 1u);
}

extern "C" __global__ void faulty(unsigned int* out, const unsigned long long* where, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) *(unsigned int*)(where[blockIdx.x] + 4 * threadIdx.x) = i;
}
"""


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    """The tests' grids are small: split them anyway."""
    monkeypatch.setattr(cores, "MIN_RANGE_THREADS", 1)


def _mix(threads: int, monkeypatch) -> tuple[bytes, bytes, int, str]:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
    monkeypatch.setenv("GPUSAFE_CPU_THREADS", str(threads))
    mem = DeviceMemory()
    program = Program(nvrtc_compile(KERNELS, "k.cu", "compute_75", ()), mem)
    n = 7 * 5 * 64 - 13
    x = np.random.default_rng(1).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    out, bins, px = mem.alloc(4 * n), mem.alloc(64), mem.alloc(4 * n)
    mem.write(px, x)
    mem.write(bins, np.zeros(16, np.uint32))
    notes = []
    real = engine.run

    def spy(launch):
        real(launch)
        notes.append("jit")

    monkeypatch.setattr(engine, "run", spy)
    r = program.launch("mix", (7, 5, 1), (64, 1, 1), 0, struct.pack("<QQQi", out, bins, px, n))
    return mem.read(out, 4 * n), mem.read(bins, 64), r.instructions, "".join(notes)


def test_outputs_counts_and_atomics_are_one_threads(monkeypatch):
    one = _mix(1, monkeypatch)
    assert one[3] == "jit"
    assert sum(np.frombuffer(one[1], np.uint32)) == 7 * 5 * 64 - 13
    program = Program(nvrtc_compile(KERNELS, "k.cu", "compute_75", ()), DeviceMemory())
    mix = next(f for f in program.module.functions if f.name == "mix")
    assert engine.compile_function(mix).parallel  # its atomicAdd is a real atomic
    for threads in (2, 4, 7):
        assert _mix(threads, monkeypatch) == one


def test_the_error_is_the_first_block_orders(monkeypatch):
    """Blocks 3 and 9 fault at different addresses: every thread count names block 3's."""
    messages = []
    for threads in (1, 4):
        monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
        monkeypatch.setenv("GPUSAFE_CPU_THREADS", str(threads))
        mem = DeviceMemory()
        program = Program(nvrtc_compile(KERNELS, "k.cu", "compute_75", ()), mem)
        out = mem.alloc(4 * 32 * 12)
        where = np.array([out + 128 * b for b in range(12)], np.uint64)
        where[3], where[9] = 0x1000, 0x2000
        pw = mem.alloc(where.nbytes)
        mem.write(pw, where)
        with pytest.raises(IllegalAddress) as e:
            program.launch("faulty", (12, 1, 1), (32, 1, 1), 0,
                           struct.pack("<QQi", out, pw, 32 * 12))
        messages.append(str(e.value))
    assert "0x1000" in messages[0]
    assert messages[1] == messages[0]


VADD = r"""
extern "C" __global__ void vadd(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""


def _records(threads: int, monkeypatch) -> tuple[list, int, bytes]:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
    monkeypatch.setenv("GPUSAFE_CPU_THREADS", str(threads))
    result = instrument(nvrtc_compile(VADD, "k.cu", "compute_75", ()))
    mem = DeviceMemory()
    n = 16 * 32
    out, a, b = mem.alloc(4 * (n - 40)), mem.alloc(4 * n), mem.alloc(4 * n)
    mem.write(a, np.arange(n, dtype=np.float32))
    mem.write(b, np.ones(n, np.float32))
    program = Program(result.ptx, mem)
    allocations = [host.AllocationRecord(x.tag, x.base, x.size, x.live) for x in mem.allocations]
    pipeline = LaunchPipeline(mem)
    launch = pipeline.prepare(result.sites, "vadd", struct.pack("<QQQi", out, a, b, n),
                              allocations, dynamic_shared=0)
    program.launch("vadd", (16, 1, 1), (32, 1, 1), 0, launch.params)
    device, dropped = pipeline.collect(launch)
    assert dropped == 0
    for v in device:  # each offender kept is a thread's own store past ``out``
        i = (v.address - out) // 4
        assert i == 32 * v.block[0] + v.thread[0] and i >= n - 40
    return ({str(v.kind) for v in device}, sum(v.count for v in device),
            mem.read(out, 4 * (n - 40)))


@pytest.mark.slow  # instrumenting and compiling the instrumented module: about 1.5 s
def test_violation_records_are_one_threads(monkeypatch):
    """Which offenders a site's tally keeps depends on which block counts
    first; what is counted and computed does not."""
    one = _records(1, monkeypatch)
    assert one[:2] == ({"global-out-of-bounds"}, 40)
    assert _records(4, monkeypatch) == one


def test_block_ranges_cover_the_grid_in_order():
    for blocks in (1, 2, 5, 64, 1000):
        for threads in (1, 2, 3, 16):
            for tpb in (1, 256, 1024):
                ranges = cores.block_ranges(blocks, threads, tpb)
                assert ranges[0][0] == 0 and ranges[-1][1] == blocks
                assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
                big = blocks * tpb // cores.MIN_RANGE_THREADS
                want = 1 if threads == 1 else max(1, min(blocks, 4 * threads, big))
                assert len(ranges) == want


def test_the_thread_knob(monkeypatch):
    monkeypatch.setenv("GPUSAFE_CPU_THREADS", "3")
    assert cores.thread_count() == 3
    monkeypatch.setenv("GPUSAFE_CPU_THREADS", "zero")
    with pytest.raises(ValueError, match="GPUSAFE_CPU_THREADS"):
        cores.thread_count()
    monkeypatch.delenv("GPUSAFE_CPU_THREADS")
    assert cores.thread_count() >= 1


def test_a_plain_atomic_keeps_the_kernel_on_one_thread():
    program = Program(nvrtc_compile(KERNELS, "k.cu", "compute_75", ()), DeviceMemory())
    mix = next(f for f in program.module.functions if f.name == "mix")
    atomics = lower_kernel(mix).atomics
    assert atomics == 1
    assert engine._atomics_are_atomic(atomics, "  %r1 = atomicrmw add ptr %p, i32 1 monotonic")
    assert not engine._atomics_are_atomic(atomics, "  %r1 = load i32, ptr %p")


def test_atomics_of_inlined_callees_count():
    """A callee's atomic, inlined twice, is two atomics the IR must have."""
    source = r"""
    __device__ __noinline__ void bump(int* c, int v) { atomicAdd(c, v); }
    extern "C" __global__ void two(int* c) { bump(c, 1); bump(c + 1, 2); }
    """
    program = Program(nvrtc_compile(source, "k.cu", "compute_75", ()), DeviceMemory())
    functions = {f.name: f for f in program.module.functions}
    assert lower_kernel(functions["two"], functions).atomics == 2


def test_a_small_grid_stays_on_one_thread(monkeypatch):
    monkeypatch.setattr(cores, "MIN_RANGE_THREADS", 32768)
    assert cores.block_ranges(64, 16, 256) == [(0, 64)]
    assert len(cores.block_ranges(4096, 16, 256)) == 32


HAMMER = r"""
extern "C" __global__ void hammer(unsigned long long* c, int reps)
{
    unsigned long long h = 0;
    for (int k = 0; k < reps; ++k) h += atomicAdd(c, 1ull) & 1;  // one atomic per iteration
    if (h == 12345678) c[1] = h;
}
"""


def test_contended_atomics_lose_no_update(monkeypatch):
    """Four threads adding to one counter: a plain load-add-store loses about
    a third of the updates here, an atomicrmw none."""
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
    monkeypatch.setenv("GPUSAFE_CPU_THREADS", "4")
    mem = DeviceMemory()
    program = Program(nvrtc_compile(HAMMER, "k.cu", "compute_75", ()), mem)
    hammer = next(f for f in program.module.functions if f.name == "hammer")
    assert engine.compile_function(hammer).parallel
    c = mem.alloc(16)
    mem.write(c, np.zeros(2, np.uint64))
    program.launch("hammer", (64, 1, 1), (32, 1, 1), 0, struct.pack("<Qi", c, 2000))
    assert np.frombuffer(mem.read(c, 16), np.uint64).tolist() == [64 * 32 * 2000, 0]


def test_a_forked_child_runs_its_blocks_on_threads(monkeypatch):
    """The child of a fork after a threaded launch gets a pool of its own."""
    import multiprocessing

    monkeypatch.setenv("GPUSAFE_CPU_THREADS", "4")
    first = _mix(4, monkeypatch)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        child = pool.apply_async(_mix_in_child).get(timeout=60)
    assert child == first[:3]


def _mix_in_child() -> tuple:
    mp = pytest.MonkeyPatch()
    try:
        return _mix(4, mp)[:3]
    finally:
        mp.undo()


EDGE = r"""
extern "C" __global__ void edge(int* out, const char* in, int step)
{
    out[threadIdx.x] = *(const int*)(in + 4 * threadIdx.x * step);
}
"""


@pytest.mark.parametrize("below_top, step, fails", [
    (4 * 63, 1, True), (4 * 64, 1, False), (2, 0, True), (4 * 32, 2, True), (None, 0, True)])
def test_a_sites_segment_hint_ends_where_its_access_still_fits(monkeypatch, below_top, step,
                                                                  fails):
    """A site's hint keeps the last address where an access of its width fits
    in the segment (here the arena's end): the threads reading the last whole
    ints hit it, the next one (4 bytes further) misses and gets the
    interpreter's error, as does a misaligned one; an empty hint matches no
    address, not even 0."""
    seen = []
    for engine_name in ("interpreter", "jit"):
        monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine_name)
        mem = DeviceMemory()
        program = Program(nvrtc_compile(EDGE, "k.cu", "compute_75", ()), mem)
        out = mem.alloc(4 * 64)
        mem.alloc(1024)
        base = 0 if below_top is None else mem.top - below_top  # 0: a hint's zeros
        try:
            program.launch("edge", (1, 1, 1), (64, 1, 1), 0, struct.pack("<QQi", out, base, step))
            seen.append(("ok", mem.read(out, 4 * 64)))
        except (IllegalAddress, MisalignedAddress) as e:
            seen.append(("error", f"{type(e).__name__}: {e}"))
    assert seen[0] == seen[1]
    assert seen[0][0] == ("error" if fails else "ok")


class _FakeWorker:
    """Records the ranges it runs; faults (status 1) on the blocks in ``bad``,
    after ``delay`` seconds on those in ``slow``."""

    def __init__(self, k: int, log: list, bad: set, slow: set, delay: float = 0.05) -> None:
        self.k, self.log, self.bad, self.slow, self.delay = k, log, bad, slow, delay
        self.instructions = 0

    def run(self, first: int, last: int) -> int:
        import time
        self.log.append((self.k, first, last))
        self.instructions += last - first
        if self.slow & set(range(first, last)):
            time.sleep(self.delay)
        return 1 if self.bad & set(range(first, last)) else 0


def test_a_worker_per_thread_runs_every_range_once():
    """A launch makes one worker per thread, not one per range (a range's
    context, callback and buffers cost what its blocks do on a small grid)."""
    log: list = []
    made: list = []

    def new_worker(k):
        made.append(k)
        return _FakeWorker(k, log, set(), set())

    status, instructions, worker = cores.run_ranges(new_worker, 64, 1, 4)
    assert (status, instructions, worker) == (0, 64, None)
    assert 0 in made and len(made) <= 4  # a helper the pool had not started is not made
    assert sorted((a, b) for _, a, b in log) == cores.block_ranges(64, 4, 1)


def test_the_fault_of_the_first_range_wins_and_later_ranges_are_not_claimed():
    """Blocks of two a range: the first range faults late (its worker
    sleeps), the third early: the launch names the first range's worker, as
    a sequential run would, and once a fault is found no worker claims a
    range after it."""
    log: list = []
    status, _, worker = cores.run_ranges(
        lambda k: _FakeWorker(k, log, bad={0, 4}, slow={0}), 16, 1, 2)
    assert cores.block_ranges(16, 2, 1)[:3] == [(0, 2), (2, 4), (4, 6)]
    assert status == 1 and (worker.k, 0, 2) in log
    starts = sorted(a for _, a, _ in log)
    assert starts[0] == 0 and set(starts) <= {0, 2, 4}  # none past the fault at (4, 6)
    single: list = []
    status, _, worker = cores.run_ranges(lambda k: _FakeWorker(k, single, {2}, set()), 16, 1, 1)
    assert status == 1 and single == [(0, 0, 16)]  # one thread: one range, the whole grid


def test_shared_atomics_are_plain_updates_and_leave_the_kernel_parallel(monkeypatch):
    """The histogram's ``atom.shared`` is the block's own (one OS thread runs
    its threads): a plain update, not counted against running blocks on
    several threads; its ``red.global`` stays an LLVM atomic."""
    from gpusafe.cpu.jit.lanes import lower_lanes
    from gpusafe_testkit.bench_kernels import BENCH_KERNELS
    monkeypatch.setattr(cores, "MIN_RANGE_THREADS", 32)
    program = Program(nvrtc_compile(BENCH_KERNELS, "k.cu", "compute_75", ()), DeviceMemory())
    histogram = next(f for f in program.module.functions if f.name == "histogram")
    for lowered in (lower_kernel(histogram), lower_lanes(histogram)):
        assert (lowered.atomics, lowered.ir.count(" atomicrmw ")) == (1, 1)
    assert engine.compile_function(histogram).parallel
    x = np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8)
    ran, real = [], engine.run
    monkeypatch.setattr(engine, "run", lambda launch: (real(launch), ran.append("jit")))
    for threads, lanes in ((1, "1"), (3, "1"), (3, "only")):
        monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
        monkeypatch.setenv("GPUSAFE_CPU_THREADS", str(threads))
        monkeypatch.setenv("GPUSAFE_JIT_LANES", lanes)
        mem = DeviceMemory()
        program = Program(nvrtc_compile(BENCH_KERNELS, "k.cu", "compute_75", ()), mem)
        px, bins = mem.alloc(x.nbytes), mem.alloc(1024)
        mem.write(px, x)
        mem.write(bins, np.zeros(256, np.uint32))
        program.launch("histogram", (6, 1, 1), (96, 1, 1), 0, struct.pack("<QQi", px, bins, 5000))
        assert np.array_equal(np.frombuffer(mem.read(bins, 1024), np.uint32),
                              np.bincount(x, minlength=256))
    assert ran == ["jit"] * 3


def test_a_launch_splits_by_the_work_its_last_launch_measured(monkeypatch):
    """The histogram's 16384 threads are under MIN_RANGE_THREADS, but each
    runs ~600 instructions: once a launch has measured that, the next one
    is split over the threads; a short kernel of as many threads is not."""
    monkeypatch.setattr(cores, "MIN_RANGE_THREADS", 32768)
    assert cores.block_ranges(64, 2, 256) == [(0, 64)]
    assert len(cores.block_ranges(64, 2, 256, per_thread=616.0)) == 8
    assert cores.block_ranges(64, 2, 256, per_thread=22.0) == [(0, 64)]
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
    program = Program(nvrtc_compile(VADD, "k.cu", "compute_75", ()), DeviceMemory())
    n = 5 * 64
    out, a, b = (program.memory.alloc(4 * n) for _ in range(3))
    result = program.launch("vadd", (5, 1, 1), (64, 1, 1), 0, struct.pack("<QQQi", out, a, b, n))
    vadd = next(f for f in program.module.functions if f.name == "vadd")
    assert engine.compile_function(vadd).per_thread == result.instructions / n


INC_DEC = r"""
extern "C" __global__ void wrap(unsigned* c, unsigned* olds)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    olds[i] = atomicInc(&c[0], 37u) ^ atomicDec(&c[1], 41u);
}
"""


def test_global_inc_and_dec_are_llvm_atomics_and_run_on_every_thread(monkeypatch):
    """``atom.inc``/``atom.dec`` (what an instrumented kernel's tally counts
    with below sm_90) are LLVM's wrapping atomics, so such a kernel keeps
    both cores; the counters end as the interpreter's."""
    monkeypatch.setattr(cores, "MIN_RANGE_THREADS", 32)
    source = nvrtc_compile(INC_DEC, "k.cu", "compute_75", ())
    assert "atom.global.inc.u32" in source and "atom.global.dec.u32" in source
    wrap = next(f for f in Program(source, DeviceMemory()).module.functions if f.name == "wrap")
    assert engine.compile_function(wrap).parallel
    finals = []
    for eng, threads in (("interp", 1), ("jit", 1), ("jit", 4)):
        monkeypatch.setenv("GPUSAFE_CPU_ENGINE", eng)
        monkeypatch.setenv("GPUSAFE_CPU_THREADS", str(threads))
        mem = DeviceMemory()
        program = Program(source, mem)
        c, olds = mem.alloc(8), mem.alloc(4 * 12 * 96)
        mem.write(c, np.array([5, 3], np.uint32))
        program.launch("wrap", (12, 1, 1), (96, 1, 1), 0, struct.pack("<QQ", c, olds))
        finals.append(bytes(mem.read(c, 8)))
    n = 12 * 96
    assert finals == [np.array([(5 + n) % 38, (3 - n) % 42], np.uint32).tobytes()] * 3
