"""Site tallies (issue 14, design B): an inline root or window check that
fails counts the access in its site's tally and keeps the first
``TALLY_OFFENDERS`` offenders (address, thread, block); the host classifies
their kind and allocation from the site, the launch's root bounds and the
variable's state space.  The count stays exact, nothing is dropped, and the
kinds are those the runtime's order gives."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from test_instrument_cpu import VADD, Buf, assert_same, f32, run_both

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.checking import Policy
from gpusafe.engine.launches import LaunchPipeline
from gpusafe.report.model import DEFAULT_MAX_THREADS
from gpusafe_instrument import host, layout
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.kinds import ViolationKind
from gpusafe_instrument.layout import TALLY_OFFENDERS
from gpusafe_instrument.sites import Site, SiteTable
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

GENERIC_SHARED = r"""
extern "C" __global__ void gen(int* out, int k, int skew)
{
    __shared__ int s[32];
    int* p = s;
    p[threadIdx.x] = threadIdx.x;
    __syncthreads();
    int* q = (int*)((char*)(p + threadIdx.x + k) + skew);
    out[threadIdx.x] = *q;
}
"""


@functools.cache
def _assembled(source: str, options: tuple[str, ...] = ()) -> str:
    """NVRTC's PTX of ``source``, after checking that ptxas accepts its
    instrumented form."""
    text = nvrtc_compile(source, "k.cu", "compute_75", options)
    ptxas(instrument(text).ptx, "sm_75")
    return text


def _by_line(o) -> dict[tuple[str, int], int]:
    """(kind, PTX line) -> how many of the oracle's violations."""
    out: dict[tuple[str, int], int] = {}
    for k in o.oracle:
        out[k[0], k[1]] = out.get((k[0], k[1]), 0) + 1
    return out


def test_a_generic_address_past_a_shared_array_is_classified_shared_out_of_bounds():
    """-G code reaches ``s`` through a generic pointer: the site is a window
    on a shared variable, and its tally's offenders are shared
    out-of-bounds (the host knows the variable's space; no kind is stored)."""
    text = _assembled(GENERIC_SHARED, ("-G",))
    o = run_both(None, "gen", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.int32)), np.int32(8), np.int32(0)], ptx_text=text)
    assert {k[0] for k in o.device} == {"shared-out-of-bounds"}
    assert o.occurrences == 8  # threads 24..31 read s[32..39]
    assert [k[3][0] for k in o.device] == list(range(24, 24 + TALLY_OFFENDERS))
    assert_same(o)


def test_a_misaligned_access_inside_a_shared_array_counts_in_the_sites_second_tally():
    """The host knows no shared variable's address, so a window site keeps
    the accesses inside the variable but misaligned in a second tally; an
    access both outside and misaligned is out of bounds (the runtime's
    order)."""
    text = _assembled(GENERIC_SHARED, ("-G",))
    o = run_both(None, "gen", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.int32)), np.int32(0), np.int32(2)], ptx_text=text)
    found = _by_line(o)
    assert sorted(found.values()) == [1, 31]
    assert {k for k, _ in found} == {"misaligned-access", "shared-out-of-bounds"}
    assert [k[3][0] for k in o.device if k[0] == "shared-out-of-bounds"] == [31]
    assert [k[3][0] for k in o.device if k[0] == "misaligned-access"] == \
        list(range(TALLY_OFFENDERS))
    assert_same(o)


@pytest.mark.parametrize("options", [("-G",), ()], ids=["G", "O3"])
def test_a_window_access_one_byte_past_its_room_is_out_of_bounds_not_misaligned(options):
    """The window's slow path compares the offset from the variable with
    the room the variable leaves for the access (issue 14, regw): thread 31
    reads 4 bytes at byte 125 of 128 (out of bounds, the first tally), the
    others misaligned inside (the second)."""
    text = _assembled(GENERIC_SHARED, options)
    o = run_both(None, "gen", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.int32)), np.int32(0), np.int32(1)], ptx_text=text)
    assert sorted(_by_line(o).values()) == [1, 31]
    assert [k[3][0] for k in o.device if k[0] == "shared-out-of-bounds"] == [31]
    assert_same(o)


def test_a_generic_address_below_a_shared_array_is_refused():
    """The offset from the variable is compared unsigned: an address below
    it wraps above the room (thread 0 reads 3 bytes before ``s``) and counts
    in the first tally, not performed.  (Its kind: the oracle finds no
    shared memory there and says global out of bounds, the host names the
    variable's space, as before this slow path.)"""
    text = _assembled(GENERIC_SHARED, ("-G",))
    o = run_both(None, "gen", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.int32)), np.int32(-1), np.int32(1)], ptx_text=text)
    assert o.occurrences == 32
    below = [k for k in o.device if k[3][0] == 0]
    assert len(below) == 1 and below[0][0] != "misaligned-access"


def _vadd_launch(out_floats: int, free_a: bool):
    """vadd over 32 threads with ``out`` holding ``out_floats`` floats and
    ``a`` freed before the launch when ``free_a``: the violations and the
    tags of out, a, b."""
    text = _assembled(VADD)
    result = instrument(text)
    mem = DeviceMemory()
    out, a, b = mem.alloc(4 * out_floats), mem.alloc(128), mem.alloc(128)
    mem.write(a, f32(32).tobytes())
    mem.write(b, f32(32).tobytes())
    tags = {x.base: x.tag for x in mem.allocations}
    if free_a:
        mem.free(a)
    info = result.sites.kernels["vadd"]
    params = bytearray(info.context_param_offset)
    for (_, at, size), value in zip(info.params, (out, a, b, 32), strict=True):
        params[at:at + size] = value.to_bytes(size, "little")
    pipeline = LaunchPipeline(mem)
    records = [host.AllocationRecord(x.tag, x.base, x.size, x.live) for x in mem.allocations]
    launch = pipeline.prepare(result.sites, "vadd", bytes(params), records)
    Program(result.ptx, mem).launch("vadd", (1, 1, 1), (32, 1, 1), 0, launch.params)
    found, dropped = pipeline.collect(launch)
    assert dropped == 0
    return found, (tags[out], tags[a], tags[b])


def test_a_use_after_free_and_an_out_of_bounds_are_classified_on_the_host():
    found, (out, a, _) = _vadd_launch(24, free_a=True)
    by_site = {}
    for v in found:
        by_site.setdefault((v.kind, v.tag, v.site.access), []).append(v)
    assert set(by_site) == {(ViolationKind.USE_AFTER_FREE, a, "read"),
                            (ViolationKind.GLOBAL_OUT_OF_BOUNDS, out, "write")}
    freed = by_site[ViolationKind.USE_AFTER_FREE, a, "read"]
    assert sum(v.count for v in freed) == 32  # every thread reads the freed a
    assert [v.thread[0] for v in freed] == list(range(TALLY_OFFENDERS))
    past = by_site[ViolationKind.GLOBAL_OUT_OF_BOUNDS, out, "write"]
    assert sum(v.count for v in past) == 8  # out[24..31]
    assert [v.thread[0] for v in past] == list(range(24, 24 + TALLY_OFFENDERS))


def test_one_site_past_its_end_keeps_its_first_offenders_and_counts_them_all():
    found, (out, _, _) = _vadd_launch(32, free_a=False)
    assert found == []
    found, (out, _, _) = _vadd_launch(20, free_a=False)
    assert {(v.kind, v.tag) for v in found} == {(ViolationKind.GLOBAL_OUT_OF_BOUNDS, out)}
    assert sum(v.count for v in found) == 12
    # the store's one site: the last offender kept stands for the rest
    assert [v.count for v in found] == [1] * (TALLY_OFFENDERS - 1) + [12 - TALLY_OFFENDERS + 1]


def _door_report(n: int, n_buffer: int, policy: Policy | None = None) -> dict:
    """The JSON report of vadd over ``n`` threads (one block) with buffers
    of ``n_buffer`` floats, launched through the Python door on a CPU
    device."""
    from cuda.bindings import driver as cuda_driver

    from gpusafe.backends.cpu import CpuBackend
    from gpusafe.doors.python_driver import DriverDoor
    from gpusafe.engine.checking import Engine
    from gpusafe.engine.findings import Findings
    from gpusafe.report import ReportBuilder

    backend = CpuBackend()
    drv = backend.driver
    real = {name: getattr(drv, name) for name in dir(cuda_driver) if name.startswith("cu")
            and hasattr(drv, name)}
    engine = Engine(backend, Findings(ReportBuilder(["app"], "cpu")), policy or Policy())
    w = {**real, **DriverDoor(engine, real).wrappers()}

    def ok(result):
        assert int(result[0]) == 0, result
        return result[1] if len(result) == 2 else None

    ok(w["cuInit"](0))
    ctx = ok(w["cuCtxCreate"](None, 0, ok(w["cuDeviceGet"](0))))
    module = ok(w["cuModuleLoadData"](_assembled(VADD).encode() + b"\0"))
    fn = ok(w["cuModuleGetFunction"](module, b"vadd"))
    bufs = [ok(w["cuMemAlloc"](4 * n_buffer)) for _ in range(3)]
    args = [np.array([int(b)], np.uint64) for b in bufs] + [np.array([n], np.int32)]
    params = np.array([a.ctypes.data for a in args], np.uint64)
    ok(w["cuLaunchKernel"](fn, 1, 1, 1, n, 1, 1, 0, 0, params.ctypes.data, 0))
    ok(w["cuCtxSynchronize"]())
    engine.drain()
    report = engine.findings.report.build(exit_code=0).to_dict()
    ok(w["cuCtxDestroy"](ctx))
    return report


@pytest.mark.slow  # a CPU backend, the engine and the door: about 1.2 s
def test_sites_overflowing_in_one_launch_are_entries_with_exact_counts_in_the_report():
    """Through the engine: three sites of vadd overflow in one launch (a, b
    read past their end, out written past it), sixteen threads each, more
    than a tally keeps; each entry counts all sixteen and lists the first
    offenders, with the allocation the host classified."""
    report = _door_report(64, 48)
    entries = sorted(report["violations"], key=lambda v: v["ptx_line"])
    assert len(entries) == 3
    for e in entries:
        assert e["kind"] == "global-out-of-bounds"
        assert e["count"] == 16
        assert [t["thread"][0] for t in e["threads"]] == list(range(48, 48 + TALLY_OFFENDERS))
        assert e["allocation"]["offset"] == 4 * 48 and e["allocation"]["size"] == 4 * 48
    assert report["summary"]["occurrences"] == 48 and report["summary"]["dropped"] == 0


@pytest.mark.slow  # as above
def test_every_offender_keeps_each_failing_access_past_what_a_tally_holds():
    """``gpusafe run --every-offender``: the same launch, each bad access a
    violation record; the report lists as many threads as an entry shows
    (8), where the tallies kept 4."""
    report = _door_report(64, 48, Policy(every_offender=True))
    entries = sorted(report["violations"], key=lambda v: v["ptx_line"])
    assert len(entries) == 3
    for e in entries:
        assert e["kind"] == "global-out-of-bounds" and e["count"] == 16
        assert [t["thread"][0] for t in e["threads"]] == list(range(48, 48 + DEFAULT_MAX_THREADS))
        assert e["allocation"]["offset"] == 4 * 48 and e["allocation"]["size"] == 4 * 48
    assert report["summary"]["occurrences"] == 48 and report["summary"]["dropped"] == 0


def _site(**fields) -> Site:
    base = dict(id=0, function="k", ptx_line=1, file=None, line=None, column=None,
                instruction="st.global.u32 [%rd1], %r1;", access="write", width=4,
                space="global", check="root", root="k_param_0", tally=0, alignment=4,
                root_index=0)
    return Site(**{**base, **fields})


LOW, HIGH = 0x10000, 0x20000


@pytest.mark.parametrize(("address", "live", "kind"), [
    (0x10, True, ViolationKind.NULL_POINTER),
    (LOW - 4, False, ViolationKind.GLOBAL_OUT_OF_BOUNDS),  # below: outside wins over freed
    (HIGH, False, ViolationKind.GLOBAL_OUT_OF_BOUNDS),  # at the end
    (LOW, False, ViolationKind.USE_AFTER_FREE),
    (HIGH - 2, True, ViolationKind.GLOBAL_OUT_OF_BOUNDS),  # runs past the end
    (LOW + 2, True, ViolationKind.MISALIGNED_ACCESS),
])
def test_a_root_offender_is_classified_in_the_runtimes_order(address, live, kind):
    root = host.ResolvedRoot(0, LOW, HIGH, 7, live)
    assert host.classify_root(_site(), address, root) == \
        (kind, 0 if kind is ViolationKind.NULL_POINTER else 7)


def test_a_root_offender_the_host_finds_good_is_named_not_passed():
    root = host.ResolvedRoot(0, LOW, HIGH, 7, True)
    with pytest.raises(host.UnclassifiedTally, match="inside root"):
        host.classify_root(_site(), LOW + 4, root)


def test_a_tally_keeps_the_first_offenders_and_counts_the_rest_in_the_last():
    site = _site()
    area = bytearray(layout.tally_size())
    at = len(area) + layout.tally_offset(0)
    area[at:at + 8] = layout.SITE_TALLY.pack(count=9)
    for k in range(TALLY_OFFENDERS):
        o = len(area) + layout.offender_offset(0, k)
        area[o:o + layout.OFFENDER.size] = layout.OFFENDER.pack(
            address=HIGH + 4 * k, thread=k | 2 << 10 | 3 << 20, block_x=5,
            block_yz=6 | 7 << 16)
    found = host.decode_tallies(bytes(area), SiteTable([site], tally_count=1),
                                [host.ResolvedRoot(0, LOW, HIGH, 7, True)])
    assert [(v.address, v.thread, v.block, v.count) for v in found] == [
        (HIGH + 4 * k, (k, 2, 3), (5, 6, 7), 1 if k < TALLY_OFFENDERS - 1 else 6)
        for k in range(TALLY_OFFENDERS)]
    assert {(v.kind, v.tag, v.width) for v in found} == \
        {(ViolationKind.GLOBAL_OUT_OF_BOUNDS, 7, 4)}


def test_the_site_table_keeps_its_tallies_through_json():
    table = SiteTable([_site(), _site(id=1, check="window", space="generic", root="s",
                                      tally=1, root_index=-1, root_space="shared")],
                      tally_count=3)
    again = SiteTable.from_json(table.to_json())
    assert again.sites == table.sites and again.tally_count == 3
    assert [s.tallies for s in again.sites] == [1, 2]


CONSTANT = r"""
__constant__ float cw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
extern "C" __global__ void cread(float* out, int k)
{
    const float* p = cw;
    out[threadIdx.x] = p[threadIdx.x + k];
}
"""


def test_a_generic_read_past_a_constant_array_is_a_window_check():
    """``-G`` code reads a ``__constant__`` array through a generic pointer
    (``cvta.const``): the variable is a window (issue 14, regw), judged
    inline where the runtime's lookup was called (52 -> 34 registers for
    ``stencil_1d`` -G sm_80), and a read past it is global out of bounds
    (constant memory is in the global window), as the oracle finds it."""
    text = _assembled(CONSTANT, ("-G",))
    result = instrument(text)
    assert [s.root for s in result.sites.sites if s.check == "window"] == ["cw"]
    assert "__gpusafe_check" not in result.ptx.split(".entry cread")[1]
    o = run_both(None, "cread", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.float32)), np.int32(2)], ptx_text=text)
    assert {k[0] for k in o.device} == {"global-out-of-bounds"}
    assert o.occurrences == 2  # cw[8], cw[9]
    assert_same(o)


def test_a_tally_counts_with_an_atom_inc_below_sm_90():
    """Below sm_90 a tally counts with ``atom.inc`` bounded at 0xfffffffe,
    which ptxas does not turn into a warp-aggregated atomic as it does an
    ``atom.add`` of 1 whose old value is used (``records._tally_atomic``):
    ``atomic_inc_dec`` sm_75 needed 20 registers with the add (7 plain).
    At sm_90 the add stays.  The counts are exact (the vadd tests above:
    12 offenders of one site, counted through the inc at sm_75)."""
    from pathlib import Path
    text = (Path(__file__).parent / "kernels" / "atomics.cu").read_text()
    sm75 = instrument(nvrtc_compile(text, "atomics.cu", "compute_75")).ptx
    assert "atom.global.inc.u32 \t%__gs_ri" in sm75
    assert "atom.global.add.u32 \t%__gs_ri" not in sm75
    assert ptxas(sm75, "sm_75", verbose=True).registers()["atomic_inc_dec"] <= 17
    sm90 = instrument(nvrtc_compile(text, "atomics.cu", "compute_90")).ptx
    assert "atom.global.add.u32 \t%__gs_ri" in sm90
    assert "atom.global.inc.u32 \t%__gs_ri" not in sm90
