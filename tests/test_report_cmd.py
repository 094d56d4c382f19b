"""``gpusafe report FILE.json``: re-rendering a saved report, and the errors of
its input (exit 2, one line, no traceback).

Round trip: a report written by gpusafe comes back byte for byte with
``--format json``; one written by hand in another layout comes back
structurally equal, in gpusafe's canonical layout."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from report_samples import buggy_report, write_sources

from gpusafe import cli
from gpusafe.commands import report as report_command
from gpusafe.report import Report

ROOT = Path(__file__).resolve().parent.parent


def gpusafe_report(argv: list[str]) -> int:
    return cli.main(["report", *argv])


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    path.write_text(buggy_report().to_json(), encoding="utf-8")
    return path


def test_json_format_round_trips_byte_for_byte(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    assert gpusafe_report([str(saved), "--format", "json", "-o", str(out)]) == 0
    assert out.read_bytes() == saved.read_bytes()


def test_json_format_to_stdout_round_trips(saved: Path, capsys) -> None:
    assert gpusafe_report([str(saved), "--format", "json"]) == 0
    assert capsys.readouterr().out == saved.read_text(encoding="utf-8")


def test_hand_formatted_report_round_trips_structurally(tmp_path: Path, capsys) -> None:
    path = tmp_path / "compact.json"
    path.write_text(json.dumps(json.loads(buggy_report().to_json())), encoding="utf-8")
    assert gpusafe_report([str(path), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == json.loads(path.read_text())
    assert Report.from_json(out) == buggy_report()
    assert out == buggy_report().to_json()


def test_rich_format_is_the_default_and_finds_sources_beside_the_report(
        saved: Path, capsys) -> None:
    write_sources(saved.parent)
    assert gpusafe_report([str(saved)]) == 0
    out = capsys.readouterr().out
    assert "ERROR global-out-of-bounds" in out
    assert "out[2 * i + 1] = v;" in out  # oob.cu found in the report's directory
    assert "\x1b[" not in out


def test_source_dir_option(saved: Path, tmp_path_factory, capsys) -> None:
    srcdir = tmp_path_factory.mktemp("src")
    write_sources(srcdir)
    assert gpusafe_report([str(saved), "--source-dir", str(srcdir)]) == 0
    assert "out[2 * i + 1] = v;" in capsys.readouterr().out


def test_print_limit_option(saved: Path, capsys) -> None:
    assert gpusafe_report([str(saved), "--print-limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("ERROR ") == 1
    assert "4 more violations not shown (--print-limit 1)" in out


def test_sarif_format(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.sarif"
    assert gpusafe_report([str(saved), "--format", "sarif", "-o", str(out)]) == 0
    log = json.loads(out.read_text())
    assert log["version"] == "2.1.0"
    assert len(log["runs"][0]["results"]) == 5


def test_junit_format(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "junit.xml"
    assert gpusafe_report([str(saved), "--format", "junit", "-o", str(out)]) == 0
    root = ET.parse(out).getroot()
    assert [c.get("name") for c in root.iter("testcase")][:4] == [
        "oob_write", "stencil", "uaf_read", "host"]


def test_reads_standard_input(saved: Path, monkeypatch, capsys) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(saved.read_text()))
    assert gpusafe_report(["-", "--format", "json"]) == 0
    assert capsys.readouterr().out == saved.read_text()


# -- errors: exit 2, one line naming the input ---------------------------------


def _fails(argv: list[str], capsys) -> str:
    assert gpusafe_report(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_missing_file(tmp_path: Path, capsys) -> None:
    err = _fails([str(tmp_path / "nope.json")], capsys)
    assert err.startswith("gpusafe report: cannot read ")
    assert "nope.json" in err and "No such file" in err


def test_directory_instead_of_file(tmp_path: Path, capsys) -> None:
    err = _fails([str(tmp_path)], capsys)
    assert "cannot read" in err


def test_not_utf8(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe{}")
    assert "cannot read" in _fails([str(bad)], capsys)


def test_invalid_json_names_line_and_column(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "schema": "gpusafe-report/1",\n  "tool": ,\n}\n')
    err = _fails([str(bad)], capsys)
    assert f"{bad}:3:11: invalid JSON" in err


def test_other_schema_version(tmp_path: Path, capsys) -> None:
    doc = json.loads(buggy_report().to_json())
    doc["schema"] = "gpusafe-report/2"
    bad = tmp_path / "v2.json"
    bad.write_text(json.dumps(doc))
    err = _fails([str(bad)], capsys)
    assert "not a gpusafe report: schema: unsupported report schema 'gpusafe-report/2'" in err


def test_schema_mismatch_names_the_path(tmp_path: Path, capsys) -> None:
    doc = json.loads(buggy_report().to_json())
    doc["violations"][1]["allocation"]["base"] = 1234
    bad = tmp_path / "mismatch.json"
    bad.write_text(json.dumps(doc))
    err = _fails([str(bad), "--format", "sarif"], capsys)
    assert "violations[1].allocation.base: expected a string, got integer" in err


def test_json_that_is_not_an_object(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2, 3]")
    assert "(top level): expected an object, got array" in _fails([str(bad)], capsys)


def test_unwritable_output(saved: Path, tmp_path: Path, capsys) -> None:
    err = _fails([str(saved), "-o", str(tmp_path / "no" / "such" / "dir" / "out.txt")], capsys)
    assert "cannot write" in err


def test_bad_print_limit_is_a_usage_error(saved: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        gpusafe_report([str(saved), "--print-limit", "-1"])
    assert info.value.code == 2


def test_unknown_format_is_a_usage_error(saved: Path) -> None:
    with pytest.raises(SystemExit) as info:
        gpusafe_report([str(saved), "--format", "html"])
    assert info.value.code == 2


@pytest.mark.slow
def test_as_a_process_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    env = dict(os.environ, NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout
    proc = subprocess.run([sys.executable, "-m", "gpusafe", "report", str(bad)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"gpusafe report: {bad}:1:2: invalid JSON: " \
                                  "Expecting property name enclosed in double quotes"


# -- wiring into the gpusafe command -----------------------------------------------


def test_add_parser_registers_the_subcommand(saved: Path, capsys) -> None:
    parser = argparse.ArgumentParser(prog="gpusafe")
    sub = parser.add_subparsers(dest="command")
    report_command.add_parser(sub)
    args = parser.parse_args(["report", str(saved), "--format", "json"])
    assert args.command == "report"
    assert args.func(args) == 0
    assert capsys.readouterr().out == saved.read_text()
