"""Sharing cuda-python's own types with the CPU device's API surfaces.

``gpusafe.cpu.driver`` and ``gpusafe.cpu.runtime`` re-export every type, enum
and constant of the cuda-python module they stand in for, so a program's
``isinstance`` checks and enum comparisons hold against either.
"""

from __future__ import annotations

import types
from typing import Any


def reexport(real: types.ModuleType, prefix: str, namespace: dict[str, Any]) -> frozenset[str]:
    """Copy ``real``'s non-function public names into ``namespace``; return the
    names of its API functions (those starting with ``prefix``)."""
    functions = frozenset(
        name for name, obj in vars(real).items()
        if name.startswith(prefix) and callable(obj) and not isinstance(obj, type)
    )
    for name, obj in vars(real).items():
        if name.startswith("_") or name in functions or isinstance(obj, types.ModuleType):
            continue
        namespace[name] = obj
    return functions
