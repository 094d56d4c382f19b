"""``gpusafe report FILE.json``: re-render a saved report.

    gpusafe report run.json                      # the terminal report, on stdout
    gpusafe report run.json --format sarif -o run.sarif
    gpusafe report run.json --format junit -o junit.xml
    gpusafe report run.json --format json        # the canonical JSON again

The formats are those of :mod:`gpusafe.report.formats`, the same that
``gpusafe run`` writes. A file that cannot be read, is not JSON, or is not a
gpusafe-report/1 report is a failure of the input: one line naming the file
(and the place in it), exit status 2, no traceback; so is an output file that
cannot be written.

The ``json`` format re-writes the report canonically: a report that
``gpusafe run --json`` wrote comes back byte for byte; one written by hand in
another layout comes back structurally equal, in gpusafe's layout.

A report may come from anyone, so reading it never ends in a traceback
(nesting too deep for the JSON reader, numbers too long, lone surrogates:
one line, exit 2), and the terminal report reads source excerpts only from
files under the report's directory, the working directory or a
``--source-dir``, their links resolved: a report naming ``/etc/passwd``
gets no excerpt of it. ``--suppressions`` applies suppressions files
(:mod:`gpusafe.report.suppressions`) before rendering.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from ..report import Report, ReportFormatError, formats, suppressions
from ..report.formats import RenderOptions
from . import count, read_input, reason, tool_error, write_output

PROG = "gpusafe report"

MAX_DIGITS = 4300
"""The longest number a report may spell (Python's own limit on converting
decimal text to an integer); a report's numbers are 64-bit, 20 digits at most."""


class ReportInputError(Exception):
    """A saved report that cannot be used; the message is the whole line to print."""


def load_report(path: str) -> Report:
    """Read and check a saved report, or raise :class:`ReportInputError`."""
    try:
        text = read_input(path)
    except (OSError, UnicodeDecodeError) as e:
        why = reason(e) if isinstance(e, OSError) else str(e)
        raise ReportInputError(f"cannot read {path}: {why}") from None
    try:
        doc = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except _TooLong as e:
        raise ReportInputError(f"{path}: not a gpusafe report: a number of {e.digits} digits "
                               "(a report's numbers are 64-bit)") from None
    except RecursionError:
        raise ReportInputError(f"{path}: not a gpusafe report: JSON nested too deeply to "
                               "read") from None
    try:
        return Report.from_dict(doc)
    except ReportFormatError as e:
        where = e.path or "(top level)"
        raise ReportInputError(f"{path}: not a gpusafe report: {where}: {e.message}") from None


class _TooLong(Exception):
    def __init__(self, digits: int) -> None:
        self.digits = digits


def _parse_int(text: str) -> int:
    """``int``, refusing before Python does (its refusal names
    ``sys.set_int_max_str_digits``, no help to someone reading a report)."""
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _TooLong(digits)
    return int(text)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``report`` on the ``gpusafe`` command's subparsers."""
    p = subparsers.add_parser("report", help="re-render a saved JSON report "
                                             "(terminal, SARIF, JUnit or JSON)",
                              description="Re-render a saved gpusafe JSON report.")
    p.add_argument("file", metavar="FILE.json", help="a report saved by 'gpusafe run --json' "
                                                     "('-' for standard input)")
    p.add_argument("--format", choices=tuple(formats.FORMATS), default=formats.TERMINAL,
                   help=f"output format (default: {formats.TERMINAL}, the terminal report)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write to OUT instead of standard output")
    p.add_argument("--print-limit", type=count, default=0, metavar="N",
                   help="show at most N violations in the rich format (0, the default: all)")
    p.add_argument("--source-dir", action="append", default=[], metavar="DIR",
                   help="where to look for CUDA sources named in the report "
                        "(repeatable; the report's own directory and the working directory "
                        "are always searched, and no source outside these is read)")
    p.add_argument("--suppressions", action="append", default=[], metavar="FILE",
                   help="leave out the violations a suppressions file matches "
                        "(repeatable; see gpusafe.report.suppressions for the format)")
    p.set_defaults(func=cmd_report)
    return p


def cmd_report(args: argparse.Namespace) -> int:
    try:
        suppress = suppressions.load(args.suppressions)
        report = load_report(args.file)
    except (ReportInputError, suppressions.SuppressionError) as e:
        return tool_error(PROG, str(e))
    unused: list[str] = []
    if args.suppressions:
        report, unmatched = suppressions.apply(report, suppress)
        unused = [str(s) for s in unmatched]
    search_dirs = [Path(d) for d in args.source_dir]
    if args.file != "-":
        search_dirs.append(Path(args.file).resolve().parent)
    search_dirs.append(Path.cwd())
    options = RenderOptions(print_limit=args.print_limit, search_dirs=search_dirs,
                            source_roots=search_dirs, unused_suppressions=unused)
    if args.output is None:
        formats.write(report, args.format, sys.stdout, options)
        return 0
    text = formats.render(report, args.format, replace(options, color=False))
    try:
        write_output(args.output, text)
    except OSError as e:
        return tool_error(PROG, f"cannot write {args.output}: {reason(e)}")
    return 0
