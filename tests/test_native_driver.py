"""The stand-in ``libcuda.so.1`` (issue 11): its exported symbols, and
native C programs using the driver API, built at test time with ``cc``
against the pip toolkit's ``cuda.h``, run under ``gpusafe run --device cpu``
with their findings, output and exit status checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpusafe.native import table
from gpusafe.native.build import source
from gpusafe_testkit.corpus import driver_header_dir

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "native"


INCLUDE = driver_header_dir()
needs_cc = pytest.mark.skipif(shutil.which("cc") is None or INCLUDE is None,
                              reason="needs a C compiler and the pip toolkit's cuda.h")


# -- the table and the generated source (no compiler) --------------------------------


def test_table_names_what_cuda_h_makes_a_program_call() -> None:
    by_symbol = {r.symbol: r for r in table.rows() if r.symbol}
    assert by_symbol["cuMemAlloc_v2"].base == "cuMemAlloc"
    assert by_symbol["cuCtxCreate_v4"].params[1][0] == "ptr"
    assert by_symbol["cuMemcpyHtoDAsync_v2_ptsz"].per_thread
    assert by_symbol["cuCtxSynchronize_v2"].version == 13000
    assert not by_symbol["cuMemPrefetchAsync_v2"].typed  # a struct by value
    older = [r for r in table.rows() if r.base == "cuCtxCreate" and r.symbol is None]
    assert [r.version for r in older] == [3020, 11040]
    assert older[0].label == "cuCtxCreate (the ABI of CUDA 3.2)"


def test_generated_stubs_declare_the_c_types() -> None:
    text = source()
    assert "CUresult cuMemAlloc_v2(void * p0, unsigned long long p1) {" in text
    assert "CUresult cuMemPrefetchAsync_v2(void) {" in text
    assert '{"cuCtxCreate", 3020, 0, (void *)gs_old_' in text


def test_static_runtime_program_on_a_gpu_is_refused_before_it_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """On a GPU a statically linked runtime loads its kernels through the
    driver's private interface: refused with the reason, nothing run."""
    from gpusafe import cli
    from gpusafe.commands import run

    app = tmp_path / "app"
    app.write_bytes(b"\x7fELF...__cudaRegisterFatBinary...")
    app.chmod(0o755)
    monkeypatch.setattr(run, "choose_device", lambda _: ("cuda", "a GPU", "on a GPU"))
    assert cli.main(["run", "--device", "cuda", "--", str(app)]) == 2
    err = capsys.readouterr().err
    assert "CUDA runtime linked in statically" in err
    assert "Rebuild it with `gpusafe nvcc`" in err
    assert "Nothing was run." in err


def test_native_program_on_a_gpu_needs_the_driver_path(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A driver-API program on a GPU: its unchecked calls must reach the real
    driver, so without its path nothing is run."""
    from gpusafe import cli
    from gpusafe.commands import run

    monkeypatch.setattr(run, "choose_device", lambda _: ("cuda", "a GPU", "on a GPU"))
    monkeypatch.setattr(run, "loaded_driver", lambda: None)
    assert cli.main(["run", "--device", "cuda", "--", "/bin/true"]) == 2
    err = capsys.readouterr().err
    assert "cannot tell which CUDA driver" in err and "Nothing was run." in err


def test_gpusafe_nvcc_adds_what_checking_needs_unless_chosen(tmp_path: Path) -> None:
    from gpusafe.commands.nvcc import nvcc_argv

    nvcc = tmp_path / "bin" / "nvcc"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudadevrt.a").write_bytes(b"")
    stand_in = tmp_path / "stand-in"
    assert nvcc_argv(nvcc, ["-o", "app", "app.cu"], stand_in) == [
        str(nvcc), "-o", "app", "app.cu", "-cudart", "shared", "--no-compress", "-lineinfo",
        "-g", f"-L{stand_in}", "-Xlinker", f"-rpath-link={stand_in}", f"-L{tmp_path / 'lib'}"]
    chosen = ["-c", "-G", "-g", "-cudart=static", "--compress-mode=size", "app.cu"]
    assert nvcc_argv(nvcc, chosen, stand_in) == [str(nvcc), *chosen]


def test_gpusafe_nvcc_passes_leading_options_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpusafe import cli
    from gpusafe.commands import nvcc

    seen: list[list[str]] = []
    monkeypatch.setattr(nvcc, "cmd_nvcc", lambda args: seen.append(args.args) or 0)
    assert cli.main(["nvcc", "-O3", "-arch", "sm_80", "-o", "app", "app.cu"]) == 0
    assert seen == [["-O3", "-arch", "sm_80", "-o", "app", "app.cu"]]


# -- the built library and native programs (slow) --------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The stand-in driver and the test programs, with their kernels' PTX."""
    if shutil.which("cc") is None or INCLUDE is None:
        pytest.skip("needs a C compiler and the pip toolkit's cuda.h")
    from gpusafe.native.build import library_dir
    from gpusafe_testkit.corpus import nvrtc_compile

    lib = library_dir()
    out = tmp_path_factory.mktemp("native")
    for kernel in ("saxpy", "fill"):
        cu = SOURCES / f"{kernel}.cu"
        ptx = nvrtc_compile(cu.read_text(), str(cu), options=["-lineinfo"])
        (out / f"{kernel}.ptx").write_text(ptx)
    programs = {"lib": lib}
    for name in ("saxpy", "oob", "double_free", "unimplemented", "proc_address", "threads"):
        exe = out / name
        link = ["-ldl"] if name == "proc_address" else [f"-L{lib}", "-lcuda", "-lpthread"]
        subprocess.run(["cc", "-g", "-Wall", "-Werror", "-o", str(exe),
                        str(SOURCES / f"{name}.c"),
                        f"-I{INCLUDE}", *link], check=True)
        programs[name] = exe
    programs["dir"] = out
    return programs


def _run(argv: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu",
                           "--json", str(report), "--", *argv],
                          capture_output=True, text=True, env=env, timeout=300)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return done, doc


@pytest.mark.slow
@needs_cc
def test_stand_in_exports_the_versioned_symbols(built: dict[str, Path]) -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", str(built["lib"] / "libcuda.so.1")],
                         capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in out.splitlines()}
    for name in ("cuInit", "cuMemAlloc_v2", "cuCtxCreate_v4", "cuMemcpyHtoDAsync_v2_ptsz",
                 "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuGetProcAddress",
                 "cuGetProcAddress_v2", "cuGetExportTable", "cuCtxSynchronize_v2"):
        assert name in symbols
    exported = {r.symbol for r in table.rows() if r.symbol}
    assert exported <= symbols
    assert not any(s.startswith("gs_") for s in symbols)  # the shim's own stay hidden


@pytest.mark.slow
@needs_cc
def test_correct_program_passes_with_its_own_exit(built: dict[str, Path],
                                                  tmp_path: Path) -> None:
    done, doc = _run([str(built["saxpy"]), str(built["dir"] / "saxpy.ptx")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "saxpy ok" in done.stdout
    assert doc["violations"] == []
    assert doc["checked_kernels"] == [{"name": "saxpy", "launches": 1}]
    assert doc["command"] == [str(built["saxpy"]), str(built["dir"] / "saxpy.ptx")]


@pytest.mark.slow
@needs_cc
def test_out_of_bounds_write_is_reported_at_its_line(built: dict[str, Path],
                                                     tmp_path: Path) -> None:
    done, doc = _run([str(built["oob"]), str(built["dir"] / "fill.ptx")], tmp_path)
    assert done.returncode == 86, done.stderr
    assert "oob done" in done.stdout
    [v] = doc["violations"]
    assert (v["kind"], v["access"], v["size"], v["kernel"]) == (
        "global-out-of-bounds", "write", 4, "fill")
    assert v["location"]["file"] == str(SOURCES / "fill.cu")
    assert v["location"]["line"] == 4
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (1024, 1024)
    assert v["threads"] == [{"block": [1, 0, 0], "thread": [0, 0, 0]}]


@pytest.mark.slow
@needs_cc
def test_use_after_free_and_double_free(built: dict[str, Path], tmp_path: Path) -> None:
    done, doc = _run([str(built["double_free"])], tmp_path)
    assert done.returncode == 86, done.stderr
    # both calls are refused (CUDA_ERROR_INVALID_VALUE), as on the Python door
    assert "copy after free: 1, second free: 1" in done.stdout
    kinds = [v["kind"] for v in doc["violations"]]
    assert kinds == ["use-after-free", "double-free"]
    assert all(v["allocation"]["size"] == 256 for v in doc["violations"])
    # the host stack's top frame is the program's call, the allocation's and free's too
    for v, line in zip(doc["violations"], (14, 15), strict=True):
        assert (Path(v["stack"][0]["file"]).name, v["stack"][0]["line"]) == ("double_free.c", line)
        assert v["allocation"]["allocated_at"].endswith("double_free.c:12")
        assert v["allocation"]["freed_at"].endswith("double_free.c:13")


@pytest.mark.slow
@needs_cc
def test_unimplemented_calls_are_named_and_fail_the_run(built: dict[str, Path],
                                                        tmp_path: Path) -> None:
    done, doc = _run([str(built["unimplemented"])], tmp_path)
    assert "cuGraphCreate: 801, cuMemPrefetchAsync: 801" in done.stdout
    assert done.returncode == 2
    assert "not implemented: cuGraphCreate" in done.stderr + done.stdout
    assert {c["name"] for c in doc["unimplemented_calls"]} == {"cuGraphCreate",
                                                               "cuMemPrefetchAsync_v2"}


@pytest.mark.slow
@needs_cc
def test_entry_points_through_dlopen_and_cuGetProcAddress(built: dict[str, Path],
                                                          tmp_path: Path) -> None:
    done, doc = _run([str(built["proc_address"])], tmp_path)
    assert "resolved through cuGetProcAddress; overlong copy: 1" in done.stdout, done.stderr
    assert done.returncode == 86
    [v] = doc["violations"]
    assert v["kind"] == "api-out-of-bounds"
    assert v["allocation"]["size"] == 64


@pytest.mark.slow
@needs_cc
def test_threads_of_a_native_program_keep_their_context(built: dict[str, Path],
                                                        tmp_path: Path) -> None:
    """Each program thread's current context lives in the CPU device's
    thread-local state: it must survive from one driver call to the next."""
    done, doc = _run([str(built["threads"]), str(built["dir"] / "fill.ptx")], tmp_path)
    assert "threads done: 1 1" in done.stdout, done.stderr
    assert done.returncode == 86
    [v] = doc["violations"]
    assert (v["kind"], v["kernel"], v["allocation"]["size"]) == (
        "global-out-of-bounds", "fill", 1024)
    assert doc["checked_kernels"] == [{"name": "fill", "launches": 2}]


@pytest.mark.slow
@needs_cc
def test_native_program_without_gpusafe_session_is_refused(built: dict[str, Path]) -> None:
    """The stand-in outside ``gpusafe run``: every call fails, loudly."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(built["lib"]), PYTHONPATH=str(ROOT))
    env.pop("GPUSAFE_SESSION", None)
    env["GPUSAFE_PYTHON"] = sys.executable
    done = subprocess.run([str(built["saxpy"]), str(built["dir"] / "saxpy.ptx")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 3
    assert "runs only under `gpusafe run`" in done.stderr


# -- frameworks that load the driver themselves, and a statically linked runtime --------


def _has_numba_cuda() -> bool:
    import importlib.util

    return importlib.util.find_spec("numba_cuda") is not None


needs_numba = pytest.mark.skipif(not _has_numba_cuda(), reason="needs numba-cuda")


@pytest.mark.slow
@needs_numba
def test_numba_kernel_out_of_bounds_found_at_its_line(tmp_path: Path) -> None:
    program = SOURCES / "numba_oob.py"
    done, doc = _run([sys.executable, str(program)], tmp_path)
    assert done.returncode == 86, done.stderr
    assert "first: [1.0, 2.0, 3.0]" in done.stdout
    found = sorted((v["kind"], v["access"], v["location"]["line"], v["allocation"]["size"])
                   for v in doc["violations"])
    assert found == [("global-out-of-bounds", "read", 12, 400),
                     ("global-out-of-bounds", "write", 12, 400)]
    assert all(v["location"]["file"].endswith("numba_oob.py") for v in doc["violations"])
    assert all("add_one" in v["kernel"] for v in doc["violations"])


@pytest.mark.slow
@needs_numba
def test_numba_shared_memory_and_atomics_pass_checked(tmp_path: Path) -> None:
    done, doc = _run([sys.executable, str(SOURCES / "numba_histogram.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "histogram ok" in done.stdout
    assert doc["violations"] == []
    [kernel] = doc["checked_kernels"]
    assert "histogram" in kernel["name"] and kernel["launches"] == 1


@pytest.mark.slow
@needs_numba
def test_numba_shared_memory_overrun_found_at_its_line(tmp_path: Path) -> None:
    done, doc = _run([sys.executable, str(SOURCES / "numba_shared_oob.py")], tmp_path)
    assert done.returncode == 86, done.stderr
    assert "histogram done" in done.stdout
    [v] = doc["violations"]
    assert (v["kind"], v["access"], v["location"]["line"], v["count"]) == (
        "shared-out-of-bounds", "write", 15, 4)
    assert {tuple(t["thread"]) for t in v["threads"]} == {(16, 0, 0)}


def _nvcc() -> Path | None:
    if INCLUDE is None:
        return None
    nvcc = INCLUDE.parent / "bin" / "nvcc"
    return nvcc if nvcc.is_file() and shutil.which("cc") else None


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_statically_linked_runtime_gets_exit_2_and_the_flag(tmp_path: Path) -> None:
    """nvcc's default links the CUDA runtime statically; it talks to the
    driver through private export tables the stand-in does not provide."""
    nvcc = _nvcc()
    assert nvcc is not None
    source = tmp_path / "runtime.cu"
    source.write_text(textwrap.dedent("""\
        #include <cstdio>
        __global__ void k(int *p) { p[threadIdx.x] = threadIdx.x; }
        int main() {
            int *d;
            cudaError_t e = cudaMalloc(&d, 64 * sizeof(int));
            printf("cudaMalloc: %s\\n", cudaGetErrorName(e));
            if (e != cudaSuccess) return 1;
            k<<<1, 64>>>(d);
            return cudaDeviceSynchronize() != cudaSuccess;
        }
        """))
    exe = tmp_path / "runtime"
    subprocess.run([str(nvcc), "-o", str(exe), str(source), f"-L{INCLUDE.parent / 'lib'}"],
                   check=True, capture_output=True)
    done, _ = _run([str(exe)], tmp_path)
    assert done.returncode == 2
    assert "cudaMalloc: cudaErrorNotSupported" in done.stdout
    assert "asked for by " + str(exe) in done.stderr
    assert "nvcc -cudart shared" in done.stderr


def _nvcc_build(tmp_path: Path, *flags: str, name: str = "runtime_oob") -> Path:
    nvcc = _nvcc()
    assert nvcc is not None
    from gpusafe.native.build import library_dir

    exe = tmp_path / name
    subprocess.run([str(nvcc), "-o", str(exe), str(SOURCES / f"{name}.cu"), "-lineinfo",
                    "-cudart", "shared", f"-L{library_dir()}", f"-L{INCLUDE.parent / 'lib'}",
                    *flags], check=True, capture_output=True)
    return exe


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_nvcc_program_with_shared_runtime_is_checked(tmp_path: Path) -> None:
    """``nvcc -cudart shared --no-compress``: the stand-in runtime finds the
    kernel's PTX in the fatbinary nvcc registered and launches it checked."""
    done, doc = _run([str(_nvcc_build(tmp_path, "--no-compress"))], tmp_path)
    assert done.returncode == 86, done.stderr
    assert "sync: cudaSuccess, host[63] = 63" in done.stdout
    oob, double = doc["violations"]
    assert (oob["kind"], oob["access"], oob["kernel"]) == (
        "global-out-of-bounds", "write", "_Z4fillPii")
    assert (oob["location"]["file"], oob["location"]["line"]) == (
        str(SOURCES / "runtime_oob.cu"), 6)
    assert oob["threads"] == [{"block": [0, 0, 0], "thread": [64, 0, 0]}]
    assert (oob["allocation"]["size"], double["kind"]) == (256, "double-free")


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
@pytest.mark.parametrize("mode", ["default", "speed"])
def test_nvcc_program_with_compressed_ptx_is_checked(tmp_path: Path, mode: str) -> None:
    """nvcc compresses fatbinary entries by default (Zstandard; LZ4 with
    ``--compress-mode=speed``): the PTX is decompressed and checked."""
    flags = [] if mode == "default" else [f"--compress-mode={mode}"]
    done, doc = _run([str(_nvcc_build(tmp_path, *flags))], tmp_path)
    assert done.returncode == 86, done.stderr
    assert [v["kind"] for v in doc["violations"]] == ["global-out-of-bounds", "double-free"]
    oob = doc["violations"][0]
    assert (oob["location"]["file"], oob["location"]["line"]) == (
        str(SOURCES / "runtime_oob.cu"), 6)
    assert doc["checked_kernels"] == [{"name": "_Z4fillPii", "launches": 1}]


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_nvcc_program_with_streams_and_events_passes(tmp_path: Path) -> None:
    done, doc = _run([str(_nvcc_build(tmp_path, "--no-compress", name="runtime_events"))],
                     tmp_path)
    assert done.returncode == 0, done.stderr
    assert "events: no error 1 1" in done.stdout
    assert doc["violations"] == []
    assert doc["checked_kernels"] == [{"name": "_Z3incPi", "launches": 1}]


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_built_with_gpusafe_nvcc_then_checked(tmp_path: Path) -> None:
    env = dict(os.environ, NVCC=str(_nvcc()))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    exe = tmp_path / "app"
    built = subprocess.run([sys.executable, "-m", "gpusafe", "nvcc", "-o", str(exe),
                            str(SOURCES / "runtime_oob.cu")], env=env, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr
    assert "-cudart shared --no-compress -lineinfo" in built.stderr
    done, doc = _run([str(exe)], tmp_path)
    assert done.returncode == 86, done.stderr
    assert [v["kind"] for v in doc["violations"]] == ["global-out-of-bounds", "double-free"]


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_gpusafe_nvcc_links_beside_another_libcuda(tmp_path: Path) -> None:
    """On the H200 machine LD_LIBRARY_PATH holds NVIDIA's libcuda.so.1, which ld
    took for the stand-in libcudart.so's need ("undefined reference to
    gpusafe_call_runtime"); a libcuda.so.1 without gpusafe's symbols plays it."""
    other = tmp_path / "driver"
    other.mkdir()
    (other / "empty.c").write_text("int cuInit(unsigned flags) { return flags ? 1 : 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    str(other / "libcuda.so.1"), str(other / "empty.c")], check=True)
    env = dict(os.environ, NVCC=str(_nvcc()), LD_LIBRARY_PATH=str(other))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    built = subprocess.run([sys.executable, "-m", "gpusafe", "nvcc", "-o", str(tmp_path / "app"),
                            str(SOURCES / "runtime_oob.cu")], env=env, capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "app").is_file()


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_nvcc_program_with_device_variables(tmp_path: Path) -> None:
    """``__constant__``/``__device__`` variables are the module's globals; a
    copy past the end of one is refused and reported against it."""
    done, doc = _run([str(_nvcc_build(tmp_path, "--no-compress", name="runtime_symbols"))],
                     tmp_path)
    assert "symbols: 64 10 252 over=1" in done.stdout, done.stderr
    assert done.returncode == 86
    [v] = doc["violations"]
    assert v["kind"] == "api-out-of-bounds"
    assert (v["allocation"]["size"], v["allocation"]["offset"]) == (16, 4)


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None, reason="needs the pip toolkit's nvcc and a C compiler")
def test_nvcc_program_reads_the_device_properties(tmp_path: Path) -> None:
    done, _ = _run([str(_nvcc_build(tmp_path, "--no-compress", name="runtime_properties"))],
                   tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no error: 1 device(s), gpusafe CPU device" in done.stdout
    assert "warp 32" in done.stdout
