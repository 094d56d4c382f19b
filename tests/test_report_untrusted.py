"""A report someone hands you is untrusted input (issue 9, item 14).

``gpusafe report`` never tracebacks on valid JSON (lone surrogates, nesting
deeper than the JSON reader goes, numbers too long for Python to convert,
values past 64 bits): one line ``gpusafe report: FILE: ...`` and exit 2.
The terminal report escapes every control character a report's strings
carry, so nothing in a report can drive the terminal. And it reads source
excerpts only from files under the report's directory, the working directory
or a ``--source-dir``, their links resolved."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_samples import OOB_CU, buggy_report

from gpusafe import cli
from gpusafe.report import AllocationInfo, Report, ReportBuilder, SourceLocation
from gpusafe.report.terminal import render_text

ROOT = Path(__file__).resolve().parent.parent

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What must never reach the terminal: every control character but tab and newline."""


def _report_doc() -> dict:
    return json.loads(buggy_report().to_json())


def _fails(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert cli.main(["report", str(path), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert "Traceback" not in err and "internal error" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gpusafe report: {path}: ")
    return err.strip()


# -- valid JSON that is no report: one line, exit 2 -------------------------------


def test_lone_surrogate_in_a_string(tmp_path: Path, capsys) -> None:
    doc = _report_doc()
    doc["violations"][0]["kernel"] = "oob_\ud800write"
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(doc))  # ensure_ascii: the file holds \ud800 as an escape
    err = _fails(path, capsys)
    assert "violations[0].kernel: a lone surrogate \\ud800 is not a character" in err


@pytest.mark.parametrize("fmt", ["rich", "json", "sarif", "junit"])
def test_lone_surrogate_fails_before_any_output(tmp_path: Path, capsys, fmt: str) -> None:
    doc = _report_doc()
    doc["command"] = ["python", "\udcff.py"]
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(doc))
    assert "command[1]: a lone surrogate" in _fails(path, capsys, "--format", fmt)


def test_nesting_deeper_than_the_json_reader_goes(tmp_path: Path, capsys) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert "JSON nested too deeply to read" in _fails(path, capsys)


def test_deep_nesting_inside_a_report_field(tmp_path: Path, capsys) -> None:
    doc = _report_doc()
    text = json.dumps(doc).replace('"command": ["python"', '"command": [' + "[" * 50_000
                                   + "]" * 50_000 + ', "python"', 1)
    path = tmp_path / "deep-field.json"
    path.write_text(text)
    assert "nested too deeply" in _fails(path, capsys)


def test_integer_too_long_for_python_to_convert(tmp_path: Path, capsys) -> None:
    text = buggy_report().to_json().replace('"size": 256', '"size": 1' + "0" * 5000, 1)
    path = tmp_path / "long.json"
    path.write_text(text)
    assert "a number of 5001 digits" in _fails(path, capsys)


@pytest.mark.parametrize("field,value", [
    (["violations", 0, "allocation", "size"], 10 ** 30),
    (["violations", 0, "count"], 2 ** 64),
    (["violations", 0, "allocation", "offset"], -(2 ** 64)),
    (["summary", "occurrences"], 10 ** 4000),
    (["exit_code"], 10 ** 100),
    (["violations", 0, "size"], 1e300),
], ids=["size-10^30", "count-2^64", "offset--2^64", "occurrences-10^4000", "exit-10^100",
        "size-1e300"])
def test_integer_past_64_bits(tmp_path: Path, capsys, field: list, value: int) -> None:
    doc = _report_doc()
    target = doc
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    where = ".".join(str(k) for k in field).replace(".0.", "[0].")
    assert f"{where}: expected an integer of at most 64 bits" in _fails(path, capsys)


def test_address_past_64_bits(tmp_path: Path, capsys) -> None:
    doc = _report_doc()
    doc["violations"][0]["address"] = "0x" + "f" * 5000
    path = tmp_path / "addr.json"
    path.write_text(json.dumps(doc))
    err = _fails(path, capsys)
    assert "violations[0].address: expected a 64-bit hex address" in err
    assert len(err) < 300  # the value is not echoed whole


def test_largest_64_bit_values_are_rendered(tmp_path: Path, capsys) -> None:
    doc = _report_doc()
    v = doc["violations"][0]
    v["address"] = "0xffffffffffffffff"
    v["count"] = 2 ** 64 - 1
    v["allocation"].update(base="0x0", size=2 ** 64 - 1, offset=2 ** 64 - 1)
    path = tmp_path / "edge.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "18446744073709551615 occurrences" in out
    assert "+18446744073709551615: 0 B past the end" in out


@pytest.mark.slow
def test_a_hostile_report_in_a_subprocess_exits_2_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("{\"schema\": " + "[" * 100_000 + "]" * 100_000 + "}")
    env = dict(os.environ, NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-m", "gpusafe", "report", str(path)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"gpusafe report: {path}: not a gpusafe report: JSON nested too " \
                          "deeply to read\n"


# -- control characters never reach the terminal ----------------------------------

EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\r\n\u202e\x00"


def _evil_report():
    b = ReportBuilder(["python", f"app{EVIL}.py"], device=f"cpu{EVIL}")
    b.record_launch(f"k{EVIL}")
    b.add_device_violation(
        "global-out-of-bounds", access="write", size=4, address=0x7F0000001104,
        kernel=f"k{EVIL}", ptx_line=41, instruction=f"st.global.f32 [%rd8], %f2;{EVIL}",
        location=SourceLocation(f"oob{EVIL}.cu", 5, 9), block=(0, 0, 0), thread=(1, 0, 0),
        allocation=AllocationInfo(3, 0x7F0000001000, 256, 260, f"app{EVIL}.py:31",
                                  f"app{EVIL}.py:40"))
    b.add_host_violation("double-free", location=SourceLocation(f"app{EVIL}.py", 40))
    b.record_unchecked(f"cublas{EVIL}", f"no PTX{EVIL}")
    return b.build(exit_code=0)


def test_no_control_character_from_a_report_reaches_the_terminal() -> None:
    text = render_text(_evil_report())
    assert not CONTROL.search(text), repr(CONTROL.search(text))
    assert "kernel k\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x0d\\x0a\\u202e\\x00" in text
    assert "at oob\\x1b]0;owned" in text
    assert "allocated at app\\x1b]0;owned" in text
    assert "not checked: kernel cublas\\x1b" in text


def test_a_newline_in_a_name_cannot_forge_a_report_line() -> None:
    b = ReportBuilder(["python", "app.py"], device="cpu")
    b.add_host_violation("leak", kernel="k\ngpusafe: no violations found.\n",
                         location=SourceLocation("app.py", 3))
    lines = render_text(b.build(exit_code=0)).splitlines()
    assert "gpusafe: no violations found." not in lines


def test_control_characters_in_the_source_file_are_escaped_and_tabs_kept(
        tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("a\n\tb\x1b[2J\nc\n")
    b = ReportBuilder(["python", "app.py"], device="cpu")
    b.add_host_violation("invalid-free", location=SourceLocation("k.cu", 2))
    text = render_text(b.build(exit_code=0), search_dirs=[tmp_path])
    assert re.search(r"> 2 \| +b\\x1b\[2J$", text, re.M)  # the tab kept (rich expands it)
    assert not CONTROL.search(text)


def test_rich_markup_in_a_name_is_shown_as_written() -> None:
    b = ReportBuilder(["python", "app.py"], device="cpu")
    b.add_host_violation("leak", kernel="[bold red]k[/]", location=SourceLocation("a.py", 3))
    assert "at launch of kernel [bold red]k[/]" in render_text(b.build(exit_code=0))


# -- source excerpts: only files under the report's, the working or a source dir --


def _report_at(file: str, line: int = 1) -> str:
    b = ReportBuilder(["python", "app.py"], device="cpu")
    b.add_host_violation("invalid-free", location=SourceLocation(file, line))
    return b.build(exit_code=0).to_json()


SECRET = "the secret of the machine\n"


@pytest.fixture()
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """reports/ (the report), work/ (the working directory), src/ (a --source-dir),
    and outside/ holding a file none of them may show."""
    dirs = {name: tmp_path / name for name in ("reports", "work", "src", "outside")}
    for d in dirs.values():
        d.mkdir()
    (dirs["outside"] / "secret.txt").write_text(SECRET)
    monkeypatch.chdir(dirs["work"])
    return dirs


def _render(layout: dict[str, Path], file: str, capsys, *extra: str) -> str:
    report = layout["reports"] / "run.json"
    report.write_text(_report_at(file))
    assert cli.main(["report", str(report), *extra]) == 0
    return capsys.readouterr().out


def test_an_absolute_path_outside_every_root_is_not_read(layout, capsys) -> None:
    out = _render(layout, str(layout["outside"] / "secret.txt"), capsys)
    assert "secret.txt:1" in out
    assert "the secret" not in out


def test_etc_passwd_is_not_read(layout, capsys) -> None:
    out = _render(layout, "/etc/passwd", capsys)
    assert "at /etc/passwd:1" in out
    assert "root:" not in out


def test_a_relative_path_escaping_the_roots_is_not_read(layout, capsys) -> None:
    out = _render(layout, "../outside/secret.txt", capsys)
    assert "the secret" not in out


def test_a_link_inside_a_root_to_a_file_outside_is_not_read(layout, capsys) -> None:
    (layout["reports"] / "k.cu").symlink_to(layout["outside"] / "secret.txt")
    out = _render(layout, "k.cu", capsys)
    assert "the secret" not in out


def test_a_linked_directory_leading_outside_is_not_followed(layout, capsys) -> None:
    (layout["work"] / "up").symlink_to(layout["outside"], target_is_directory=True)
    out = _render(layout, "up/secret.txt", capsys)
    assert "the secret" not in out


@pytest.mark.parametrize("root", ["reports", "work", "src"])
def test_sources_under_each_root_are_read(layout, capsys, root: str) -> None:
    (layout[root] / "oob.cu").write_text(OOB_CU)
    out = _render(layout, str(layout[root] / "oob.cu"), capsys,
                  "--source-dir", str(layout["src"]))
    assert "extern \"C\" __global__ void oob_write" in out


def test_a_link_within_the_roots_is_read(layout, capsys) -> None:
    (layout["src"] / "oob.cu").write_text(OOB_CU)
    (layout["work"] / "k.cu").symlink_to(layout["src"] / "oob.cu")
    out = _render(layout, "k.cu", capsys, "--source-dir", str(layout["src"]))
    assert "void oob_write" in out


def test_gpusafe_run_still_reads_the_file_a_location_names(layout) -> None:
    """The run's own report names files its own program compiled: no confinement."""
    (layout["outside"] / "oob.cu").write_text(OOB_CU)
    text = render_text(Report.from_json(_report_at(str(layout["outside"] / "oob.cu"))))
    assert "void oob_write" in text


def test_an_instruction_keeps_its_tab_and_loses_its_escape_sequences() -> None:
    from dataclasses import replace

    from gpusafe.report.display import as_shown

    v = buggy_report().violations[0]
    shown = as_shown(replace(v, instruction="st.global.f32\t[%rd8], %f2; \x1b[2J"))
    assert shown.instruction == "st.global.f32\t[%rd8], %f2; \\x1b[2J"
