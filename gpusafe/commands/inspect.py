"""``gpusafe inspect FILE.ptx [--json]``: what a PTX module contains.

The summary is built once as plain data (:func:`module_summary`); the
terminal table and the JSON output are both rendered from it. A file it cannot
read is one line and exit status 2; PTX it cannot parse is the line, column
and the offending line with a caret under the place, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..exitcodes import EXIT_TOOL_ERROR
from . import parse_error, read_input, tool_error

if TYPE_CHECKING:
    from gpusafe_instrument import ptx

PROG = "gpusafe inspect"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("inspect", help="summarise a PTX module: kernels, parameters, memory ops")
    p.add_argument("file", metavar="FILE.ptx", help="PTX file ('-' for standard input)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_inspect)
    return p


def cmd_inspect(args: argparse.Namespace) -> int:
    # The PTX front end loads in a tenth of a second: only this command pays for it.
    from gpusafe_instrument import ptx

    try:
        text = read_input(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return tool_error(PROG, f"cannot read {args.file}: {e}")
    try:
        # one function at a time: the summary never holds the module's tree
        summary = summarize(ptx.parse_items(text), args.file)
    except ptx.ParseError as e:
        print(ptx_parse_failure(PROG, args.file, e), file=sys.stderr)
        return EXIT_TOOL_ERROR
    del text
    if args.json:
        json.dump(summary, sys.stdout, indent=2)  # written as encoded, never whole in memory
        sys.stdout.write("\n")
    else:
        render_summary(summary, Console())
    return 0


def ptx_parse_failure(prog: str, path: str, e: ptx.ParseError) -> str:
    """What ``gpusafe inspect`` and ``gpusafe instrument`` say of PTX they
    cannot parse: the line with a caret under the place, or one line when
    there is no line to show (an empty file)."""
    if not e.line_text.strip():
        return f"{prog}: {path}:{e.line}: {e.message}"
    return parse_error(prog, path, e)


def module_summary(module: ptx.Module, source: str) -> dict[str, Any]:
    """The summary of a parsed module (:func:`summarize` of its items)."""
    return summarize(module.items, source)


def summarize(items: Iterable[ptx.Item], source: str) -> dict[str, Any]:
    """What the module holds: its version, target and address size, and for
    each function its parameters, instruction count and memory instructions
    (by space, access and width).  ``items`` may come one at a time
    (``ptx.parse_items``): nothing of a function is kept once it is counted."""
    from gpusafe_instrument import ptx  # with the PTX front end, as above

    functions = []
    version: str | None = None
    target: list[str] = []
    address_size = 32
    for item in items:
        if isinstance(item, ptx.Function):
            if item.body is not None:
                functions.append(_function_summary(item))
        elif isinstance(item, ptx.Version) and version is None:
            version = item.text
        elif isinstance(item, ptx.Target) and not target:
            target = list(item.targets)
        elif isinstance(item, ptx.AddressSize):
            address_size = item.bits
    return {
        "file": source,
        "version": version,
        "target": target,
        "address_size": address_size,
        "functions": functions,
    }


def _function_summary(fn: ptx.Function) -> dict[str, Any]:
    from gpusafe_instrument import query

    types = query.register_types(fn)
    counts: Counter[tuple[str, str, int]] = Counter()
    instructions = 0
    for instr in query.instructions(fn):
        instructions += 1
        try:
            accesses = query.instruction_accesses(instr, None, types)
        except query.Unsupported:
            continue
        counts.update((a.space, a.kind.value, a.width) for a in accesses)
    return {
        "name": fn.name,
        "kind": "kernel" if fn.is_kernel else "device function",
        "params": [
            {"name": p.name, "type": p.type, "size": p.size, "align": p.alignment}
            for p in fn.params
        ],
        "returns": None if fn.returns is None else [
            {"name": p.name, "type": p.type, "size": p.size, "align": p.alignment}
            for p in fn.returns
        ],
        "instructions": instructions,
        "memory": [
            {"space": s, "access": k, "width": w, "count": n}
            for (s, k, w), n in sorted(counts.items())
        ],
    }


def render_summary(summary: dict[str, Any], console: Console) -> None:
    console.print(
        f"[bold]{summary['file']}[/]: PTX {summary['version']}, "
        f"target {', '.join(summary['target'])}, {summary['address_size']}-bit addresses, "
        f"{len(summary['functions'])} function(s)"
    )
    for fn in summary["functions"]:
        console.print()
        console.print(
            f"[bold cyan]{fn['kind']}[/] [bold]{fn['name']}[/] "
            f"({fn['instructions']} instructions)"
        )
        params = Table(title=None, show_edge=False, box=None, pad_edge=False)
        for col in ("parameter", "type", "size", "align"):
            params.add_column(col, justify="right" if col in ("size", "align") else "left")
        for p in fn["params"]:
            params.add_row(p["name"], p["type"], str(p["size"]), str(p["align"]))
        if fn["params"]:
            console.print(params)
        else:
            console.print("  no parameters")
        mem = Table(show_edge=False, box=None, pad_edge=False)
        for col in ("space", "access", "width", "count"):
            mem.add_column(col, justify="right" if col in ("width", "count") else "left")
        for row in fn["memory"]:
            mem.add_row(row["space"], row["access"], f"{row['width']} B", str(row["count"]))
        if fn["memory"]:
            console.print(mem)
        else:
            console.print("  no memory instructions")
