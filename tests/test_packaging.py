"""gpusafe as a user installs it: a wheel built from the project, installed
into a fresh virtual environment, checking a sample from outside the repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)


def _source_tree(dest: Path) -> Path:
    """The project's files as a clean checkout has them (no build/ left over
    from an earlier build to leak stale modules into the wheel)."""
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                  cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest


def test_an_installed_wheel_checks_a_sample_from_outside_the_repo(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    source = _source_tree(tmp_path / "source")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
                  str(wheels), str(source)])
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("gpusafe-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # the dependencies as the project pins them (the pip cache makes this quick)
    installed = _run([str(python), "-m", "pip", "install", "--quiet", f"{wheel}[samples]"])
    assert installed.returncode == 0, installed.stderr

    work = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "samples", work)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"),
               PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    report = tmp_path / "report.json"
    proc = _run([str(env_dir / "bin" / "gpusafe"), "run", "--device", "cpu", "--json",
                 str(report), "--", "python", "vector_add_oob.py"], cwd=work, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 86, out
    assert "global-out-of-bounds" in out
    import json

    doc = json.loads(report.read_text())
    assert doc["summary"]["kernels_checked"] == 1
    assert str(ROOT) not in "".join(v["location"]["file"] or "" for v in doc["violations"])
