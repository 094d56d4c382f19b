"""Differential tests on the CPU device: a kernel's uninstrumented run, checked
by the oracle (``gpusafe.cpu.oracle``), against its instrumented run, checked
by the inserted code and the device runtime.  The violations the instrumented
PTX records (decoded through the site table) must equal the oracle's — same
kind, same PTX line, same address, same thread — and every output must be
identical (a bad access is not performed by either: a load yields zero, a
store is dropped).  An inline check site keeps only its first
``layout.TALLY_OFFENDERS`` offenders and counts the rest (issue 14, design
B): per PTX line the count equals the oracle's, each offender kept is one the
oracle saw, and as many are kept as the tallies hold.  The same launch is
also run built with ``every_offender`` (``gpusafe run --every-offender``),
where each failing access writes a record: there the violations must equal
the oracle's one for one, as every test here asked before site tallies.

Each violation kind that can happen on the device has a test here that fails
if its check is removed: the kind must be *reported by the instrumented
code*, not only by the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host, layout
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile

# --------------------------------------------------------------------------
# the harness


@dataclass
class Buf:
    """A device buffer argument: its initial bytes; ``freed`` frees it before launch."""

    data: np.ndarray
    freed: bool = False
    offset: int = 0  # the pointer passed is base + offset


@dataclass
class Null:
    pass


@dataclass
class PtrTable:
    """A buffer of pointers to other Buf arguments (index into the args list,
    byte offset); ``None`` entries are null."""

    targets: list[tuple[int, int] | None]


@dataclass
class Outcome:
    oracle: list[tuple]
    device: list[tuple]  # the offenders the device kept (every one, for a record site)
    occurrences: int  # what the device counted: every bad access
    counts: dict[int, int]  # PTX line -> what the device counted there
    tallied: set[int]  # PTX lines of tallied sites
    plain_out: list[bytes]
    checked_out: list[bytes]
    dropped: int
    plain_instructions: int
    checked_instructions: int
    stats: dict = field(default_factory=dict)
    every: list[tuple] = field(default_factory=list)
    """Every offender an every-offender build (``instrument(every_offender=True)``)
    recorded: the same launch, each failing access a violation record"""
    every_out: list[bytes] = field(default_factory=list)
    every_dropped: int = 0
    oracle_allocations: list[tuple] = field(default_factory=list)
    """(kind, PTX line, address, base of the allocation the oracle found the
    address in, or 0), sorted"""
    device_allocations: list[tuple] = field(default_factory=list)
    """the same from the device's records: the base of the allocation their
    tag names (0: tag 0); tallied offenders are left out (no tag)"""


def _key_oracle(v) -> tuple:
    return (str(v.kind), v.ptx_line, v.address, v.thread, v.block)


def _key_device(v) -> tuple:
    return (str(v.kind), v.site.ptx_line, v.address, v.thread, v.block)


def _place(mem: DeviceMemory, args: list) -> list[int | None]:
    addrs: list[int | None] = []
    for a in args:
        if isinstance(a, Buf):
            raw = a.data.tobytes()
            base = mem.alloc(max(len(raw), 1))
            mem.write(base, raw)
            addrs.append(base)
        elif isinstance(a, PtrTable):
            addrs.append(mem.alloc(8 * len(a.targets)))
        else:
            addrs.append(None)
    for a, base in zip(args, addrs, strict=True):
        if isinstance(a, PtrTable):
            vals = [0 if t is None else addrs[t[0]] + t[1] for t in a.targets]
            mem.write(base, np.array(vals, dtype=np.uint64).tobytes())
    for a, base in zip(args, addrs, strict=True):
        if isinstance(a, Buf) and a.freed:
            mem.free(base)
    return addrs


def _pack(params: list[tuple[str, int, int]], args: list, addrs: list[int | None]) -> bytes:
    size = params[-1][1] + params[-1][2] if params else 0
    buf = bytearray(size)
    # arguments past the kernel's parameters are buffers only pointed to (PtrTable)
    for (_, off, psize), a, base in zip(params, args, addrs, strict=False):
        if isinstance(a, Buf):
            val = (base + a.offset).to_bytes(8, "little")
        elif isinstance(a, PtrTable):
            val = base.to_bytes(8, "little")
        elif isinstance(a, Null):
            val = bytes(8)
        else:
            val = np.asarray(a).tobytes()
        assert len(val) == psize, (a, psize)
        buf[off:off + psize] = val
    return bytes(buf)


def run_both(source: str | None, kernel: str, grid, block, args: list, *, shared: int = 0,
             ptx_text: str | None = None, options=(), arch: str = "compute_75") -> Outcome:
    text = ptx_text if ptx_text is not None else nvrtc_compile(source, "k.cu", arch, options)
    result = instrument(text)
    info = result.sites.kernels[kernel]

    mem1 = DeviceMemory()
    addrs1 = _place(mem1, args)
    prog1 = Program(text, mem1)
    oracle = Oracle(mem1)
    r1 = prog1.launch(kernel, grid, block, shared, _pack(list(info.params), args, addrs1),
                      observers=[oracle])
    checked = _checked_run(result, kernel, grid, block, args, shared)
    every = _checked_run(instrument(text, every_offender=True), kernel, grid, block, args,
                         shared)

    keys, counts, tallied = device_view(checked.found)
    bases = {a.tag: a.base for a in checked.mem.allocations}
    return Outcome(
        oracle=sorted(_key_oracle(v) for v in oracle.violations),
        device=keys, occurrences=sum(counts.values()), counts=counts, tallied=tallied,
        plain_out=_outputs(mem1, args, addrs1), checked_out=checked.out, dropped=checked.dropped,
        plain_instructions=r1.instructions, checked_instructions=checked.instructions,
        stats={k: s.to_dict() for k, s in result.stats.items()},
        oracle_allocations=sorted(
            (str(v.kind), v.ptx_line, v.address,
             0 if v.allocation is None else v.allocation.base)
            for v in oracle.violations),
        device_allocations=sorted(
            (str(v.kind), v.site.ptx_line, v.address, bases.get(v.tag, 0))
            for v in checked.found if v.site.tally < 0),
        every=sorted(_key_device(v) for v in every.found), every_out=every.out,
        every_dropped=every.dropped,
    )


@dataclass
class _Checked:
    """One instrumented launch: what the device recorded, and the buffers after."""

    found: list[host.DeviceViolation]
    dropped: int
    out: list[bytes]
    instructions: int
    mem: DeviceMemory


def _checked_run(result, kernel: str, grid, block, args: list, shared: int) -> _Checked:
    info = result.sites.kernels[kernel]
    mem = DeviceMemory()
    addrs = _place(mem, args)
    prog = Program(result.ptx, mem)
    allocations = [host.AllocationRecord(a.tag, a.base, a.size, a.live)
                   for a in mem.allocations]
    pipeline = LaunchPipeline(mem)
    launch = pipeline.prepare(result.sites, kernel, _pack(list(info.params), args, addrs),
                              allocations, dynamic_shared=shared, grid=grid, block=block)
    r = prog.launch(launch.entry, grid, block, shared, launch.params)
    found, dropped = pipeline.collect(launch)
    return _Checked(found, dropped, _outputs(mem, args, addrs), r.instructions, mem)


def _outputs(mem: DeviceMemory, args: list, addrs: list[int | None]) -> list[bytes]:
    return [mem.read(base, a.data.nbytes) for a, base in zip(args, addrs, strict=True)
            if isinstance(a, Buf) and not a.freed]


def device_view(found: list[host.DeviceViolation]) -> tuple[list[tuple], dict[int, int],
                                                             set[int]]:
    """What a launch's violations give to compare with the oracle: the
    offenders kept (sorted keys), the count per PTX line, the PTX lines of
    tallied sites."""
    counts: dict[int, int] = {}
    tallied: set[int] = set()
    for v in found:
        counts[v.site.ptx_line] = counts.get(v.site.ptx_line, 0) + v.count
        if v.site.tally >= 0:
            tallied.add(v.site.ptx_line)
    return sorted(_key_device(v) for v in found), counts, tallied


def differences(oracle: list[tuple], kept: list[tuple], counts: dict[int, int],
                tallied: set[int]) -> list[str]:
    """How the device's violations differ from the oracle's (none: the
    same): per PTX line the same count; at a record site the same
    violations; at a tallied site, each offender kept one the oracle saw, and
    at least as many kept as a tally holds (or all of them)."""
    out = []
    for line in sorted({k[1] for k in oracle} | {k[1] for k in kept} | set(counts)):
        seen = [k for k in oracle if k[1] == line]
        mine = [k for k in kept if k[1] == line]
        if counts.get(line, 0) != len(seen):
            out.append(f"line {line}: counted {counts.get(line, 0)}, the oracle {len(seen)}")
        if line not in tallied:
            if mine != seen:
                out.append(f"line {line}: {mine} != {seen}")
            continue
        rest = list(seen)
        for k in mine:
            if k not in rest:
                out.append(f"line {line}: kept {k}, which the oracle did not see")
            else:
                rest.remove(k)
        if len(mine) < min(len(seen), layout.TALLY_OFFENDERS):
            out.append(f"line {line}: kept {len(mine)} of {len(seen)}")
    return out


def same_violations(o: Outcome) -> bool:
    """Whether the device found what the oracle found (:func:`differences`),
    and an every-offender build every violation the oracle found."""
    return not differences(o.oracle, o.device, o.counts, o.tallied) and o.every == o.oracle


def assert_same(o: Outcome) -> None:
    assert o.dropped == 0
    assert differences(o.oracle, o.device, o.counts, o.tallied) == []
    assert o.checked_out == o.plain_out
    # as these tests compared before site tallies (issue 14): every violation
    assert o.every_dropped == 0
    assert o.every == o.oracle
    assert o.every_out == o.plain_out


def kinds(o: Outcome) -> set[str]:
    return {k[0] for k in o.device}


# --------------------------------------------------------------------------
# kernels

VADD = r"""
extern "C" __global__ void vadd(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""


def f32(n, start=0.0):
    return np.arange(start, start + n, dtype=np.float32)


def test_in_bounds_vector_add_reports_nothing_and_computes_the_same():
    o = run_both(VADD, "vadd", (4, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(128, np.float32)), Buf(f32(128)), Buf(f32(128, 7)), np.int32(128)])
    assert o.device == [] and o.oracle == []
    assert_same(o)
    assert np.array_equal(np.frombuffer(o.checked_out[0], np.float32), f32(128) + f32(128, 7))


def test_global_out_of_bounds_write_is_reported_and_dropped():
    o = run_both(VADD, "vadd", (4, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(120, np.float32)), Buf(f32(128)), Buf(f32(128, 7)), np.int32(128)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 8
    assert_same(o)


def test_global_out_of_bounds_read_yields_zero():
    o = run_both(VADD, "vadd", (1, 1, 1), (64, 1, 1),
                 [Buf(np.zeros(64, np.float32)), Buf(f32(60)), Buf(f32(64, 1)), np.int32(64)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert {k[4] for k in o.device} == {(0, 0, 0)}
    assert_same(o)
    out = np.frombuffer(o.checked_out[0], np.float32)
    assert np.array_equal(out[60:], f32(64, 1)[60:])  # a[i] read as zero


STENCIL = r"""
extern "C" __global__ void stencil(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i - 1] + 2.0f * in[i] + in[i + 1];
}
"""


def test_negative_offset_reads_before_the_allocation():
    o = run_both(STENCIL, "stencil", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(f32(32)), np.int32(32)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2  # in[-1] by thread 0, in[32] by thread 31
    assert_same(o)


SHARED = r"""
extern "C" __global__ void shift(int* out, int k)
{
    __shared__ int s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x + k];
}
"""


def test_shared_out_of_bounds_is_reported():
    o = run_both(SHARED, "shift", (1, 1, 1), (32, 1, 1), [Buf(np.zeros(32, np.int32)), np.int32(3)])
    assert kinds(o) == {"shared-out-of-bounds"}
    assert o.occurrences == 3
    assert_same(o)


DYNSHARED = r"""
extern "C" __global__ void dyn(int* out, int k)
{
    extern __shared__ int s[];
    s[threadIdx.x] = threadIdx.x * 3;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x + k];
}
"""


def test_dynamic_shared_out_of_bounds_is_reported():
    o = run_both(DYNSHARED, "dyn", (1, 1, 1), (32, 1, 1), [Buf(np.zeros(32, np.int32)), np.int32(2)],
                 shared=32 * 4)
    assert kinds(o) == {"shared-out-of-bounds"}
    assert o.occurrences == 2
    assert_same(o)


def test_dynamic_shared_in_bounds_is_quiet():
    o = run_both(DYNSHARED, "dyn", (1, 1, 1), (32, 1, 1), [Buf(np.zeros(32, np.int32)), np.int32(2)],
                 shared=34 * 4)
    assert o.device == [] and o.oracle == []
    assert_same(o)


LOCAL = r"""
extern "C" __global__ void local_idx(int* out, const int* idx, int n)
{
    int buf[8];
    int i = threadIdx.x;
    for (int k = 0; k < 8; ++k) buf[k] = k * 10 + i;
    out[i] = buf[idx[i]];
}
"""


def test_local_out_of_bounds_is_reported():
    idx = np.array([0, 3, 7, 8, 2, 9, 1, 1], np.int32)
    o = run_both(LOCAL, "local_idx", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.int32)), Buf(idx), np.int32(8)])
    assert kinds(o) == {"local-out-of-bounds"}
    assert o.occurrences == 2
    assert_same(o)


# A per-thread array overrun through a pointer inside a device function: the
# kernel passes its array's window with the pointer (gpusafe_instrument/checks/
# arguments.py).  At -G the callee writes through the generic pointer; at -O3
# NVRTC sees every caller pass a local address and writes with st.local.
LOCAL_THROUGH_POINTER = r"""
__device__ __noinline__ void fill(int* p, int n)
{
    for (int k = 0; k < n; ++k) p[k] = k * 3 + 1;
}

__device__ __noinline__ int sum(const int* p, int n)
{
    int s = 0;
    for (int k = 0; k < n; ++k) s += p[k];
    return s;
}

__device__ __noinline__ void fill_twice(int* p, int n)
{
    fill(p, n);
    fill(p, n);
}

extern "C" __global__ void local_fill(int* out, int n)
{
    int a[8];
    fill(a, n);
    int s = 0;
    for (int k = 0; k < 8; ++k) s += a[k];
    out[threadIdx.x] = s;
}

extern "C" __global__ void local_sum(int* out, int n)
{
    int a[8];
    for (int k = 0; k < 8; ++k) a[k] = k + threadIdx.x;
    out[threadIdx.x] = sum(a, n);
}

extern "C" __global__ void forwarded(int* out, int n)
{
    int a[8];
    fill_twice(a, n);
    out[threadIdx.x] = a[threadIdx.x % 8];
}

extern "C" __global__ void global_fill(int* out, int n)
{
    fill(out + 8 * threadIdx.x, n);
}
"""

OPTIONS = [("-G",), ()]  # NVRTC optimises at -O3 by default


def _lines_in(ptx_text: str, function: str, opcodes: tuple[str, ...]) -> set[int]:
    """PTX lines of ``opcodes`` inside ``function`` (the mangled name's body)."""
    lines = ptx_text.split("\n")
    start = next(i for i, line in enumerate(lines) if function in line and "(" in line)
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return {i + 1 for i in range(start, end) if lines[i].split()[:1]
            and lines[i].split()[0].startswith(opcodes)}


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_writing_a_local_array_through_a_pointer_in_bounds_is_quiet(options):
    o = run_both(LOCAL_THROUGH_POINTER, "local_fill", (1, 1, 1), (4, 1, 1),
                 [Buf(np.zeros(4, np.int32)), np.int32(8)], options=options)
    assert o.device == [] and o.oracle == []
    assert_same(o)
    assert np.array_equal(np.frombuffer(o.checked_out[0], np.int32),
                          np.full(4, sum(k * 3 + 1 for k in range(8))))
    assert o.stats["_Z4fillPii"]["checks"]["argument"] >= 1


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_overrunning_a_local_array_through_a_pointer_is_reported(options):
    text = nvrtc_compile(LOCAL_THROUGH_POINTER, "k.cu", "compute_75", options)
    o = run_both(None, "local_fill", (1, 1, 1), (4, 1, 1),
                 [Buf(np.zeros(4, np.int32)), np.int32(12)], ptx_text=text)
    assert kinds(o) == {"local-out-of-bounds"}
    assert o.occurrences == 4 * 4  # p[8] .. p[11] in each of 4 threads
    stores = _lines_in(text, "_Z4fillPii", ("st.",))
    assert {v[1] for v in o.device} <= stores
    assert_same(o)


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_reading_past_a_local_array_through_a_pointer_is_reported(options):
    text = nvrtc_compile(LOCAL_THROUGH_POINTER, "k.cu", "compute_75", options)
    o = run_both(None, "local_sum", (1, 1, 1), (2, 1, 1),
                 [Buf(np.zeros(2, np.int32)), np.int32(10)], ptx_text=text)
    assert kinds(o) == {"local-out-of-bounds"}
    assert o.occurrences == 2 * 2
    assert {v[1] for v in o.device} <= _lines_in(text, "_Z3sumPKii", ("ld.",))
    assert_same(o)


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_window_forwarded_through_a_device_function_is_checked(options):
    o = run_both(LOCAL_THROUGH_POINTER, "forwarded", (1, 1, 1), (2, 1, 1),
                 [Buf(np.zeros(2, np.int32)), np.int32(9)], options=options)
    assert kinds(o) == {"local-out-of-bounds"}
    assert o.occurrences == 2 * 2  # p[8], written twice, in each of 2 threads
    assert_same(o)


@pytest.mark.parametrize("options", OPTIONS, ids=["G", "O3"])
def test_a_global_pointer_to_the_same_function_is_still_looked_up(options):
    o = run_both(LOCAL_THROUGH_POINTER, "global_fill", (1, 1, 1), (2, 1, 1),
                 [Buf(np.zeros(12, np.int32)), np.int32(8)], options=options)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 4  # thread 1 writes out[8..15], out has 12
    assert_same(o)


def test_use_after_free_is_reported():
    o = run_both(VADD, "vadd", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Buf(f32(32), freed=True), Buf(f32(32)), np.int32(32)])
    assert kinds(o) == {"use-after-free"}
    assert o.occurrences == 32
    assert_same(o)


def test_null_pointer_is_reported():
    o = run_both(VADD, "vadd", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.float32)), Null(), Buf(f32(32)), np.int32(32)])
    assert kinds(o) == {"null-pointer"}
    assert o.occurrences == 32
    assert_same(o)


MISALIGNED = r"""
extern "C" __global__ void misaligned(int* out, const char* bytes, int off)
{
    int i = threadIdx.x;
    out[i] = *(const int*)(bytes + 4 * i + off);
}
"""


def test_misaligned_access_is_reported():
    o = run_both(MISALIGNED, "misaligned", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.int32)), Buf(np.arange(64, dtype=np.uint8)), np.int32(1)])
    assert kinds(o) == {"misaligned-access"}
    assert o.occurrences == 8
    assert_same(o)


def test_misaligned_parameter_pointer_is_reported():
    o = run_both(VADD, "vadd", (1, 1, 1), (8, 1, 1),
                 [Buf(np.zeros(8, np.float32)), Buf(f32(16), offset=2), Buf(f32(8)), np.int32(8)])
    assert kinds(o) == {"misaligned-access"}
    assert_same(o)


GATHER = r"""
extern "C" __global__ void gather(float* out, float* const* table, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[i][i % 4];
}
"""


def test_pointers_loaded_from_memory_are_looked_up():
    args = [Buf(np.zeros(8, np.float32)), PtrTable([(3, 0), (4, 0)] * 3 + [(3, 8), (4, 4)]),
            np.int32(8), Buf(f32(4)), Buf(f32(4, 100))]
    o = run_both(GATHER, "gather", (1, 1, 1), (8, 1, 1), args)
    # table[6] = buf2 + 8: element 6 % 4 = 2 -> buf2 + 16: one past the end
    # table[7] = buf3 + 4: element 3 -> buf3 + 16: one past the end
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2
    assert_same(o)


def test_null_pointer_loaded_from_memory_is_reported():
    args = [Buf(np.zeros(4, np.float32)), PtrTable([(3, 0), None, (3, 0), (3, 0)]), np.int32(4),
            Buf(f32(4))]
    o = run_both(GATHER, "gather", (1, 1, 1), (4, 1, 1), args)
    assert kinds(o) == {"null-pointer"}
    assert_same(o)


CALLS = r"""
__device__ __noinline__ float window_sum(const float* p, int len)
{
    float s = 0.0f;
    for (int k = 0; k < len; ++k) s += p[k];
    return s;
}

__device__ __noinline__ void put(float* p, float v) { *p = v; }

extern "C" __global__ void sums(float* out, const float* in, int len, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) put(out + i, window_sum(in + i, len));
}
"""


def test_device_functions_check_through_the_context():
    o = run_both(CALLS, "sums", (1, 1, 1), (16, 1, 1),
                 [Buf(np.zeros(16, np.float32)), Buf(f32(16)), np.int32(3), np.int32(16)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 3  # in[16], in[17] (thread 15), in[16] (thread 14)
    assert_same(o)
    assert o.stats["_Z10window_sumPKfi"]["checks"]


GUARDED = """
.version 7.0
.target sm_75
.address_size 64

.visible .entry guarded(
	.param .u64 guarded_param_0,
	.param .u32 guarded_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [guarded_param_0];
	ld.param.u32 	%r1, [guarded_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r2, %tid.x;
	mul.wide.u32 	%rd3, %r2, 4;
	add.s64 	%rd4, %rd2, %rd3;
	setp.lt.u32 	%p1, %r2, %r1;
	@%p1 st.global.u32 	[%rd4], %r2;
	ret;
}
"""


def test_a_false_guard_reports_nothing():
    o = run_both(None, "guarded", (1, 1, 1), (32, 1, 1), [Buf(np.zeros(16, np.int32)), np.int32(16)],
                 ptx_text=GUARDED)
    assert o.device == [] and o.oracle == []
    assert_same(o)


def test_a_true_guard_reports_the_access():
    o = run_both(None, "guarded", (1, 1, 1), (32, 1, 1), [Buf(np.zeros(16, np.int32)), np.int32(20)],
                 ptx_text=GUARDED)
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 4
    assert_same(o)


ATOMIC = r"""
extern "C" __global__ void hist(unsigned* bins, const int* v, unsigned* old, int n)
{
    int i = threadIdx.x;
    if (i < n) old[i] = atomicAdd(&bins[v[i]], 1u);
}
"""


def test_a_bad_atomic_returns_zero_and_changes_nothing():
    v = np.array([0, 1, 2, 3, 4, 1, 9, 2], np.int32)
    o = run_both(ATOMIC, "hist", (1, 1, 1), (8, 1, 1),
                 [Buf(np.full(4, 5, np.uint32)), Buf(v), Buf(np.full(8, 77, np.uint32)), np.int32(8)])
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 2
    assert_same(o)
    old = np.frombuffer(o.checked_out[2], np.uint32)
    assert old[4] == 0 and old[6] == 0
