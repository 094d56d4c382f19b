"""The ``gpusafe`` subcommands, one module each, and what they share.

Each module (:mod:`.run`, :mod:`.report`, :mod:`.inspect`, :mod:`.instrument`)
has ``add_parser(subparsers)``, which registers the subcommand and sets its
``func``; :mod:`gpusafe.cli` builds the command line from them.

What they share is how gpusafe fails (DESIGN.md "Exit status"): a failure of
gpusafe itself is one line on standard error naming the cause, and exit
status :data:`~gpusafe.exitcodes.EXIT_TOOL_ERROR`; a bad flag too
(:class:`CommandParser`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

from ..exitcodes import EXIT_TOOL_ERROR

if TYPE_CHECKING:
    from gpusafe_instrument import ptx


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose usage error is the one line
    ``gpusafe run: error: ...`` and exit status 2, without the usage text
    (``--help`` still prints it). Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_TOOL_ERROR, f"{self.prog}: error: {one_line(message)}\n")


def one_line(text: str) -> str:
    """``text`` with its line breaks folded, so an error stays one line."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def tool_error(prog: str, message: str) -> int:
    """Say ``prog: message`` on standard error, as one line; the status to exit with."""
    print(f"{prog}: {one_line(message)}", file=sys.stderr)
    return EXIT_TOOL_ERROR


def parse_error(prog: str, path: str, e: ptx.ParseError) -> str:
    """PTX that cannot be parsed, shown as the user's line with a caret under
    the place: the one failure said in three lines, since it shows their code."""
    return (f"{prog}: {path}:{e.line}:{e.column}: {e.message}\n"
            f"    {e.line_text}\n    {' ' * (e.column - 1)}^")


def read_input(path: str) -> str:
    """The text of an input file given on the command line ('-': standard
    input); OSError or UnicodeDecodeError when it cannot be read."""
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8", errors="strict") as f:
        return f.read()


def write_output(path: str, text: str) -> None:
    """Write an output file whole, UTF-8 with ``\\n`` line ends on every system."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def reason(error: OSError) -> str:
    """What the system said, without the errno and the path the caller names."""
    return error.strerror or str(error)


def count(text: str) -> int:
    """A flag's non-negative whole number (``--print-limit``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 (no limit) or more")
    return n
