"""The JIT engine against the interpreter over the whole test corpus.

Every kernel of tests/kernels/specs.py (NVRTC -O3 and -G), correct and made
buggy (one buffer shrunk into its red zone, as test_instrument_specs does),
plain and instrumented, runs on both engines: outputs, printf output,
instruction counts and the instrumented run's violation records must be
identical (records as a sorted list: the engines run threads in different
orders, both valid GPU schedules, see docs/decisions.md; a site tally's
count, and its offenders only where it kept them all, since which threads
count first is that order).  A kernel the JIT
does not cover must fall back to the interpreter with a named reason.

Coverage is counted over every entry of every corpus module (all archs and
option sets, numba, LLVM) by lowering it, and must not drop under the count
measured when this test was written: a change that loses coverage fails
here instead of silently falling back.  Slow (the interpreter runs each
kernel several times): a SLOW_MODULES member.
"""

from __future__ import annotations

import functools
import io
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernels.specs import SPECS, KernelSpec
from test_cpu_jit import engine_notes, on_both_engines
from test_cpu_kernels import _numba_array
from test_instrument_specs import _params, _place, _shrinkable

from gpusafe.cpu.jit import cores
from gpusafe.cpu.jit.lower import Unsupported, lower_kernel
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.layout import TALLY_OFFENDERS
from gpusafe_testkit.corpus import compile_kernel_file, corpus_modules, nvrtc_compile

pytestmark = pytest.mark.slow  # about 105 s: the interpreter runs each kernel several times

VARIANTS = {"O3": (), "G": ("-G",)}

MIN_COVERED = 826
"""Corpus entry kernels the JIT compiled when this was measured (of 878)."""

MIN_SPEC_CASES = 178
"""Spec kernels (compute_75, -O3 and -G) the JIT compiled when measured (of 192)."""


@pytest.fixture(autouse=True)
def blocks_on_threads(monkeypatch):
    """The JIT runs with its blocks split over four threads, whatever the grid's
    size: the multi-threaded path is what must give the interpreter's results."""
    monkeypatch.setenv("GPUSAFE_CPU_THREADS", "4")
    monkeypatch.setattr(cores, "MIN_RANGE_THREADS", 1)


@functools.lru_cache(maxsize=4)
def _instrument(text: str):
    return instrument(text)


def _run(spec: KernelSpec, text: str, shrink: str | None, engine: str, checked: bool,
         monkeypatch) -> dict:
    """One launch of ``spec`` on ``engine``: outputs, stdout, count, records
    and note."""
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", engine)
    notes = engine_notes(monkeypatch)
    result = _instrument(text)
    mem = DeviceMemory()
    addrs, sizes = _place(mem, spec, shrink)
    program = Program(result.ptx if checked else text, mem)
    params = _params(result.sites.kernels[spec.kernel], spec, addrs)
    out = io.StringIO()
    records: list = []
    dropped = 0
    if checked:
        allocs = [host.AllocationRecord(a.tag, a.base, a.size, a.live) for a in mem.allocations]
        pipeline = LaunchPipeline(mem)
        launch = pipeline.prepare(result.sites, spec.kernel, params, allocs,
                                  dynamic_shared=spec.shared_bytes)
        r = program.launch(spec.kernel, spec.grid, spec.block, spec.shared_bytes, launch.params,
                           stdout=out)
        found, dropped = pipeline.collect(launch)
        records = _order_free(found)
    else:
        r = program.launch(spec.kernel, spec.grid, spec.block, spec.shared_bytes, params,
                           stdout=out)
    (note,) = notes
    return {"outputs": {b.name: mem.read(addrs[b.name], sizes[b.name]) for b in spec.buffers},
            "stdout": sorted(out.getvalue().splitlines()), "count": r.instructions,
            "records": records, "dropped": dropped, "note": note}


def _order_free(found: list) -> list:
    """What a launch's violations say whichever order its threads ran in:
    per site the count, and the violations themselves where the site kept
    them all (a record site; a tally that counted at most
    ``TALLY_OFFENDERS``); past that, which offenders a tally keeps is the
    engine's thread order (issue 14, design B), so only their kinds."""
    sites: dict[int, list] = {}
    for v in found:
        sites.setdefault(v.site.id, []).append(v)
    out = []
    for vs in sites.values():
        site, total = vs[0].site, sum(v.count for v in vs)
        if site.tally < 0 or total <= TALLY_OFFENDERS:
            what = sorted((str(v.kind), v.address, v.thread, v.block, v.count) for v in vs)
        else:
            what = sorted({str(v.kind) for v in vs})
        out.append((site.ptx_line, total, what))
    return sorted(out)


def _functions(program: Program) -> dict:
    """The module's defined functions by name, as ``Program`` keeps them."""
    return {f.name: f for f in program.module.functions if f.body is not None}


def _globals(program: Program) -> frozenset:
    return frozenset(v.name for v in program.module.variables if v.space != ".shared")


def _lowers(text: str, kernel: str) -> str | None:
    """None when the JIT lowers the kernel, else the reason it does not."""
    program = Program(text, DeviceMemory())
    function = next(f for f in program.module.functions if f.name == kernel)
    try:
        lower_kernel(function, _functions(program), _globals(program))
    except Unsupported as e:
        return str(e)
    return None


def _assert_named_fallback(note: str) -> None:
    assert note.startswith("interpreter: ") and len(note) > len("interpreter: ") + 3, note


CASES = [(s, v) for s in SPECS for v in VARIANTS]


@pytest.mark.parametrize(("spec", "variant"), CASES, ids=[f"{s.name}-{v}" for s, v in CASES])
def test_spec_kernel_is_identical_on_both_engines(spec: KernelSpec, variant: str, monkeypatch):
    text = compile_kernel_file(spec.file, "compute_75", VARIANTS[variant])
    shrink = _shrinkable(spec)
    if _lowers(text, spec.kernel) is not None:
        got = _run(spec, text, None, "jit", False, monkeypatch)
        _assert_named_fallback(got["note"])
        return
    for bug in (None, shrink):
        for checked in (False, True):
            ref = _run(spec, text, bug, "interpreter", checked, monkeypatch)
            got = _run(spec, text, bug, "jit", checked, monkeypatch)
            assert ref["note"] == ""
            if got["note"] != "jit":
                _assert_named_fallback(got["note"])
            what = f"{'buggy' if bug else 'correct'} {'instrumented' if checked else 'plain'}"
            for key in ("outputs", "stdout", "count", "records", "dropped"):
                assert got[key] == ref[key], f"{what}: {key} differs"
            if not checked:
                assert got["note"] == "jit", what  # the plain kernel lowers, so it must run
            if bug is None:
                arrays = {b.name: np.frombuffer(got["outputs"][b.name], b.data.dtype)
                          for b in spec.buffers if b.output}
                assert spec.check(arrays) == []


def test_corpus_coverage_does_not_regress():
    """Every entry of every corpus module either lowers or names its reason."""
    covered = 0
    svml = 0  # refused only where numpy may compute approximate functions with SVML
    reasons: Counter[str] = Counter()
    for module in corpus_modules():
        program = Program(module.ptx, DeviceMemory())
        functions = _functions(program)
        module_globals = _globals(program)
        for function in program.module.functions:
            if function.body is None or not function.is_kernel:
                continue
            try:
                lower_kernel(function, functions, module_globals)
                covered += 1
            except Unsupported as e:
                reason = str(e)
                assert reason.strip(), f"{module.name}: {function.name}: a fallback without reason"
                reasons[reason.split(":")[0].split(" (")[0]] += 1
                svml += "SVML" in reason
    total = covered + sum(reasons.values())
    print(f"\nJIT corpus coverage: {covered} of {total} entry kernels compile, "
          f"{total - covered} fall back; most common reasons:")
    for reason, n in reasons.most_common(12):
        print(f"  {n:4d}  {reason}")
    answers = [_lowers(compile_kernel_file(s.file, "compute_75", VARIANTS[v]), s.kernel)
               for s, v in CASES]
    specs = sum(a is None for a in answers)
    print(f"spec cases (compute_75, -O3 and -G): {specs} of {len(CASES)} run on the JIT")
    # on an AVX-512 CPU the approximate functions stay on the interpreter (named):
    # the floors were measured where they compile
    print(f"refused because numpy may use SVML here: {svml} corpus kernels")
    assert covered + svml >= MIN_COVERED
    assert specs + sum(a is not None and "SVML" in a for a in answers) >= MIN_SPEC_CASES


# ---------------------------------------------------------------------------
# numba and LLVM kernels of the corpus


def _arrays(rng) -> dict[str, tuple]:
    """Per kernel: (module label, arguments, grid, block); arrays are buffers."""
    f = rng.standard_normal(1000).astype(np.float32)
    g = rng.standard_normal(1000).astype(np.float32)
    m = rng.standard_normal((20, 33)).astype(np.float32)
    vals = (np.arange(500) * 7919 % 1000).astype(np.int64)
    return {
        "numba_vec_add": ("numba:numba_vec_add[sm_75]", [np.zeros(1000, np.float32), f, g],
                          (8, 1, 1), (128, 1, 1)),
        "numba_vec_add_debug": ("numba:numba_vec_add[sm_75,debug]",
                                [np.zeros(1000, np.float32), f, g], (8, 1, 1), (128, 1, 1)),
        "numba_saxpy_2d": ("numba:numba_saxpy_2d[sm_75]",
                           [np.zeros((20, 33), np.float32), m, m * 2, np.float32(1.5)],
                           (3, 5, 1), (8, 8, 1)),
        "llvm_saxpy": ("llvm:llvm_saxpy[sm_75]", [np.zeros(1000, np.float32), f, g,
                                                  np.float32(2.0), np.int32(1000)],
                       (4, 1, 1), (256, 1, 1)),
        "llvm_atomic_count": ("llvm:llvm_atomic_count[sm_75]",
                              [np.zeros(10, np.int32), vals, np.int64(500), np.int64(10)],
                              (2, 1, 1), (256, 1, 1)),
    }


@pytest.mark.parametrize("case", list(_arrays(np.random.default_rng(0))))
def test_numba_and_llvm_kernels_are_identical_on_both_engines(case, monkeypatch):
    label, args, grid, block = _arrays(np.random.default_rng(7))[case]
    module = next(m for m in corpus_modules() if m.name == label)
    (kernel,) = module.entries
    reason = _lowers(module.ptx, kernel)
    results = {}
    for engine, mem, program in on_both_engines(module.ptx, monkeypatch):
        notes = engine_notes(monkeypatch)
        raw, addrs = b"", []
        for a in args:
            if isinstance(a, np.ndarray):
                addrs.append(mem.alloc(a.nbytes))
                mem.write(addrs[-1], a)
                raw += _numba_array(a, addrs[-1]) if module.origin == "numba" else (
                    addrs[-1].to_bytes(8, "little"))
            else:
                raw += np.asarray(a).tobytes()
        info = program.kernels[kernel]
        params = bytearray(info.param_size)
        for layout in info.params:  # parameters in order, each its own size
            params[layout.offset:layout.offset + layout.size] = raw[:layout.size]
            raw = raw[layout.size:]
        assert raw == b""
        r = program.launch(kernel, grid, block, 0, bytes(params))
        results[engine] = ([mem.read(a, b.nbytes) for a, b in
                            zip(addrs, [x for x in args if isinstance(x, np.ndarray)],
                                strict=True)], r.instructions, notes[0])
    if reason is None:
        assert results["jit"][2] == "jit"
    else:
        _assert_named_fallback(results["jit"][2])
    assert results["jit"][:2] == results["interpreter"][:2]


# ---------------------------------------------------------------------------
# generated kernels: straight-line and looping integer/float code the JIT covers

N = 64

_INT_TERMS = ["i", "n", "(int)x", "a", "(i * 7)", "(a >> 3)", "(a ^ i)", "(a % 13)",
              "(n - i)", "(a / 5)"]
_FLOAT_TERMS = ["x", "y", "(float)a", "(x * y)", "(x - y)", "fmaf(x, y, 1.5f)", "(y / 4.0f)"]


@st.composite
def _int_expr(draw, depth: int = 2) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_INT_TERMS + [str(draw(st.integers(-100, 100)))]))
    op = draw(st.sampled_from(["+", "-", "*", "&", "|", "^", "<<", ">>", "min", "max", "?"]))
    a, b = draw(_int_expr(depth - 1)), draw(_int_expr(depth - 1))
    if op in ("min", "max"):
        return f"{op}({a}, {b})"
    if op == "?":
        return f"(({a}) < ({b}) ? ({a}) : ({b}) + 1)"
    if op in ("<<", ">>"):
        return f"(({a}) {op} (({b}) & 31))"
    return f"(({a}) {op} ({b}))"


@st.composite
def _float_expr(draw, depth: int = 2) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_FLOAT_TERMS))
    op = draw(st.sampled_from(["+", "-", "*", "?"]))
    a, b = draw(_float_expr(depth - 1)), draw(_float_expr(depth - 1))
    if op == "?":
        return f"(({a}) < ({b}) ? ({a}) : ({b}))"
    return f"(({a}) {op} ({b}))"


@st.composite
def _generated(draw) -> str:
    ie = [draw(_int_expr()) for _ in range(3)]
    fe = [draw(_float_expr()) for _ in range(2)]
    loop = draw(st.integers(0, 4))
    return f"""
extern "C" __global__ void gen(int* iout, float* fout, const int* ia, const float* fa, int n,
                                int* rout)
{{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int a = ia[i];
    float x = fa[i], y = fa[(i + 5) % n];
    int acc = 0;
    float facc = 0.0f;
    for (int k = 0; k < {loop} + (a & 1); ++k) {{
        acc += {ie[0]};
        facc += {fe[0]};
        a = a * 3 + k;
    }}
    iout[i] = acc ^ ({ie[1]});
    rout[((unsigned)({ie[2]})) % n] = 7;  // stores that may race write one value
    fout[i] = facc + {fe[1]};
}}
"""


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(src=_generated())
def test_generated_kernels_are_identical_on_both_engines(src, monkeypatch):
    rng = np.random.default_rng(0)
    ia = rng.integers(-1000, 1000, N).astype(np.int32)
    fa = (rng.integers(-64, 64, N) / 8).astype(np.float32)
    text = nvrtc_compile(src, "gen.cu", "compute_75", ())
    results = {}
    for engine, mem, program in on_both_engines(text, monkeypatch):
        notes = engine_notes(monkeypatch)
        bufs = [np.zeros(N, np.int32), np.zeros(N, np.float32), ia, fa, np.zeros(N, np.int32)]
        addrs = []
        for b in bufs:
            addrs.append(mem.alloc(b.nbytes))
            mem.write(addrs[-1], b)
        params = (b"".join(a.to_bytes(8, "little") for a in addrs[:4]) + np.int32(N).tobytes()
                  + bytes(4) + addrs[4].to_bytes(8, "little"))
        r = program.launch("gen", (2, 1, 1), (32, 1, 1), 0, params)
        results[engine] = ([mem.read(a, b.nbytes) for a, b in zip(addrs, bufs, strict=True)],
                           r.instructions, notes[0])
    ref, got = results["interpreter"], results["jit"]
    reason = _lowers(text, "gen")
    if reason is None:
        assert got[2] == "jit", src
    else:
        _assert_named_fallback(got[2])
    assert got[0] == ref[0], src
    assert got[1] == ref[1], src
