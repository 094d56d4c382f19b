"""The real-compiler PTX corpus used by the test suite.

Every ``tests/kernels/*.cu`` file is compiled with NVRTC (the pip CUDA 13.0
toolchain) for several architectures and option sets; a handful of numba-cuda
kernels and hand-written LLVM IR kernels (through llvmlite's NVPTX backend) are
added so the corpus holds PTX from three different producers.

Compiled PTX is cached on disk under ``<repo>/.corpus-cache/`` keyed by a hash of
the source, the options and the compiler version, so only the first run pays
for compilation.

Public API::

    nvrtc_compile(source, name, arch="compute_75", options=(), name_expressions=()) -> str
    nvrtc_compile_ex(...) -> NvrtcResult          # PTX plus lowered names and log
    nvrtc_version() -> tuple[int, int]
    cuda_include_dirs() -> list[str]
    ptxas_path() -> str
    ptxas(ptx_text, arch="sm_75", extra=(), verbose=False) -> PtxasResult
    kernel_files() -> list[pathlib.Path]
    corpus_modules() -> list[CorpusModule]
    corpus_module_names() -> list[str]            # cheap: for pytest parametrize
    corpus_module(name) -> CorpusModule
    kernel_specs() -> module                       # tests/kernels/specs.py (SPECS, KernelSpec, ...)
    nvrtc_modules() / numba_modules() / llvm_modules() -> list[CorpusModule]
    entry_names(ptx) -> list[str]
    compile_kernel_file(filename, arch="compute_75", options=()) -> str
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
KERNELS_DIR = TESTS_DIR / "kernels"
CACHE_DIR = REPO_ROOT / ".corpus-cache"

#: Architectures every .cu file is compiled for (NVRTC virtual arch -> ptxas arch).
NVRTC_ARCHES: tuple[str, ...] = ("compute_75", "compute_80", "compute_90")
#: Option sets every .cu file is compiled with; "" is the default (-O3).
NVRTC_VARIANTS: tuple[tuple[str, ...], ...] = ((), ("-G",), ("-lineinfo",))
#: Options always passed to NVRTC.
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17",)

# Bump to invalidate every cached entry after a change in how PTX is produced.
_CACHE_SCHEMA = "corpus-cache/2"


class CompileError(RuntimeError):
    """A compiler (NVRTC, ptxas, numba, LLVM) rejected its input."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log


# --------------------------------------------------------------------------
# toolchain discovery
# --------------------------------------------------------------------------


@functools.cache
def _nvidia_cu13_dir() -> Path:
    """site-packages/nvidia/cu13 of the installed pip CUDA packages."""
    import nvidia  # namespace package installed by the nvidia-* wheels

    for base in list(getattr(nvidia, "__path__", [])):
        cand = Path(base) / "cu13"
        if (cand / "include" / "cuda_runtime.h").is_file() or (cand / "bin" / "ptxas").is_file():
            return cand
    raise CompileError("cannot find the pip CUDA 13 toolkit (site-packages/nvidia/cu13)")


def driver_header_dir() -> Path | None:
    """The pip toolkit's folder holding ``cuda.h`` (native test programs
    include it), or None where the toolkit is not installed."""
    try:
        inc = _nvidia_cu13_dir() / "include"
    except (CompileError, ImportError):
        return None
    return inc if (inc / "cuda.h").is_file() else None


def cuda_include_dirs() -> list[str]:
    """Header directories passed to NVRTC with -I (CUDA headers and CCCL)."""
    inc = _nvidia_cu13_dir() / "include"
    dirs = [str(inc)]
    if (inc / "cccl").is_dir():  # libcu++ (cuda/std/...), needed by cooperative_groups
        dirs.append(str(inc / "cccl"))
    return dirs


def ptxas_path() -> str:
    """Path of the pip ptxas (site-packages/nvidia/cu13/bin/ptxas)."""
    p = _nvidia_cu13_dir() / "bin" / "ptxas"
    if not p.is_file():
        raise CompileError(f"ptxas not found at {p}")
    return str(p)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check_nvrtc(err, "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def _toolchain_id() -> tuple:
    """What the NVRTC output depends on besides source and options: the NVRTC
    version and build, and the versions of the packages providing headers."""
    from importlib.metadata import PackageNotFoundError, version

    pkgs = []
    for dist in ("nvidia-cuda-nvrtc", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime"):
        try:
            pkgs.append((dist, version(dist)))
        except PackageNotFoundError:
            pass
    return (nvrtc_version(), tuple(pkgs), tuple(cuda_include_dirs()))


def _check_nvrtc(err, what: str, log: str = "") -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{what} failed: {err!r}", log)


# --------------------------------------------------------------------------
# NVRTC
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class NvrtcResult:
    ptx: str
    log: str
    lowered_names: dict[str, str] = field(default_factory=dict)


def _nvrtc_compile_uncached(
    source: str, name: str, arch: str, options: Sequence[str], name_expressions: Sequence[str]
) -> NvrtcResult:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, expr.encode())
            _check_nvrtc(err, f"nvrtcAddNameExpression({expr!r})")
        opts = [f"--gpu-architecture={arch}"]
        opts += [f"-I{d}" for d in cuda_include_dirs()]
        opts += list(BASE_OPTIONS) + list(options)
        bopts = [o.encode() for o in opts]
        (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        err, logsize = nvrtc.nvrtcGetProgramLogSize(prog)
        _check_nvrtc(err, "nvrtcGetProgramLogSize")
        logbuf = bytearray(logsize)
        (err,) = nvrtc.nvrtcGetProgramLog(prog, logbuf)
        log = logbuf.rstrip(b"\0").decode(errors="replace")
        _check_nvrtc(cerr, f"NVRTC compilation of {name} ({' '.join(opts[:1] + list(options))})", log)
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check_nvrtc(err, "nvrtcGetPTXSize")
        buf = bytearray(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, buf)
        _check_nvrtc(err, "nvrtcGetPTX")
        ptx = buf.rstrip(b"\0").decode()
        lowered = {}
        for expr in name_expressions:
            err, low = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
            _check_nvrtc(err, f"nvrtcGetLoweredName({expr!r})")
            lowered[expr] = low.decode() if isinstance(low, bytes) else str(low)
        return NvrtcResult(ptx=ptx, log=log, lowered_names=lowered)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _cache_key(*parts: object) -> str:
    h = hashlib.sha256()
    for p in (_CACHE_SCHEMA, *parts):
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def _cache_get(key: str) -> str | None:
    p = CACHE_DIR / f"{key}.ptx"
    try:
        return p.read_text()
    except OSError:
        return None


def _cache_put(key: str, text: str) -> None:
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE_DIR, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, CACHE_DIR / f"{key}.ptx")  # atomic: parallel writers are fine
    except OSError:
        pass  # a read-only checkout still works, just uncached


def nvrtc_compile_ex(
    source: str,
    name: str,
    arch: str = "compute_75",
    options: Sequence[str] = (),
    name_expressions: Sequence[str] = (),
    *,
    cache: bool = True,
) -> NvrtcResult:
    """Compile CUDA C++ with NVRTC; return PTX, the log and lowered (mangled) names.

    Cached on disk unless ``cache=False``; name expressions are never cached
    (the lowered names are part of the result, so those compiles are redone).
    """
    options = tuple(options)
    name_expressions = tuple(name_expressions)
    key = None
    if cache and not name_expressions:
        key = _cache_key("nvrtc", source, name, arch, options, BASE_OPTIONS, _toolchain_id())
        hit = _cache_get(key)
        if hit is not None:
            return NvrtcResult(ptx=hit, log="")
    res = _nvrtc_compile_uncached(source, name, arch, options, name_expressions)
    if key is not None:
        _cache_put(key, res.ptx)
    return res


def nvrtc_compile(
    source: str,
    name: str,
    arch: str = "compute_75",
    options: Sequence[str] = (),
    name_expressions: Sequence[str] = (),
) -> str:
    """Compile CUDA C++ source with NVRTC and return the PTX text (no trailing NUL).

    ``name`` is the file name NVRTC reports in diagnostics (and in .file/.loc
    directives with -G/-lineinfo). Raises :class:`CompileError` carrying the
    NVRTC log when compilation fails.
    """
    return nvrtc_compile_ex(source, name, arch, options, name_expressions).ptx


def lowered_names(source: str, name: str, name_expressions: Sequence[str],
                  arch: str = "compute_75") -> dict[str, str]:
    """Mangled names of template instantiations, e.g. {"scale_add<float>": "_Z9scale_addIf..."}."""
    return nvrtc_compile_ex(source, name, arch, (), name_expressions).lowered_names


# --------------------------------------------------------------------------
# ptxas
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PtxasResult:
    """What ptxas said. ``stderr`` holds the ``-v`` resource report when asked for."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    cubin_size: int

    @property
    def info(self) -> str:
        """The -v output (ptxas prints it on stderr)."""
        return self.stdout + self.stderr

    def registers(self) -> dict[str, int]:
        """Registers per function from -v output: {function name: count}."""
        regs: dict[str, int] = {}
        current = None
        for line in self.info.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'|Function properties for (\S+)", line)
            if m:
                current = m.group(1) or m.group(2)
                continue
            m = re.search(r"Used (\d+) registers", line)
            if m and current is not None:
                regs[current] = int(m.group(1))
        return regs


def ptxas(ptx_text: str, arch: str = "sm_75", extra: Sequence[str] = (),
          verbose: bool = False) -> PtxasResult:
    """Assemble PTX with the pip ptxas into a temporary cubin.

    Raises :class:`CompileError` with ptxas's stderr when it rejects the PTX.
    With ``verbose=True`` passes ``-v`` so the result carries register and
    memory usage (see :meth:`PtxasResult.registers`).
    """
    with tempfile.TemporaryDirectory(prefix="corpus-ptxas-") as tmp:
        src = Path(tmp) / "in.ptx"
        out = Path(tmp) / "out.cubin"
        src.write_text(ptx_text)
        args = [ptxas_path(), f"-arch={arch}", "-o", str(out)]
        if verbose:
            args.append("-v")
        args += list(extra)
        args.append(str(src))
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"ptxas -arch={arch} failed (rc={proc.returncode})",
                               proc.stderr + proc.stdout)
        size = out.stat().st_size if out.exists() else 0
        return PtxasResult(args=args, returncode=proc.returncode, stdout=proc.stdout,
                           stderr=proc.stderr, cubin_size=size)


# --------------------------------------------------------------------------
# the corpus
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusModule:
    name: str  # e.g. "atomics.cu[compute_80,-G]", "numba:saxpy[sm_75]"
    ptx: str
    arch: str  # the ptxas target, "sm_75"
    origin: str  # "nvrtc" | "numba" | "llvm"
    source: str = ""  # .cu file name (nvrtc), function name (numba), IR name (llvm)
    options: tuple[str, ...] = ()

    @property
    def entries(self) -> list[str]:
        return entry_names(self.ptx)


_ENTRY_RE = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$%][\w$%]*)", re.M)


def entry_names(ptx: str) -> list[str]:
    """Names of the kernels (.entry directives) in a PTX module."""
    return _ENTRY_RE.findall(ptx)


def kernel_files() -> list[Path]:
    return sorted(KERNELS_DIR.glob("*.cu"))


def _sm_of(compute_arch: str) -> str:
    return "sm_" + compute_arch.split("_", 1)[1]


def _module_name(filename: str, arch: str, options: Sequence[str]) -> str:
    return f"{filename}[{','.join([arch, *options])}]"


def compile_kernel_file(filename: str, arch: str = "compute_75", options: Sequence[str] = ()) -> str:
    """PTX of one tests/kernels file (cached)."""
    path = KERNELS_DIR / filename
    return nvrtc_compile(path.read_text(), filename, arch, options)


def _compile_job(job: tuple[str, str, tuple[str, ...]]) -> tuple[str, str, tuple[str, ...], str]:
    filename, arch, options = job
    return filename, arch, options, compile_kernel_file(filename, arch, options)


def _parallel_map(fn, jobs: list) -> list:
    """Run uncached compiles in worker processes (NVRTC holds the GIL)."""
    workers = min(len(jobs), os.cpu_count() or 1, 8)
    if workers <= 1:
        return [fn(j) for j in jobs]
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process with CUDA/LLVM state
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        return list(ex.map(fn, jobs, chunksize=1))


@functools.cache
def nvrtc_modules() -> tuple[CorpusModule, ...]:
    """Every tests/kernels/*.cu for every arch in NVRTC_ARCHES and option set in NVRTC_VARIANTS."""
    jobs = [(p.name, arch, tuple(opts)) for p in kernel_files()
            for arch in NVRTC_ARCHES for opts in NVRTC_VARIANTS]
    done: dict[tuple, str] = {}
    todo = []
    for job in jobs:
        filename, arch, opts = job
        src = (KERNELS_DIR / filename).read_text()
        key = _cache_key("nvrtc", src, filename, arch, opts, BASE_OPTIONS, _toolchain_id())
        hit = _cache_get(key)
        if hit is None:
            todo.append(job)
        else:
            done[job] = hit
    if todo:
        for filename, arch, opts, ptx in _parallel_map(_compile_job, todo):
            done[(filename, arch, opts)] = ptx
    return tuple(
        CorpusModule(name=_module_name(f, a, o), ptx=done[(f, a, o)], arch=_sm_of(a),
                     origin="nvrtc", source=f, options=o)
        for (f, a, o) in jobs
    )


# --------------------------------------------------------------------------
# numba-cuda
# --------------------------------------------------------------------------

# Kept as source text: it is exec'd lazily (importing numba is slow) and its
# text is part of the cache key.
NUMBA_SOURCE = '''
import math
from numba import cuda, float32, int32

def numba_vec_add(out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]

def numba_saxpy_2d(out, x, y, alpha):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = alpha * x[i, j] + y[i, j]

def numba_shared_reverse(out, inp):
    buf = cuda.shared.array(128, dtype=float32)
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * 128
    if base + t < inp.size:
        buf[t] = inp[base + t]
    cuda.syncthreads()
    if base + t < inp.size:
        out[base + t] = buf[127 - t]

def numba_block_reduce(out, inp):
    buf = cuda.shared.array(256, dtype=float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = inp[i] if i < inp.size else float32(0.0)
    cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        out[cuda.blockIdx.x] = buf[0]

def numba_atomics(hist, total, mx, vals):
    i = cuda.grid(1)
    if i < vals.size:
        v = vals[i]
        cuda.atomic.add(hist, v % hist.size, 1)
        cuda.atomic.add(total, 0, float32(v) * float32(0.5))
        cuda.atomic.max(mx, 0, v)

def numba_math(out, x):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = math.sin(v) * math.exp(-v) + math.sqrt(abs(v)) + math.log1p(abs(v)) + math.tanh(v)

def numba_clamp(x, lo, hi):
    return min(max(x, lo), hi)

def numba_polyval(x):
    return ((x * float32(0.5) + float32(1.0)) * x - float32(2.0)) * x + float32(3.0)

def numba_warp_vote(out, inp):
    i = cuda.grid(1)
    if i < inp.size:
        b = cuda.ballot_sync(0xFFFFFFFF, inp[i] > 0)
        out[i] = cuda.popc(b) + cuda.shfl_down_sync(0xFFFFFFFF, inp[i], 1)
'''

# kernels that call device functions are built in _numba_build once the device
# functions are jitted.
_NUMBA_DEVFN_SOURCE = '''
def numba_uses_devfn(out, x, lo, hi):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = clamp_dev(polyval_dev(x[i]), lo, hi)
'''

_NUMBA_CC = (7, 5)


def _numba_jobs():
    """(function, kind, signature, options) of every numba module."""
    return [
        ("numba_vec_add", "kernel", "void(float32[::1], float32[::1], float32[::1])", ()),
        ("numba_saxpy_2d", "kernel", "void(float32[:, ::1], float32[:, ::1], float32[:, ::1], float32)", ()),
        ("numba_shared_reverse", "kernel", "void(float32[::1], float32[::1])", ()),
        ("numba_block_reduce", "kernel", "void(float32[::1], float32[::1])", ()),
        ("numba_atomics", "kernel", "void(int32[::1], float32[::1], int32[::1], int32[::1])", ()),
        ("numba_math", "kernel", "void(float64[::1], float64[::1])", ()),
        ("numba_warp_vote", "kernel", "void(int32[::1], int32[::1])", ()),
        ("numba_uses_devfn", "kernel", "void(float32[::1], float32[::1], float32, float32)", ()),
        ("numba_clamp", "device", "float32(float32, float32, float32)", ()),
        ("numba_block_reduce", "kernel", "void(float32[::1], float32[::1])", ("lineinfo",)),
        ("numba_vec_add", "kernel", "void(float32[::1], float32[::1], float32[::1])", ("debug",)),
    ]


def _numba_label(job) -> str:
    name, _kind, _sig, opts = job
    return f"numba:{name}[{','.join([f'sm_{_NUMBA_CC[0]}{_NUMBA_CC[1]}', *opts])}]"


def _numba_exec(ns: dict, source: str, filename: str) -> None:
    import linecache

    # numba looks the source up (line info, debug info): make it findable
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def _numba_compile(name: str, kind: str, sig: str, opts: tuple[str, ...] = ()) -> str:
    import warnings

    from numba import cuda

    ns: dict = {}
    _numba_exec(ns, NUMBA_SOURCE, "<corpus-numba>")
    kw = {"lineinfo": "lineinfo" in opts}
    if "debug" in opts:
        kw.update(debug=True, opt=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's performance/debug-info chatter
        if name != "numba_uses_devfn":
            ptx, _resty = cuda.compile_ptx(ns[name], sig, device=(kind == "device"), cc=_NUMBA_CC, **kw)
            return ptx
        # A kernel calling @cuda.jit(device=True) functions. numba compiles such
        # callees for "the current device", which needs a driver; there is none
        # here, so tell the dispatcher the current device is a cc 7.5 one.
        import types
        from unittest import mock

        from numba.cuda import dispatcher

        fake = types.SimpleNamespace(compute_capability=_NUMBA_CC)
        with mock.patch.object(dispatcher, "get_current_device", lambda: fake):
            ns["clamp_dev"] = cuda.jit(device=True)(ns["numba_clamp"])
            ns["polyval_dev"] = cuda.jit(device=True)(ns["numba_polyval"])
            _numba_exec(ns, _NUMBA_DEVFN_SOURCE, "<corpus-numba-devfn>")
            ptx, _resty = cuda.compile_ptx(ns[name], sig, cc=_NUMBA_CC, **kw)
        return ptx


def _numba_job(job):
    return job, _numba_compile(*job)


@functools.cache
def _numba_version() -> str:
    from importlib.metadata import version

    return f"numba-cuda {version('numba-cuda')}, numba {version('numba')}"


@functools.cache
def numba_modules() -> tuple[CorpusModule, ...]:
    """PTX from numba.cuda.compile_ptx (NVVM), cc 7.5."""
    arch = f"sm_{_NUMBA_CC[0]}{_NUMBA_CC[1]}"
    results: dict = {}
    keys = {}
    for job in _numba_jobs():
        keys[job] = _cache_key("numba", NUMBA_SOURCE, _NUMBA_DEVFN_SOURCE, job, _NUMBA_CC,
                               _numba_version())
        hit = _cache_get(keys[job])
        if hit is None:
            # in this process: the numba import dominates, the compiles are quick
            _, hit = _numba_job(job)
            _cache_put(keys[job], hit)
        results[job] = hit
    return tuple(
        CorpusModule(name=_numba_label(job), ptx=results[job], arch=arch, origin="numba",
                     source=job[0], options=(job[1], job[2], *job[3]))
        for job in _numba_jobs()
    )


# --------------------------------------------------------------------------
# LLVM NVPTX backend (llvmlite)
# --------------------------------------------------------------------------

LLVM_TRIPLE = "nvptx64-nvidia-cuda"
LLVM_CPU = "sm_75"
#: PTX ISA requested from the NVPTX backend; must not exceed what ptxas 13.0 takes (9.0).
LLVM_PTX_FEATURE = "+ptx78"

LLVM_IR_MODULES: dict[str, str] = {
    # out[i] = a[i] * s + b[i] for i < n, with the canonical tid/ctaid index math
    "llvm_saxpy": r"""
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define void @llvm_saxpy(ptr addrspace(1) %out, ptr addrspace(1) %a, ptr addrspace(1) %b,
                        float %s, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %ctaid, %ntid
  %i = add i32 %base, %tid
  %inb = icmp slt i32 %i, %n
  br i1 %inb, label %body, label %exit
body:
  %idx = sext i32 %i to i64
  %pa = getelementptr inbounds float, ptr addrspace(1) %a, i64 %idx
  %pb = getelementptr inbounds float, ptr addrspace(1) %b, i64 %idx
  %po = getelementptr inbounds float, ptr addrspace(1) %out, i64 %idx
  %va = load float, ptr addrspace(1) %pa, align 4
  %vb = load float, ptr addrspace(1) %pb, align 4
  %m = fmul float %va, %s
  %r = fadd float %m, %vb
  store float %r, ptr addrspace(1) %po, align 4
  br label %exit
exit:
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @llvm_saxpy, !"kernel", i32 1}
""",
    # a shared-memory block sum with a device function and a loop
    "llvm_block_sum": r"""
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@buf = internal addrspace(3) global [128 x i32] undef, align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare void @llvm.nvvm.barrier0()

define internal i32 @square_plus(i32 %x, i32 %k) noinline {
  %sq = mul i32 %x, %x
  %r = add i32 %sq, %k
  ret i32 %r
}

define void @llvm_block_sum(ptr addrspace(1) %out, ptr addrspace(1) %in) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %blk = mul i32 %ctaid, 128
  %g = add i32 %blk, %tid
  %g64 = zext i32 %g to i64
  %pin = getelementptr inbounds i32, ptr addrspace(1) %in, i64 %g64
  %v = load i32, ptr addrspace(1) %pin, align 4
  %w = call i32 @square_plus(i32 %v, i32 1)
  %t64 = zext i32 %tid to i64
  %ps = getelementptr inbounds [128 x i32], ptr addrspace(3) @buf, i64 0, i64 %t64
  store i32 %w, ptr addrspace(3) %ps, align 4
  call void @llvm.nvvm.barrier0()
  br label %loop
loop:
  %s = phi i32 [ 64, %entry ], [ %s2, %latch ]
  %lt = icmp ult i32 %tid, %s
  br i1 %lt, label %add, label %latch
add:
  %o = add i32 %tid, %s
  %o64 = zext i32 %o to i64
  %po = getelementptr inbounds [128 x i32], ptr addrspace(3) @buf, i64 0, i64 %o64
  %x = load i32, ptr addrspace(3) %po, align 4
  %y = load i32, ptr addrspace(3) %ps, align 4
  %z = add i32 %x, %y
  store i32 %z, ptr addrspace(3) %ps, align 4
  br label %latch
latch:
  call void @llvm.nvvm.barrier0()
  %s2 = lshr i32 %s, 1
  %more = icmp ne i32 %s2, 0
  br i1 %more, label %loop, label %done
done:
  %is0 = icmp eq i32 %tid, 0
  br i1 %is0, label %write, label %exit
write:
  %p0 = getelementptr inbounds [128 x i32], ptr addrspace(3) @buf, i64 0, i64 0
  %tot = load i32, ptr addrspace(3) %p0, align 4
  %c64 = zext i32 %ctaid to i64
  %pout = getelementptr inbounds i32, ptr addrspace(1) %out, i64 %c64
  store i32 %tot, ptr addrspace(1) %pout, align 4
  br label %exit
exit:
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @llvm_block_sum, !"kernel", i32 1}
""",
    # generic-address pointer math, a select, i64 arithmetic and an atomic
    "llvm_atomic_count": r"""
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define void @llvm_atomic_count(ptr %counts, ptr %vals, i64 %n, i64 %nbins) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %b = mul i32 %ctaid, %ntid
  %i32 = add i32 %b, %tid
  %i = zext i32 %i32 to i64
  %inb = icmp ult i64 %i, %n
  br i1 %inb, label %body, label %exit
body:
  %pv = getelementptr inbounds i64, ptr %vals, i64 %i
  %v = load i64, ptr %pv, align 8
  %bin = urem i64 %v, %nbins
  %pc = getelementptr inbounds i32, ptr %counts, i64 %bin
  %old = atomicrmw add ptr %pc, i32 1 monotonic, align 4
  br label %exit
exit:
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @llvm_atomic_count, !"kernel", i32 1}
""",
    # a dense switch: the NVPTX backend lowers it to a jump table (brx.idx + .branchtargets)
    "llvm_switch": r"""
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
define void @llvm_switch(ptr addrspace(1) %out, ptr addrspace(1) %ops) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %i = zext i32 %tid to i64
  %p = getelementptr inbounds i32, ptr addrspace(1) %ops, i64 %i
  %op = load i32, ptr addrspace(1) %p, align 4
  switch i32 %op, label %def [
    i32 0, label %c0
    i32 1, label %c1
    i32 2, label %c2
    i32 3, label %c3
    i32 4, label %c4
    i32 5, label %c5
    i32 6, label %c6
    i32 7, label %c7
  ]
c0: br label %done
c1: br label %done
c2: br label %done
c3: br label %done
c4: br label %done
c5: br label %done
c6: br label %done
c7: br label %done
def: br label %done
done:
  %r = phi i32 [ 11, %c0 ], [ 22, %c1 ], [ 35, %c2 ], [ 47, %c3 ], [ 51, %c4 ], [ 68, %c5 ], [ 72, %c6 ], [ 89, %c7 ], [ -1, %def ]
  %po = getelementptr inbounds i32, ptr addrspace(1) %out, i64 %i
  store i32 %r, ptr addrspace(1) %po, align 4
  ret void
}
!nvvm.annotations = !{!0}
!0 = !{ptr @llvm_switch, !"kernel", i32 1}
""",
}


@functools.cache
def _llvm_target_machine():
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(LLVM_TRIPLE)
    return target.create_target_machine(cpu=LLVM_CPU, features=LLVM_PTX_FEATURE, opt=2)


def llvm_emit_ptx(ir_text: str) -> str:
    """Assemble LLVM IR with llvmlite's NVPTX backend (sm_75) and return the PTX."""
    import llvmlite.binding as llvm

    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError("LLVM IR rejected", str(e)) from e
    return _llvm_target_machine().emit_assembly(mod)


@functools.cache
def llvm_modules() -> tuple[CorpusModule, ...]:
    import llvmlite

    mods = []
    for name, ir in LLVM_IR_MODULES.items():
        key = _cache_key("llvm", ir, LLVM_CPU, LLVM_PTX_FEATURE, llvmlite.__version__)
        ptx = _cache_get(key)
        if ptx is None:
            ptx = llvm_emit_ptx(ir)
            _cache_put(key, ptx)
        mods.append(CorpusModule(name=f"llvm:{name}[{LLVM_CPU}]", ptx=ptx, arch=LLVM_CPU,
                                 origin="llvm", source=name, options=(LLVM_PTX_FEATURE,)))
    return tuple(mods)


def corpus_modules() -> list[CorpusModule]:
    """The whole corpus: NVRTC matrix, then numba, then LLVM modules."""
    return [*nvrtc_modules(), *numba_modules(), *llvm_modules()]


def corpus_module_names() -> list[str]:
    """Names of every corpus module, cheap to compute (no compilation): for parametrize."""
    names = [_module_name(p.name, a, o) for p in kernel_files()
             for a in NVRTC_ARCHES for o in NVRTC_VARIANTS]
    names += [_numba_label(j) for j in _numba_jobs()]
    names += [f"llvm:{n}[{LLVM_CPU}]" for n in LLVM_IR_MODULES]
    return names


def kernel_specs():
    """The launch specs of tests/kernels (tests/kernels/specs.py, imported by path)."""
    import importlib.util
    import sys

    name = "gpusafe_tests_kernel_specs"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, KERNELS_DIR / "specs.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses need the module registered while executing
        spec.loader.exec_module(mod)
    return mod


def corpus_module(name: str) -> CorpusModule:
    for m in corpus_modules():
        if m.name == name:
            return m
    raise KeyError(name)


if __name__ == "__main__":  # python tests/corpus.py: build the corpus and time it
    import sys
    import time

    t0 = time.perf_counter()
    mods = corpus_modules()
    t1 = time.perf_counter()
    print(f"{len(mods)} modules in {t1 - t0:.1f}s", file=sys.stderr)
    if "--ptxas" in sys.argv:
        for m in mods:
            ptxas(m.ptx, m.arch)
        print(f"ptxas ok in {time.perf_counter() - t1:.1f}s", file=sys.stderr)
