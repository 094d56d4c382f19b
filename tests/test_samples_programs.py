"""The sample programs (samples/), their expectations, and the GPU check's logic.

* every sample's CUDA source compiles with NVRTC (-lineinfo) and ptxas accepts
  the PTX, for an old and a new architecture;
* samples/expectations.json agrees with the sources: the files exist, each
  named line holds the named code, the PTX's line info puts an access of the
  expected state space and direction on each expected device line, the host
  kinds point at a one-line call of the right API, allocation tags follow the
  order of the cuMemAlloc calls;
* the samples are ordinary cuda-python programs (no gpusafe import; the three
  usual import styles all appear);
* the correct samples run unchanged on the CPU device's driver surface
  (``gpusafe.cpu.driver`` substituted for ``cuda.bindings.driver`` by a
  sitecustomize shim) and pass their own result checks, and a sabotaged copy
  of each fails them (the checks can fail);
* every sample under ``gpusafe run --device cpu --json`` reports exactly its
  expectation (kind, access, kernel, file, line, allocation tag and offset,
  exit statuses);
* scripts/gpu_check.py: comparison against synthetic reports in the
  DESIGN.md schema, compute-sanitizer output parsing, and a whole dry run
  with a fake gpusafe and a fake compute-sanitizer.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import jsonschema
import pytest

from gpusafe_instrument.kinds import ViolationKind

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SCRIPTS = ROOT / "scripts"
EXPECTATIONS = json.loads((SAMPLES / "expectations.json").read_text())["samples"]
NAMES = sorted(EXPECTATIONS)
CORRECT = [n for n in NAMES if not EXPECTATIONS[n]["violations"]]
BUGGY = [n for n in NAMES if EXPECTATIONS[n]["violations"]]
HOST_KINDS = {"double-free", "invalid-free", "api-out-of-bounds", "leak"}
# the API call a host-side violation's line must hold
HOST_API = {"double-free": "cuMemFree", "invalid-free": "cuMemFree",
            "api-out-of-bounds": "cuMemcpy", "leak": "cuMemAlloc",
            "use-after-free": "cuLaunchKernel"}
ARCHES = [("compute_75", "sm_75"), ("compute_90", "sm_90")]
REPORT_SCHEMA = json.loads(
    (ROOT / "gpusafe" / "report" / "schema" / "gpusafe-report-1.schema.json").read_text())


def _load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPTS / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


gpu_check = _load_gpu_check()


def _nvrtc():
    sys.path.insert(0, str(SAMPLES))
    try:
        import nvrtc  # samples/nvrtc.py, as the samples import it
    finally:
        sys.path.remove(str(SAMPLES))
    return nvrtc


def _tree(name: str) -> ast.Module:
    return ast.parse((SAMPLES / EXPECTATIONS[name]["program"]).read_text())


def cuda_source(name: str) -> tuple[str, str]:
    """(source text, the name NVRTC is given) of a sample's kernels."""
    exp = EXPECTATIONS[name]
    if exp["cuda_source"]:
        path = SAMPLES / exp["cuda_source"]
        return path.read_text(), str(path)
    for node in _tree(name).body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets]
                == ["SOURCE"] and isinstance(node.value, ast.Constant)):
            return node.value.value, f"{name}_kernels.cu"
    raise AssertionError(f"{name}: cuda_source is null but the program has no SOURCE string")


# --------------------------------------------------------------------------
# the list of samples
# --------------------------------------------------------------------------


def test_every_sample_program_has_an_expectation_and_back():
    programs = {p.name for p in SAMPLES.glob("*.py")} - {"nvrtc.py"}
    assert programs == {EXPECTATIONS[n]["program"] for n in NAMES}
    for name in NAMES:
        exp = EXPECTATIONS[name]
        assert exp["program"] == f"{name}.py"
        if exp["cuda_source"]:
            assert (SAMPLES / exp["cuda_source"]).is_file(), exp["cuda_source"]
    assert {p.name for p in SAMPLES.glob("*.cu")} == {
        EXPECTATIONS[n]["cuda_source"] for n in NAMES if EXPECTATIONS[n]["cuda_source"]}


def test_every_violation_kind_has_a_sample_and_three_are_correct():
    kinds = {v["kind"] for n in NAMES for v in EXPECTATIONS[n]["violations"]}
    assert kinds == {k.value for k in ViolationKind}
    assert len(CORRECT) >= 3
    # the overflow into a neighbouring allocation is its own sample
    assert "neighbour_overflow" in BUGGY


def test_expectation_fields():
    for name in NAMES:
        exp = EXPECTATIONS[name]
        assert set(exp) == {"program", "cuda_source", "bug", "flags", "exit_code", "violations"}
        assert (exp["bug"] is None) == (not exp["violations"])
        assert ("--leak-check" in exp["flags"]) == any(
            v["kind"] == "leak" for v in exp["violations"])
        for v in exp["violations"]:
            assert v["kind"] in {k.value for k in ViolationKind}
            device = v["file"].endswith(".cu")
            assert v["access"] in (("read", "write", "atomic") if device else (None,)), v
            assert ("kernel" in v) == device, v
            assert device != (v["kind"] in HOST_KINDS or v["file"].endswith(".py")), v
            alloc = v["allocation"]
            if alloc is not None:
                assert set(alloc) == {"tag", "buffer", "offset"}
                assert alloc["tag"] >= 1 and isinstance(alloc["offset"], int)


# --------------------------------------------------------------------------
# the programs are ordinary cuda-python programs
# --------------------------------------------------------------------------


def _imports(name: str) -> list[str]:
    out = []
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(node.module)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_sample_imports_only_cuda_bindings_numpy_and_the_nvrtc_helper(name):
    allowed = {"cuda.bindings", "cuda.bindings.driver", "numpy", "nvrtc", "pathlib", "sys"}
    imports = _imports(name)
    assert set(imports) <= allowed, imports
    assert "cuda.bindings" in imports or "cuda.bindings.driver" in imports
    text = (SAMPLES / EXPECTATIONS[name]["program"]).read_text()
    tree = _tree(name)
    doc = ast.get_docstring(tree)
    assert doc, f"{name} has no docstring"
    for v in EXPECTATIONS[name]["violations"]:  # a buggy sample's docstring names its lines
        assert re.search(rf"\bline {v['line']}\b", doc), f"{name}: docstring lacks line {v['line']}"
    # the docstring may say what gpusafe reports; the code knows nothing of it
    code = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.STRING)]
    assert not any("gpusafe" in t for t in code)
    # cuCtxCreate in both cuda-bindings signatures, every call through check()
    assert "cuCtxCreate(None, 0, dev)" in text and "cuCtxCreate(0, dev)" in text
    assert "except TypeError" in text
    assert re.search(r"^def check\(result\):", text, re.M)
    assert "compile_to_ptx(" in text
    # kernelParams as cuda-python's examples build them: an array of addresses of arguments
    assert "np.array([arg.ctypes.data for arg in args], dtype=np.uint64)" in text


def test_the_three_import_styles_are_all_used():
    styles = {"from cuda.bindings import driver": 0, "from cuda.bindings.driver import": 0,
              "import cuda.bindings.driver as cuda": 0}
    for name in NAMES:
        text = (SAMPLES / EXPECTATIONS[name]["program"]).read_text()
        for style in styles:
            styles[style] += style in text
    assert all(styles.values()), styles


# --------------------------------------------------------------------------
# NVRTC and ptxas
# --------------------------------------------------------------------------


@pytest.mark.parametrize("arch,sm", ARCHES, ids=[a for a, _ in ARCHES])
@pytest.mark.parametrize("name", NAMES)
def test_sample_source_compiles_and_ptxas_accepts_it(name, arch, sm):
    from gpusafe_testkit.corpus import ptxas

    source, nvrtc_name = cuda_source(name)
    ptx = _nvrtc().compile_to_ptx(source, nvrtc_name, arch=arch)
    assert ".entry" in ptx and f".target {sm}" in ptx
    assert re.search(r"^\s*\.loc\s", ptx, re.M), "no line info: -lineinfo missing"
    result = ptxas(ptx, sm)
    assert result.returncode == 0 and result.cubin_size > 0


# --------------------------------------------------------------------------
# expectations agree with the sources
# --------------------------------------------------------------------------

_MEM = re.compile(r"^\s*(?:@!?%\w+\s+)?(ld|st|atom|red)\.(\w+)")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', re.M)
_SPACES = {"global-out-of-bounds": {"global", "generic"}, "use-after-free": {"global", "generic"},
           "misaligned-access": {"global", "generic"}, "null-pointer": {"global", "generic"},
           "shared-out-of-bounds": {"shared", "generic"}, "local-out-of-bounds": {"local", "generic"}}
_OPS = {"read": {"ld"}, "write": {"st"}, "atomic": {"atom", "red"}}


def ptx_accesses(ptx: str) -> set[tuple[str, int, str, str]]:
    """(file basename, source line, op, state space) of every memory instruction."""
    files = {int(i): Path(f).name for i, f in _FILE.findall(ptx)}
    loc = None
    out = set()
    for line in ptx.splitlines():
        if m := _LOC.match(line):
            loc = (files.get(int(m.group(1))), int(m.group(2)))
        elif (m := _MEM.match(line)) and loc is not None:
            space = m.group(2) if m.group(2) in ("global", "shared", "local", "param",
                                                 "const") else "generic"
            out.add((*loc, m.group(1), space))
    return out


@pytest.mark.parametrize("name", BUGGY)
def test_expected_lines_exist_and_hold_the_named_code(name):
    exp = EXPECTATIONS[name]
    own = {exp["program"], exp["cuda_source"]}
    for v in exp["violations"]:
        assert v["file"] in own, v
        lines = (SAMPLES / v["file"]).read_text().splitlines()
        assert 1 <= v["line"] <= len(lines), v
        assert v["code"] in lines[v["line"] - 1], (v, lines[v["line"] - 1])


@pytest.mark.parametrize("arch,sm", ARCHES, ids=[a for a, _ in ARCHES])
@pytest.mark.parametrize("name", [n for n in BUGGY if EXPECTATIONS[n]["cuda_source"]])
def test_ptx_line_info_puts_the_expected_access_on_the_expected_line(name, arch, sm):
    source, nvrtc_name = cuda_source(name)
    accesses = ptx_accesses(_nvrtc().compile_to_ptx(source, nvrtc_name, arch=arch))
    for v in EXPECTATIONS[name]["violations"]:
        if not v["file"].endswith(".cu"):
            continue
        here = {(op, space) for f, line, op, space in accesses if (f, line) == (v["file"], v["line"])}
        wanted = {(op, space) for op in _OPS[v["access"]] for space in _SPACES[v["kind"]]}
        assert here & wanted, f"{v}: the PTX has {sorted(here)} at {v['file']}:{v['line']}"
        # the kernel the expectation names is the one the source defines
        assert f'extern "C" __global__ void {v["kernel"]}(' in source


def _calls(tree: ast.AST, api_prefix: str) -> list[ast.Call]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if fname.startswith(api_prefix):
                out.append(node)
    return out


def _helpers(tree: ast.Module, api_prefix: str) -> set[str]:
    """The program's functions (other than main) that call the API: its helpers."""
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name != "main" and _calls(n, api_prefix)}


def _api_calls(tree: ast.Module, api_prefix: str) -> list[ast.Call]:
    """Calls of the API, or of a helper that calls it, outside the helpers."""
    helpers = _helpers(tree, api_prefix)
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    return [c for c in ast.walk(main) if isinstance(c, ast.Call) and (
        c in _calls(main, api_prefix) or getattr(c.func, "id", None) in helpers)]


def test_samples_allocate_free_and_launch_through_a_helper_at_least_once():
    used = {api for name in NAMES for api in ("cuMemAlloc", "cuMemFree", "cuLaunchKernel")
            if any(getattr(c.func, "id", None) in _helpers(_tree(name), api)
                   for c in _api_calls(_tree(name), api))}
    assert used == {"cuMemAlloc", "cuMemFree", "cuLaunchKernel"}
    # and the expectations name the caller's line, with the helper's as frame #0
    helper_frames = [v["stack"] for n in BUGGY for v in EXPECTATIONS[n]["violations"]
                     if len(v.get("stack", [])) > 1 and v["stack"][0][0] != "main"]
    assert len(helper_frames) >= 3


@pytest.mark.parametrize("name", BUGGY)
def test_host_side_lines_are_one_line_calls_of_the_right_api(name):
    tree = _tree(name)
    for v in EXPECTATIONS[name]["violations"]:
        if not v["file"].endswith(".py"):
            continue
        calls = [c for c in _api_calls(tree, HOST_API[v["kind"]]) if c.lineno == v["line"]]
        assert calls, f"{v}: no {HOST_API[v['kind']]} call (or call of its helper) on that line"
        # a call spread over lines would make the reported line depend on the Python version
        assert all(c.end_lineno == c.lineno for c in calls), v


def _allocations(name: str) -> list[tuple[str, int]]:
    """(variable, line) of each ``x = ...cuMemAlloc(...)`` (or ``x = alloc(...)``,
    the program's helper) of main(), in source order."""
    tree = _tree(name)
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    allocating = _api_calls(tree, "cuMemAlloc")
    out = []
    for stmt in main.body:  # straight-line code only: a loop would break the numbering
        for call in [c for c in ast.walk(stmt) if c in allocating]:
            assert isinstance(stmt, ast.Assign), f"{name}:{call.lineno}: cuMemAlloc outside x = ..."
            out.append((stmt.targets[0].id, stmt.lineno))
    nested = len(allocating) - len(out)
    assert nested == 0, f"{name}: {nested} cuMemAlloc call(s) outside main's straight-line code"
    return out


@pytest.mark.parametrize("name", NAMES)
def test_allocation_tags_follow_the_order_of_cuMemAlloc_calls(name):
    allocs = _allocations(name)
    assert allocs, f"{name} allocates nothing"
    for v in EXPECTATIONS[name]["violations"]:
        alloc = v["allocation"]
        if alloc is None:
            continue
        assert alloc["tag"] <= len(allocs), v
        variable, line = allocs[alloc["tag"] - 1]
        assert variable == alloc["buffer"], (v, allocs)
        if v["kind"] == "leak":
            assert line == v["line"], (v, allocs)


# --------------------------------------------------------------------------
# the correct samples run on the CPU device and check their own results
# --------------------------------------------------------------------------

SHIM = """\
import sys

import cuda.bindings.nvrtc  # noqa: F401  (loads the real driver module's internals first)
import gpusafe.cpu.driver as d

sys.modules["cuda.bindings.driver"] = d
import cuda.bindings  # noqa: E402

cuda.bindings.driver = d
"""


def run_on_cpu_device(program: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a sample unchanged with ``cuda.bindings.driver`` resolving to ``gpusafe.cpu.driver``."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SHIM)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(ROOT)])
    env.pop("GPUSAFE_SESSION", None)
    return subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", CORRECT)
def test_correct_sample_passes_its_own_checks_on_the_cpu_device(name, tmp_path):
    r = run_on_cpu_device(SAMPLES / EXPECTATIONS[name]["program"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout and "FAILED" not in r.stdout, r.stdout


SABOTAGE = {  # one wrong operation per correct sample: its own check must catch it
    "vector_add": ("vector_add.cu", "a[i] + b[i]", "a[i] + b[i] * 1.0001f"),
    "matmul_tiled": ("matmul_tiled.cu", "for (int j = 0; j < TILE; ++j)",
                     "for (int j = 0; j < TILE - 1; ++j)"),
    "reduction": ("reduction.py", "for (int offset = 16; offset > 0;",
                  "for (int offset = 16; offset > 1;"),
}


@pytest.mark.parametrize("name", CORRECT)
def test_sabotaged_correct_sample_fails_its_own_checks(name, tmp_path):
    work = tmp_path / "samples"
    work.mkdir()
    for f in ("nvrtc.py", EXPECTATIONS[name]["program"], EXPECTATIONS[name]["cuda_source"]):
        if f:
            shutil.copy(SAMPLES / f, work / f)
    target, old, new = SABOTAGE[name]
    text = (work / target).read_text()
    assert old in text
    (work / target).write_text(text.replace(old, new))
    r = run_on_cpu_device(work / EXPECTATIONS[name]["program"], tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED" in r.stdout


# --------------------------------------------------------------------------
# every sample under gpusafe run --device cpu
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_gpusafe_run_on_the_cpu_device_reports_exactly_the_expectation(name, tmp_path):
    exp = EXPECTATIONS[name]
    out = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    r = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--json",
                        str(out), *exp["flags"], "--", sys.executable,
                        f"samples/{exp['program']}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.is_file(), r.stdout + r.stderr
    report = json.loads(out.read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    verdict = gpu_check.compare(exp, report, r.returncode, strict=True)
    assert verdict.ok, "\n".join(verdict.problems) + "\n" + r.stderr[-3000:]
    for v in exp["violations"]:  # the stacks and the folded launch argument
        entry = next(e for e in report["violations"] if e["kind"] == v["kind"]
                     and e["location"]["line"] == v["line"]
                     and Path(e["location"]["file"]).name == v["file"])
        assert entry.get("argument") == v.get("argument"), entry
        if "stack" in v:
            stack = (entry["allocation"]["allocated_stack"] if v["kind"] == "leak"
                     else entry["stack"])
            assert [[f["function"], f["line"]] for f in stack] == v["stack"], stack
            assert all(Path(f["file"]).name == exp["program"] for f in stack), stack


# --------------------------------------------------------------------------
# scripts/gpu_check.py: the comparison
# --------------------------------------------------------------------------


def synthetic_report(expectation: dict, program: str = "app.py") -> dict:
    """A report in the DESIGN.md schema holding exactly ``expectation``'s violations."""
    violations = []
    for v in expectation["violations"]:
        device = v["file"].endswith(".cu")
        alloc = v["allocation"]
        base = 0x7F0000001000 + 0x10000 * (alloc["tag"] if alloc else 0)
        violations.append({
            "kind": v["kind"], "access": v["access"], "size": 4 if device else 0,
            "address": hex(base + (alloc["offset"] if alloc else 0)),
            "kernel": v.get("kernel"),
            "location": {"file": f"/somewhere/samples/{v['file']}", "line": v["line"],
                         "column": 5 if device else None},
            "ptx_line": 41 if device else None,
            "instruction": "st.global.f32 [%rd8], %f2;" if device else None,
            "count": 1,
            "threads": [{"block": [0, 0, 0], "thread": [0, 0, 0]}] if device else None,
            "allocation": None if alloc is None else {
                "tag": alloc["tag"], "base": hex(base), "size": 4000,
                "offset": alloc["offset"], "allocated_at": f"{program}:10", "freed_at": None},
        })
    return {"schema": "gpusafe-report/1", "tool": {"name": "gpusafe", "version": "0.1.0"},
            "command": ["python", program], "device": "cpu",
            "exit_code": expectation["exit_code"], "violations": violations,
            "summary": {"violations": len(violations), "occurrences": len(violations),
                        "kernels_checked": 1, "launches": 1, "dropped": 0}}


def test_synthetic_report_validates_against_the_report_schema():
    schema = REPORT_SCHEMA
    for name in NAMES:
        jsonschema.validate(synthetic_report(EXPECTATIONS[name]), schema)


@pytest.mark.parametrize("name", NAMES)
def test_compare_accepts_the_exact_report(name):
    exp = EXPECTATIONS[name]
    status = 86 if exp["violations"] else exp["exit_code"]
    verdict = gpu_check.compare(exp, synthetic_report(exp), status, strict=True)
    assert verdict.ok and not verdict.notes, verdict


def _variant(exp: dict, **changes) -> dict:
    report = synthetic_report(exp)
    v = report["violations"][0]
    for key, value in changes.items():
        if key == "line":
            v["location"]["line"] = value
        elif key in ("tag", "offset"):
            v["allocation"][key] = value
        else:
            v[key] = value
    return report


def test_compare_rejects_each_kind_of_difference():
    exp = EXPECTATIONS["vector_add_oob"]
    cmp = gpu_check.compare
    wrong_line = cmp(exp, _variant(exp, line=8))
    assert not wrong_line.ok
    assert any("missing: 1x global-out-of-bounds at vector_add_oob.cu:7" in p
               for p in wrong_line.problems)
    assert any("unexpected: 1x global-out-of-bounds at vector_add_oob.cu:8" in p
               for p in wrong_line.problems)
    assert not cmp(exp, _variant(exp, kind="use-after-free")).ok

    missing = synthetic_report(exp)
    del missing["violations"][1]
    assert not cmp(exp, missing).ok
    extra = synthetic_report(exp)
    extra["violations"].append(dict(extra["violations"][0]))
    assert not cmp(exp, extra).ok

    # finer fields: notes by default, problems with strict
    for change in ({"tag": 2}, {"offset": 4004}, {"access": "write"}, {"kernel": "other"}):
        loose = cmp(exp, _variant(exp, **change))
        assert loose.ok and loose.notes, change
        assert not cmp(exp, _variant(exp, **change), strict=True).ok, change

    bad_exit = synthetic_report(exp)
    bad_exit["exit_code"] = 1
    assert not cmp(exp, bad_exit).ok
    assert not cmp(exp, synthetic_report(exp), gpusafe_status=0).ok
    assert cmp(exp, synthetic_report(exp), gpusafe_status=86).ok
    assert not cmp(exp, None).ok
    wrong_schema = synthetic_report(exp)
    wrong_schema["schema"] = "gpusafe-report/2"
    assert not cmp(exp, wrong_schema).ok

    # a correct sample: any violation is a mismatch, and gpusafe passes the program's status on
    correct = EXPECTATIONS["vector_add"]
    assert cmp(correct, synthetic_report(correct), gpusafe_status=0).ok
    assert not cmp(correct, synthetic_report(exp)).ok
    assert not cmp(correct, synthetic_report(correct), gpusafe_status=86).ok


def test_compare_matches_file_by_basename_and_ignores_order():
    exp = EXPECTATIONS["use_after_free"]
    report = synthetic_report(exp)
    report["violations"].reverse()
    report["violations"][0]["location"]["file"] = "use_after_free.cu"  # NVRTC name as given
    assert gpu_check.compare(exp, report, 86, strict=True).ok


# --------------------------------------------------------------------------
# scripts/gpu_check.py: compute-sanitizer output
# --------------------------------------------------------------------------

SANITIZER_OOB = """\
========= COMPUTE-SANITIZER
out[:4] = [2. 3. 4. 5.], out[-1] = 1001.0
========= Invalid __global__ read of size 4 bytes
=========     at vector_add+0x90 in /home/u/gpusafe/samples/vector_add_oob.cu:7
=========     by thread (232,0,0) in block (3,0,0)
=========     Address 0x7f1e3fa00fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f1e3fa00000 of size 4000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f8a2f] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
"""

SANITIZER_MISC = """\
========= Invalid __shared__ read of size 4 bytes
=========     at pair_average(float *, const float *, int)+0x1d0 in shared_oob.cu:16
=========     Address 0x200 is out of bounds
========= Invalid __global__ read of size 4 bytes
=========     at record_values+0x70 in /x/misaligned.cu:9
=========     Address 0x7f0000000001 is misaligned
========= Invalid __global__ read of size 4 bytes
=========     at add_bias+0x60 in /x/null_pointer.cu:7
=========     Address 0x4 is out of bounds
========= Program hit CUDA_ERROR_ILLEGAL_ADDRESS (error 700) due to "an illegal memory access was encountered" on CUDA API call to cuCtxSynchronize.
========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call to cuMemFree_v2.
========= Leaked 2048 bytes at 0x7f1e3fa00000
=========     Saved host backtrace up to driver entry point at allocation time
========= LEAK SUMMARY: 2048 bytes leaked in 1 allocations
"""


def test_parse_sanitizer_findings():
    [oob] = gpu_check.parse_sanitizer(SANITIZER_OOB)
    assert (oob.file, oob.line) == ("vector_add_oob.cu", 7)
    assert "global-out-of-bounds" in oob.kinds
    assert oob.describe("vector_add_oob") == "invalid __global__ read .cu:7"

    found = gpu_check.parse_sanitizer(SANITIZER_MISC)
    assert [(sorted(f.kinds), f.file, f.line, f.consequence) for f in found] == [
        (["shared-out-of-bounds"], "shared_oob.cu", 16, False),
        (["misaligned-access"], "misaligned.cu", 9, False),
        (["null-pointer"], "null_pointer.cu", 7, False),
        ([], None, None, True),
        (["double-free", "invalid-free"], None, None, False),
        (["leak"], None, None, False),
    ]
    assert gpu_check.parse_sanitizer("========= ERROR SUMMARY: 0 errors\n") == []


def test_sanitizer_verdicts():
    ok = gpu_check.sanitizer_as_expected
    oob = gpu_check.parse_sanitizer(SANITIZER_OOB)
    assert ok(EXPECTATIONS["vector_add_oob"], oob)
    assert not ok(EXPECTATIONS["vector_add"], oob)  # a correct sample must be quiet
    assert ok(EXPECTATIONS["vector_add"], [])
    assert not ok(EXPECTATIONS["neighbour_overflow"], [])  # missed
    # the right class at the wrong line is not a catch
    moved = gpu_check.parse_sanitizer(SANITIZER_OOB.replace(".cu:7", ".cu:6"))
    assert not ok(EXPECTATIONS["vector_add_oob"], moved)
    misc = [f for f in gpu_check.parse_sanitizer(SANITIZER_MISC) if not f.consequence]
    for name in ("shared_oob", "misaligned", "null_pointer", "double_free", "invalid_free",
                 "leak"):
        assert ok(EXPECTATIONS[name], misc), name
    assert not ok(EXPECTATIONS["local_oob"], misc)
    assert not ok(EXPECTATIONS["api_oob"], misc)


# --------------------------------------------------------------------------
# scripts/gpu_check.py: a whole dry run with fakes
# --------------------------------------------------------------------------

FAKE_GPUSAFE = """\
import json, sys
from pathlib import Path
args = sys.argv[1:]
assert args[0] == "run" and "--device" in args and "--" in args, args
out = Path(args[args.index("--json") + 1])
name = Path(args[-1]).stem
exp = json.loads(Path({expectations!r}).read_text())["samples"][name]
sys.path.insert(0, {tests!r})
from test_samples_programs import synthetic_report
report = synthetic_report(exp, args[-1])
if name == "shared_oob":  # one wrong line
    report["violations"][0]["location"]["line"] += 1
out.write_text(json.dumps(report))
sys.exit(86 if exp["violations"] else exp["exit_code"])
"""

FAKE_SANITIZER = """\
import sys
program = sys.argv[-1]
if "vector_add_oob" in program:
    sys.stdout.write({oob!r})
elif "leak" in program and "--leak-check" not in sys.argv:
    sys.exit(3)
"""


def test_gpu_check_dry_run_with_fakes(tmp_path, capsys):
    fake = tmp_path / "fake_gpusafe.py"
    fake.write_text(FAKE_GPUSAFE.format(expectations=str(SAMPLES / "expectations.json"),
                                        tests=str(Path(__file__).parent)))
    sanitizer = tmp_path / "compute-sanitizer"
    sanitizer.write_text(f"#!{sys.executable}\n" + FAKE_SANITIZER.format(oob=SANITIZER_OOB))
    sanitizer.chmod(0o755)
    samples = "vector_add_oob,shared_oob,leak,vector_add"
    argv = ["--device", "cpu", "--skip-prereqs", "--samples", samples, "--out",
            str(tmp_path / "out"), "--gpusafe-cmd", f"{sys.executable} {fake}",
            "--sanitizer", str(sanitizer), "--summary", str(tmp_path / "summary.json")]
    status = gpu_check.main(argv)
    printed = capsys.readouterr().out
    assert status == 1  # shared_oob's line is wrong
    table = printed[printed.index("sample "):]
    assert re.search(r"vector_add_oob +\| 3x global-out-of-bounds \.cu:7 +\| "
                     r"3x global-out-of-bounds \.cu:7 .*\| invalid __global__ read \.cu:7 .*"
                     r"gpusafe ok, cs ok", table)
    assert re.search(r"shared_oob .*shared-out-of-bounds \.cu:17 .*gpusafe MISMATCH", table)
    assert re.search(r"vector_add +\| none +\| none .*gpusafe ok, cs ok", table)
    assert re.search(r"leak .*gpusafe ok, cs missed", table)
    assert "MISMATCH missing: 1x shared-out-of-bounds at shared_oob.cu:16" in printed
    assert printed.strip().splitlines()[-1].startswith(
        "gpusafe: 3/4 samples as expected (")
    assert "; compute-sanitizer: 2/4 (" in printed.strip().splitlines()[-1]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["gpusafe_ok"] for s in summary["samples"]] == [True, False, True, True]

    # all good -> exit status 0
    assert gpu_check.main([*argv[:4], "vector_add_oob,vector_add", *argv[5:]]) == 0


def test_gpu_check_never_waits_for_a_hung_program(tmp_path, capsys):
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(600)\n")
    status = gpu_check.main(["--device", "cpu", "--skip-prereqs", "--samples", "vector_add",
                             "--timeout", "2", "--no-sanitizer", "--out", str(tmp_path / "o"),
                             "--gpusafe-cmd", f"{sys.executable} {hang}"])
    printed = capsys.readouterr().out
    assert status == 1
    assert "timed out" in printed


def test_gpu_check_names_a_native_build_that_failed(tmp_path, capsys):
    """On the first GPU machine ``gpusafe nvcc`` failed there and the script
    died on the missing run; now the sample is a mismatch that says why."""
    fails = tmp_path / "nvcc_fails.py"
    fails.write_text("import sys\nprint('nvcc: no such toolkit', file=sys.stderr)\n"
                     "sys.exit(1)\n")
    sanitizer = tmp_path / "compute-sanitizer"
    sanitizer.write_text(f"#!{sys.executable}\n")
    sanitizer.chmod(0o755)
    status = gpu_check.main(["--device", "cpu", "--skip-prereqs", "--samples", "native_leak",
                             "--sanitizer", str(sanitizer), "--out", str(tmp_path / "o"),
                             "--gpusafe-cmd", f"{sys.executable} {fails}"])
    printed = capsys.readouterr().out
    assert status == 1
    assert "native_leak ... MISMATCH (-)" in printed
    assert "compute-sanitizer: native_leak ... (-)" in printed  # nothing to run it on
    assert "gpusafe nvcc failed (1): nvcc: no such toolkit" in printed
    assert re.search(r"native_leak .*gpusafe nvcc failed.*gpusafe MISMATCH", printed)


def test_gpu_check_shell_script_is_bounded_and_offline():
    text = (SCRIPTS / "gpu-check.sh").read_text()
    assert os.access(SCRIPTS / "gpu-check.sh", os.X_OK)
    assert "${PYTHON:-python3}" in text and "PYTHONPATH" in text
    assert "timeout" in text and "gpu_check.py" in text
    assert "pip" not in re.sub(r"#.*", "", text)  # installs nothing
    assert textwrap.dedent(text).startswith("#!/usr/bin/env bash")
