"""One rule for every path a report prints (issue 12): relative to the working
directory when under it, otherwise absolute, whatever form the engine
recorded. The JSON keeps what was recorded; SARIF artifact locations keep
their URI rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusafe.report import AllocationInfo, Report, ReportBuilder, SourceLocation, junit, sarif
from gpusafe.report.display import display_path, display_site
from gpusafe.report.terminal import render_text


@pytest.fixture()
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    monkeypatch.chdir(work)
    return work.resolve()


def test_an_absolute_path_under_the_working_directory_is_shown_relative(cwd: Path) -> None:
    assert display_path(str(cwd / "src" / "app.py")) == "src/app.py"


def test_an_absolute_path_elsewhere_stays_absolute(cwd: Path) -> None:
    assert display_path("/usr/lib/python3/x.py") == "/usr/lib/python3/x.py"


def test_a_relative_path_leaving_the_working_directory_is_shown_absolute(cwd: Path) -> None:
    assert display_path("../../x/y.py") == str(cwd.parent.parent / "x" / "y.py")


def test_a_relative_path_under_it_is_normalised(cwd: Path) -> None:
    assert display_path("./src/../app.py") == "app.py"
    assert display_path("src/app.py") == "src/app.py"


def test_a_path_through_a_link_to_the_working_directory_is_relative(cwd: Path) -> None:
    link = cwd.parent / "link"
    link.symlink_to(cwd, target_is_directory=True)
    assert display_path(str(link / "src" / "app.py")) == "src/app.py"


def test_names_that_are_not_paths_are_kept(cwd: Path) -> None:
    assert display_path("<string>") == "<string>"
    assert display_site("<stdin>:3") == "<stdin>:3"
    assert display_site("not a site") == "not a site"


def test_a_site_keeps_its_line(cwd: Path) -> None:
    assert display_site(f"{cwd}/app.py:31") == "app.py:31"


def _report(cwd: Path) -> Report:
    b = ReportBuilder(["python", "app.py"], "cpu")
    b.add_device_violation(
        "use-after-free", access="read", size=4, address=0x7F0000003008, kernel="k",
        ptx_line=3, instruction="ld.global.f32 %f1, [%rd1];",
        location=SourceLocation(str(cwd / "src" / "k.cu"), 4, 2),
        block=(0, 0, 0), thread=(0, 0, 0),
        allocation=AllocationInfo(2, 0x7F0000003000, 64, 8, "../lib/alloc.py:10",
                                  f"{cwd}/./app.py:12"))
    return b.build(exit_code=0)


def test_the_terminal_report_follows_the_rule(cwd: Path) -> None:
    text = render_text(_report(cwd))
    lib = cwd.parent / "lib" / "alloc.py"
    assert "    at src/k.cu:4:2\n" in text
    assert f"allocated at {lib}:10, freed at app.py:12" in text
    assert str(cwd) not in text


def test_junit_text_follows_the_rule(cwd: Path) -> None:
    text = junit.render(_report(cwd))
    assert "at src/k.cu:4:2" in text
    assert f"allocated at {cwd.parent / 'lib' / 'alloc.py'}:10, freed at app.py:12" in text


def test_sarif_messages_follow_the_rule_and_uris_keep_theirs(cwd: Path) -> None:
    (result,) = sarif.to_sarif(_report(cwd))["runs"][0]["results"]
    assert "freed at app.py:12" in result["message"]["text"]
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == f"file://{cwd}/src/k.cu"
    related = [r["physicalLocation"]["artifactLocation"]["uri"]
               for r in result["relatedLocations"]]
    assert related == ["../lib/alloc.py", f"file://{cwd}/app.py"]


def test_the_json_keeps_what_was_recorded(cwd: Path) -> None:
    doc = json.loads(_report(cwd).to_json())
    v = doc["violations"][0]
    assert v["location"]["file"] == str(cwd / "src" / "k.cu")
    assert v["allocation"]["allocated_at"] == "../lib/alloc.py:10"
    assert v["allocation"]["freed_at"] == f"{cwd}/./app.py:12"


def test_the_source_is_still_found_from_the_recorded_path(cwd: Path) -> None:
    (cwd / "src" / "k.cu").write_text("a\nb\nc\nd = bad;\ne\n")
    assert "> 4 | d = bad;" in render_text(_report(cwd))
