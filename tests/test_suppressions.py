"""Suppressions (issue 12): ``--suppressions FILE`` for ``gpusafe run`` and
``gpusafe report``. One suppression a line, ``key:pattern`` terms that must
all match (kind, kernel, file, site; shell wildcards). Suppressed entries are
not shown and do not fail the run; the summary counts them; a suppression
that matched nothing is listed; a file that cannot be used is one line and
exit 2."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from report_samples import buggy_report, out_of_bounds
from test_run_cli import gpusafe_run, write_program

from gpusafe import cli
from gpusafe.commands import run as run_command
from gpusafe.report import SCHEMA_PATH, Report, ReportBuilder
from gpusafe.report.suppressions import Suppression, SuppressionError, apply, load, parse
from gpusafe.report.terminal import render_text

# buggy_report(): [0] global-out-of-bounds in oob_write at oob.cu:5, allocated at app.py:31
# [1] global-out-of-bounds in stencil at stencil.cu:9, allocated at app.py:50
# [2] use-after-free in uaf_read at uaf.cu:4, allocated at app.py:10, freed at app.py:12
# [3] double-free at app.py:40 (allocated app.py:10, freed app.py:12)
# [4] leak at app.py:20


def kept_after(text: str, cwd: Path | None = None) -> list[str]:
    """The kernels (or kinds, for host entries) left after suppressing with ``text``."""
    report, _ = apply(buggy_report(), parse(text, "s.txt"), cwd)
    return [v.kernel or v.kind.value for v in report.violations]


ALL = ["oob_write", "stencil", "uaf_read", "double-free", "leak"]


# -- one test per pattern type ---------------------------------------------------


def test_kind_exact() -> None:
    assert kept_after("kind:use-after-free") == ["oob_write", "stencil", "double-free", "leak"]


def test_kind_wildcard() -> None:
    assert kept_after("kind:*-out-of-bounds") == ["uaf_read", "double-free", "leak"]


def test_kernel() -> None:
    assert kept_after("kernel:oob_*") == ["stencil", "uaf_read", "double-free", "leak"]


def test_kernel_never_matches_an_entry_without_one() -> None:
    assert kept_after("kernel:*") == ["double-free", "leak"]


def test_file_matches_the_source_location() -> None:
    assert kept_after("file:stencil.cu") == ["oob_write", "uaf_read", "double-free", "leak"]


def test_file_matches_the_allocation_site() -> None:
    assert kept_after("kind:global-out-of-bounds file:app.py") == [
        "uaf_read", "double-free", "leak"]


def test_file_pattern_without_a_slash_matches_the_name_in_any_directory(tmp_path: Path) -> None:
    report = Report.from_json(buggy_report().to_json().replace('"oob.cu"', '"/x/y/oob.cu"'))
    left, _ = apply(report, parse("file:*.cu kind:global-*", "s.txt"))
    assert [v.kernel or v.kind.value for v in left.violations] == [
        "uaf_read", "double-free", "leak"]


def test_file_pattern_with_a_slash_matches_the_path_as_recorded_or_shown(
        tmp_path: Path) -> None:
    report = Report.from_json(buggy_report().to_json().replace(
        '"oob.cu"', json.dumps(str(tmp_path / "kernels" / "oob.cu"))))
    for pattern in ("*/kernels/*.cu", "kernels/oob.cu"):
        left, _ = apply(report, parse(f"file:{pattern}", "s.txt"), cwd=tmp_path)
        assert [v.kernel for v in left.violations][0] == "stencil", pattern


def test_site_matches_the_location() -> None:
    assert kept_after("site:app.py:40") == ["oob_write", "stencil", "uaf_read", "leak"]


def test_site_matches_the_allocation_site() -> None:
    assert kept_after("site:app.py:31") == ["stencil", "uaf_read", "double-free", "leak"]


def test_site_matches_the_free_site() -> None:
    assert kept_after("site:app.py:12") == ["oob_write", "stencil", "leak"]


def test_site_line_wildcard() -> None:
    assert kept_after("site:uaf.cu:*") == ["oob_write", "stencil", "double-free", "leak"]
    assert kept_after("site:app.py:[23]?") == ["stencil", "uaf_read", "double-free"]


def test_all_terms_must_match() -> None:
    assert kept_after("kind:leak kernel:oob_write") == ALL
    assert kept_after("kind:leak site:app.py:20") == ALL[:-1]


def test_comments_blank_lines_and_quotes() -> None:
    text = "# known issues\n\n  kind:leak   # tracked upstream\nfile:'my dir/*.cu'\n"
    sups = parse(text, "s.txt")
    assert [(s.source, s.terms) for s in sups] == [
        ("s.txt:3", (("kind", "leak"),)), ("s.txt:4", (("file", "my dir/*.cu"),))]
    assert str(sups[1]) == "s.txt:4: 'file:my dir/*.cu'"


# -- applying: counts, JSON, terminal -------------------------------------------------


def test_summary_counts_what_is_left_and_what_was_suppressed() -> None:
    report, unused = apply(buggy_report(), parse("kind:*-out-of-bounds", "s.txt"))
    s = report.summary
    assert (s.violations, s.occurrences, s.suppressed) == (3, 3, 2)
    assert (s.kernels_checked, s.launches) == (3, 4)
    assert unused == []


def test_suppressed_counts_add_up_when_applied_again() -> None:
    once, _ = apply(buggy_report(), parse("kind:leak", "a.txt"))
    twice, _ = apply(Report.from_json(once.to_json()), parse("kind:double-free", "b.txt"))
    assert twice.summary.suppressed == 2


def test_json_carries_the_count_and_validates() -> None:
    report, _ = apply(buggy_report(), parse("kind:leak", "s.txt"))
    doc = json.loads(report.to_json())
    assert doc["summary"]["suppressed"] == 1
    assert [v["kind"] for v in doc["violations"]].count("leak") == 0
    validator = Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    assert list(validator.iter_errors(doc)) == []
    assert Report.from_json(report.to_json()) == report


def test_a_report_without_suppressions_has_no_count() -> None:
    assert "suppressed" not in json.loads(buggy_report().to_json())["summary"]


def test_terminal_shows_the_count_and_lists_what_matched_nothing() -> None:
    sups = parse("kind:leak\nkernel:no_such_kernel\n", "known.supp")
    report, unused = apply(buggy_report(), sups)
    text = render_text(report, unused_suppressions=[str(s) for s in unused])
    assert "ERROR leak" not in text
    assert "| suppressed           |       1 |             |" in text
    assert "suppression matched nothing: known.supp:2: kernel:no_such_kernel" in text
    assert text.rstrip().endswith("gpusafe: 4 violations (35 occurrences) found "
                                  "(1 suppressed).")


def test_everything_suppressed_reads_as_no_violations() -> None:
    report, _ = apply(buggy_report(), parse("kind:*", "s.txt"))
    text = render_text(report)
    # the sample has a kernel that ran unchecked: the verdict says so after the count
    assert text.rstrip().splitlines()[-1].startswith(
        "gpusafe: no violations found (5 suppressed) in what was checked, but the run was not "
        "checked whole")
    assert report.exit_status(allow_unchecked=True) == 0
    assert report.exit_status() == 2  # the unchecked cubin kernel


# -- malformed files: one line naming file and line ----------------------------------


@pytest.mark.parametrize("line,message", [
    ("kind", "s.txt:2: 'kind' is not key:pattern (keys: kind, kernel, file, site)"),
    ("kernal:foo", "s.txt:2: unknown key 'kernal' (keys: kind, kernel, file, site)"),
    ("kernel:", "s.txt:2: kernel: needs a pattern"),
    ("kind:global-oob", "s.txt:2: kind:global-oob names no violation kind (kinds: "),
    ("site:app.py", "s.txt:2: site:app.py is not file:line"),
    ("file:'unclosed", "s.txt:2: no closing quotation"),
])
def test_malformed_line(line: str, message: str) -> None:
    with pytest.raises(SuppressionError) as info:
        parse(f"kind:leak\n{line}\n", "s.txt")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SuppressionError, match="cannot read suppressions file .*nope.supp: No "
                                               "such file"):
        load([str(tmp_path / "nope.supp")])


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    bad = tmp_path / "bad.supp"
    bad.write_bytes(b"kind:leak\n\xff\n")
    with pytest.raises(SuppressionError, match="not UTF-8"):
        load([str(bad)])


def test_several_files_are_read_in_order(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("kind:leak\n")
    (tmp_path / "b").write_text("kind:double-free\n")
    sups = load([str(tmp_path / "a"), str(tmp_path / "b")])
    assert [s.source for s in sups] == [f"{tmp_path}/a:1", f"{tmp_path}/b:1"]


# -- gpusafe report --suppressions ------------------------------------------------------


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    path.write_text(buggy_report().to_json())
    return path


def test_report_command_applies_suppressions(saved: Path, tmp_path: Path, capsys) -> None:
    supp = tmp_path / "ci.supp"
    supp.write_text("kind:*-out-of-bounds\nkind:leak kernel:x\n")
    assert cli.main(["report", str(saved), "--suppressions", str(supp)]) == 0
    out = capsys.readouterr().out
    assert "ERROR global-out-of-bounds" not in out
    assert f"suppression matched nothing: {supp}:2: kind:leak kernel:x" in out
    assert cli.main(["report", str(saved), "--suppressions", str(supp),
                     "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["suppressed"] == 2


def test_report_command_with_a_malformed_file_exits_2(saved: Path, tmp_path: Path,
                                                       capsys) -> None:
    supp = tmp_path / "bad.supp"
    supp.write_text("kynd:leak\n")
    assert cli.main(["report", str(saved), "--suppressions", str(supp)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"gpusafe report: {supp}:1: unknown key 'kynd' (keys: kind, " \
                           "kernel, file, site)\n"


# -- gpusafe run --suppressions ---------------------------------------------------------


def _run_args(tmp_path: Path, *supp: Path) -> argparse.Namespace:
    _, parsers = cli.build_parser()
    argv = [f"--suppressions={s}" for s in supp]
    return parsers["run"].parse_args([*argv, "--json", str(tmp_path / "out.json"),
                                      "--", "python", "app.py"])


def test_a_run_whose_only_violation_is_suppressed_keeps_the_program_status(
        tmp_path: Path, capsys) -> None:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.record_launch("oob_write")
    out_of_bounds(b)
    report = b.build(exit_code=3)
    supp = tmp_path / "known.supp"
    supp.write_text("kind:global-out-of-bounds kernel:oob_write site:app.py:31\n")
    args = _run_args(tmp_path, supp)
    assert run_command.conclude(report, args, load(args.suppressions)) == 3
    assert "gpusafe: no violations found (1 suppressed)." in capsys.readouterr().err
    assert json.loads((tmp_path / "out.json").read_text())["summary"]["suppressed"] == 1
    # the same run without the suppression fails
    assert run_command.conclude(report, _run_args(tmp_path)) == 86


def test_run_with_a_malformed_file_exits_2_before_running_anything(
        tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    supp = tmp_path / "bad.supp"
    supp.write_text("# fine\nkind:leek\n")
    marker = tmp_path / "ran"
    status = cli.main(["run", "--device", "cpu", "--suppressions", str(supp), "--",
                       "python", "-c", f"open({str(marker)!r}, 'w')"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpusafe run: {supp}:2: kind:leek names no violation kind")
    assert len(err.splitlines()) == 1
    assert not marker.exists()


@pytest.mark.slow
def test_run_end_to_end_with_the_only_violation_suppressed(tmp_path: Path) -> None:
    app = write_program(tmp_path, "")
    supp = tmp_path / "known.supp"
    supp.write_text("# the off-by-one in add_one is known\n"
                    "kind:global-out-of-bounds kernel:add_one file:add_one.cu\n"
                    "kind:leak\n")
    rc, doc, out = gpusafe_run(tmp_path, "--suppressions", str(supp), "python", str(app))
    assert rc == 0, out
    assert doc["violations"] == [] and doc["summary"]["suppressed"] == 2
    assert f"suppression matched nothing: {supp}:3: kind:leak" in out
    assert "gpusafe: no violations found (2 suppressed)." in out


def test_suppression_str_is_where_and_what() -> None:
    s = Suppression((("kind", "leak"),), "f:1", "kind:leak")
    assert str(s) == "f:1: kind:leak"
