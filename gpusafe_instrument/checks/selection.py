"""Checking some kernels of a module and leaving the others as they were.

Used for the kernel filter (``gpusafe run --kernel-filter``) and for kernels
the pass cannot check: a kernel left alone keeps calling the original,
unchecked device functions; the checked kernels call checked copies of the
device functions they reach, named ``__gpusafe_<name>``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from .. import query
from ..nodes import Block, Function, Instruction, Module, Statement, Symbol
from ..runtime import PREFIX


def calls_in(stmts: list[Statement]) -> set[str]:
    """The functions ``stmts`` call directly."""
    out: set[str] = set()
    for st in stmts:
        if type(st) is Instruction and st.op == "call":
            t = query.call_target(st)
            if t is not None:
                out.add(t)
        elif type(st) is Block:
            out |= calls_in(st.statements)
    return out


def _retarget(stmts: list[Statement], names: dict[str, str]) -> None:
    """Point every direct call in ``stmts`` to a function in ``names`` at its new name."""
    for i, st in enumerate(stmts):
        if type(st) is Instruction and st.op == "call":
            t = query.call_target(st)
            if t in names:
                ops = tuple(Symbol(names[t]) if isinstance(o, Symbol) and o.name == t else o
                            for o in st.operands)
                stmts[i] = Instruction(st.opcode, ops, st.guard, line=st.line)
        elif type(st) is Block:
            _retarget(st.statements, names)


def split_selected(module: Module, select: Callable[[str], bool] | None,
                   ) -> tuple[set[str] | None, dict[str, str]]:
    """Add a copy ``__gpusafe_<f>`` of every device function a selected kernel
    reaches by direct calls (a declaration too, for forward declarations),
    right after the original, with no linkage of its own; point the selected
    kernels' and the copies' calls at the copies.  The originals and the
    unselected kernels stay untouched.  Returns (names of the functions to
    instrument, copy name -> original name); (None, {}) when ``select`` is
    None (every kernel is checked, in place)."""
    if select is None:
        return None, {}
    defined = {f.name: f for f in module.functions if f.body is not None and not f.is_kernel}
    kernels = [f for f in module.functions
               if f.is_kernel and f.body is not None and select(f.name)]
    reach: set[str] = set()
    work = [c for k in kernels for c in calls_in(k.body or [])]
    while work:
        name = work.pop()
        if name in reach or name not in defined:
            continue
        reach.add(name)
        work.extend(calls_in(defined[name].body or []))
    names = {n: PREFIX + n for n in reach}
    items: list = []
    for item in module.items:
        items.append(item)
        if isinstance(item, Function) and not item.is_kernel and item.name in names:
            dup = copy.deepcopy(item)
            dup.name = names[item.name]
            dup.linkage = ()
            dup.header_raw = None
            dup.lead = "\n"
            if dup.body is not None:
                _retarget(dup.body, names)
            items.append(dup)
    module.items[:] = items
    for k in kernels:
        _retarget(k.body or [], names)
    return {k.name for k in kernels} | set(names.values()), {v: k for k, v in names.items()}


def drop_unused_copies(module: Module, copies: set[str],
                       known: dict[str, set[str]] | None = None) -> None:
    """Remove copies (and their declarations) that no kernel or other function
    left in the module calls; ``known``: the calls of functions whose body
    is no longer statements (printed already), by name."""
    known = known or {}
    while True:
        called: set[str] = set()
        for f in module.functions:
            if f.name in known:
                called |= known[f.name]
            elif f.body is not None:
                called |= calls_in(f.body)
        dead = {f.name for f in module.functions if f.name in copies and f.name not in called}
        if not dead:
            return
        module.items[:] = [i for i in module.items
                           if not (isinstance(i, Function) and i.name in dead)]
        copies -= dead
