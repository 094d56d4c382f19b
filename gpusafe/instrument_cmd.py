"""``gpusafe instrument IN.ptx -o OUT.ptx [--sites SITES.json] [--stats]``.

Writes the checked PTX (the runtime linked in) and, with ``--sites``, the site
table as JSON; ``--stats`` prints each function's check statistics as a table.
A file it cannot read, PTX it cannot parse and a construct it cannot check
are reported as one line naming the input, with exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

EXIT_TOOL_ERROR = 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "instrument", help="insert bounds checks into a PTX module",
        description="Insert gpusafe's bounds checks into a PTX module.")
    p.add_argument("file", metavar="IN.ptx", help="PTX file ('-' for standard input)")
    p.add_argument("-o", "--output", metavar="OUT.ptx", required=True,
                   help="where to write the checked PTX ('-' for standard output)")
    p.add_argument("--sites", metavar="SITES.json", help="write the site table as JSON")
    p.add_argument("--stats", action="store_true", help="print per-function check statistics")
    p.set_defaults(func=cmd_instrument)
    return p


def _fail(err: Console, text: str) -> int:
    err.print(text, markup=False, highlight=False)
    return EXIT_TOOL_ERROR


def cmd_instrument(args: argparse.Namespace) -> int:
    from instrument import ptx
    from instrument.checks import InstrumentError, instrument

    err = Console(stderr=True)
    out = Console()
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8", errors="strict") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return _fail(err, f"gpusafe instrument: cannot read {args.file}: {e}")
    try:
        module = ptx.parse(text)
    except ptx.ParseError as e:
        return _fail(err, f"gpusafe instrument: {args.file}:{e.line}:{e.column}: {e.message}\n"
                          f"    {e.line_text}\n    {' ' * (e.column - 1)}^")
    try:
        result = instrument(module)
    except InstrumentError as e:
        where = f"{args.file}:{e.ptx_line}" if e.ptx_line else args.file
        return _fail(err, f"gpusafe instrument: {where}: {e}")
    try:
        if args.output == "-":
            sys.stdout.write(result.ptx)
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(result.ptx)
        if args.sites:
            with open(args.sites, "w", encoding="utf-8") as f:
                f.write(result.sites.to_json())
    except OSError as e:
        return _fail(err, f"gpusafe instrument: cannot write: {e}")
    if args.stats:
        render_stats(result.stats, err if args.output == "-" else out)
    return 0


def render_stats(stats, console: Console) -> None:
    table = Table(title="gpusafe instrument: checks per function")
    for col in ("function", "memory ops", "not checked", "root", "window", "lookup",
                "alignment", "generic", "removed", "slots"):
        table.add_column(col, justify="left" if col == "function" else "right")
    for s in stats.values():
        unchecked = ", ".join(f"{n} {k}" for k, n in sorted(s.unchecked.items())) or "-"
        removed = ", ".join(f"{n} {k}" for k, n in sorted(s.removed.items())) or "-"
        table.add_row(
            f"{s.name} ({s.kind})", str(s.memory_instructions), unchecked,
            *(str(s.checks.get(k, 0)) for k in ("root", "window", "lookup", "alignment")),
            str(s.generic_checks), removed, str(s.slots))
    console.print(table)
    console.print("ld.param and ld.const are never checked: kernel parameters and "
                  "constant memory cannot be written out of bounds by the kernel.",
                  highlight=False)
