"""The exit status contract of DESIGN.md for gpusafe's own failures: one line
on standard error naming the cause and exit status 2, never a traceback:
a report file ``gpusafe run`` cannot write, a bad flag, an ``--error-exitcode``
that is not an exit status, an internal error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusafe import cli
from gpusafe.commands import report as report_command
from gpusafe.commands import run as run_command
from gpusafe.exitcodes import EXIT_TOOL_ERROR
from gpusafe.report import formats

ROOT = Path(__file__).resolve().parent.parent

# each run flag, and another flag whose file must still be written when it fails
OUTPUT_FLAGS = [("--json", "--sarif"), ("--sarif", "--junit"), ("--junit", "--json"),
                ("--log-file", "--json")]


def test_every_report_format_has_a_run_flag() -> None:
    assert sorted(f.run_flag for f in formats.FORMATS.values()) == sorted(
        bad for bad, _ in OUTPUT_FLAGS)


@pytest.mark.slow
@pytest.mark.parametrize("flag,other", OUTPUT_FLAGS)
def test_run_with_an_unwritable_report_file_exits_2_with_one_line(
        tmp_path: Path, flag: str, other: str) -> None:
    bad = tmp_path / "no" / "such" / "dir" / "out"
    good = tmp_path / "good"
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "gpusafe", "run", "--device", "cpu", flag, str(bad), other,
         str(good), "--", "python", "-c", "pass"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_TOOL_ERROR, proc.stderr
    assert "Traceback" not in proc.stderr
    about = [line for line in proc.stderr.splitlines() if str(bad) in line]
    assert about == [f"gpusafe run: cannot write {bad} ({flag}): No such file or directory"]
    assert good.stat().st_size > 0  # the other report was written all the same
    # and the terminal report shown (a run of `pass` checked no launch, and says so)
    assert "gpusafe: no violations found in what was checked" in proc.stderr


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == EXIT_TOOL_ERROR
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.strip()


def test_unknown_run_flag_is_one_line_of_run(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["run", "--bogus", "--", "python", "-c", "pass"], capsys)
    assert err == "gpusafe run: error: unrecognized arguments: --bogus"


def test_bad_flag_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["run", "--device", "tpu", "python", "-c", "pass"], capsys)
    assert err.startswith("gpusafe run: error: argument --device: invalid choice: 'tpu'")


def test_missing_subcommand_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error([], capsys)
    assert err == "gpusafe: error: the following arguments are required: COMMAND"


@pytest.mark.parametrize("value", ["0", "256", "-1", "1000", "x"])
def test_error_exitcode_must_be_an_exit_status(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["run", "--error-exitcode", value, "python", "-c", "pass"], capsys)
    assert err.startswith("gpusafe run: error: argument --error-exitcode: ")


@pytest.mark.parametrize("value", [1, 86, 255])
def test_error_exitcode_accepts_1_to_255(value: int) -> None:
    parser, _ = cli.build_parser()
    args = parser.parse_args(["run", "--error-exitcode", str(value), "python", "x.py"])
    assert args.error_exitcode == value


def _explode(*args: object, **kw: object) -> None:
    raise RuntimeError("the registry\nfell over")


def test_internal_error_is_one_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    monkeypatch.setattr(run_command, "classify", _explode)
    assert cli.main(["run", "--device", "cpu", "python", "-c", "pass"]) == EXIT_TOOL_ERROR
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "gpusafe: internal error: RuntimeError: the registry fell over "
        f"(set {cli.DEBUG_ENV}=1 for the traceback)"]


def test_internal_error_traceback_with_gpusafe_debug(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    monkeypatch.setattr(report_command, "load_report", _explode)
    assert cli.main(["report", "run.json"]) == EXIT_TOOL_ERROR
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "in _explode" in err
    assert err.splitlines()[-1] == "gpusafe: internal error: RuntimeError: the registry fell over"


def test_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(report_command, "load_report", interrupt)
    assert cli.main(["report", "run.json"]) == 130
