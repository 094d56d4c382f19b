"""Native host stacks (issue 11): a native program's calls are reported at
its own frames, symbolized from its DWARF line tables to function and
file:line, innermost first, with nvcc's stubs, the CUDA headers' inline
wrappers, the stand-ins, libc and libpython left out.  Programs are built
at test time with ``cc -g`` and the toolkit's ``nvcc -g``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "native"


def _toolkit() -> Path | None:
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "cu13"
        if (candidate / "include" / "cuda.h").is_file():
            return candidate
    return None


TOOLKIT = _toolkit()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("cc") is None or TOOLKIT is None
                       or not (TOOLKIT / "bin" / "nvcc").is_file(),
                       reason="needs a C compiler and the pip toolkit's nvcc"),
]


def _run(argv: list[str], tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess,
                                                                   dict]:
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu", *options,
                           "--json", str(report), "--", *argv],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return done, doc


def _frames(stack: list[dict]) -> list[tuple[str, int, str]]:
    return [(Path(f["file"]).name, f["line"], f["function"]) for f in stack]


def _nvcc(tmp_path: Path, name: str, *flags: str) -> Path:
    from gpusafe.native.build import library_dir

    assert TOOLKIT is not None
    exe = tmp_path / name
    subprocess.run([str(TOOLKIT / "bin" / "nvcc"), "-o", str(exe), str(SOURCES / f"{name}.cu"),
                    "-cudart", "shared", f"-L{library_dir()}", f"-L{TOOLKIT / 'lib'}", *flags],
                   check=True, capture_output=True)
    return exe


def test_runtime_program_frames_name_its_own_lines(tmp_path: Path) -> None:
    """A leak and an overflow allocated through a helper, the kernel launched
    from another: each site is the program's line, its callers below it."""
    exe = _nvcc(tmp_path, "leak", "-g", "-lineinfo", "--no-compress")
    done, doc = _run([str(exe)], tmp_path, "--leak-check")
    assert done.returncode == 86, done.stderr
    assert "leak done 1" in done.stdout
    oob, leak = doc["violations"]
    assert (oob["kind"], oob["location"]["line"]) == ("global-out-of-bounds", 7)
    assert _frames(oob["stack"]) == [("leak.cu", 15, "run"), ("leak.cu", 20, "main")]
    assert _frames(oob["allocation"]["allocated_stack"]) == [
        ("leak.cu", 11, "make"), ("leak.cu", 19, "main")]
    assert oob["allocation"]["allocated_at"].endswith("leak.cu:11")
    assert leak["kind"] == "leak"
    assert (Path(leak["location"]["file"]).name, leak["location"]["line"]) == ("leak.cu", 11)
    assert _frames(leak["stack"]) == [("leak.cu", 11, "make"), ("leak.cu", 18, "main")]
    assert "#1 main" in done.stderr and "leak.cu:20" in done.stderr


def test_double_free_names_both_frees(tmp_path: Path) -> None:
    exe = _nvcc(tmp_path, "runtime_oob", "-g", "-lineinfo", "--no-compress")
    done, doc = _run([str(exe)], tmp_path)
    assert done.returncode == 86, done.stderr
    oob, double = doc["violations"]
    assert _frames(oob["stack"]) == [("runtime_oob.cu", 12, "main")]
    assert double["kind"] == "double-free"
    assert _frames(double["stack"]) == [("runtime_oob.cu", 16, "main")]
    assert double["allocation"]["freed_at"].endswith("runtime_oob.cu:15")


def test_driver_api_program_built_with_cc(tmp_path: Path) -> None:
    from gpusafe.native.build import library_dir
    from gpusafe_testkit.corpus import nvrtc_compile

    assert TOOLKIT is not None
    cu = SOURCES / "fill.cu"
    (tmp_path / "fill.ptx").write_text(nvrtc_compile(cu.read_text(), str(cu),
                                                     options=["-lineinfo"]))
    exe = tmp_path / "oob"
    subprocess.run(["cc", "-g", "-o", str(exe), str(SOURCES / "oob.c"),
                    f"-I{TOOLKIT / 'include'}", f"-L{library_dir()}", "-lcuda"], check=True)
    done, doc = _run([str(exe), str(tmp_path / "fill.ptx")], tmp_path)
    assert done.returncode == 86, done.stderr
    [v] = doc["violations"]
    assert _frames(v["stack"]) == [("oob.c", 19, "main")]
    assert _frames(v["allocation"]["allocated_stack"]) == [("oob.c", 16, "main")]
    # --stack-depth 0: the site is still named, no stack is kept
    done, doc = _run([str(exe), str(tmp_path / "fill.ptx")], tmp_path, "--stack-depth", "0")
    [v] = doc["violations"]
    assert "stack" not in v
    assert v["allocation"]["allocated_at"].endswith("oob.c:16")


def test_program_without_line_tables_has_no_invented_site(tmp_path: Path) -> None:
    """Built without ``-g`` the program's frames cannot be named: the report
    says nothing of a site rather than naming libc or the stand-in."""
    exe = _nvcc(tmp_path, "runtime_oob", "-lineinfo", "--no-compress")
    done, doc = _run([str(exe)], tmp_path)
    assert done.returncode == 86, done.stderr
    oob, double = doc["violations"]
    assert "stack" not in oob
    assert double["allocation"]["allocated_at"] is None
