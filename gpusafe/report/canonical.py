"""The canonical text of a JSON report: two-space indent, short containers
on one line.  Deterministic, so a saved report re-renders to the same bytes."""

from __future__ import annotations

import json
from typing import Any

_INLINE_WIDTH = 76


def _dump(obj: Any, level: int) -> str:
    flat = json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(obj, (dict, list)) or not obj:
        return flat
    if len(flat) + 2 * level <= _INLINE_WIDTH and _depth(obj) <= 2:
        return flat
    pad = "  " * (level + 1)
    if isinstance(obj, dict):
        items = [
            f"{pad}{json.dumps(k, ensure_ascii=False)}: {_dump(v, level + 1)}"
            for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    items = [f"{pad}{_dump(v, level + 1)}" for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"


def _depth(obj: Any) -> int:
    if isinstance(obj, dict):
        return 1 + max((_depth(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((_depth(v) for v in obj), default=0)
    return 0


def canonical_json(obj: Any) -> str:
    return _dump(obj, 0)
