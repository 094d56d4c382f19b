"""Pointer arguments that carry the window of a local variable.

A kernel that passes the address of one of its per-thread (``.local``)
arrays to a device function (``int a[8]; fill(a, n);``) gives the callee a
pointer whose bounds only the caller knows: inside ``fill`` the pointer is a
parameter, of unknown provenance, and a write past the array would be checked
for its alignment only (local memory has no allocation table to look in).

So the bounds travel with the pointer.  A device function's 8-byte
parameter *carries a window* when some checked call site passes it a pointer
derived from a local variable of the caller, or the caller's own parameter
that carries a window.  Every call site of such a function then passes, in
two hidden parameters after the launch context (``__gpusafe_wlo<k>``,
``__gpusafe_whi<k>``), the generic ``[low, high)`` of that variable, or
``0, 0`` when the argument is not known to point into one.  Inside the
callee, an access through the parameter (``Mode.ARGUMENT``) is checked
against the window: a ``.local`` access by its fast filter, a generic one by
the runtime (which tells a local address from others with ``isspacep.local``;
a global or shared address is judged as any pointer of unknown provenance).

A parameter no call site passes a local pointer to carries no window and
changes nothing: the callee's signature and checks stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .. import provenance as prov
from .. import query
from ..nodes import Address, ArgumentList, Instruction, Register, Symbol
from .planning import FunctionPlan
from .selection import calls_in

WindowSource = Union[prov.VarRoot, int]
"""Where an argument's window comes from: a local variable of the caller, or
the caller's own parameter of that index (when it carries a window)."""


@dataclass(frozen=True)
class CallSite:
    """A direct call, and where the window of each argument would come from."""

    instr: Instruction
    callee: str
    sources: tuple[WindowSource | None, ...]


def _source(value: prov.Value | None) -> WindowSource | None:
    if not isinstance(value, prov.Ptr):
        return None
    root = value.root
    if isinstance(root, prov.VarRoot) and root.space == "local" and root.size is not None:
        return root
    if isinstance(root, prov.ArgRoot):
        return root.index
    return None


def _arguments(instr: Instruction) -> tuple:
    """The argument list of a direct call (after the callee's name)."""
    ops = instr.operands
    for i, o in enumerate(ops):
        if isinstance(o, Symbol):
            nxt = ops[i + 1] if i + 1 < len(ops) else None
            return nxt.items if isinstance(nxt, ArgumentList) else ()
    return ()


def call_sites(plan: FunctionPlan, callees: set[str]) -> list[CallSite]:
    """The calls of ``plan``'s function to ``callees``, with each argument's
    window source: the provenance of the register stored to the argument's
    ``.param`` variable in the call sequence (or passed directly)."""
    out: list[CallSite] = []
    stored: dict[tuple[tuple[int, ...], str], prov.Value | None] = {}
    for path, instr, state in plan.analyze().states():
        op = instr.op
        if op == "st" and "param" in instr.modifiers and len(instr.operands) == 2:
            dst, val = instr.operands
            if isinstance(dst, Address) and isinstance(dst.base, Symbol) and dst.offset == 0:
                value = state.get(val.name) if isinstance(val, Register) else None
                stored[(path[:-1], dst.base.name)] = value
        elif op == "call":
            target = query.call_target(instr)
            if target not in callees:
                continue
            sources = []
            for arg in _arguments(instr):
                if isinstance(arg, Symbol):
                    value = stored.get((path[:-1], arg.name))
                elif isinstance(arg, Register):
                    value = state.get(arg.name)
                else:
                    value = None
                sources.append(_source(value))
            out.append(CallSite(instr, target, tuple(sources)))  # type: ignore[arg-type]
    return out


def plan_windows(plans: list[FunctionPlan]) -> dict[str, list[CallSite]]:
    """Decide which parameters carry a window (sets ``FunctionPlan.windows``)
    and return the call sites of each caller that passes windows, by caller.

    A fixed point over the call graph: a parameter carries a window when a
    call site passes it a local variable's pointer, or the caller's own
    parameter that carries one."""
    by_name = {fp.fn.name: fp for fp in plans}
    pointer_takers = {name for name, fp in by_name.items()
                      if not fp.kernel and fp.function_params}
    if not pointer_takers:
        return {}
    sites: dict[str, list[CallSite]] = {}
    for fp in plans:
        if calls_in(fp.fn.body or []) & pointer_takers:
            found = call_sites(fp, pointer_takers)
            if found:
                sites[fp.fn.name] = found
    changed = True
    while changed:
        changed = False
        for caller, calls in sites.items():
            carried = by_name[caller].windows
            for call in calls:
                callee = by_name[call.callee]
                for k, source in enumerate(call.sources):
                    if source is None or k in callee.windows \
                            or k not in callee.function_params.values():
                        continue
                    if isinstance(source, int) and source not in carried:
                        continue
                    callee.windows.add(k)
                    changed = True
    return {caller: [c for c in calls if by_name[c.callee].windows]
            for caller, calls in sites.items()}
