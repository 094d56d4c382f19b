"""The ``gpusafe`` command line: the parser, built from :mod:`gpusafe.commands`.

Every failure of gpusafe itself is one line on standard error and exit status
2 (:data:`gpusafe.exitcodes.EXIT_TOOL_ERROR`), never a traceback and never
mistaken for a clean result: an input it cannot read, a file it cannot write,
a bad flag (``gpusafe run: error: ...``), and an unexpected exception in
gpusafe's own code (``gpusafe: internal error: <Type>: <message>``). Set the
environment variable ``GPUSAFE_DEBUG=1`` to see the traceback of an internal
error as well.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from . import __version__
from .commands import CommandParser, inspect, instrument, nvcc, one_line, report, run
from .exitcodes import EXIT_INTERRUPTED, EXIT_TOOL_ERROR

DEBUG_ENV = "GPUSAFE_DEBUG"
"""Set to 1 to get the traceback of an internal error."""

SUBCOMMANDS = (inspect, run, instrument, report, nvcc)
"""The modules of the subcommands, in the order ``gpusafe --help`` lists them."""


def build_parser() -> tuple[CommandParser, dict[str, argparse.ArgumentParser]]:
    """The ``gpusafe`` parser, and each subcommand's parser by name."""
    parser = CommandParser(
        prog="gpusafe",
        description="A memory-safety checker for CUDA programs, with or without a GPU.",
        epilog=f"Exit status 2 means gpusafe itself failed; {DEBUG_ENV}=1 shows the "
               "traceback of an internal error.",
    )
    parser.add_argument("--version", action="version", version=f"gpusafe {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(sub)
    return parser, dict(sub.choices)


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def internal_error(error: Exception) -> int:
    """Report an exception that escaped a command: a bug in gpusafe, said as one line."""
    if debugging():
        traceback.print_exception(error)
    hint = "" if debugging() else f" (set {DEBUG_ENV}=1 for the traceback)"
    text = one_line(str(error))
    print(f"gpusafe: internal error: {type(error).__name__}"
          f"{': ' + text if text else ''}{hint}", file=sys.stderr)
    return EXIT_TOOL_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and getattr(args, "pass_through", False):
        args.args = unknown + list(args.args)  # another tool's flags (gpusafe nvcc)
        unknown = []
    if unknown:  # said by the subcommand, whose flags they are not
        commands[args.subcommand].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug in gpusafe: one line, exit 2
        return internal_error(e)


if __name__ == "__main__":
    sys.exit(main())
