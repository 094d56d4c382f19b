"""The ``gpusafe`` command line.

Every subcommand reports a failure of its own input (a file it cannot read,
PTX it cannot parse) as one line naming the input, line and column, and exits
with status 2: never a traceback, and never mistaken for a clean result.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rich.console import Console

from . import __version__

EXIT_TOOL_ERROR = 2


def _consoles() -> tuple[Console, Console]:
    # rich colours only a terminal and honours NO_COLOR on its own.
    return Console(), Console(stderr=True)


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="strict") as f:
        return f.read()


def cmd_inspect(args: argparse.Namespace) -> int:
    from instrument import ptx

    from .inspection import module_summary, render_summary

    out, err = _consoles()
    try:
        text = _read_text(args.file)
    except (OSError, UnicodeDecodeError) as e:
        err.print(f"gpusafe inspect: cannot read {args.file}: {e}", markup=False, highlight=False)
        return EXIT_TOOL_ERROR
    try:
        module = ptx.parse(text)
    except ptx.ParseError as e:
        err.print(
            f"gpusafe inspect: {args.file}:{e.line}:{e.column}: {e.message}\n"
            f"    {e.line_text}\n    {' ' * (e.column - 1)}^",
            markup=False, highlight=False,
        )
        return EXIT_TOOL_ERROR
    summary = module_summary(module, args.file)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        render_summary(summary, out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpusafe",
        description="A memory-safety checker for CUDA programs, with or without a GPU.",
    )
    parser.add_argument("--version", action="version", version=f"gpusafe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("inspect", help="summarise a PTX module: kernels, parameters, memory ops")
    p.add_argument("file", metavar="FILE.ptx", help="PTX file ('-' for standard input)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_inspect)

    from . import instrument_cmd, report_cmd, run_cmd

    run_cmd.add_parser(sub)
    instrument_cmd.add_parser(sub)
    report_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
