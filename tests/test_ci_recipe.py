"""docs/ci.md: its GitHub Actions workflow is well-formed YAML of the shape
GitHub runs, it runs on a CPU-only runner and uploads the SARIF to code
scanning, and every gpusafe flag it uses exists (gpusafe's own argparse
parser and the pytest plugin's options are asked).

No YAML library is installed with the project, so the workflow is read by
:func:`parse_yaml`, a strict reader of the block subset workflows are written
in (mappings, sequences, plain and double-quoted scalars, ``|`` blocks): any
other construct is an error rather than a guess."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from _pytest.config.argparsing import Parser

from gpusafe import pytest_plugin
from gpusafe.cli import build_parser

DOC = Path(__file__).resolve().parent.parent / "docs" / "ci.md"


class YamlError(ValueError):
    pass


def workflow_text() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/ci.md holds exactly one yaml block: the workflow"
    return blocks[0]


def parse_yaml(text: str) -> Any:
    lines = [(n, raw) for n, raw in enumerate(text.split("\n"), 1)
             if raw.strip() and not raw.lstrip().startswith("#")]
    for n, raw in lines:
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            raise YamlError(f"line {n}: a tab in the indentation")
    value, rest = _block(lines, 0, _indent(lines[0][1]) if lines else 0)
    if rest < len(lines):
        raise YamlError(f"line {lines[rest][0]}: unexpected indentation")
    return value


def _indent(raw: str) -> int:
    return len(raw) - len(raw.lstrip(" "))


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    """The mapping or sequence whose lines start at ``i`` with ``indent``."""
    if lines[i][1].lstrip().startswith("- ") or lines[i][1].strip() == "-":
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _sequence(lines, i, indent):
    out = []
    while i < len(lines) and _indent(lines[i][1]) == indent:
        n, raw = lines[i]
        body = raw.strip()
        if not body.startswith("-"):
            raise YamlError(f"line {n}: a mapping key among sequence items")
        item = body[1:].strip()
        if ":" in _unquoted(item) and not item.startswith('"'):
            # "- key: value" opens a mapping indented to where "key" starts
            inner = indent + 2
            lines[i] = (n, " " * inner + item)
            value, i = _mapping(lines, i, inner)
        else:
            value, i = _scalar(item, n), i + 1
        out.append(value)
    return out, i


def _mapping(lines, i, indent):
    out: dict[str, Any] = {}
    while i < len(lines) and _indent(lines[i][1]) == indent:
        n, raw = lines[i]
        key, sep, rest = raw.strip().partition(":")
        if not sep or not key or key.startswith(("-", '"', "'")):
            raise YamlError(f"line {n}: expected 'key: value', got {raw.strip()!r}")
        if rest and not rest.startswith(" "):
            raise YamlError(f"line {n}: no space after the colon of {key!r}")
        if key in out:
            raise YamlError(f"line {n}: {key!r} given twice")
        rest = rest.strip()
        i += 1
        if rest == "|":
            block = []
            while i < len(lines) and _indent(lines[i][1]) > indent:
                block.append(lines[i][1])
                i += 1
            if not block:
                raise YamlError(f"line {n}: an empty '|' block")
            cut = min(_indent(b) for b in block)
            out[key] = "\n".join(b[cut:] for b in block) + "\n"
        elif rest:
            out[key] = _scalar(rest, n)
        elif i < len(lines) and _indent(lines[i][1]) > indent:
            out[key], i = _block(lines, i, _indent(lines[i][1]))
        else:
            out[key] = None
    return out, i


def _unquoted(text: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def _scalar(text: str, n: int) -> str:
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            raise YamlError(f"line {n}: a double-quoted scalar JSON cannot read: {text}") from None
        if not isinstance(value, str):
            raise YamlError(f"line {n}: not one quoted string: {text}")
        return value
    if text[0] in "[{&*!|>'%@`" or " #" in text or ": " in text:
        raise YamlError(f"line {n}: {text!r} is outside the subset this reader accepts")
    return text


# --------------------------------------------------------------------------
# the reader itself


def test_the_reader_reads_the_subset() -> None:
    doc = parse_yaml('a: 1\nb:\n  - x\n  - k: "v w"\n    j: y\nc: |\n  one\n  two\n')
    assert doc == {"a": "1", "b": ["x", {"k": "v w", "j": "y"}], "c": "one\ntwo\n"}


@pytest.mark.parametrize("text", ["a: [1, 2]\n", "a: 1\na: 2\n", "a:1\n", "a: &x 1\n",
                                  "a:\n\t- x\n", "a: 1 # comment\n", "- a\nb: 1\n"])
def test_the_reader_refuses_what_it_does_not_know(text: str) -> None:
    with pytest.raises(YamlError):
        parse_yaml(text)


# --------------------------------------------------------------------------
# the workflow


@pytest.fixture(scope="module")
def workflow() -> dict:
    return parse_yaml(workflow_text())


def _steps(workflow: dict) -> list[dict]:
    (job,) = workflow["jobs"].values()
    return job["steps"]


def test_the_workflow_has_the_shape_github_runs(workflow: dict) -> None:
    assert set(workflow) == {"name", "on", "permissions", "jobs"}
    assert set(workflow["on"]) <= {"push", "pull_request", "workflow_dispatch"}
    (job,) = workflow["jobs"].values()
    assert set(job) <= {"runs-on", "steps", "timeout-minutes", "env"}
    for step in job["steps"]:
        assert isinstance(step, dict) and ("uses" in step) != ("run" in step), step
        assert set(step) <= {"name", "uses", "with", "run", "if", "env"}, step


def test_it_runs_on_a_cpu_only_runner_with_the_cpu_device(workflow: dict) -> None:
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"  # GitHub's hosted runners have no GPU
    runs = " ".join(s.get("run", "") for s in _steps(workflow))
    assert "--gpusafe-device cpu" in runs and "--device cpu" in runs


def test_the_sarif_goes_to_code_scanning_even_when_the_checks_fail(workflow: dict) -> None:
    assert workflow["permissions"]["security-events"] == "write"
    upload = next(s for s in _steps(workflow)
                  if s.get("uses", "").startswith("github/codeql-action/upload-sarif@"))
    assert upload["if"] == "always()"
    target = upload["with"]["sarif_file"]
    written = [a for s in _steps(workflow) for cmd in _commands(s)
               for flag, a in zip(cmd, cmd[1:], strict=False)
               if flag in ("--sarif", "--gpusafe-sarif")]
    assert len(written) == 2 and all(Path(w).parent == Path(target) for w in written)


def _commands(step: dict) -> list[list[str]]:
    return [shlex.split(line) for line in step.get("run", "").splitlines() if line.strip()]


def test_every_gpusafe_run_flag_exists(workflow: dict) -> None:
    parser, commands = build_parser()
    exact = set(commands["run"]._option_string_actions)
    runs = [cmd for s in _steps(workflow) for cmd in _commands(s) if cmd[:2] == ["gpusafe", "run"]]
    assert runs
    for cmd in runs:
        args = parser.parse_args(cmd[1:])  # a flag that does not exist exits 2 here
        assert args.command[:2] == ["--", "python"], cmd
        # argparse takes abbreviations; the recipe spells every flag out
        flags = [t for t in cmd[:cmd.index("--")] if t.startswith("-")]
        assert set(flags) <= exact, set(flags) - exact


def test_every_pytest_plugin_flag_exists(workflow: dict) -> None:
    parser = Parser(_ispytest=True)
    pytest_plugin.pytest_addoption(parser)
    known = {name for group in parser._groups for option in group.options
             for name in option.names()}
    runs = [cmd for s in _steps(workflow) for cmd in _commands(s) if "pytest" in cmd]
    assert runs
    for cmd in runs:
        used = [t for t in cmd if t.startswith("--gpusafe")]
        assert "--gpusafe" in used
        assert set(used) <= known, set(used) - known
        args = parser.parse_known_args(cmd[cmd.index("pytest") + 1:])
        assert args.gpusafe and args.gpusafe_device == "cpu"
