"""The LD_PRELOAD door (issue 11): a program that resolves the driver the
way the CUDA runtime does (``dlopen`` + ``cuGetProcAddress_v2``) reaches
gpusafe's checked driver through the preload library's hooks, whatever path
it opens; with a real driver given, what gpusafe does not check (here a
fake driver's ``cuDeviceGetLuid`` and ``cuGetExportTable``) passes to it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpusafe_testkit.corpus import driver_header_dir

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "native"


INCLUDE = driver_header_dir()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cc") is None or INCLUDE is None,
                                 reason="needs a C compiler and the pip toolkit's cuda.h")]

NOWHERE = "/nonexistent/nvidia/libcuda.so.1"
"""A driver path that exists on no machine: only the hook can open it."""


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from gpusafe.native.build import PRELOAD, library_dir

    lib = library_dir()
    out = tmp_path_factory.mktemp("preload")
    exe, fake = out / "proc_address", out / "libfake_driver.so"
    subprocess.run(["cc", "-Wall", "-Werror", "-g", "-o", str(exe),
                    str(SOURCES / "proc_address.c"), f"-I{INCLUDE}", "-ldl"], check=True)
    subprocess.run(["cc", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(fake),
                    str(SOURCES / "fake_driver.c")], check=True)
    return {"exe": exe, "fake": fake, "preload": lib / PRELOAD}


def _run(argv: list[str], tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess,
                                                                 dict]:
    report = tmp_path / "report.json"
    env = dict(os.environ, GPUSAFE_PRELOAD_TRACE="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu",
                           "--json", str(report), "--", *argv],
                          capture_output=True, text=True, env=env, timeout=300)
    return done, json.loads(report.read_text()) if report.exists() else {}


def test_without_the_door_the_driver_is_not_found(programs: dict[str, Path]) -> None:
    done = subprocess.run([str(programs["exe"]), NOWHERE], capture_output=True, text=True)
    assert done.returncode == 6
    assert "cannot open shared object file" in done.stderr


def test_hooks_route_dlopen_and_cuGetProcAddress_to_the_checked_driver(
        programs: dict[str, Path], tmp_path: Path) -> None:
    done, doc = _run([str(programs["exe"]), NOWHERE], tmp_path)
    assert "resolved through cuGetProcAddress; overlong copy: 1" in done.stdout, done.stderr
    assert f"gpusafe preload: dlopen({NOWHERE}) -> checked" in done.stderr
    assert "gpusafe preload: dlsym(cuGetProcAddress_v2) -> gpusafe's" in done.stderr
    for name in ("cuInit", "cuMemAlloc", "cuMemcpyDtoH", "cuMemFree"):
        assert f"gpusafe preload: cuGetProcAddress({name}) -> checked" in done.stderr
    assert done.returncode == 86
    [v] = doc["violations"]
    assert (v["kind"], v["allocation"]["size"]) == ("api-out-of-bounds", 64)
    # the native frames of the checked call are the program's (built with -g)
    assert [(Path(f["file"]).name, f["function"]) for f in v["stack"]] == [
        ("proc_address.c", "main")]


def test_unchecked_functions_pass_to_the_real_driver(programs: dict[str, Path],
                                                     tmp_path: Path) -> None:
    done, doc = _run([str(programs["exe"]), NOWHERE, "real"], tmp_path,
                     GPUSAFE_REAL_DRIVER=str(programs["fake"]))
    assert "real driver: luid 0 FAKELUID 42, export table 0 fake-table" in done.stdout, \
        done.stderr
    assert "gpusafe preload: cuGetProcAddress(cuDeviceGetLuid) -> real driver" in done.stderr
    assert "gpusafe preload: cuGetProcAddress(cuGetExportTable) -> real driver" in done.stderr
    assert "gpusafe preload: cuGetProcAddress(cuMemAlloc) -> checked" in done.stderr
    assert done.returncode == 86  # the checked calls are still checked
    assert [v["kind"] for v in doc["violations"]] == ["api-out-of-bounds"]
    assert not doc.get("unimplemented_calls")


@pytest.mark.parametrize("lookup", ["dlvsym", "default"])
def test_dlvsym_and_rtld_default_lookups_are_routed(programs: dict[str, Path], tmp_path: Path,
                                                    lookup: str) -> None:
    """``dlvsym`` on the driver's handle and ``dlsym(RTLD_DEFAULT, ...)`` of a
    driver name are routed as ``dlsym`` on the handle is: unrouted, the fake
    real driver's own ``cuGetProcAddress_v2`` (which knows no ``cuInit``)
    would answer, and the program would stop (exit 5) before any check."""
    done, doc = _run([str(programs["exe"]), NOWHERE, "real", lookup], tmp_path,
                     GPUSAFE_REAL_DRIVER=str(programs["fake"]))
    assert "real driver: luid 0 FAKELUID 42, export table 0 fake-table" in done.stdout, \
        done.stderr
    call = "dlvsym" if lookup == "dlvsym" else "dlsym"
    assert f"gpusafe preload: {call}(cuGetProcAddress_v2) -> gpusafe's" in done.stderr
    if lookup == "default":
        assert "gpusafe preload: dlsym(cuMemAlloc_v2) -> checked" in done.stderr
    assert done.returncode == 86
    [v] = doc["violations"]
    assert (v["kind"], v["allocation"]["size"]) == ("api-out-of-bounds", 64)


def test_rtld_default_lookups_of_other_names_are_untouched(programs: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """Only names a driver defines are routed: a program's own symbol looked
    up in the global scope is its own."""
    (tmp_path / "main.c").write_text(_DEFAULT_MAIN)
    subprocess.run(["cc", "-Wall", "-Werror", "-rdynamic", "-o", str(tmp_path / "main"),
                    str(tmp_path / "main.c"), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(programs["preload"]))
    done = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, "cuda_helper 5, cuMissing (nil)\n"), \
        done.stderr


_DEFAULT_MAIN = """#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int cuda_helper(void) { return 5; }
int main(void) {
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cuda_helper");
    printf("cuda_helper %d, cuMissing %p\\n", f ? f() : -1, dlsym(RTLD_DEFAULT, "cuMissing"));
    return 0;
}
"""


def test_python_programs_are_not_preloaded(tmp_path: Path) -> None:
    """The door is for native programs; a Python program keeps the Python door."""
    done, _ = _run([sys.executable, "-c", "import os; print(os.environ.get('LD_PRELOAD'))"],
                   tmp_path)
    assert done.returncode == 0, done.stderr
    assert "libgpusafe_preload" not in done.stdout


_BASE = "int gs_value(void) { return 7; }\n"
_WRAP = """#define _GNU_SOURCE
#include <dlfcn.h>
int gs_value(void) {
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gs_value");
    return next ? 10 * next() : -1;
}
"""
_MAIN = """#include <stdio.h>
int gs_value(void);
int main(void) { printf("value %d\\n", gs_value()); return 0; }
"""


def test_rtld_next_still_searches_after_the_caller(programs: dict[str, Path],
                                                   tmp_path: Path) -> None:
    """An interposer's dlsym(RTLD_NEXT) must find the next definition after
    itself, not after the preload library (which would find its own)."""
    for name, text in (("base.c", _BASE), ("wrap.c", _WRAP), ("main.c", _MAIN)):
        (tmp_path / name).write_text(text)
    cc = ["cc", "-Wall", "-Werror"]
    subprocess.run([*cc, "-shared", "-fPIC", "-o", str(tmp_path / "libbase.so"),
                    str(tmp_path / "base.c")], check=True)
    subprocess.run([*cc, "-shared", "-fPIC", "-o", str(tmp_path / "libwrap.so"),
                    str(tmp_path / "wrap.c"), "-ldl"], check=True)
    subprocess.run([*cc, "-o", str(tmp_path / "main"), str(tmp_path / "main.c"),
                    f"-L{tmp_path}", "-Wl,--no-as-needed", "-lwrap", "-lbase",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(programs["preload"]))
    done = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, "value 70\n"), done.stderr
