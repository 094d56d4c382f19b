"""GPUSAFE_CPU_ENGINE=auto (the default): a kernel is interpreted until compiling
it pays, then compiled; the results are the same either way, and only a
launch worth compiling that the JIT refused is named in the report's notes."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from test_cpu_jit import engine_notes

from gpusafe.backends.cpu import CpuBackend
from gpusafe.cpu import scheduler
from gpusafe.cpu.jit import cache, engine, tiers
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe_testkit.corpus import nvrtc_compile

VADD = r"""
extern "C" __global__ void vadd(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""

REFUSED = r"""
extern "C" __global__ void twice_all(int* p)
{
    __shared__ int s[32];
    s[threadIdx.x] = p[threadIdx.x];
    int v = ((volatile int*)s)[threadIdx.x];  // ld.volatile.shared: the JIT refuses it
    p[threadIdx.x] = 2 * threadIdx.x + v * 0;
}
"""

N = 256


@pytest.fixture(scope="module")
def vadd_ptx() -> str:
    return nvrtc_compile(VADD, "auto.cu", "compute_75", ())


@pytest.fixture
def auto(tmp_path, monkeypatch):
    """The default engine, an empty disk cache, no kernel named yet."""
    monkeypatch.delenv("GPUSAFE_CPU_ENGINE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(scheduler, "INTERPRETED", {})
    monkeypatch.setattr("gpusafe.backends.cpu.INTERPRETED", scheduler.INTERPRETED)
    return monkeypatch


class Vadd:
    """One program (one decoded kernel, so one tier record) and its buffers."""

    def __init__(self, ptx: str) -> None:
        self.mem = DeviceMemory()
        self.program = Program(ptx, self.mem)
        rng = np.random.default_rng(5)
        self.a = rng.random(N, dtype=np.float32)
        self.b = rng.random(N, dtype=np.float32)
        self.out = self.mem.alloc(4 * N)
        ins = []
        for arr in (self.a, self.b):
            ins.append(self.mem.alloc(arr.nbytes))
            self.mem.write(ins[-1], arr)
        self.params = struct.pack("<3Qi", self.out, *ins, N)

    def launch(self) -> tuple[bytes, int]:
        self.mem.write(self.out, np.zeros(N, np.float32))
        result = self.program.launch("vadd", (N // 64, 1, 1), (64, 1, 1), 0, self.params)
        out = self.mem.read(self.out, 4 * N)
        assert np.frombuffer(out, np.float32).tolist() == (self.a + self.b).tolist()
        return out, result.instructions


def test_the_default_is_auto_and_a_small_launch_is_interpreted(auto, vadd_ptx):
    assert tiers.engine() == "auto"
    notes = engine_notes(auto)
    Vadd(vadd_ptx).launch()
    assert notes[0].startswith("interpreter (auto: not worth compiling yet")
    assert CpuBackend.notes(None) == []  # type: ignore[arg-type]


def test_a_big_launch_is_compiled_at_once(auto, vadd_ptx):
    auto.setattr(tiers, "TIER_INSTRUCTIONS", 1000)
    notes = engine_notes(auto)
    v = Vadd(vadd_ptx)
    first, count = v.launch()
    assert notes == ["jit"]
    auto.setenv("GPUSAFE_CPU_ENGINE", "interp")
    assert v.launch() == (first, count)
    assert notes[-1] == ""


def test_a_kernel_is_compiled_once_its_interpreted_launches_add_up(auto, vadd_ptx):
    """Ski rental: interpreted while the thread-instructions so far are below
    the threshold, compiled from the launch after they reach it, the same
    bytes and counts throughout."""
    v = Vadd(vadd_ptx)
    notes = engine_notes(auto)
    _, count = v.launch()  # one launch: what the threshold is measured in
    auto.setattr(tiers, "TIER_INSTRUCTIONS", 3 * count)
    auto.setattr(tiers, "TIER_SECONDS", 1e9)  # the count decides, not the machine's load
    results = {v.launch() for _ in range(4)}
    assert len(results) == 1
    assert [n == "jit" for n in notes] == [False, False, False, True, True]


def test_interpreter_time_also_pays_for_a_compile(auto, vadd_ptx):
    auto.setattr(tiers, "TIER_SECONDS", 1e-9)  # any interpreted launch reaches it
    notes = engine_notes(auto)
    v = Vadd(vadd_ptx)
    assert v.launch() == v.launch()
    assert notes[0] != "jit" and notes[1] == "jit"


def test_disk_cached_code_is_used_only_for_a_launch_worth_the_link(auto, vadd_ptx):
    auto.setenv("GPUSAFE_CPU_ENGINE", "jit")
    auto.setattr(engine, "_CACHE", {})  # compiled here, so written to this disk cache
    Vadd(vadd_ptx).launch()
    auto.setattr(engine, "_CACHE", {})  # as in a new process
    auto.delenv("GPUSAFE_CPU_ENGINE")
    notes = engine_notes(auto)
    auto.setattr(tiers, "DISK_INSTRUCTIONS", 10**9)
    Vadd(vadd_ptx).launch()
    assert notes[-1].startswith("interpreter (auto")  # small: interpreted, cache or not
    auto.setattr(tiers, "DISK_INSTRUCTIONS", 1)
    hits, compiled = cache.DISK.hits, engine.STATS.compiled
    Vadd(vadd_ptx).launch()
    assert notes[-1] == "jit"
    assert (cache.DISK.hits, engine.STATS.compiled) == (hits + 1, compiled)


def _twice(monkeypatch) -> list[int]:
    mem = DeviceMemory()
    program = Program(nvrtc_compile(REFUSED, "refused.cu", "compute_75", ()), mem)
    out = mem.alloc(4 * 32)
    program.launch("twice_all", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out))
    return np.frombuffer(mem.read(out, 4 * 32), np.int32).tolist()


def test_only_a_refused_launch_worth_compiling_is_named(auto):
    """A kernel the JIT does not cover (a volatile shared load) is no note while the policy
    interprets it, and named with the lowering's reason once a launch would
    have paid; the results are the interpreter's both times."""
    notes = engine_notes(auto)
    assert _twice(auto) == [2 * i for i in range(32)]
    assert notes[-1].startswith("interpreter (auto") and scheduler.INTERPRETED == {}
    auto.setattr(tiers, "TIER_INSTRUCTIONS", 10)
    assert _twice(auto) == [2 * i for i in range(32)]
    assert notes[-1].startswith("interpreter: ")
    assert list(scheduler.INTERPRETED) == ["twice_all"]
    assert CpuBackend.notes(None)[0].startswith(  # type: ignore[arg-type]
        "kernel twice_all ran on the CPU device's interpreter, not its JIT: ")


def test_an_unknown_engine_is_an_error(auto, vadd_ptx):
    auto.setenv("GPUSAFE_CPU_ENGINE", "llvm")
    with pytest.raises(ValueError, match="GPUSAFE_CPU_ENGINE='llvm'"):
        tiers.engine()
    auto.setenv("GPUSAFE_CPU_ENGINE", "Interpreter")
    assert tiers.engine() == "interp"
