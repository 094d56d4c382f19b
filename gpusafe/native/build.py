"""Building the stand-in ``libcuda.so.1`` from source with the machine's C
compiler, once per (source, Python) pair, into gpusafe's cache.

No binary ships with gpusafe: the library links against this Python's
``libpython`` (it runs the engine in the program's process), so it is built
where it runs.  ``python -m gpusafe.native.build`` builds it ahead of time
and prints its folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .table import C_TYPES, HAND_WRITTEN, Row, rows

HERE = Path(__file__).resolve().parent
SHIM = HERE / "shim.c"
RUNTIME_SHIM = HERE / "runtime_shim.c"
RUNTIME_NAMES = HERE / "runtime_api.txt"
RUNTIME_NAMES_12 = HERE / "runtime_api_12.txt"
PRELOAD_SHIM = HERE / "preload.c"
LIBRARY = "libcuda.so.1"
RUNTIME = "libcudart.so.13"
RUNTIMES = {13: RUNTIME, 12: "libcudart.so.12"}
"""The stand-in runtime's sonames by CUDA major version: a program built
against CUDA 12's shared runtime asks for ``libcudart.so.12``, its symbols
versioned ``libcudart.so.12``."""
PRELOAD = "libgpusafe_preload.so"
CFLAGS = ["-shared", "-fPIC", "-O0", "-fvisibility=default", f"-Wl,-soname,{LIBRARY}"]
"""-O0: the stubs only marshal arguments, and it halves the build time."""


class BuildError(Exception):
    """The stand-in driver cannot be built here (no C compiler, no libpython)."""


def _stub(row: Row) -> str:
    name = row.symbol if row.symbol else f"gs_old_{row.index}"
    linkage = "" if row.symbol else "static "
    if not row.typed:
        return f"{linkage}CUresult {name}(void) {{ return gs_call({row.index}, -1, NULL); }}\n"
    params = ", ".join(f"{C_TYPES[c]} p{i}" for i, (c, _) in enumerate(row.params)) or "void"
    sets = []
    for i, (code, _) in enumerate(row.params):
        macro = {"i32": "GS_I", "i64": "GS_I", "u32": "GS_U", "u64": "GS_U", "ptr": "GS_P",
                 "f32": "GS_D", "f64": "GS_D"}[code]
        sets.append(f"{macro}({i}, p{i});")
    n = len(row.params)
    array = f"gs_arg a[{n}]; " if n else "gs_arg *a = NULL; "
    types = ", ".join(C_TYPES[c] for c, _ in row.params) or "void"
    names = ", ".join(f"p{i}" for i in range(n))
    forward = (f"if (gs_backend) {{ CUresult (*f_)({types}) = (CUresult (*)({types}))"
               f"gs_forward({row.index}); if (f_) return f_({names}); }} ")
    return (f"{linkage}CUresult {name}({params}) {{ {forward}{array}{' '.join(sets)} "
            f"return gs_call({row.index}, {n}, a); }}\n")


def source() -> str:
    """shim.c and, after it, one stub per row and the table cuGetProcAddress reads."""
    parts = [SHIM.read_text()]
    entries = []
    for row in rows():
        if row.base in HAND_WRITTEN:
            fn = row.symbol or row.base
        else:
            parts.append(_stub(row))
            fn = row.symbol or f"gs_old_{row.index}"
        entries.append(f'    {{"{row.base}", {row.version}, {int(row.per_thread)}, '
                       f"(void *){fn}}},\n")
    parts.append("const gs_entry gs_table[] = {\n" + "".join(entries) + "};\n")
    parts.append(f"const int gs_table_size = {len(entries)};\n")
    parts.append(f"void *gs_forwarded[{len(entries)}];\n")
    [export] = [r.index for r in rows() if r.base == "cuGetExportTable"]
    parts.append(f"const int gs_export_table_row = {export};\n")
    return "".join(parts)


def _names(path: Path) -> list[str]:
    return [n for n in path.read_text().splitlines() if n and not n.startswith("#")]


def runtime_source(major: int = 13) -> str:
    """runtime_shim.c and a stub for every runtime function it does not
    define; for CUDA 12 (``major`` 12) also the functions only CUDA 12 has,
    and ``cudaGetDeviceProperties``, whose ``cudaDeviceProp`` is laid out
    differently there: those stubs say it is CUDA 12's form of the call."""
    text = f"#define GS_CUDART_MAJOR {major}\n" + RUNTIME_SHIM.read_text()
    defined = set(re.findall(r"^\S.*?\b(cuda\w+)\(", text, flags=re.M))
    older: list[str] = []
    if major < 13:
        defined.discard("cudaGetDeviceProperties")
        older = ["cudaGetDeviceProperties", *_names(RUNTIME_NAMES_12)]
    stubs = []
    for name in _names(RUNTIME_NAMES):
        if name not in defined and name not in older:
            stubs.append(f'cudaError_t {name}(void) {{ gs_arg a[1]; A_P(0, "{name}"); '
                         f'return CALL("__unserved", 1); }}\n')
    for name in older:
        stubs.append(f'cudaError_t {name}(void) {{ gs_arg a[1]; A_P(0, "{name}"); '
                     f'return CALL("__unserved_cuda12", 1); }}\n')
    return text + "".join(stubs)


def preload_source() -> str:
    """preload.c and the names it routes to the checked driver: every
    function the stand-in serves (the rest go to the real driver), less
    ``cuGetExportTable``, the real runtime's private way to its driver."""
    from . import calls, libraries

    served = sorted((set(calls.CALLS) | set(libraries.CALLS) | {"cuGetProcAddress"})
                    - {"cuGetExportTable"})
    names = "".join(f'    "{name}",\n' for name in served)
    return (PRELOAD_SHIM.read_text() + "const char *const gs_wrapped[] = {\n" + names + "};\n"
            f"const int gs_wrapped_size = {len(served)};\n")


def _build_runtime(compiler: str, work: Path, major: int, soname: str) -> None:
    """The runtime on the driver, its symbols versioned by soname as NVIDIA's are."""
    (work / f"libcudart{major}.c").write_text(runtime_source(major))
    (work / f"libcudart{major}.map").write_text(f"{soname} {{ global: *; }};\n")
    cmd = [compiler, "-shared", "-fPIC", "-O0", f"-Wl,-soname,{soname}",
           f"-Wl,--version-script={work / f'libcudart{major}.map'}", "-o", str(work / soname),
           str(work / f"libcudart{major}.c"), f"-L{work}", "-lcuda", "-Wl,-rpath,$ORIGIN",
           "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"building the stand-in CUDA runtime {soname} failed:\n"
                         + done.stderr[-4000:])


def _python_link_flags() -> list[str]:
    libdir = sysconfig.get_config_var("LIBDIR")
    version = sysconfig.get_config_var("LDVERSION") or sysconfig.get_python_version()
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not libdir:
        raise BuildError("this Python has no shared libpython (it was built without "
                         "--enable-shared), which the stand-in CUDA driver links against")
    return [f"-I{sysconfig.get_paths()['include']}", f"-L{libdir}", f"-lpython{version}",
            f"-Wl,-rpath,{libdir}"]


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpusafe" / "native"


def library_dir() -> Path:
    """The folder holding the built ``libcuda.so.1`` (built now if missing)."""
    flags = _python_link_flags()
    try:
        text = source()
        runtime = "".join(runtime_source(major) for major in RUNTIMES)
        preload = preload_source()
    except OSError as e:  # an installation without the package's data files
        raise BuildError(f"the stand-in CUDA driver's sources are missing: {e}") from None
    key = hashlib.sha256("\0".join([text, runtime, preload, *CFLAGS, *flags, sys.version])
                         .encode()).hexdigest()[:16]
    folder = _cache_root() / key
    if (folder / LIBRARY).is_file():
        return folder
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BuildError("no C compiler (cc) to build the stand-in CUDA driver")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=folder.parent))
    try:
        (work / "libcuda.c").write_text(text)
        cmd = [compiler, *CFLAGS, "-o", str(work / LIBRARY), str(work / "libcuda.c"),
               *flags, "-lpthread", "-ldl"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError("building the stand-in CUDA driver failed:\n" + done.stderr[-4000:])
        (work / "libcuda.so").symlink_to(LIBRARY)  # what `cc -lcuda` looks for
        for major, soname in RUNTIMES.items():
            _build_runtime(compiler, work, major, soname)
        (work / "libcudart.so").symlink_to(RUNTIME)  # what `nvcc -cudart shared` links
        # the LD_PRELOAD door: no libpython, it only routes
        (work / "preload.c").write_text(preload)
        cmd = [compiler, "-shared", "-fPIC", "-O0", "-o", str(work / PRELOAD),
               str(work / "preload.c"), "-ldl", "-lpthread"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError("building the preload library failed:\n" + done.stderr[-4000:])
        try:
            os.replace(work, folder)  # atomic: a concurrent build wins or loses whole
        except OSError:
            if not (folder / LIBRARY).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


SIMULATED_ADAPTER = "gpusafe.native.simulated"


def simulated_driver() -> Path:
    """A simulated GPU's ``libcuda.so.1`` (:mod:`gpusafe.native.simulated`):
    the stand-in's stubs served by a plain CPU device, for tests of
    ``--device cuda`` without a GPU.  Built on demand, in its own folder."""
    flags = _python_link_flags()
    text = source()
    # -Bsymbolic: its table hands out its own stubs, not the checked
    # driver's, which is loaded first, globally, with the same names
    extra = [f'-DGS_ADAPTER="{SIMULATED_ADAPTER}"', "-DGS_SIMULATED", "-Wl,-Bsymbolic"]
    key = hashlib.sha256("\0".join([text, *extra, *CFLAGS, *flags, sys.version])
                         .encode()).hexdigest()[:16]
    folder = _cache_root() / f"simulated-{key}"
    if (folder / LIBRARY).is_file():
        return folder / LIBRARY
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BuildError("no C compiler (cc) to build the simulated GPU's driver")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=folder.parent))
    try:
        (work / "libcuda.c").write_text(text)
        done = subprocess.run([compiler, *CFLAGS, *extra, "-o", str(work / LIBRARY),
                               str(work / "libcuda.c"), *flags, "-lpthread", "-ldl"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError("building the simulated GPU's driver failed:\n"
                             + done.stderr[-4000:])
        try:
            os.replace(work, folder)
        except OSError:
            if not (folder / LIBRARY).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder / LIBRARY


if __name__ == "__main__":
    try:
        print(library_dir())
    except BuildError as e:
        print(f"gpusafe: {e}", file=sys.stderr)
        sys.exit(2)
