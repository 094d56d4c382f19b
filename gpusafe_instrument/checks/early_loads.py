"""Global loads moved above the filling of a local array (issue 14).

ptxas keeps a small local array in registers when it can, dynamic indexing
included (a dynamic read becomes a chain of selects).  When a checked global
load sits between the stores that fill such an array and the loads that read
it back, the check's slow path ends the block for ptxas, so every element is
computed in front of the check and held in a register across its slow path:
``local_array_dynamic_index`` (a 16-int table filled from one value, then
read at an index loaded from global memory) takes 16 registers unchecked and
30 checked.  Without checks ptxas issues that index load first.

So, before the checks are planned, such a load moves up its block over the
array's stores and over the arithmetic whose results only those stores use,
taking along the arithmetic that computes its address.  It moves only where
the array is read back after it in the same block, and it passes nothing
else: not another load (loaded values would then cross more slow paths), not
arithmetic whose result is used elsewhere (its operands would cross the slow
path instead).  Hoisting every global load as far as it could legally go was
measured first: it saved this kernel but cost up to 10 registers elsewhere
(``local_buckets`` +10, ``pointer_chase`` +4..+6), worse overall.

What a move needs to be legal: the load is a weak ``ld.global`` (no volatile,
scope or ordering modifier); it passes stores to local memory (a global
address cannot reach local memory) and arithmetic; neither the load nor an
instruction moving with it writes a register an instruction it passes reads
or writes, or reads one that instruction writes (a predicated instruction
also reads what it writes: where its guard is false the old value stays).

Each moved instruction keeps its ``.loc`` (one is written in front of it where
the ``.loc`` in effect differs, the region's last one after the region, and
any place an ``inlined_at`` names before the ``.loc`` naming it, as ptxas
requires), so reports name the same source line; its PTX line
(``Instruction.line``) goes with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..nodes import Block, Instruction, Loc, Statement
from ..provenance import defs, operand_registers

_ARITHMETIC = frozenset({
    "add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg",
    "min", "max", "popc", "clz", "bfind", "fns", "brev", "bfe", "bfi", "bmsk", "szext",
    "and", "or", "xor", "not", "cnot", "lop3", "shf", "shl", "shr", "prmt", "selp", "slct",
    "set", "setp", "mov", "cvt", "cvta", "fma", "rcp", "sqrt", "rsqrt", "sin", "cos", "lg2",
    "ex2", "tanh", "testp", "copysign", "dp4a", "dp2a",
})
"""Opcodes that only compute registers from registers."""

_CHANGING = ("%clock", "%globaltimer", "%pm", "%smid", "%warpid", "%nwarpid")
"""Special registers whose value depends on when they are read."""

_ORDERED = frozenset({"volatile", "relaxed", "acquire", "release", "mmio", "cv", "sys",
                      "gpu", "cta", "cluster"})
"""Memory modifiers that order an access against others."""

# what an instruction is to this pass
_OTHER, _ALU, _LOAD_GLOBAL, _LOAD_LOCAL, _STORE_LOCAL = range(5)


def hoist_loads(body: list[Statement]) -> list[Statement] | None:
    """Move the global loads of a function body that a local array's filling
    holds back (in place); the body as it came when something moved, else
    None.  A region is a run of instructions and ``.loc``s: labels, nested
    ``{ }`` blocks and anything else end one."""
    if not any(type(s) is Instruction and s.op == "st" and ".local" in s.opcode for s in body):
        return None  # no local array filled here (most functions): nothing to look at
    reads: Counter[str] = Counter()
    _count_reads(body, reads)
    out: list[Statement] = []
    run: list[Statement] = []
    locs = _Locs()
    moved = False

    def flush() -> None:
        nonlocal moved
        new = _region(run, locs, reads) if len(run) > 1 else None
        for t in run:
            locs.went_by(t)
        out.extend(run if new is None else new)
        moved = moved or new is not None
        run.clear()

    for s in body:
        if type(s) is Instruction or type(s) is Loc:
            run.append(s)
            continue
        flush()
        out.append(s)
        locs.went_by(s)
    flush()
    if not moved:
        return None
    original = list(body)
    body[:] = out
    return original


def _count_reads(stmts: list[Statement], reads: Counter[str]) -> None:
    for s in stmts:
        if type(s) is Instruction:
            reads.update(_Item(s, None).reads)
        elif type(s) is Block:
            _count_reads(s.statements, reads)


class _Locs:
    """The ``.loc``s written so far: the one in effect, and every place one
    named (ptxas takes an ``inlined_at`` place only once a ``.loc`` before
    it has named it)."""

    def __init__(self) -> None:
        self.current: Loc | None = None
        self.named: set[tuple[int, int, int]] = set()

    def went_by(self, s: Statement) -> None:
        if type(s) is Loc:
            self.current = s
            self.named.add((s.file, s.line_no, s.column))
        elif type(s) is Block:
            for t in s.statements:
                self.went_by(t)


class _Item:
    """One instruction of a region, with the ``.loc`` in effect at it and the
    registers it reads and writes."""

    __slots__ = ("instr", "loc", "reads", "writes", "kind")

    def __init__(self, instr: Instruction, loc: Loc | None) -> None:
        self.instr = instr
        self.loc = loc
        self.writes = frozenset(defs(instr))
        reads: set[str] = set()
        for o in instr.operands[1:] if self.writes else instr.operands:
            operand_registers(o, reads)
        if instr.guard is not None:
            reads.add(instr.guard.register)
            reads |= self.writes
        self.reads = frozenset(reads)
        self.kind = _kind(instr, reads)


def _kind(instr: Instruction, reads: set[str]) -> int:
    mods = instr.modifiers
    if "cc" in mods or any(r.startswith(_CHANGING) for r in reads):
        return _OTHER
    if instr.op in _ARITHMETIC:
        return _ALU
    if instr.op not in ("ld", "st") or any(m in _ORDERED for m in mods):
        return _OTHER
    if instr.op == "st":
        return _STORE_LOCAL if "local" in mods else _OTHER
    if "global" in mods:
        return _LOAD_GLOBAL
    return _LOAD_LOCAL if "local" in mods else _OTHER


def _independent(x: _Item, y: _Item) -> bool:
    """Whether ``x`` may be written above ``y``: neither touches a register
    in an order-dependent way (:func:`_clash`), nor does ``y`` compute one
    ``x`` reads."""
    return not (y.writes & x.reads) and not _clash(x, y)


def _clash(x: _Item, y: _Item) -> bool:
    """Whether ``x`` above ``y`` would change what either computes, ``y``
    computing one of ``x``'s operands left aside (that ``y`` may come along):
    one writes what the other writes, or ``x`` writes what ``y`` reads; or
    ``y`` would print under ``x``'s ``.loc`` when it has none (none can be
    undone)."""
    return bool(y.writes & x.writes or y.reads & x.writes) \
        or (y.loc is None and x.loc is not None)


def _region(stmts: list[Statement], locs: _Locs, reads: Counter[str]) -> list[Statement] | None:
    """The region with its held-back loads moved up, or None when none moves."""
    items: list[_Item] = []
    loc = locs.current
    for s in stmts:
        if type(s) is Loc:
            loc = s
        else:
            items.append(_Item(s, loc))
    moved = False
    read_back: set[str] = set()  # values read from local memory, and computed from them
    for it in items:
        if it.kind == _LOAD_LOCAL or (it.kind == _ALU and it.reads & read_back):
            read_back |= it.writes
    for load in [it for it in items if it.kind == _LOAD_GLOBAL]:
        at = items.index(load)
        if not any(it.kind == _LOAD_LOCAL for it in items[at + 1:]):
            continue
        trial = list(items)
        filling = _Filling(reads, read_back)
        new = _raise(trial, at, filling.takes)
        if new < at and filling.stores:
            items = trial
            moved = True
    return _written(stmts, items, locs, loc) if moved else None


class _Filling:
    """What a load may pass: the stores of a local array and the arithmetic
    whose results only those (and such arithmetic) read, met going up; not an
    update of the array (a value read back from local memory, or computed
    from one, then stored), which would hold the value read across the check
    instead."""

    def __init__(self, reads: Counter[str], read_back: set[str]) -> None:
        self.reads = reads  # reads of each register in the whole function
        self.read_back = read_back  # values read back from local memory (or computed from)
        self.inside: Counter[str] = Counter()  # reads by what the load passed
        self.passed: set[int] = set()  # (the load meets again what its address passed)
        self.stores = 0

    def takes(self, y: _Item) -> bool:
        if id(y) in self.passed:
            return True
        if y.reads & self.read_back:
            return False
        if y.kind == _STORE_LOCAL:
            self.stores += 1
        elif not (y.kind == _ALU and y.writes and y.instr.guard is None
                  and all(self.inside[r] == self.reads[r] for r in y.writes)):
            return False
        self.inside.update(y.reads)
        self.passed.add(id(y))
        return True


def _raise(items: list[_Item], at: int, passes: Callable[[_Item], bool]) -> int:
    """Move ``items[at]`` up over what ``passes`` takes, with the arithmetic
    computing its operands (each moving the same way); its new index."""
    x = items[at]
    j = at
    while j > 0:
        y = items[j - 1]
        if _independent(x, y) and passes(y):
            items[j - 1], items[j] = x, y
            j -= 1
            continue
        # y computes one of x's operands and conflicts in no other way: it
        # comes along if it can move itself
        if y.kind == _ALU and y.writes & x.reads and not _clash(x, y):
            k = _raise(items, j - 1, passes)
            if k == j - 1:
                break
            continue
        break
    return j


def _written(stmts: list[Statement], items: list[_Item], locs: _Locs,
             last: Loc | None) -> list[Statement]:
    """The region's statements in the new order, with the ``.loc``s that keep
    each instruction's source place (``last``: the one in effect after it)."""
    own = {(t.file, t.line_no, t.column): t for t in stmts if type(t) is Loc}
    named = set(locs.named)
    out: list[Statement] = []

    def write(t: Loc) -> None:
        if t.inlined_at is not None and t.inlined_at not in named:
            write(own[t.inlined_at])  # valid PTX named it before t
        out.append(t)
        named.add((t.file, t.line_no, t.column))

    in_effect = locs.current
    for it in items:
        if it.loc is not None and it.loc is not in_effect:
            write(it.loc)
            in_effect = it.loc
        out.append(it.instr)
    for t in own.values():  # a later inlined_at may name one no instruction used
        if (t.file, t.line_no, t.column) not in named:
            write(t)
            in_effect = t
    if last is not in_effect:
        assert last is not None
        write(last)
    return out
