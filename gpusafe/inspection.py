"""``gpusafe inspect``: what a PTX module contains, as data and as a table.

The summary is built once as plain data (``module_summary``); the terminal
table and the JSON output are both rendered from it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from instrument import ptx, query


def module_summary(module: ptx.Module, source: str) -> dict[str, Any]:
    functions = []
    for fn in module.functions:
        if fn.body is None:
            continue
        counts = Counter(
            (a.space, a.kind.value, a.width) for a in query.memory_accesses(module, fn)
        )
        functions.append({
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
            "instructions": sum(1 for _ in query.instructions(fn)),
            "memory": [
                {"space": s, "access": k, "width": w, "count": n}
                for (s, k, w), n in sorted(counts.items())
            ],
        })
    version = module.version
    target = module.target
    return {
        "file": source,
        "version": version.text if version else None,
        "target": list(target.targets) if target else [],
        "address_size": module.address_size,
        "functions": functions,
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
