"""The GPU check: every sample under ``gpusafe run`` (and compute-sanitizer), one table.

Run by ``scripts/gpu-check.sh`` on a GPU machine with no network::

    scripts/gpu-check.sh                      # --device cuda, compute-sanitizer if on PATH
    scripts/gpu-check.sh --device cpu         # dry run on the CPU device (no GPU needed)

For every sample in ``samples/expectations.json`` it runs::

    python -m gpusafe run --device DEV --json OUT.json [sample flags] -- python samples/X.py

(the native samples of ``samples/native/expectations.json`` are built first
with ``gpusafe nvcc`` and run as binaries; on a device their ``devices``
does not name, gpusafe's refusal, exit 2, is what is expected)
and compares the report's violations with the expectation (kind, source file
and line; ``--strict`` also access, kernel, allocation tag and offset), and
the exit statuses (the program's own, and gpusafe's: 86 when it found
violations). Where ``compute-sanitizer`` is on PATH (GPU only), each sample
also runs under ``compute-sanitizer --tool memcheck`` (``--leak-check full``
for samples that need ``--leak-check``) and its findings are parsed from its
output. One table shows both tools' findings and wall times side by side,
then a one-line verdict. Exit status: 0 only if every gpusafe run matched its
expectation; 1 if one did not; 2 if a prerequisite is missing.

Nothing here hangs: every child runs in its own process group with a
timeout, output goes to files, and the whole run keeps to a time budget
(gpusafe runs first; compute-sanitizer runs get what is left).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
EXPECTATIONS = SAMPLES / "expectations.json"
NATIVE_EXPECTATIONS = SAMPLES / "native" / "expectations.json"
"""Native samples: built with ``gpusafe nvcc``, run as a binary (issue 11)."""
REPORT_SCHEMA = "gpusafe-report/1"
DEFAULT_ERROR_EXITCODE = 86  # DESIGN.md: gpusafe run's status when it found violations

# kinds found on the host: their location is a .py line, their access is null
HOST_KINDS = frozenset({"double-free", "invalid-free", "api-out-of-bounds", "leak"})


# --------------------------------------------------------------------------
# expectations and gpusafe reports
# --------------------------------------------------------------------------


def load_expectations(path: Path = EXPECTATIONS) -> dict[str, dict]:
    """Sample name -> its expectation (samples/README.md describes the format)."""
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != "gpusafe-sample-expectations/1":
        raise ValueError(f"{path}: unknown format {doc.get('format')!r}")
    return doc["samples"]


def _basename(file: str | None) -> str | None:
    return None if file is None else file.replace("\\", "/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Finding:
    """One violation, from an expectation or a gpusafe report, in comparable form."""

    kind: str
    file: str | None  # basename
    line: int | None
    access: str | None = None
    kernel: str | None = None
    tag: int | None = None
    offset: int | None = None

    @property
    def base(self) -> tuple:
        return (self.kind, self.file, self.line)

    def full(self, with_kernel: bool) -> tuple:
        return (*self.base, self.access, self.kernel if with_kernel else None, self.tag,
                self.offset)

    def describe(self, sample: str | None = None) -> str:
        """``global-out-of-bounds .cu:7`` (file shortened to its suffix when it is the sample's)."""
        where = "?"
        if self.file is not None:
            stem, _, suffix = self.file.rpartition(".")
            short = f".{suffix}" if sample is not None and stem == sample else self.file
            where = f"{short}:{self.line}"
        return f"{self.kind} {where}"

    def detail(self) -> str:
        parts = [self.kind, f"{self.file}:{self.line}", f"access={self.access}"]
        if self.kernel is not None:
            parts.append(f"kernel={self.kernel}")
        parts.append("no allocation" if self.tag is None else f"tag {self.tag} +{self.offset}")
        return " ".join(parts)


def expected_findings(expectation: dict) -> list[Finding]:
    out = []
    for v in expectation["violations"]:
        alloc = v.get("allocation")
        out.append(Finding(v["kind"], _basename(v["file"]), v["line"], v.get("access"),
                           v.get("kernel"), alloc["tag"] if alloc else None,
                           alloc.get("offset") if alloc else None))
    return out


def report_findings(report: dict) -> list[Finding]:
    """The violations of a gpusafe JSON report (DESIGN.md schema)."""
    out = []
    for v in report.get("violations", []):
        loc = v.get("location") or {}
        alloc = v.get("allocation")
        out.append(Finding(str(v.get("kind")), _basename(loc.get("file")), loc.get("line"),
                           v.get("access"), v.get("kernel"),
                           alloc.get("tag") if alloc else None,
                           alloc.get("offset") if alloc else None))
    return out


@dataclass
class Verdict:
    ok: bool
    problems: list[str] = field(default_factory=list)  # why it is not as expected
    notes: list[str] = field(default_factory=list)  # differences not compared in this mode


def compare(expectation: dict, report: dict | None, gpusafe_status: int | None = None,
            strict: bool = False) -> Verdict:
    """Is ``report`` what ``expectation`` says gpusafe must find?

    Always compared: the multiset of (kind, file basename, line); the
    program's exit code (``report["exit_code"]``); gpusafe's own exit status
    when given (86 when violations are expected, else the program's). With
    ``strict``, each violation must also have the expected access, kernel
    (where the expectation names one), allocation tag and offset; without
    it those differences are returned as notes.
    """
    if report is None:
        return Verdict(False, ["no JSON report"])
    problems: list[str] = []
    notes: list[str] = []
    if report.get("schema") != REPORT_SCHEMA:
        problems.append(f"report schema {report.get('schema')!r}, expected {REPORT_SCHEMA!r}")
    expected = expected_findings(expectation)
    actual = report_findings(report)

    exp_base, act_base = Counter(f.base for f in expected), Counter(f.base for f in actual)
    for key, n in (exp_base - act_base).items():
        problems.append(f"missing: {n}x {key[0]} at {key[1]}:{key[2]}")
    for key, n in (act_base - exp_base).items():
        problems.append(f"unexpected: {n}x {key[0]} at {key[1]}:{key[2]}")

    # the finer fields, matched within each (kind, file, line) group
    unmatched = list(actual)
    for e in expected:
        with_kernel = e.kernel is not None
        hit = next((a for a in unmatched if a.full(with_kernel) == e.full(with_kernel)), None)
        if hit is not None:
            unmatched.remove(hit)
            continue
        same_place = [a for a in unmatched if a.base == e.base]
        if not same_place:
            continue  # already reported as missing
        got = same_place[0]
        unmatched.remove(got)
        (problems if strict else notes).append(f"expected {e.detail()}; got {got.detail()}")

    program_exit = report.get("exit_code")
    if program_exit != expectation["exit_code"]:
        problems.append(f"program exit code {program_exit}, expected {expectation['exit_code']}")
    if gpusafe_status is not None:
        want = DEFAULT_ERROR_EXITCODE if expected else expectation["exit_code"]
        if gpusafe_status != want:
            problems.append(f"gpusafe exited {gpusafe_status}, expected {want}")
    return Verdict(not problems, problems, notes)


def group(findings: list[Finding], sample: str) -> list[str]:
    """Cell lines: identical findings folded into ``3x kind file:line``."""
    if not findings:
        return ["none"]
    counts = Counter(f.describe(sample) for f in findings)
    return [text if n == 1 else f"{n}x {text}" for text, n in counts.items()]


# --------------------------------------------------------------------------
# compute-sanitizer
# --------------------------------------------------------------------------

_PREFIX = re.compile(r"^=+\s?")
_INVALID = re.compile(r"^Invalid __(global|shared|local)__ (\w+) of size (\d+)")
_AT = re.compile(r"^\s*at .*? in (\S+?):(\d+)")
_ADDRESS = re.compile(r"^\s*Address (0x[0-9a-fA-F]+) is (misaligned|out of bounds|\w+)")
_API = re.compile(r"^Program hit (\w+) .*?on CUDA API call to (\w+)")
_LEAK = re.compile(r"^Leaked (\d+) bytes at (0x[0-9a-fA-F]+)")
_WARP = re.compile(r"^(Warp|Lane) (Illegal|Misaligned|Out-of-range) Address")
_NULL_LIMIT = 0x10000  # an invalid global access below this address is a null-pointer access

# the (gpusafe) kinds each compute-sanitizer finding counts as
_API_KINDS = {"cuMemFree": {"double-free", "invalid-free"},
              "cuMemcpy": {"api-out-of-bounds", "use-after-free"},
              "cuMemset": {"api-out-of-bounds", "use-after-free"}}


@dataclass
class SanitizerFinding:
    text: str  # what compute-sanitizer called it, shortened
    kinds: frozenset[str]  # the gpusafe kinds it is evidence of
    file: str | None = None  # basename
    line: int | None = None
    consequence: bool = False  # an API error that only echoes a device fault

    def describe(self, sample: str) -> str:
        if self.file is None:
            return self.text
        stem, _, suffix = self.file.rpartition(".")
        short = f".{suffix}" if stem == sample else self.file
        return f"{self.text} {short}:{self.line}"


def parse_sanitizer(text: str) -> list[SanitizerFinding]:
    """The findings in compute-sanitizer memcheck output (errors, API errors, leaks)."""
    findings: list[SanitizerFinding] = []
    current: SanitizerFinding | None = None
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue  # the program's own output
        line = _PREFIX.sub("", raw)
        if m := _INVALID.match(line):
            space, access = m.group(1), m.group(2)
            kind = {"global": "global-out-of-bounds", "shared": "shared-out-of-bounds",
                    "local": "local-out-of-bounds"}[space]
            kinds = {kind}
            if space == "global":  # memcheck does not tell a freed buffer from no buffer
                kinds.add("use-after-free")
            current = SanitizerFinding(f"invalid __{space}__ {access}", frozenset(kinds))
            findings.append(current)
        elif current is not None and (m := _AT.match(line)):
            current.file, current.line = _basename(m.group(1)), int(m.group(2))
        elif current is not None and (m := _ADDRESS.match(line)):
            address, what = int(m.group(1), 16), m.group(2)
            if what == "misaligned":
                current.text = current.text.replace("invalid", "misaligned")
                current.kinds = frozenset({"misaligned-access"})
            elif current.text.startswith("invalid __global__") and address < _NULL_LIMIT:
                current.text = current.text.replace("invalid", "null")
                current.kinds = frozenset({"null-pointer"})
        elif m := _API.match(line):
            error, api = m.group(1), m.group(2)
            api_base = re.sub(r"(_v\d+|Async)+$", "", api)
            kinds = next((k for prefix, k in _API_KINDS.items() if api_base.startswith(prefix)),
                         set())
            consequence = error in ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS",
                                    "CUDA_ERROR_LAUNCH_FAILED") and not kinds
            findings.append(SanitizerFinding(f"{error} in {api}", frozenset(kinds),
                                             consequence=consequence))
            current = None
        elif m := _LEAK.match(line):
            findings.append(SanitizerFinding(f"leaked {m.group(1)} bytes", frozenset({"leak"})))
            current = None
        elif m := _WARP.match(line):
            kind = {"Illegal": "global-out-of-bounds", "Misaligned": "misaligned-access",
                    "Out-of-range": "local-out-of-bounds"}[m.group(2)]
            kinds = {kind, "shared-out-of-bounds"} if m.group(2) == "Out-of-range" else {kind}
            if m.group(2) == "Illegal":
                kinds |= {"null-pointer", "use-after-free"}
            current = SanitizerFinding(f"{m.group(1).lower()} {m.group(2).lower()} address",
                                       frozenset(kinds))
            findings.append(current)
    return findings


def sanitizer_as_expected(expectation: dict, findings: list[SanitizerFinding]) -> bool:
    """Did compute-sanitizer catch the sample's bug (or, for a correct sample, stay quiet)?

    A buggy sample counts when one finding is evidence of one expected
    violation's kind and, where both name a source line (device kinds), at
    that line. memcheck names neither frees nor copies by their bug, so an
    API error on cuMemFree counts for double-free and invalid-free, and one
    on cuMemcpy for api-out-of-bounds.
    """
    if not expectation["violations"]:
        return not findings
    for e in expected_findings(expectation):
        for f in findings:
            if e.kind not in f.kinds:
                continue
            if e.kind in HOST_KINDS or f.line is None or (f.file, f.line) == (e.file, e.line):
                return True
    return False


# --------------------------------------------------------------------------
# running things
# --------------------------------------------------------------------------


@dataclass
class Run:
    argv: list[str]
    status: int | None  # None: timed out (killed) or could not start
    wall: float
    stdout: str
    stderr: str
    timed_out: bool = False
    error: str | None = None  # why it could not start

    def tail(self, n: int = 12) -> str:
        lines = (self.stdout + "\n" + self.stderr).strip().splitlines()
        return "\n".join(lines[-n:])


def run_command(argv: list[str], timeout: float, log_prefix: Path, env: dict | None = None,
                cwd: Path = ROOT) -> Run:
    """Run ``argv`` in its own process group, output to files; kill the group on timeout."""
    out_path, err_path = Path(f"{log_prefix}.out"), Path(f"{log_prefix}.err")
    start = time.monotonic()
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
            timed_out = False
            try:
                status: int | None = proc.wait(timeout=max(timeout, 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                status = None
    except OSError as e:
        return Run(argv, None, time.monotonic() - start, "", "", error=f"{argv[0]}: {e.strerror}")
    wall = time.monotonic() - start
    read = lambda p: p.read_text(errors="replace")  # noqa: E731
    return Run(argv, status, wall, read(out_path), read(err_path), timed_out)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


_PROBE = r"""
import json, sys
DEVICE, SAMPLES = sys.argv[1], sys.argv[2]
out = {"python": sys.version.split()[0]}
def step(name, fn):
    try:
        out[name] = fn()
        return True
    except BaseException as e:
        out[name + "_error"] = f"{type(e).__name__}: {e}"
        return False
def version(mod, dist):
    __import__(mod)
    from importlib.metadata import version
    return version(dist)
for mod, dist in (("numpy", "numpy"), ("rich", "rich"), ("llvmlite", "llvmlite"),
                  ("elftools", "pyelftools")):
    step(mod, lambda mod=mod, dist=dist: version(mod, dist))
step("cuda_bindings", lambda: __import__("cuda.bindings", fromlist=["x"]).__version__)
def nvrtc_version():
    from cuda.bindings import nvrtc
    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(str(err))
    return f"{major}.{minor}"
step("nvrtc", nvrtc_version)
sys.path.insert(0, SAMPLES)
step("include_dirs", lambda: __import__("nvrtc").cuda_include_dirs())
KERNEL = 'extern "C" __global__ void probe(int* p) { if (p) *p = 1; }'
def compile_probe(arch):
    return __import__("nvrtc").compile_to_ptx(KERNEL, "probe.cu", arch=arch)
def gpu():
    from cuda.bindings import driver as d
    def ok(result, what):
        err, *values = result
        if err != d.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what}: {err.name}")
        return values[0] if len(values) == 1 else values
    ok(d.cuInit(0), "cuInit")
    version = ok(d.cuDriverGetVersion(), "cuDriverGetVersion")
    dev = ok(d.cuDeviceGet(0), "cuDeviceGet(0)")
    name = ok(d.cuDeviceGetName(256, dev), "cuDeviceGetName")
    A = d.CUdevice_attribute
    major = ok(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cc")
    minor = ok(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cc")
    out["gpu"] = {"driver": f"{version // 1000}.{version % 1000 // 10}",
                  "name": name.split(b"\0")[0].decode(), "arch": f"compute_{major}{minor}"}
    if "nvrtc" not in out:
        return out["gpu"]
    def load():
        ptx = compile_probe(out["gpu"]["arch"])
        ctx = ok(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        ok(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        mod = ok(d.cuModuleLoadData(ptx.encode() + b"\0"), "cuModuleLoadData of NVRTC's PTX")
        ok(d.cuModuleUnload(mod), "cuModuleUnload")
        ok(d.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
        return "ok"
    step("module_load", load)
    return out["gpu"]
if DEVICE == "cuda":
    step("gpu", gpu)
elif "nvrtc" in out:
    step("compile", lambda: bool(compile_probe("compute_75")))
print("PROBE" + json.dumps(out))
"""


@dataclass
class Prerequisites:
    ok: bool
    lines: list[str]  # what was found, one line each
    problems: list[str]  # what is missing, exactly


def check_prerequisites(device: str, python: str, gpusafe_cmd: list[str],
                        outdir: Path) -> Prerequisites:
    lines: list[str] = []
    problems: list[str] = []
    if device == "cuda":
        smi = shutil.which("nvidia-smi")
        if smi:
            r = run_command([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                            20, outdir / "nvidia-smi")
            text = r.stdout.strip().replace("\n", "; ") if r.status == 0 else r.tail(2)
            lines.append(f"nvidia-smi: {text}")
        else:
            lines.append("nvidia-smi: not on PATH (the cuInit probe decides)")

    r = run_command([python, "-c", _PROBE, device, str(SAMPLES)], 120, outdir / "probe",
                    env=child_env())
    found = next((ln[5:] for ln in r.stdout.splitlines() if ln.startswith("PROBE")), None)
    if found is None:
        why = "timed out" if r.timed_out else f"exited {r.status}"
        problems.append(f"the prerequisite probe ({python}) {why}: {r.tail(5) or r.error}")
        return Prerequisites(False, lines, problems)
    info = json.loads(found)
    versions = ", ".join(f"{k} {info[k]}" for k in ("python", "cuda_bindings", "numpy", "rich",
                                                    "llvmlite", "elftools") if k in info)
    lines.append(f"{python}: {versions}")
    for mod, what in (("cuda_bindings", "cuda-bindings (pip cuda-bindings / cuda-python)"),
                      ("numpy", "numpy"), ("rich", "rich"), ("llvmlite", "llvmlite"),
                      ("elftools", "pyelftools (native programs' fat binaries)")):
        if mod not in info:
            problems.append(f"{what} is not importable by {python}: {info.get(mod + '_error')}")
    if "nvrtc" in info:
        lines.append(f"NVRTC {info['nvrtc']}")
        dirs = info.get("include_dirs") or []
        lines.append("CUDA headers for NVRTC: " + (", ".join(dirs) if dirs else
                     "none found (the samples include no headers, so none are needed)"))
    elif "cuda_bindings" in info:
        problems.append("NVRTC is missing: `from cuda.bindings import nvrtc; nvrtc.nvrtcVersion()` "
                        f"failed with {info.get('nvrtc_error')}. The samples compile their CUDA "
                        "with NVRTC at run time: install the NVRTC library (pip "
                        "nvidia-cuda-nvrtc matching cuda-bindings' major version, or the CUDA "
                        "toolkit's libnvrtc on LD_LIBRARY_PATH)")
    if "compile_error" in info:
        problems.append(f"NVRTC cannot compile a one-line kernel: {info['compile_error']}")
    if device == "cuda":
        if "gpu" in info:
            g = info["gpu"]
            lines.append(f"GPU: {g['name']} ({g['arch']}), driver CUDA {g['driver']}")
        elif "cuda_bindings" in info:
            problems.append(f"no usable GPU: {info.get('gpu_error')}")
        if "module_load_error" in info:
            problems.append(
                f"{info['module_load_error']}; the driver (CUDA {info['gpu']['driver']}) cannot "
                f"load PTX from NVRTC {info.get('nvrtc')}; an NVRTC newer than the driver emits "
                "a PTX ISA the driver does not know. Use an NVRTC no newer than the driver.")

    r = run_command([*gpusafe_cmd, "run", "--help"], 60, outdir / "gpusafe-run-help",
                    env=child_env())
    if r.status != 0:
        problems.append(f"`{shlex.join(gpusafe_cmd)} run --help` exited "
                        f"{'on timeout' if r.timed_out else r.status}: gpusafe run is not "
                        f"available here ({r.tail(2) or r.error})")
    else:
        lines.append(f"gpusafe: {shlex.join(gpusafe_cmd)} run (repo on PYTHONPATH: {ROOT})")
    return Prerequisites(not problems, lines, problems)


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for cand in ("/usr/local/cuda/bin/compute-sanitizer",
                 "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if os.access(cand, os.X_OK):
            return cand
    return None


# --------------------------------------------------------------------------
# the check
# --------------------------------------------------------------------------


@dataclass
class SampleResult:
    name: str
    expectation: dict
    gpusafe: Run | None = None
    report: dict | None = None
    verdict: Verdict | None = None
    sanitizer: Run | None = None
    sanitizer_findings: list[SanitizerFinding] | None = None
    sanitizer_ok: bool | None = None
    skipped: str | None = None  # why the gpusafe run did not happen


def run_gpusafe(name: str, exp: dict, args, outdir: Path, budget: float) -> SampleResult:
    res = SampleResult(name, exp)
    report_path = outdir / f"{name}.json"
    program = [args.python, str(Path("samples") / exp["program"])]
    if exp.get("native"):
        built, why = build_native(name, exp, args, outdir, budget)
        if built is None:
            res.verdict = Verdict(False, [why])
            return res
        program = [str(built)]
    argv = [*args.gpusafe_cmd, "run", "--device", args.device, "--json", str(report_path),
            *exp["flags"], "--", *program]
    res.gpusafe = run_command(argv, min(args.timeout, budget), outdir / f"{name}.gpusafe",
                              env=child_env())
    if res.gpusafe.timed_out:
        res.verdict = Verdict(False, [f"timed out after {res.gpusafe.wall:.0f} s"])
        return res
    if res.gpusafe.error:
        res.verdict = Verdict(False, [res.gpusafe.error])
        return res
    if exp.get("native") and args.device not in exp["devices"]:
        refused = res.gpusafe.status == 2 and "Nothing was run" in res.gpusafe.stderr
        res.verdict = Verdict(refused, [] if refused else [
            f"expected gpusafe to refuse a native program on {args.device} (exit 2, "
            f"'Nothing was run'); it exited {res.gpusafe.status}"], ["refused: native programs are checked on "
                                       f"{', '.join(exp['devices'])} only"])
        return res
    try:
        res.report = json.loads(report_path.read_text())
    except (OSError, ValueError) as e:
        res.verdict = Verdict(False, [f"no JSON report ({type(e).__name__}); gpusafe exited "
                                      f"{res.gpusafe.status}: {res.gpusafe.tail(3)}"])
        return res
    res.verdict = compare(exp, res.report, res.gpusafe.status, strict=args.strict)
    return res


def build_native(name: str, exp: dict, args, outdir: Path,
                 budget: float) -> tuple[Path | None, str]:
    """The native sample's binary, built with ``gpusafe nvcc`` (or why not)."""
    exe = outdir / name
    if exe.is_file():
        return exe, ""
    r = run_command([*args.gpusafe_cmd, "nvcc", "-o", str(exe),
                     str(SAMPLES / exp["program"])], min(args.timeout, budget),
                    outdir / f"{name}.build", env=child_env())
    if r.status != 0 or not exe.is_file():
        return None, f"gpusafe nvcc failed ({r.error or r.status}): {r.tail(3)}"
    return exe, ""


def _native_env(env: dict, python: str) -> dict:
    """A native sample outside gpusafe finds NVIDIA's libcudart.so.13 (the pip
    toolkit's, next to nvcc) as the program needs it, on the real driver."""
    r = subprocess.run([python, "-c", "from gpusafe.commands.nvcc import find_nvcc; "
                        "print(find_nvcc() or '')"], capture_output=True, text=True, env=env)
    nvcc = r.stdout.strip()
    if nvcc:
        lib = Path(nvcc).resolve().parent.parent / "lib"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(lib), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


def run_sanitizer(res: SampleResult, sanitizer: str, args, outdir: Path, budget: float) -> None:
    exp = res.expectation
    argv = [sanitizer, "--tool", "memcheck"]
    if "--leak-check" in exp["flags"]:
        argv += ["--leak-check", "full"]
    env = child_env()
    if exp.get("native"):
        exe = outdir / res.name
        if not exe.is_file():
            return  # its build failed: the gpusafe column says why
        argv.append(str(exe))
        env = _native_env(env, args.python)
    else:
        argv += [args.python, str(Path("samples") / exp["program"])]
    res.sanitizer = run_command(argv, min(args.timeout, budget), outdir / f"{res.name}.sanitizer",
                                env=env)
    res.sanitizer_findings = parse_sanitizer(res.sanitizer.stdout + "\n" + res.sanitizer.stderr)
    relevant = [f for f in res.sanitizer_findings if not f.consequence]
    res.sanitizer_ok = (not res.sanitizer.timed_out
                        and sanitizer_as_expected(exp, relevant))


def _seconds(run: Run | None) -> str:
    if run is None:
        return "-"
    return f"{run.wall:.1f} s" + (" (timeout)" if run.timed_out else "")


def render(results: list[SampleResult], sanitizer_state: str) -> str:
    """One table: per sample, the expectation, both tools' findings and times, a verdict."""
    header = ["sample", "expected", "gpusafe", "time", "compute-sanitizer", "time", "verdict"]
    rows: list[list[list[str]]] = []
    for r in results:
        expected = group(expected_findings(r.expectation), r.name)
        if r.skipped:
            found, gs_ok = [f"not run: {r.skipped}"], False
        elif r.report is not None:
            found, gs_ok = group(report_findings(r.report), r.name), r.verdict.ok
        elif r.verdict is not None and r.verdict.ok:  # a refusal that was expected
            found, gs_ok = [n[:60] for n in r.verdict.notes] or ["as expected"], True
        else:
            found, gs_ok = [r.verdict.problems[0][:60] if r.verdict else "?"], False
        if r.sanitizer is None:
            san = [sanitizer_state]
        elif r.sanitizer.timed_out:
            san = ["timed out"]
        else:
            shown = [f for f in r.sanitizer_findings if not f.consequence] or []
            counts = Counter(f.describe(r.name) for f in shown)
            san = [t if n == 1 else f"{n}x {t}" for t, n in counts.items()][:4] or ["none"]
        verdict = "gpusafe ok" if gs_ok else "gpusafe MISMATCH"
        if r.sanitizer_ok is not None:
            verdict += ", cs ok" if r.sanitizer_ok else ", cs missed"
        rows.append([[r.name], expected, found, [_seconds(r.gpusafe)], san,
                     [_seconds(r.sanitizer)], [verdict]])
    widths = [max([len(header[i])] + [len(s) for row in rows for s in row[i]])
              for i in range(len(header))]
    sep = "-+-".join("-" * w for w in widths)
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(), sep]
    for row in rows:
        for k in range(max(len(cell) for cell in row)):
            out.append(" | ".join((cell[k] if k < len(cell) else "").ljust(w)
                                  for cell, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(out)


def verdict_line(results: list[SampleResult], sanitizer_ran: bool) -> str:
    n = len(results)
    gs = sum(1 for r in results if r.verdict is not None and r.verdict.ok)
    gs_time = sum(r.gpusafe.wall for r in results if r.gpusafe is not None)
    line = f"gpusafe: {gs}/{n} samples as expected ({gs_time:.1f} s)"
    if sanitizer_ran:
        cs = sum(1 for r in results if r.sanitizer_ok)
        cs_time = sum(r.sanitizer.wall for r in results if r.sanitizer is not None)
        line += f"; compute-sanitizer: {cs}/{n} ({cs_time:.1f} s)"
    else:
        line += "; compute-sanitizer: not run"
    return line


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="passed to gpusafe run (cpu: a dry run without a GPU)")
    p.add_argument("--python", default=sys.executable,
                   help="the Python that runs gpusafe and the samples (default: this one)")
    p.add_argument("--samples", default="", help="comma-separated names (default: all)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per run (default 60)")
    p.add_argument("--budget", type=float, default=270.0,
                   help="seconds for all runs together (default 270)")
    p.add_argument("--strict", action="store_true",
                   help="also compare access, kernel, allocation tag and offset")
    p.add_argument("--sanitizer", default=None,
                   help="path of compute-sanitizer (default: PATH, /usr/local/cuda/bin)")
    p.add_argument("--no-sanitizer", action="store_true", help="do not run compute-sanitizer")
    p.add_argument("--gpusafe-cmd", default=None,
                   help="command that runs gpusafe (default: PYTHON -m gpusafe)")
    p.add_argument("--skip-prereqs", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="directory for reports and logs (default: a "
                   "new temporary directory)")
    p.add_argument("--summary", default=None, help="write the results as JSON to this file")
    args = p.parse_args(argv)
    args.gpusafe_cmd = (shlex.split(args.gpusafe_cmd) if args.gpusafe_cmd
                        else [args.python, "-m", "gpusafe"])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    deadline = started + args.budget
    outdir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    outdir.mkdir(parents=True, exist_ok=True)
    expectations = load_expectations()
    if NATIVE_EXPECTATIONS.is_file():
        expectations.update(load_expectations(NATIVE_EXPECTATIONS))
    names = [s for s in args.samples.split(",") if s] or list(expectations)
    unknown = [s for s in names if s not in expectations]
    if unknown:
        print(f"gpu-check: unknown samples {unknown}; known: {', '.join(expectations)}",
              file=sys.stderr)
        return 2

    print(f"gpu-check: --device {args.device}, {len(names)} samples, logs in {outdir}",
          flush=True)
    if not args.skip_prereqs:
        pre = check_prerequisites(args.device, args.python, args.gpusafe_cmd, outdir)
        for line in pre.lines:
            print(f"  {line}")
        if not pre.ok:
            for problem in pre.problems:
                print(f"MISSING: {problem}", file=sys.stderr)
            print("gpu-check: prerequisites missing, no sample was run", file=sys.stderr)
            return 2

    sanitizer = None
    sanitizer_state = "not run"
    if args.no_sanitizer:
        sanitizer_state = "not run (--no-sanitizer)"
    elif args.sanitizer:
        sanitizer = args.sanitizer
    elif args.device == "cuda":
        sanitizer = find_sanitizer()
        sanitizer_state = "not installed" if sanitizer is None else sanitizer_state
    else:
        sanitizer_state = "n/a (CPU device)"

    results: list[SampleResult] = []
    for name in names:
        left = deadline - time.monotonic()
        if left < 5:
            res = SampleResult(name, expectations[name], skipped="time budget spent")
            res.verdict = Verdict(False, ["not run: time budget spent"])
            results.append(res)
            continue
        print(f"  gpusafe run: {name} ...", end=" ", flush=True)
        res = run_gpusafe(name, expectations[name], args, outdir, left)
        print(f"{'ok' if res.verdict.ok else 'MISMATCH'} ({_seconds(res.gpusafe)})", flush=True)
        for problem in res.verdict.problems:
            print(f"    {problem}", flush=True)
        results.append(res)
    if sanitizer is not None:
        for res in results:
            left = deadline - time.monotonic()
            if left < 5:
                break
            print(f"  compute-sanitizer: {res.name} ...", end=" ", flush=True)
            run_sanitizer(res, sanitizer, args, outdir, left)
            print(f"({_seconds(res.sanitizer)})", flush=True)

    print()
    print(render(results, sanitizer_state))
    failures = [r for r in results if not (r.verdict and r.verdict.ok)]
    for r in results:
        if r.verdict and (r.verdict.problems or r.verdict.notes):
            print(f"\n{r.name}:")
            for p in r.verdict.problems:
                print(f"  MISMATCH {p}")
            for n in r.verdict.notes:
                print(f"  note     {n}")
            if r.verdict.problems and r.gpusafe is not None:
                print("  last output of gpusafe run:")
                for line in r.gpusafe.tail(8).splitlines():
                    print(f"    {line}")
    print()
    print(verdict_line(results, sanitizer is not None))
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary(results, args), indent=2))
    return 0 if not failures else 1


def summary(results: list[SampleResult], args) -> dict:
    return {
        "device": args.device,
        "samples": [{
            "name": r.name,
            "gpusafe_ok": bool(r.verdict and r.verdict.ok),
            "gpusafe_seconds": r.gpusafe.wall if r.gpusafe else None,
            "gpusafe_status": r.gpusafe.status if r.gpusafe else None,
            "problems": r.verdict.problems if r.verdict else [],
            "notes": r.verdict.notes if r.verdict else [],
            "found": [f.detail() for f in report_findings(r.report)] if r.report else None,
            "sanitizer_ok": r.sanitizer_ok,
            "sanitizer_seconds": r.sanitizer.wall if r.sanitizer else None,
            "sanitizer_found": ([f.describe(r.name) for f in r.sanitizer_findings]
                                if r.sanitizer_findings is not None else None),
        } for r in results],
    }


if __name__ == "__main__":
    sys.exit(main())
