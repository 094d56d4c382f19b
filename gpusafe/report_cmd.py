"""``gpusafe report FILE.json``: re-render a saved report.

    gpusafe report run.json                      # the terminal report, on stdout
    gpusafe report run.json --format sarif -o run.sarif
    gpusafe report run.json --format junit -o junit.xml
    gpusafe report run.json --format json        # the canonical JSON again

A file that cannot be read, is not JSON, or is not a gpusafe-report/1 report
is a failure of the input: one line naming the file (and the place in it),
exit status 2, no traceback.

The ``json`` format re-writes the report canonically: a report that
``gpusafe run --json`` wrote comes back byte for byte; one written by hand in
another layout comes back structurally equal, in gpusafe's layout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from .report import Report, ReportFormatError

EXIT_TOOL_ERROR = 2
FORMATS = ("rich", "sarif", "junit", "json")


class ReportInputError(Exception):
    """A saved report that cannot be used; the message is the whole line to print."""


def load_report(path: str) -> Report:
    """Read and check a saved report, or raise :class:`ReportInputError`."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8", errors="strict") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ReportInputError(f"cannot read {path}: {reason}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    try:
        return Report.from_dict(doc)
    except ReportFormatError as e:
        where = e.path or "(top level)"
        raise ReportInputError(f"{path}: not a gpusafe report: {where}: {e.message}") from None


def render(report: Report, fmt: str, *, print_limit: int = 0,
           search_dirs: Sequence[Path] = (), out=None, color: bool | None = None) -> None:
    """Write ``report`` in format ``fmt`` to ``out`` (standard output by default)."""
    out = out if out is not None else sys.stdout
    if fmt == "rich":
        from .report import terminal

        terminal.render(report, out, print_limit=print_limit, search_dirs=search_dirs,
                        color=color)
    elif fmt == "sarif":
        from .report import sarif

        out.write(sarif.render(report))
    elif fmt == "junit":
        from .report import junit

        out.write(junit.render(report))
    elif fmt == "json":
        out.write(report.to_json())
    else:
        raise ValueError(f"unknown report format {fmt!r}")


def _print_limit(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 (no limit) or more")
    return n


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("file", metavar="FILE.json", help="a report saved by 'gpusafe run --json' "
                                                     "('-' for standard input)")
    p.add_argument("--format", choices=FORMATS, default="rich",
                   help="output format (default: rich, the terminal report)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write to OUT instead of standard output")
    p.add_argument("--print-limit", type=_print_limit, default=0, metavar="N",
                   help="show at most N violations in the rich format (0, the default: all)")
    p.add_argument("--source-dir", action="append", default=[], metavar="DIR",
                   help="where to look for CUDA sources named in the report "
                        "(repeatable; the report's own directory is always searched)")
    p.set_defaults(func=cmd_report)
    return p


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``report`` on the ``gpusafe`` command's subparsers."""
    p = subparsers.add_parser("report", help="re-render a saved JSON report "
                                             "(terminal, SARIF, JUnit or JSON)")
    return configure(p)


def cmd_report(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    try:
        report = load_report(args.file)
    except ReportInputError as e:
        err.print(f"gpusafe report: {e}", markup=False, soft_wrap=True)
        return EXIT_TOOL_ERROR
    search_dirs = [Path(d) for d in args.source_dir]
    if args.file != "-":
        search_dirs.append(Path(args.file).resolve().parent)
    search_dirs.append(Path.cwd())
    if args.output is None:
        render(report, args.format, print_limit=args.print_limit, search_dirs=search_dirs)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8", newline="\n") as out:
            render(report, args.format, print_limit=args.print_limit,
                   search_dirs=search_dirs, out=out, color=False)
    except OSError as e:
        err.print(f"gpusafe report: cannot write {args.output}: {e.strerror or e}",
                  markup=False, soft_wrap=True)
        return EXIT_TOOL_ERROR
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``gpusafe report`` on its own (what the tests call)."""
    parser = configure(argparse.ArgumentParser(
        prog="gpusafe report", description="Re-render a saved gpusafe JSON report."))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
