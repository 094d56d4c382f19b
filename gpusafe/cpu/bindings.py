"""Sharing cuda-python's own types and conventions with the CPU device's API
surfaces (:mod:`gpusafe.cpu.driver`, :mod:`gpusafe.cpu.runtime`).

Both re-export every type, enum and constant of the cuda-python module they
stand in for, so a program's ``isinstance`` checks and enum comparisons hold
against either; both mark their implementations of cuda-python functions the
same way, list them the same way and name a missing one the same way.
"""

from __future__ import annotations

import types
from typing import Any


def api_functions(real: types.ModuleType, prefix: str) -> frozenset[str]:
    """The names of ``real``'s API functions (those starting with ``prefix``)."""
    return frozenset(
        name for name, obj in vars(real).items()
        if name.startswith(prefix) and callable(obj) and not isinstance(obj, type)
    )


def reexport(real: types.ModuleType, prefix: str, namespace: dict[str, Any]) -> frozenset[str]:
    """Copy ``real``'s non-function public names into ``namespace``; return the
    names of its API functions (those starting with ``prefix``)."""
    functions = api_functions(real, prefix)
    for name, obj in vars(real).items():
        if name.startswith("_") or name in functions or isinstance(obj, types.ModuleType):
            continue
        namespace[name] = obj
    return functions


def implements(wrapper: Any, real: types.ModuleType, name: str, surface: str) -> None:
    """Mark ``wrapper`` as the CPU device's ``name`` of ``real`` (its first doc
    line is the real function's)."""
    wrapper.implements = name
    wrapper.__doc__ = (getattr(real, name).__doc__ or "").split("\n")[0] + \
        f"\n\n(gpusafe CPU device implementation; see {surface}.)"


def implemented(cls: type) -> frozenset[str]:
    """The cuda-python functions a surface class implements."""
    return frozenset(
        name for name in dir(cls) if getattr(getattr(cls, name), "implements", None) == name
    )


def missing(owner: str, name: str, functions: frozenset[str], real: str, listed: str) -> str:
    """The AttributeError message for ``owner.name``: a function of ``real`` the
    CPU device does not implement gets a message that says so."""
    if name in functions:
        return (f"{owner} has no attribute {name!r}: {name} is a {real} function the "
                f"gpusafe CPU device does not implement (implemented: see {listed})")
    return f"{owner} has no attribute {name!r}"
