"""``gpusafe instrument IN.ptx -o OUT.ptx [--sites SITES.json] [--stats] [--every-offender]``.

Writes the checked PTX (the runtime linked in) and, with ``--sites``, the site
table as JSON; ``--stats`` prints each function's check statistics as a table.
A file it cannot read or write, and a construct it cannot check, are one line
naming the input, with exit status 2; PTX it cannot parse is shown with a
caret under the place, as ``gpusafe inspect`` shows it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ..exitcodes import EXIT_TOOL_ERROR
from . import read_input, tool_error, write_output
from .inspect import ptx_parse_failure

if TYPE_CHECKING:
    from gpusafe_instrument.checks import FunctionStats

PROG = "gpusafe instrument"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "instrument", help="insert bounds checks into a PTX module",
        description="Insert gpusafe's bounds checks into a PTX module.")
    p.add_argument("file", metavar="IN.ptx", help="PTX file ('-' for standard input)")
    p.add_argument("-o", "--output", metavar="OUT.ptx", required=True,
                   help="where to write the checked PTX ('-' for standard output)")
    p.add_argument("--sites", metavar="SITES.json", help="write the site table as JSON")
    p.add_argument("--stats", action="store_true", help="print per-function check statistics")
    p.add_argument("--every-offender", action="store_true",
                   help="the PTX `gpusafe run --every-offender` loads: every failing access "
                        "writes a violation record instead of counting in its site's tally")
    p.set_defaults(func=cmd_instrument)
    return p


def cmd_instrument(args: argparse.Namespace) -> int:
    # The instrumenter loads in a third of a second: only this command pays for it.
    from gpusafe_instrument import ptx
    from gpusafe_instrument.checks import InstrumentError, instrument

    try:
        text = read_input(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return tool_error(PROG, f"cannot read {args.file}: {e}")
    try:
        module = ptx.parse(text)
    except ptx.ParseError as e:
        print(ptx_parse_failure(PROG, args.file, e), file=sys.stderr)
        return EXIT_TOOL_ERROR
    try:
        result = instrument(module, every_offender=args.every_offender)
    except InstrumentError as e:
        where = f"{args.file}:{e.ptx_line}" if e.ptx_line else args.file
        return tool_error(PROG, f"{where}: {e}")
    try:
        if args.output == "-":
            sys.stdout.write(result.ptx)
        else:
            write_output(args.output, result.ptx)
        if args.sites:
            write_output(args.sites, result.sites.to_json())
    except OSError as e:
        return tool_error(PROG, f"cannot write: {e}")
    if args.stats:
        render_stats(result.stats, Console(stderr=args.output == "-"))
    return 0


def render_stats(stats: Mapping[str, FunctionStats], console: Console) -> None:
    table = Table(title="gpusafe instrument: checks per function")
    for col in ("function", "memory ops", "not checked", "root", "window", "argument",
                "lookup", "alignment", "generic", "removed", "slots"):
        table.add_column(col, justify="left" if col == "function" else "right")
    for s in stats.values():
        unchecked = ", ".join(f"{n} {k}" for k, n in sorted(s.unchecked.items())) or "-"
        removed = ", ".join(f"{n} {k}" for k, n in sorted(s.removed.items())) or "-"
        table.add_row(
            f"{s.name} ({s.kind})", str(s.memory_instructions), unchecked,
            *(str(s.checks.get(k, 0))
              for k in ("root", "window", "argument", "lookup", "alignment")),
            str(s.generic_checks), removed, str(s.slots))
    console.print(table)
    console.print("ld.param and ld.const are never checked: kernel parameters and "
                  "constant memory cannot be written out of bounds by the kernel.",
                  highlight=False)
    if any(s.unchecked.get("surface") for s in stats.values()):
        console.print("Surface accesses (suld, sust, sured) are not checked: the hardware "
                      "keeps them inside the surface's array (their .trap, .clamp or .zero "
                      "mode), which gpusafe does not track.", highlight=False)
