"""Device functions judge against the windows their callers pass (issue 14, design A).

A device function's pointer parameter that every checked caller passes a
known pointer (a kernel parameter's allocation, a shared variable, a local
variable, or a window the caller received) is filtered and decided inline
against that window: no ``__gpusafe_check`` call in the callee.  Each test
here is differential (the instrumented run's records against the CPU
device's access oracle: kind, PTX line, address, thread), and each proves a
case the window must not hide: an overflow seen through two call sites, a
caller passing an unknown pointer (the lookup stays), a freed argument, a
pointer passed past or before its allocation (the window is the
allocation's, not the pointer's), a shared array overrun.  Every
instrumented module is assembled by ptxas."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_instrument_cpu import Buf, PtrTable, assert_same, f32, kinds, run_both

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host, layout
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.kinds import ViolationKind
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

OPTIONS = [("-G",), ()]  # -G keeps every device function a call; NVRTC's default is -O3

TWO_SITES = r"""
__device__ __noinline__ void put(float* p, int i, float v) { p[i] = v; }

extern "C" __global__ void two_sites(float* a, float* b, int n)
{
    int t = threadIdx.x;
    put(a, t, 1.0f);
    put(b, t + n, 2.0f);
}

extern "C" __global__ void offset_past(float* a, int n)
{
    put(a + n, threadIdx.x, 3.0f);
}

extern "C" __global__ void offset_before(float* a)
{
    put(a - 1, threadIdx.x, 4.0f);
}
"""

MIXED = r"""
__device__ __noinline__ float get(const float* p, int i) { return p[i]; }

extern "C" __global__ void mixed(float* out, const float* a, float* const* table, int n)
{
    int t = threadIdx.x;
    out[t] = get(a, t) + get(table[0], t + n);
}
"""

SHARED = r"""
__device__ __noinline__ void fill(float* p, int n) { for (int k = 0; k < n; ++k) p[k] = k; }

extern "C" __global__ void shared_fill(float* out, int n)
{
    __shared__ float s[4][8];
    fill(s[threadIdx.x % 4], n);
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x % 4][0];
}
"""


def _function(ptx_text: str, name: str) -> str:
    """The body of function ``name`` (its definition, not a declaration)."""
    m = re.search(rf"\.func\s*(?:\([^)]*\)\s*)?{re.escape(name)}\([^)]*\)\s*\{{", ptx_text)
    assert m is not None, f"no definition of {name}"
    end = re.compile(r"^}", re.M).search(ptx_text, m.end())
    assert end is not None
    return ptx_text[m.end():end.start()]


def _instrumented(source: str, options) -> str:
    result = instrument(nvrtc_compile(source, "k.cu", "compute_75", options))
    for arch in ("sm_75", "sm_90"):
        ptxas(result.ptx, arch)  # raises when ptxas rejects it
    return result.ptx


def _records(source: str, kernel: str, block: int, sizes: list[int], scalars: list[int],
             options, free: int | None = None):
    """The device records of one launch (with their tags), and the tag of
    each buffer (``sizes`` floats each, passed as the first parameters)."""
    text = nvrtc_compile(source, "k.cu", "compute_75", options)
    result = instrument(text)
    mem = DeviceMemory()
    bufs = [mem.alloc(4 * n) for n in sizes]
    tags = {base: next(a.tag for a in mem.allocations if a.base == base) for base in bufs}
    if free is not None:
        mem.free(bufs[free])
    info = result.sites.kernels[kernel]
    params = bytearray(info.context_param_offset)
    for (_, at, size), value in zip(info.params, [*bufs, *scalars], strict=True):
        params[at:at + size] = (value % (1 << 8 * size)).to_bytes(size, "little")
    pipeline = LaunchPipeline(mem)
    records = [host.AllocationRecord(a.tag, a.base, a.size, a.live) for a in mem.allocations]
    launch = pipeline.prepare(result.sites, kernel, bytes(params), records)
    Program(result.ptx, mem).launch(launch.entry, (1, 1, 1), (block, 1, 1), 0, launch.params)
    found, dropped = pipeline.collect(launch)
    assert dropped == 0
    return found, [tags[b] for b in bufs], bufs


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_callee_given_kernel_pointers_at_two_sites_decides_inline(options):
    text = _instrumented(TWO_SITES, options)
    body = _function(text, "_Z3putPfif")
    assert "__gpusafe_check" not in body
    assert "__gpusafe_wd0" in body


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_an_overflow_through_the_second_site_is_the_same_record(options):
    o = run_both(TWO_SITES, "two_sites", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(np.zeros(32, np.float32)), np.int32(2)],
                 options=options)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2  # b[32], b[33]
    assert_same(o)
    assert o.stats["_Z3putPfif"]["checks"] == {"argument": 1}
    found, tags, bufs = _records(TWO_SITES, "two_sites", 32, [32, 32], [2], options)
    # the allocation is named by the tag the caller passed, as the report names it
    assert {(v.kind.value, v.tag) for v in found} == {("global-out-of-bounds", tags[1])}
    assert sorted(v.address for v in found) == [bufs[1] + 128, bufs[1] + 132]
    assert sorted(v.thread[0] for v in found) == [30, 31]


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_pointer_passed_past_its_allocation_is_judged_against_the_allocation(options):
    """The window is the root's allocation, not the pointer's: ``a + n``
    passed to ``put`` overflows ``a`` from thread ``32 - n`` on."""
    o = run_both(TWO_SITES, "offset_past", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(32, np.float32)), np.int32(28)], options=options)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 4  # threads 4..7: a[32] .. a[35]
    assert_same(o)


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_pointer_passed_before_its_allocation_is_judged_against_the_allocation(options):
    """``a - 1`` passed to ``put``: thread 0's ``p[0]`` is before ``a`` (out
    of bounds of ``a``, named by its tag), the others land inside ``a``."""
    found, tags, bufs = _records(TWO_SITES, "offset_before", 4, [32], [], options)
    assert [(v.kind.value, v.address, v.tag, v.thread[0]) for v in found] == [
        ("global-out-of-bounds", bufs[0] - 4, tags[0], 0)]
    o = run_both(TWO_SITES, "offset_before", (1, 1, 1), (4, 1, 1),
                 [Buf(np.zeros(32, np.float32))], options=options)
    assert o.occurrences == 1
    assert_same(o)


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_use_after_free_through_a_device_function_is_reported(options):
    o = run_both(TWO_SITES, "two_sites", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(np.zeros(32, np.float32), freed=True),
                  np.int32(0)], options=options)
    assert kinds(o) == {"use-after-free"}
    assert o.occurrences == 8
    assert_same(o)
    found, tags, _ = _records(TWO_SITES, "two_sites", 8, [32, 32], [0], options, free=1)
    assert {(v.kind.value, v.tag) for v in found} == {("use-after-free", tags[1])}


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_callee_given_an_unknown_pointer_at_one_site_keeps_the_lookup(options):
    text = _instrumented(MIXED, options)
    assert "__gpusafe_check" in _function(text, "_Z3getPKfi")
    args = [Buf(np.zeros(8, np.float32)), Buf(f32(8)), PtrTable([(4, 0)]), np.int32(2),
            Buf(f32(8, 10))]
    o = run_both(MIXED, "mixed", (1, 1, 1), (8, 1, 1), args, options=options)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2  # table[0][8], table[0][9]
    assert_same(o)


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_shared_array_overrun_through_a_device_function_is_reported(options):
    text = _instrumented(SHARED, options)
    assert "__gpusafe_check" not in _function(text, "_Z4fillPfi")
    quiet = run_both(SHARED, "shared_fill", (1, 1, 1), (4, 1, 1),
                     [Buf(np.zeros(4, np.float32)), np.int32(8)], options=options)
    assert quiet.device == [] and quiet.oracle == []
    assert_same(quiet)
    # row 3 ends the array: s[3][8] and s[3][9] are past it
    o = run_both(SHARED, "shared_fill", (1, 1, 1), (4, 1, 1),
                 [Buf(np.zeros(4, np.float32)), np.int32(10)], options=options)
    assert kinds(o) == {"shared-out-of-bounds"}
    assert o.occurrences == 2
    assert_same(o)


FREEING = r"""
__device__ __noinline__ int last(int* p) { int v = p[1]; free(p); return v; }

extern "C" __global__ void take(int* a, int* out) { out[0] = last(a); }
"""


def test_a_callee_that_frees_keeps_the_lookup():
    """A root's state is the one the host saw at launch: a function that may
    free a device-heap block (here the block passed to it) judges what it
    reads through its parameters by looking the address up, which sees the
    free."""
    text = _instrumented(FREEING, ())
    body = _function(text, "_Z4lastPi")
    assert "__gpusafe_check" in body
    assert "__gpusafe_wd0" not in text


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_callee_site_tallies_each_offender_with_its_own_callers_root(options):
    """An access through a decided parameter counts in its site's tally
    (issue 14, regw) and keeps the device's verdict: the host cannot tell
    which caller's root an offender came through from the site, so the kind
    and the root's bounds offset travel in the offender's ``verdict`` word.
    ``put`` overflows ``a`` (31 floats: thread 31) and ``b`` (threads 30
    and 31): each offender is named by the tag of the allocation its own
    caller passed; then a launch past what a tally keeps counts exactly."""
    result = instrument(nvrtc_compile(TWO_SITES, "k.cu", "compute_75", options))
    (site,) = [s for s in result.sites.sites if s.check == "argument"]
    assert site.tally >= 0
    found, tags, bufs = _records(TWO_SITES, "two_sites", 32, [31, 32], [2], options)
    assert sorted((v.kind.value, v.address, v.tag, v.count) for v in found) == sorted([
        ("global-out-of-bounds", bufs[0] + 124, tags[0], 1),
        ("global-out-of-bounds", bufs[1] + 128, tags[1], 1),
        ("global-out-of-bounds", bufs[1] + 132, tags[1], 1)])
    found, tags, bufs = _records(TWO_SITES, "two_sites", 40, [32, 32], [2], options)
    assert sum(v.count for v in found) == 18  # a[32..39], b[32..41]
    assert len(found) == layout.TALLY_OFFENDERS


def test_an_argument_offender_is_classified_from_its_callers_descriptor():
    """The host classifies an argument site's offender from the descriptor
    its caller passed: a root's (its bounds' offset in the launch context)
    against that root's bounds, a variable's (its out-of-bounds kind) as a
    window's; a descriptor naming no root of the launch, or no kind, is the
    two sides of the ABI disagreeing: gpusafe's own failure, never a pass."""
    site = host.Site(0, "f", 1, None, None, None, "st.f32 [%rd1], %f1;", "write", 4,
                     "generic", "argument", tally=3, alignment=4)
    live = host.ResolvedRoot(0, 0x10000, 0x10100, 7, True)
    freed = host.ResolvedRoot(0, 0x20000, 0x20100, 8, False)
    roots = [live, freed]
    at = layout.root_offset

    def verdict(address: int, descriptor: int, tally: int = 3) -> tuple[str, int]:
        kind, tag = host.classify_argument(site, address, tally, descriptor, roots)
        return kind.value, tag

    assert verdict(0x10100, at(0)) == ("global-out-of-bounds", 7)
    assert verdict(0x100FE, at(0)) == ("global-out-of-bounds", 7)  # 2 bytes left
    assert verdict(0x10002, at(0)) == ("misaligned-access", 7)
    assert verdict(0x20000, at(1)) == ("use-after-free", 8)
    assert verdict(0x10, at(1)) == ("null-pointer", 0)
    shared = ViolationKind.SHARED_OUT_OF_BOUNDS.code
    assert verdict(0x7000_0000, shared) == ("shared-out-of-bounds", 0)
    assert verdict(0x7000_0002, shared, tally=4) == ("misaligned-access", 0)
    assert verdict(0x10, shared) == ("null-pointer", 0)
    with pytest.raises(host.UnclassifiedTally):
        verdict(0x10008, at(0))  # inside the root, aligned: the device refused a good access
    with pytest.raises(host.UnclassifiedTally):
        verdict(0x10100, at(2))
    with pytest.raises(host.UnclassifiedTally):
        verdict(0x7000_0000, 0)
