"""In-kernel ``malloc``/``free`` (the device heap) under instrumentation.

Kernels are CUDA C++ compiled by NVRTC, instrumented, and run on the CPU
device through the same launch pipeline ``gpusafe run`` uses, several
launches sharing one device memory and one pipeline (the device heap
outlives a launch).  Before the heap joined the checks, every access to a
malloc'd block was an out-of-bounds access (the block is in no table) and a
use after a device free was one too; these tests fail on that code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.findings import heap_allocation
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host, layout
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.host import DeviceViolation
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

HEAP = r"""
extern "C" __global__ void make(char** slots, int n, int over)
{
    int t = threadIdx.x;
    char* p = (char*)malloc(n);
    for (int i = 0; i < n; ++i) p[i] = (char)(t + i);
    if (over && t == 0) p[n] = 1;
    slots[t] = p;
}
extern "C" __global__ void use(char** slots, int* out, int n)
{
    int t = threadIdx.x;
    char* p = slots[t];
    int s = 0;
    for (int i = 0; i < n; ++i) s += p[i];
    out[t] = s;
}
extern "C" __global__ void release(char** slots, int twice, int offset)
{
    char* p = slots[threadIdx.x];
    free(p + offset);
    if (twice && threadIdx.x == 0) free(p);
}
extern "C" __global__ void stale(char** slots, int* out)
{
    out[threadIdx.x] = slots[threadIdx.x][0];
}
extern "C" __global__ void touch(char* p, int n)
{
    if (threadIdx.x <= n) p[threadIdx.x] += 1;
}
"""

MALLOC_LINE = 5  # `char* p = (char*)malloc(n);` in HEAP
FREE_LINE = 21  # `free(p + offset);`
THREADS = 32
N = 16


@pytest.fixture(scope="module")
def heap_module():
    text = nvrtc_compile(HEAP, "heap.cu", "compute_75", ("-lineinfo",))
    return text, instrument(text)


@dataclass
class Device:
    """One CPU device memory, the instrumented module loaded on it, and the
    launch pipeline: what a checked process has across launches."""

    memory: DeviceMemory
    program: Program
    sites: object
    pipeline: LaunchPipeline
    slots: int
    out: int

    def launch(self, kernel: str, *args: int) -> list[DeviceViolation]:
        info = self.sites.kernels[kernel]  # type: ignore[attr-defined]
        params = bytearray(info.context_param_offset)
        for (_, offset, size), value in zip(info.params, args, strict=True):
            params[offset:offset + size] = int(value).to_bytes(size, "little")
        records = [host.AllocationRecord(a.tag, a.base, a.size, a.live)
                   for a in self.memory.allocations if not a.label]
        launch = self.pipeline.prepare(self.sites, kernel, bytes(params), records)  # type: ignore[arg-type]
        self.heap = launch.heap
        self.program.launch(kernel, (1, 1, 1), (THREADS, 1, 1), 0, launch.params)
        found, dropped = self.pipeline.collect(launch)
        assert dropped == 0
        return found

    def sums(self) -> np.ndarray:
        return np.frombuffer(self.memory.read(self.out, 4 * THREADS), np.int32)

    def pointers(self) -> np.ndarray:
        return np.frombuffer(self.memory.read(self.slots, 8 * THREADS), np.uint64)


def _device(heap_module, **pipeline_options) -> Device:
    _, result = heap_module
    # as under `gpusafe run --device cpu`: the device adds no red zone of its own
    memory = DeviceMemory(red_zone=0, quarantine=0)
    slots = memory.alloc(8 * THREADS)
    out = memory.alloc(4 * THREADS)
    return Device(memory, Program(result.ptx, memory), result.sites,
                  LaunchPipeline(memory, **pipeline_options), slots, out)


def _expected_sums() -> np.ndarray:
    return np.array([sum(t + i for i in range(N)) for t in range(THREADS)], np.int32)


def test_accesses_inside_heap_blocks_report_nothing_in_this_launch_and_later_ones(heap_module):
    d = _device(heap_module)
    assert d.launch("make", d.slots, N, 0) == []
    assert d.launch("use", d.slots, d.out, N) == []  # blocks from an earlier launch
    assert np.array_equal(d.sums(), _expected_sums())
    assert d.launch("release", d.slots, 0, 0) == []


def test_a_heap_pointer_passed_as_a_kernel_argument_is_judged_against_its_block(heap_module):
    d = _device(heap_module)
    d.launch("make", d.slots, N, 0)
    p = int(d.pointers()[3])
    found = d.launch("touch", p, N)  # threads 0..N: the last one writes past the block
    assert sorted((v.kind.value, v.site.access, v.address, v.thread) for v in found) == [
        ("global-out-of-bounds", "read", p + N, (N, 0, 0)),
        ("global-out-of-bounds", "write", p + N, (N, 0, 0))]
    assert heap_allocation(d.pipeline, d.heap, found[0].tag).base == p  # type: ignore[union-attr]
    assert list(d.memory.peek(p, N)) == [3 + i + 1 for i in range(N)]


def test_a_heap_block_freed_by_an_earlier_launch_is_use_after_free_through_an_argument(
        heap_module):
    """The host resolves a pointer argument in no allocation from the heap
    table at launch: a block an earlier launch freed is judged freed."""
    d = _device(heap_module)
    d.launch("make", d.slots, N, 0)
    p = int(d.pointers()[5])
    assert d.launch("release", d.slots, 0, 0) == []
    found = d.launch("touch", p, 0)  # thread 0 reads and writes p[0]
    assert sorted((v.kind.value, v.site.access, v.address) for v in found) == [
        ("use-after-free", "read", p), ("use-after-free", "write", p)]
    info = heap_allocation(d.pipeline, d.heap, found[0].tag)
    assert info is not None and info.base == p and info.freed_at is not None


def test_one_byte_past_a_heap_block_is_out_of_bounds_of_that_block(heap_module):
    d = _device(heap_module)
    found = d.launch("make", d.slots, N, 1)
    assert len(found) == 1
    v = found[0]
    assert v.kind.value == "global-out-of-bounds" and v.site.access == "write"
    assert v.thread == (0, 0, 0) and v.width == 1
    p0 = int(d.pointers()[0])
    assert v.address == p0 + N
    info = heap_allocation(d.pipeline, d.heap, v.tag)
    assert info is not None
    assert (info.base, info.size, info.allocated_by_kernel) == (p0, N, "make")
    assert info.allocated_at is not None and info.allocated_at.endswith(f"heap.cu:{MALLOC_LINE}")
    assert info.freed_at is None
    # the bad store was not performed: the byte after the block is still zero
    assert d.memory.peek(p0 + N, 1) == b"\0"


def test_use_after_device_free_is_use_after_free(heap_module):
    d = _device(heap_module)
    d.launch("make", d.slots, N, 0)
    assert d.launch("release", d.slots, 0, 0) == []
    found = d.launch("stale", d.slots, d.out)
    assert {v.kind.value for v in found} == {"use-after-free"}
    assert len(found) == THREADS
    assert {v.tag for v in found} == {layout.HEAP_TAG_BASE + i for i in range(THREADS)}
    info = heap_allocation(d.pipeline, d.heap, found[0].tag)
    assert info is not None and info.freed_at is not None
    assert info.freed_at.endswith(f"heap.cu:{FREE_LINE}")
    assert not d.sums().any()  # a refused load yields zero


def test_freeing_a_heap_block_twice_is_a_double_free(heap_module):
    d = _device(heap_module)
    d.launch("make", d.slots, N, 0)
    found = d.launch("release", d.slots, 1, 0)
    assert [(v.kind.value, v.thread, v.site.access) for v in found] == [
        ("double-free", (0, 0, 0), "free")]
    assert found[0].address == int(d.pointers()[0])


def test_freeing_inside_a_heap_block_is_an_invalid_free_and_not_performed(heap_module):
    d = _device(heap_module)
    d.launch("make", d.slots, N, 0)
    found = d.launch("release", d.slots, 0, 1)
    assert {v.kind.value for v in found} == {"invalid-free"}
    assert len(found) == THREADS
    # refused: the blocks are still live and in use without a word
    assert d.launch("use", d.slots, d.out, N) == []
    assert np.array_equal(d.sums(), _expected_sums())


def test_freed_blocks_stay_in_quarantine_until_the_ring_is_full(heap_module):
    d = _device(heap_module, heap_ring=8)
    d.launch("make", d.slots, N, 0)
    pointers = [int(p) for p in d.pointers()]
    d.launch("release", d.slots, 0, 0)
    live = {a.base: a.live for a in d.memory.allocations}
    # the device frees the blocks in lane order: the last 8 are kept from reuse
    assert [live[p] for p in pointers] == [False] * (THREADS - 8) + [True] * 8


def test_a_full_heap_table_is_counted_and_its_blocks_frees_go_through(heap_module):
    d = _device(heap_module, heap_capacity=8)
    d.launch("make", d.slots, N, 0)
    assert d.pipeline.heap_unrecorded() == THREADS - 8
    # frees of the unrecorded blocks cannot be judged: performed, not reported
    assert d.launch("release", d.slots, 0, 0) == []


def test_heap_calls_become_runtime_calls_with_a_site_and_ptxas_accepts_them(heap_module):
    _, result = heap_module
    heap_sites = [s for s in result.sites.sites if s.check == "heap"]
    assert sorted((s.access, s.function) for s in heap_sites) == [
        ("free", "release"), ("free", "release"), ("malloc", "make")]
    text = result.ptx
    assert "__gpusafe_malloc, (" in text and "__gpusafe_free, (" in text
    assert text.count(".extern .func") == 2  # malloc and free, declared once
    for arch in ("sm_75", "sm_90"):
        ptxas(text, arch)


def test_a_module_without_malloc_gets_no_heap_wrappers():
    text = nvrtc_compile(r"""
    extern "C" __global__ void k(int* a) { a[threadIdx.x] = 1; }
    """, "k.cu", "compute_75")
    out = instrument(text).ptx
    assert "__gpusafe_malloc" not in out and "__gpusafe_free" not in out
    assert ".extern .func" not in out


def test_malloc_in_a_device_function_passes_the_context_down():
    source = r"""
    __device__ __noinline__ int* grab(int n) { return (int*)malloc(n * sizeof(int)); }
    extern "C" __global__ void k(int* out, int n)
    {
        int* p = grab(n);
        p[n] = 7;              // one int past the block
        out[threadIdx.x] = p[0];
        free(p);
    }
    """
    text = nvrtc_compile(source, "dev.cu", "compute_75", ("-lineinfo",))
    result = instrument(text)
    ptxas(result.ptx, "sm_75")
    memory = DeviceMemory(red_zone=0, quarantine=0)
    out = memory.alloc(4 * THREADS)
    info = result.sites.kernels["k"]
    params = bytearray(info.context_param_offset)
    params[0:8] = out.to_bytes(8, "little")
    params[8:12] = (4).to_bytes(4, "little")
    pipeline = LaunchPipeline(memory)
    launch = pipeline.prepare(result.sites, "k", bytes(params),
                              [host.AllocationRecord(a.tag, a.base, a.size) for a in
                               memory.allocations])
    Program(result.ptx, memory).launch("k", (1, 1, 1), (THREADS, 1, 1), 0, launch.params)
    found, _ = pipeline.collect(launch)
    assert {v.kind.value for v in found} == {"global-out-of-bounds"}
    assert len(found) == THREADS
    assert all(host.is_heap_tag(v.tag) for v in found)
    assert {heap_allocation(pipeline, launch.heap, v.tag).size for v in found} == {16}  # type: ignore[union-attr]


FREE_THEN_USE = r"""
__device__ __noinline__ void drop(int* p) { free(p); }
extern "C" __global__ void k(int* out, int via)
{
    int* p = (int*)malloc(64);
    p[2] = 3;                   // the block's window is cached now
    __syncthreads();
    p[0] = 1;                   // through the cached window
    p[1] = 2;
    if (via) drop(p); else free(p);
    out[threadIdx.x] = p[0] + p[1];
}
"""


@pytest.mark.parametrize("via", [0, 1], ids=["free", "free-in-a-callee"])
def test_a_block_freed_by_the_thread_itself_is_not_used_through_its_cached_window(via):
    text = nvrtc_compile(FREE_THEN_USE, "ftu.cu", "compute_75", ("-lineinfo",))
    result = instrument(text)
    ptxas(result.ptx, "sm_75")
    memory = DeviceMemory(red_zone=0, quarantine=0)
    out = memory.alloc(4 * THREADS)
    info = result.sites.kernels["k"]
    params = bytearray(info.context_param_offset)
    params[0:8] = out.to_bytes(8, "little")
    params[8:12] = via.to_bytes(4, "little")
    pipeline = LaunchPipeline(memory)
    launch = pipeline.prepare(result.sites, "k", bytes(params),
                              [host.AllocationRecord(a.tag, a.base, a.size) for a in
                               memory.allocations])
    Program(result.ptx, memory).launch("k", (1, 1, 1), (THREADS, 1, 1), 0, launch.params)
    found, _ = pipeline.collect(launch)
    assert [v.kind.value for v in found] == ["use-after-free"] * (2 * THREADS)
    assert not np.frombuffer(memory.read(out, 4 * THREADS), np.int32).any()


def test_a_full_heap_table_is_named_once_as_gpusafes_own_problem():
    from test_engine import make_engine

    engine, _ = make_engine()
    engine._heap_overflow()
    assert engine.findings.problems == []  # no heap table: nothing read
    engine.pipeline.heaps[1] = 0x1000
    engine.pipeline.heap_unrecorded = lambda: 24  # type: ignore[method-assign]
    engine._heap_overflow()
    engine._heap_overflow()
    assert len(engine.findings.problems) == 1
    assert engine.findings.problems[0].startswith("the device heap table is full: 24 ")


def test_blocks_of_one_malloc_fold_into_one_entry_and_the_report_round_trips():
    import json

    from jsonschema import Draft202012Validator

    from gpusafe.report import SCHEMA_PATH, AllocationInfo, Report, ReportBuilder

    b = ReportBuilder(["python", "app.py"], "cpu")
    for thread, base in enumerate((0x7F0000001000, 0x7F0000001100)):
        block = AllocationInfo(tag=layout.HEAP_TAG_BASE + thread, base=base, size=16, offset=16,
                               allocated_at="heap.cu:5", allocated_by_kernel="make")
        b.add_device_violation("global-out-of-bounds", access="write", size=1,
                               address=base + 16, kernel="make", ptx_line=40,
                               instruction="st.u8 [%rd1], %rs1;", block=(0, 0, 0),
                               thread=(thread, 0, 0), allocation=block)
    host_alloc = AllocationInfo(tag=3, base=0x7F0000002000, size=8, offset=8)
    b.add_device_violation("global-out-of-bounds", access="read", size=4,
                           address=0x7F0000002008, kernel="make", ptx_line=41,
                           instruction="ld.u32 %r1, [%rd2];", block=(0, 0, 0),
                           thread=(0, 0, 0), allocation=host_alloc)
    doc = b.build(exit_code=0).to_dict()
    Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).validate(doc)
    heap_entry, host_entry = doc["violations"]
    assert heap_entry["count"] == 2 and heap_entry["allocation"]["allocated_by_kernel"] == "make"
    assert "allocated_by_kernel" not in host_entry["allocation"]
    again = Report.from_dict(json.loads(json.dumps(doc)))
    assert again.violations[0].allocation.allocated_by_kernel == "make"  # type: ignore[union-attr]
    assert again.to_dict() == doc
