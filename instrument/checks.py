"""The bounds-check pass: PTX in, checked PTX and a site table out.

    result = instrument(ptx_text)       # or a parsed Module
    result.ptx      # the checked module, runtime linked in
    result.sites    # SiteTable: one Site per check, and each kernel's launch ABI
    result.stats    # per-function FunctionStats

What happens to each memory instruction (``query.memory_access``):

* ``ld.param`` / ``ld.const`` are not checked (the statistics say how many).
* Global, shared, local and generic accesses get a *fast filter* right before
  them, chosen by the provenance of the address (``instrument.provenance``):

  - **root** (derived from a kernel pointer parameter): the offset ``R`` from
    the parameter's value is compared with a limit loaded once per thread from
    the launch context: ``setp.ge.u64 p, R, lim; @p bra slow``.  When the
    offset is not held in one register, ``R`` is computed with one ``sub``.
  - **window** (derived from a ``.shared``/``.local``/``.global`` variable):
    ``sub t, addr, var; setp.gt t, size - end; @p bra slow`` against the
    variable's compile-time extent; dynamic shared memory against the launch's
    dynamic shared size.  Constant in-bounds offsets need no check at all.
  - **lookup** (unknown provenance, global or generic): the address is compared
    with a per-thread cache of the last allocation the runtime found; a miss
    calls the runtime, which searches the allocation table (generic addresses
    are classified there with ``isspacep``).
  - **alignment**: an offset not known to be a multiple of the access width
    adds ``and``/``setp.ne.or`` to the filter.

* A failing filter branches to the site's out-of-line *slow path* at the end of
  the function, which respects the instruction's guard, calls
  ``__gpusafe_check`` (the device runtime) to decide precisely and record a
  violation, then either jumps back to perform the access or skips it: a
  skipped load or atomic has every destination register zeroed.

Launch context convention: every ``.entry`` gets one hidden trailing ``.u64``
parameter (``__gpusafe_ctx``) holding the address of the launch context
(``instrument/layout.py``); every ``.func`` defined in the module that checks
an access, or calls one that does, gets the same trailing parameter and each
of its call sites passes the caller's.  Functions declared but not defined in
the module (``vprintf``, ``malloc``, other modules' functions) keep their
signature and are not checked.  Indirect calls to functions that need the
context are refused.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from . import cfg as cfg_mod
from . import layout, ptx, query
from . import provenance as prov
from .kinds import AccessKind
from .nodes import (
    Address,
    ArgumentList,
    Block,
    Function,
    Immediate,
    Instruction,
    Loc,
    Module,
    Param,
    Register,
    RegisterDecl,
    Statement,
    Symbol,
    Variable,
    Vector,
)
from .runtime import CHECK_FUNCTION, CONTEXT_PARAM, PREFIX, is_instrumented, link
from .sites import KernelInfo, RootInfo, SiteTable, SlotInfo

CHECKED_SPACES = ("global", "shared", "local", "generic")
MERGE_END_LIMIT = 64
PARAM_LIMITS_MAX = 0
"""At most this many check-slot limits may travel in the hidden kernel
parameter after the context pointer (the rest are read from the launch
context).  Zero keeps the documented ABI: one hidden trailing ``.u64``.
Carrying up to 64 limits there measured 1.390 against 1.413 (geometric mean
of ``bench/overhead.py``); not worth breaking the contract every launcher
(and the native interposer to come) relies on."""
PARAM_SPACE = 4096
"""Kernel parameter space every target accepts; the hidden parameter never
makes a kernel's parameters exceed it."""
"""Accesses through one root whose end offset is at most this share one check
slot (the largest end); a larger end offset gets a slot of its own."""


class InstrumentError(Exception):
    """A construct the pass cannot check; names the function, the PTX line and
    the instruction."""

    def __init__(self, message: str, function: str | None = None,
                 ptx_line: int | None = None, instruction: str | None = None) -> None:
        self.message = message
        self.function = function
        self.ptx_line = ptx_line
        self.instruction = instruction
        where = ""
        if function is not None:
            where += f"in {function}"
        if ptx_line:
            where += f", PTX line {ptx_line}"
        text = f"{where}: {message}" if where else message
        if instruction:
            text += f"\n    {instruction}"
        super().__init__(text)


@dataclass
class FunctionStats:
    name: str
    kind: str  # "kernel" | "function"
    memory_instructions: int = 0
    unchecked: Counter = field(default_factory=Counter)  # space -> count (param, const)
    checks: Counter = field(default_factory=Counter)  # root/window/lookup/alignment
    generic_checks: int = 0  # of the checks, those on generic addresses
    removed: Counter = field(default_factory=Counter)  # reason -> count
    slots: int = 0

    def to_dict(self) -> dict:
        return {
            "name": self.name, "kind": self.kind,
            "memory_instructions": self.memory_instructions,
            "unchecked": dict(self.unchecked), "checks": dict(self.checks),
            "generic_checks": self.generic_checks, "removed": dict(self.removed),
            "slots": self.slots,
        }


@dataclass
class InstrumentResult:
    ptx: str
    sites: SiteTable
    stats: dict[str, FunctionStats]
    module: Module


# --------------------------------------------------------------------------
# small builders


def _op(x) -> object:
    if isinstance(x, (Register, Symbol, Immediate, Address, Vector, ArgumentList)):
        return x
    if isinstance(x, int):
        return Immediate.integer(x)
    if isinstance(x, str) and x.startswith("%"):
        return Register(x)
    if isinstance(x, str):
        return Symbol(x)
    raise TypeError(x)


def I(opcode: str, *operands, guard: ptx.Guard | None = None) -> Instruction:  # noqa: E743
    return Instruction(opcode, tuple(_op(o) for o in operands), guard)


def _bits_of(types: dict[str, str], reg: str) -> int:
    return prov.reg_bits(types, reg)


# --------------------------------------------------------------------------
# planning


@dataclass
class _Access:
    path: tuple[int, ...]
    instr: Instruction
    access: query.MemoryAccess
    value: prov.Value | None  # provenance of the base register (None: no register)
    site: int = -1
    mode: str = ""  # root / window / lookup / alignment / static / none
    root: int = -1
    fallback_root: int = -1  # root index whose value is subtracted (sub form)


@dataclass(frozen=True)
class _Cond:
    """The access may be bad when: R/C/F (root): its offset from root ``root``'s
    pointer (register ``reg``, the constant alone, or ``reg`` minus the pointer)
    plus [start, end) leaves the slot's limit; W (window): ``reg`` minus the
    variable ``root`` = (name, space, bits) plus [start, end) leaves the
    variable; A: ``reg`` + imm is not a multiple of ``align``."""

    form: str
    reg: str | None
    root: object
    align: int
    start: int
    end: int


@dataclass(eq=False)
class _Unit:
    """One fast filter of the function: a grouped region's or a standalone
    root/window access's.  ``pred``: the predicate register its filter leaves
    true when any of its conditions may hold (set when it is emitted, only for
    units other filters are dominated by); ``dom``: the unit whose predicate
    this one's filter reuses instead of computing its own."""

    index: int  # the top-level statement the filter is placed before
    accesses: list[_Access]
    region: bool
    conds: list[_Cond]
    dom: _Unit | None = None
    used: bool = False  # some other unit's filter reuses this one's predicate
    pred: str | None = None


@dataclass
class _Slot:
    roots: tuple[int, ...]
    end: int
    align: int


class _FunctionPass:
    def __init__(self, module: Module, fn: Function, module_vars: dict[str, prov.VarRoot],
                 sites: SiteTable, defined: set[str], display: str | None = None) -> None:
        self.module = module
        self.fn = fn
        self.display = display or fn.name  # the name reports use (a copy's original)
        self.sites = sites
        self.defined = defined
        self.kernel = fn.is_kernel
        self.stats = FunctionStats(self.display, "kernel" if self.kernel else "function")
        self.types = prov.register_types(fn)
        self.vars = dict(module_vars)
        for s in fn.body or []:
            if type(s) is Variable:
                root = prov.variable_root(s)
                if root is not None:
                    self.vars[s.name] = root
        self.kernel_params: dict[str, tuple[int, int]] = {}
        if self.kernel:
            self.kernel_params = {p.name: (i, p.size) for i, p in enumerate(fn.params)}
        self.accesses: list[_Access] = []
        self.roots: list[prov.ParamRoot] = []
        self.root_index: dict[prov.ParamRoot, int] = {}
        self.slots: list[_Slot] = []
        self.union: list[int] = []  # union-find over roots sharing an offset register
        self.graph: cfg_mod.CFG | None = None
        self.optimize = True
        self._deferred: list[Statement] = []
        self.needs_ctx = False
        self.calls: set[str] = set()
        self.label_n = 0
        self.extra_regs: dict[str, str] = {}  # name -> type
        self.var_forms: dict[tuple[str, str, int], str] = {}  # (var, space, bits) -> reg
        self.fallback_roots: set[int] = set()
        self.uses_cache = False
        self.uses_dyn = False
        self.hoisting = False  # fast_filter may hoist (off for the slow copies)
        self.loop_blocks: set[int] = set()
        self.in_loop = False  # the check being emitted runs inside a loop
        self.hoisted_limits: set[int] = set()  # slots whose limit the prologue loads
        self.param_limit_cap = 0
        self._loops: dict[int, set[int]] = {}
        self._defs_cache: dict[int, set[str]] = {}
        self._invariant: dict[int, tuple[int, str, list[_Cond]]] = {}
        if self.kernel:
            offs = _param_offsets(fn.params + [Param(CONTEXT_PARAM, ".u64")])
            room = (PARAM_SPACE - offs[-1] - 8) // 8
            self.param_limit_cap = max(0, min(PARAM_LIMITS_MAX, room))

    # -- analysis ---------------------------------------------------------

    def plan(self) -> None:
        fn = self.fn
        graph = cfg_mod.build(fn)
        self.graph = graph
        self._loops = graph.loops()
        for body in self._loops.values():
            self.loop_blocks |= body
        ctx = prov.AnalysisContext(self.kernel_params, self.vars, self.types)
        analysis = prov.analyze(fn, ctx, graph)
        locs = self._locations()
        for path, instr, state in analysis.states():
            if instr.op == "call":
                for o in instr.operands:
                    if isinstance(o, Symbol):
                        self.calls.add(o.name)
                        break
            access = query.memory_access(instr, locs.get(path))
            if access is None:
                if query.touches_memory_otherwise(instr):
                    raise InstrumentError(
                        f"'{instr.op}' reaches memory through an address operand and "
                        f"gpusafe cannot check it", self.display, instr.line, instr.canonical())
                continue
            self.stats.memory_instructions += 1
            if access.space not in CHECKED_SPACES:
                self.stats.unchecked[access.space] += 1
                continue
            if access.width <= 0:
                raise InstrumentError("cannot tell the width of this access", fn.name,
                                      instr.line, instr.canonical())
            base = access.address.base
            if isinstance(base, Register):
                value = state.get(base.name)
                if value is None:
                    value = (prov.UNKNOWN if _bits_of(self.types, base.name) == 64
                             else prov.Scalar(1))
            elif isinstance(base, Symbol):
                root = self.vars.get(base.name)
                if root is None:
                    raise InstrumentError(f"address of unknown symbol {base.name}", fn.name,
                                          instr.line, instr.canonical())
                value = prov.Ptr(root, root.space, None, 0, prov.MAX_ALIGN)
            else:
                value = None
            acc = _Access(path, instr, access, value)
            self._classify(acc)
            self.accesses.append(acc)
        sharing: dict[tuple[int, str], int] = {}
        for acc in self.accesses:
            v = acc.value
            if acc.mode == "root" and isinstance(v, prov.Ptr) and v.off_reg is not None:
                key = (graph.block_of[acc.path[0]], v.off_reg)
                if key in sharing:
                    a, b = self._find(sharing[key]), self._find(acc.root)
                    self.union[a] = b
                else:
                    sharing[key] = acc.root

    def _locations(self) -> dict[tuple[int, ...], query.SourceLocation]:
        files = self.module.files
        out: dict[tuple[int, ...], query.SourceLocation] = {}
        loc = None
        for i, s in enumerate(self.fn.body or []):
            if type(s) is Loc:
                loc = query.SourceLocation(files.get(s.file), s.line_no, s.column)
            elif type(s) is Instruction:
                if loc is not None:
                    out[(i,)] = loc
            elif type(s) is Block:
                for j, inner in enumerate(s.statements):
                    if type(inner) is Loc:
                        loc = query.SourceLocation(files.get(inner.file), inner.line_no,
                                                   inner.column)
                    elif type(inner) is Instruction and loc is not None:
                        out[(i, j)] = loc
        return out

    def _root(self, root: prov.ParamRoot) -> int:
        if root not in self.root_index:
            self.root_index[root] = len(self.roots)
            self.union.append(len(self.roots))
            self.roots.append(root)
        return self.root_index[root]

    def _group(self, root: int) -> tuple[int, ...]:
        """The roots checked together with ``root`` (they share offset registers)."""
        rep = self._find(root)
        return tuple(sorted(r for r in range(len(self.roots)) if self._find(r) == rep))

    def _find(self, r: int) -> int:
        while self.union[r] != r:
            self.union[r] = self.union[self.union[r]]
            r = self.union[r]
        return r

    def _slot(self, root: int, end: int, align: int) -> int:
        roots = self._group(root)
        for i, s in enumerate(self.slots):
            if s.roots == roots and s.align == align:
                if end <= MERGE_END_LIMIT and s.end <= MERGE_END_LIMIT:
                    s.end = max(s.end, end)
                    return i
                if s.end == end:
                    return i
        self.slots.append(_Slot(roots, end, align))
        return len(self.slots) - 1

    def _classify(self, acc: _Access) -> None:
        a = acc.access
        v = acc.value
        w = a.width
        imm = a.address.offset
        space = a.space
        if isinstance(v, prov.Ptr) and isinstance(v.root, prov.ParamRoot) \
                and v.space in ("global", "generic") and space in ("global", "generic"):
            acc.mode = "root"
            ridx = self._root(v.root)
            acc.root = ridx
            start = None if v.off_const is None else v.off_const + imm
            if start is None:
                acc.fallback_root = ridx
                self.fallback_roots.add(ridx)
            self._new_site(acc, "root", str(v.root))
            return
        if isinstance(v, prov.Ptr) and isinstance(v.root, prov.VarRoot) and (
                v.space == space or (space == "generic" and v.space == "generic")):
            root = v.root
            if v.off_const is not None and v.off_reg is None and root.size is not None:
                s = v.off_const + imm
                if 0 <= s and s + w <= root.size and root.align % w == 0 and s % w == 0:
                    acc.mode = "static"
                    self.stats.removed["static-in-bounds"] += 1
                    return
            acc.mode = "window"
            if root.size is None:
                self.uses_dyn = True
            self._new_site(acc, "window", root.name)
            return
        # unknown provenance
        if space == "local":
            if w == 1:
                acc.mode = "none"
                self.stats.removed["local-byte-unknown-frame"] += 1
                return
            acc.mode = "alignment"
            self._new_site(acc, "alignment", None)
            return
        acc.mode = "lookup"
        if space in ("global", "generic"):
            self.uses_cache = True
        self._new_site(acc, "lookup", None)

    def _new_site(self, acc: _Access, check: str, root: str | None) -> None:
        a = acc.access
        loc = a.location
        site = self.sites.add(
            function=self.display, ptx_line=acc.instr.line,
            file=loc.file if loc else None, line=loc.line if loc else None,
            column=loc.column if loc else None, instruction=acc.instr.canonical(),
            access=str(a.kind), width=a.width, space=a.space, check=check, root=root,
        )
        acc.site = site.id
        self.stats.checks[check] += 1
        if a.space == "generic":
            self.stats.generic_checks += 1
        self.needs_ctx = True

    # -- code generation ------------------------------------------------------

    def reg(self, name: str, type_: str) -> str:
        full = f"%__gs_{name}"
        self.extra_regs.setdefault(full, type_)
        return full

    def label(self, what: str) -> str:
        self.label_n += 1
        return f"$__gs_{what}{self.label_n}"

    def _var_form(self, root: prov.VarRoot, space: str, bits: int) -> str:
        key = (root.name, space, bits)
        if key not in self.var_forms:
            self.var_forms[key] = self.reg(f"v{len(self.var_forms)}", f".b{bits}")
        return self.var_forms[key]

    def _address_reg(self, acc: _Access, out: list[Statement], bits: int | None = None) -> tuple[str, int]:
        """A register holding the full address of ``acc`` (base + offset)."""
        addr = acc.access.address
        base = addr.base
        if isinstance(base, Register):
            b = _bits_of(self.types, base.name)
            if addr.offset == 0:
                return base.name, b
            t = self.reg("a", ".b64") if b == 64 else self.reg("a32", ".b32")
            out.append(I(f"add.u{b}", t, base.name, addr.offset))
            return t, b
        t = self.reg("a", ".b64")
        if isinstance(base, Symbol):
            out.append(I("mov.u64", t, base.name))
            if addr.offset:
                out.append(I("add.u64", t, t, addr.offset))
        else:
            out.append(I("mov.u64", t, addr.offset))
        return t, 64

    # A filter is a list of conditions, each true when the access may be bad;
    # conditions of several accesses merge (same register, same root or
    # variable: one compare covers the union of their offset ranges).

    def conditions(self, acc: _Access) -> list[_Cond]:
        a = acc.access
        w = a.width
        imm = a.address.offset
        v = acc.value
        base = a.address.base
        out: list[_Cond] = []
        if acc.mode == "root":
            assert isinstance(v, prov.Ptr)
            static_align = v.align % w == 0 and imm % w == 0
            align = w if static_align else 1
            if acc.fallback_root >= 0:
                assert isinstance(base, Register)
                out.append(_Cond("F", base.name, acc.root, align, imm, imm + w))
            else:
                s0 = v.off_const + imm
                if v.off_reg is None:
                    out.append(_Cond("C", None, acc.root, align, s0, s0 + w))
                else:
                    out.append(_Cond("R", v.off_reg, acc.root, align, s0, s0 + w))
            if not static_align and w > 1:
                out.append(self._align_cond(acc))
            return out
        if acc.mode == "lookup":
            assert isinstance(base, Register) and imm >= 0
            out.append(_Cond("L", base.name, None, 1, imm, imm + w))
            if w > 1:
                out.append(self._align_cond(acc))
            return out
        assert acc.mode == "window" and isinstance(v, prov.Ptr)
        root = v.root
        assert isinstance(root, prov.VarRoot)
        if not isinstance(base, Register):  # [var+imm] outside the variable
            return [_Cond("ALWAYS", None, None, 1, 0, 0)]
        bits = _bits_of(self.types, base.name)
        if v.off_reg is not None and v.off_const is not None:
            s0 = v.off_const + imm
            rbits = _bits_of(self.types, v.off_reg)
            out.append(_Cond("WR", v.off_reg, (root.name, v.space, rbits), 1, s0, s0 + w))
        else:
            out.append(_Cond("W", base.name, (root.name, v.space, bits), 1, imm, imm + w))
        if not (root.align % w == 0 and v.align % w == 0 and imm % w == 0) and w > 1:
            out.append(self._align_cond(acc))
        return out

    def _align_cond(self, acc: _Access) -> _Cond:
        a = acc.access
        base = a.address.base
        w = a.width
        name = base.name if isinstance(base, Register) else None
        imm = a.address.offset % w
        return _Cond("A", name, (imm, a.address.offset if name is None else 0), w, 0, 0)

    def merge(self, conds: list[_Cond]) -> list[_Cond]:
        out: dict[tuple, _Cond] = {}
        for c in conds:
            key = (c.form, c.reg, c.root if c.form != "R" else self._find(c.root), c.align)
            if c.form == "A":
                key = (c.form, c.reg, c.root, c.align)
            if key in out:
                m = out[key]
                out[key] = _Cond(m.form, m.reg, m.root, m.align, min(m.start, c.start),
                                 max(m.end, c.end))
            else:
                out[key] = c
        return list(out.values())

    def emit(self, conds: list[_Cond], slow: str | None, *, pred: str | None = None,
             seed: str | None = None) -> list[Statement]:
        """Instructions that branch to ``slow`` when any condition holds, or
        (``slow`` None) only set ``pred`` to whether any holds (then no
        condition may fail unconditionally: see :meth:`_constant_failure`).
        ``seed``: a predicate ORed in (the loop's hoisted invariant checks)."""
        p = pred or self.reg("p", ".pred")
        t64 = self.reg("t", ".b64")
        out: list[Statement] = []
        first = True
        lead = seed

        def setp(cmp: str, bits: int, a, b) -> None:
            nonlocal first
            if first and lead is None:
                out.append(I(f"setp.{cmp}.u{bits}", p, a, b))
            elif first:
                out.append(I(f"setp.{cmp}.or.u{bits}", p, a, b, lead))
            else:
                out.append(I(f"setp.{cmp}.or.u{bits}", p, a, b, p))
            first = False

        for c in conds:
            if c.form == "ALWAYS":
                return [I("bra.uni", slow)]
            if c.form in ("R", "C", "F"):
                if c.start < 0 and c.form == "C":
                    return [I("bra.uni", slow)]
                lim = self._limit(self._slot(c.root, c.end, c.align), out)
                if c.form == "C":
                    setp("eq", 64, lim, 0)
                    continue
                if c.form == "F":
                    out.append(I("sub.u64", t64, c.reg, self.reg(f"pv{c.root}", ".b64")))
                    x = t64
                else:
                    x = c.reg
                if c.start < 0:
                    setp("lt", 64, x, -c.start)
                setp("ge", 64, x, lim)
            elif c.form == "W":
                name, vspace, bits = c.root
                root = self.vars[name]
                vlo = self._var_form(root, vspace, bits)
                t = t64 if bits == 64 else self.reg("u", ".b32")
                out.append(I(f"sub.u{bits}", t, c.reg, vlo))
                if root.size is not None:
                    limit = root.size - max(c.end, 0)
                    if limit < 0:
                        return [I("bra.uni", slow)]
                    setp("gt", bits, t, limit)
                    if c.start < 0:
                        setp("lt", bits, t, -c.start)
                else:
                    dyn = self.reg("dyn", ".b64") if bits == 64 else self.reg("dyn32", ".b32")
                    end = max(c.end, 0)
                    out.append(I(f"add.u{bits}", t, t, end))
                    setp("gt", bits, t, dyn)
                    setp("lt", bits, t, end - min(c.start, 0))
            elif c.form == "WR":
                name, vspace, bits = c.root
                root = self.vars[name]
                if root.size is not None:
                    limit = root.size - max(c.end, 0)
                    if limit < 0:
                        return [I("bra.uni", slow)]
                    setp("gt", bits, c.reg, limit)
                    if c.start < 0:
                        setp("lt", bits, c.reg, -c.start)
                else:
                    t = t64 if bits == 64 else self.reg("u", ".b32")
                    dyn = self.reg("dyn", ".b64") if bits == 64 else self.reg("dyn32", ".b32")
                    end = max(c.end, 0)
                    out.append(I(f"add.u{bits}", t, c.reg, end))
                    setp("gt", bits, t, dyn)
                    setp("lt", bits, t, end - min(c.start, 0))
            elif c.form == "L":
                lo, hi = self.reg("uclo", ".b64"), self.reg("uchi", ".b64")
                out.append(I("sub.u64", t64, hi, c.end))
                setp("gt", 64, c.reg, t64)
                if c.start:
                    out.append(I("sub.u64", t64, lo, c.start))
                    setp("lt", 64, c.reg, t64)
                else:
                    setp("lt", 64, c.reg, lo)
            elif c.form == "A":
                imm, absolute = c.root
                if c.reg is None:
                    if (absolute % c.align) != 0:
                        return [I("bra.uni", slow)]
                    continue
                bits = _bits_of(self.types, c.reg)
                t = t64 if bits == 64 else self.reg("u", ".b32")
                addr = c.reg
                if imm:
                    addr = self.reg("a", ".b64") if bits == 64 else self.reg("a32", ".b32")
                    out.append(I(f"add.u{bits}", addr, c.reg, imm))
                out.append(I(f"and.b{bits}", t, addr, c.align - 1))
                setp("ne", bits, t, 0)
        if slow is None:
            return out if not first else []
        if first:
            return [I("bra", slow, guard=ptx.Guard(seed))] if seed is not None else []
        out.append(I("bra", slow, guard=ptx.Guard(p)))
        return out

    def _constant_failure(self, c: _Cond) -> bool:
        """Whether ``emit`` turns ``c`` into an unconditional branch (or nothing)."""
        if c.form == "ALWAYS":
            return True
        if c.form == "C":
            return c.start < 0
        if c.form in ("W", "WR"):
            root = self.vars[c.root[0]]
            return root.size is not None and root.size - max(c.end, 0) < 0
        if c.form == "A":
            return c.reg is None
        return c.form not in ("R", "F")

    # -- loop-invariant checks ----------------------------------------------

    def _loop_of(self, index: int) -> int | None:
        """The innermost loop (its header block) holding top-level statement ``index``."""
        assert self.graph is not None
        b = self.graph.block_of[index]
        best = None
        for h, body in self._loops.items():
            if b in body and (best is None or len(body) < len(self._loops[best])):
                best = h
        return best

    def _loop_defs(self, header: int) -> set[str]:
        if header not in self._defs_cache:
            assert self.graph is not None and self.fn.body is not None
            out: set[str] = set()
            for b in self._loops[header]:
                bb = self.graph.blocks[b]
                for i in range(bb.start, bb.end):
                    out |= _all_defs(self.fn.body[i])
            self._defs_cache[header] = out
        return self._defs_cache[header]

    def _preheader(self, header: int) -> int | None:
        """Index of the statement before which code runs once on entry to the
        loop: the end of the loop's only predecessor outside it."""
        assert self.graph is not None and self.fn.body is not None
        outside = [p for p in self.graph.blocks[header].predecessors
                   if p not in self._loops[header]]
        if len(outside) != 1:
            return None
        bb = self.graph.blocks[outside[0]]
        body = self.fn.body
        for i in range(bb.end - 1, bb.start - 1, -1):
            st = body[i]
            if type(st) is Instruction:
                return i if st.op in cfg_mod.TERMINATORS else bb.end
            if type(st) is Block:
                return bb.end
        return bb.end

    def _hoist(self, conds: list[_Cond], index: int) -> tuple[list[_Cond], str | None]:
        """Split a filter's conditions at top-level statement ``index``: those
        whose inputs the enclosing loop never writes are checked once before
        the loop into the loop's predicate (returned, to OR into the filter);
        the others stay."""
        if not self.optimize:
            return conds, None
        header = self._loop_of(index)
        if header is None:
            return conds, None
        at = self._preheader(header)
        if at is None:
            return conds, None
        written = self._loop_defs(header)
        keep, hoist = [], []
        for c in conds:
            if (c.form in ("R", "F", "W", "WR", "A", "C") and not self._constant_failure(c)
                    and (c.reg is None or c.reg not in written)):
                hoist.append(c)
            else:
                keep.append(c)
        if not hoist:
            return conds, None
        pred = self.reg(f"inv{header}", ".pred")
        self._invariant.setdefault(header, (at, pred, []))[2].extend(hoist)
        self.stats.removed["hoisted-out-of-loop"] += len(hoist)
        return keep, pred

    def _preheader_code(self) -> dict[int, list[Statement]]:
        out: dict[int, list[Statement]] = {}
        saved, self.in_loop = self.in_loop, True  # limits come from the prologue
        for at, pred, conds in self._invariant.values():
            code = self.emit(self.merge(conds), None, pred=pred)
            out.setdefault(at, []).extend(code)
        self.in_loop = saved
        return out

    def _limit(self, slot: int, out: list[Statement]) -> str:
        """The register holding check slot ``slot``'s limit.  Outside loops it
        is read from the hidden parameter right before the check (a constant-bank
        operand on the GPU; threads that never reach the check never read it);
        inside a loop, or when it lives in the launch context, the prologue
        reads it once."""
        lim = self.reg(f"lim{slot}", ".b64")
        if slot < self.param_limit_cap and not self.in_loop:
            out.append(I("ld.param.u64", lim, Address(Symbol(CONTEXT_PARAM), 8 + 8 * slot)))
        else:
            self.hoisted_limits.add(slot)
        return lim

    def _load_ctx(self) -> Statement:
        return I("ld.param.u64", self.reg("ctx", ".b64"), Address(Symbol(CONTEXT_PARAM)))

    def fast_filter(self, acc: _Access, slow: str, unit: _Unit | None = None) -> list[Statement]:
        """``unit``: the access's own unit when other filters reuse its
        predicate (it then gets a register of its own, named in ``unit.pred``)."""
        a = acc.access
        w = a.width
        out: list[Statement] = []
        if acc.mode in ("root", "window"):
            conds = self.merge(self.conditions(acc))
            seed = None
            if self.hoisting and len(acc.path) == 1:
                conds, seed = self._hoist(conds, acc.path[0])
            if unit is None:
                return self.emit(conds, slow, seed=seed)
            return self._emit_unit(unit, conds, slow, seed)
        p = self.reg("p", ".pred")
        t64 = self.reg("t", ".b64")
        if acc.mode == "lookup":
            if a.space not in ("global", "generic"):
                return [I("bra.uni", slow)]
            addr, bits = self._address_reg(acc, out)
            if bits != 64:
                return [I("bra.uni", slow)]
            lo, hi = self.reg("uclo", ".b64"), self.reg("uchi", ".b64")
            out.append(I("sub.u64", t64, hi, w))
            out.append(I("setp.gt.u64", p, addr, t64))
            out.append(I("setp.lt.or.u64", p, addr, lo, p))
            if w > 1:
                out.append(I("and.b64", t64, addr, w - 1))
                out.append(I("setp.ne.or.b64", p, t64, 0, p))
        else:
            assert acc.mode == "alignment"
            addr, bits = self._address_reg(acc, out)
            t = t64 if bits == 64 else self.reg("u", ".b32")
            out.append(I(f"and.b{bits}", t, addr, w - 1))
            out.append(I(f"setp.ne.b{bits}", p, t, 0))
        out.append(I("bra", slow, guard=ptx.Guard(p)))
        return out

    def slow_path(self, acc: _Access, slow: str, do: str, skip: str) -> list[Statement]:
        a = acc.access
        instr = acc.instr
        out: list[Statement] = [ptx.Label(slow)]
        if instr.guard is not None:
            g = instr.guard
            out.append(I("bra", skip, guard=ptx.Guard(g.register, not g.negated)))
        addr, bits = self._address_reg(acc, out)
        if bits != 64:
            a64 = self.reg("a", ".b64")
            out.append(I("cvt.u64.u32", a64, addr))
            addr = a64
        lo: object = 0
        hi: object = 0
        v = acc.value
        w = a.width
        if acc.mode == "root":
            assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.ParamRoot)
            how = layout.how(layout.MODE_ROOT, "global", a.space == "generic",
                             self.root_index[v.root])
        elif acc.mode == "window":
            assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.VarRoot)
            root = v.root
            lo, hi = self.reg("lo", ".b64"), self.reg("hi", ".b64")
            out.append(I("mov.u64", lo, root.name))
            if v.space == "generic":
                out.append(I(f"cvta.{root.space}.u64", lo, lo))
            if root.size is not None:
                out.append(I("add.u64", hi, lo, root.size))
            else:
                out.append(I("add.u64", hi, lo, self.reg("dyn", ".b64")))
            how = layout.how(layout.MODE_WINDOW, root.space, v.space == "generic")
        else:
            how = layout.how(layout.MODE_UNKNOWN, a.space, a.space == "generic")
        ctx = self.reg("ctx", ".b64")
        out.append(self._load_ctx())
        status = self.reg("st", ".b32")
        args = [(".b64", ctx), (".b64", addr), (".b64", lo), (".b64", hi), (".b32", w),
                (".b32", w), (".b32", acc.site), (".b32", how)]
        inner: list[Statement] = []
        names = []
        for i, (t, val) in enumerate(args):
            name = f"__gs_arg{i}"
            names.append(Symbol(name))
            inner.append(Variable(".param", t, name))
            inner.append(I(f"st.param{t}", Address(Symbol(name)), val))
        inner.append(Variable(".param", ".b8", "__gs_ret", align=8,
                              dims=(layout.CHECK_RESULT.size,)))
        inner.append(Instruction("call", (ArgumentList((Symbol("__gs_ret"),)),
                                          Symbol(CHECK_FUNCTION), ArgumentList(tuple(names)))))
        inner.append(I("ld.param.b32", status,
                       Address(Symbol("__gs_ret"), layout.CHECK_RESULT.offset("status"))))
        if acc.mode == "lookup" and a.space in ("global", "generic"):
            inner.append(I("ld.param.b64", self.reg("uclo", ".b64"),
                           Address(Symbol("__gs_ret"), layout.CHECK_RESULT.offset("low"))))
            inner.append(I("ld.param.b64", self.reg("uchi", ".b64"),
                           Address(Symbol("__gs_ret"), layout.CHECK_RESULT.offset("high"))))
        out.append(Block(inner))
        q = self.reg("q", ".pred")
        out.append(I("setp.eq.u32", q, status, 0))
        out.append(I("bra", do, guard=ptx.Guard(q)))
        out.extend(self._zero_destinations(instr))
        out.append(I("bra.uni", skip))
        return out

    def _zero_destinations(self, instr: Instruction) -> list[Statement]:
        if instr.op not in ("ld", "ldu", "atom"):
            return []
        first = instr.operands[0]
        regs = []
        if isinstance(first, Register):
            regs = [first]
        elif isinstance(first, Vector):
            regs = [r for r in first.items if isinstance(r, Register)]
        out: list[Statement] = []
        width = query._width(instr.modifiers)
        count = 1
        for m in instr.modifiers:
            if m in ("v2", "v4", "v8"):
                count = int(m[1:])
        elem = max(width // count, 1)
        for r in regs:
            t = self.types.get(r.name)
            size = ptx.type_size(t) if t else elem
            if t == ".pred":
                out.append(I("setp.ne.u32", r.name, 0, 0))
            elif size == 1:
                u = self.reg("u", ".b32")
                out.append(I("mov.u32", u, 0))
                out.append(I("cvt.u8.u32", r.name, u))
            else:
                out.append(I(f"mov.b{size * 8}", r.name, 0))
        return out

    def prologue(self) -> list[Statement]:
        out: list[Statement] = []
        ctx = self.reg("ctx", ".b64")
        if self.uses_dyn or any(i >= self.param_limit_cap for i in self.hoisted_limits):
            out.append(self._load_ctx())
        nroots = len(self.roots)
        for i in sorted(self.hoisted_limits):
            lim = self.reg(f"lim{i}", ".b64")
            if i < self.param_limit_cap:
                out.append(I("ld.param.u64", lim, Address(Symbol(CONTEXT_PARAM), 8 + 8 * i)))
            else:
                out.append(I("ld.global.u64", lim,
                             Address(Register(ctx), layout.limit_offset(nroots, i))))
        for r in sorted(self.fallback_roots):
            root = self.roots[r]
            out.append(I("ld.param.u64", self.reg(f"pv{r}", ".b64"),
                         Address(Symbol(root.param), root.offset)))
        for (name, space, bits), reg in self.var_forms.items():
            root = self.vars[name]
            out.append(I(f"mov.u{bits}", reg, name))
            if space == "generic":
                out.append(I(f"cvta.{root.space}.u64", reg, reg))
        if self.uses_dyn:
            d32 = self.reg("dyn32", ".b32")
            out.append(I("ld.global.u32", d32, Address(Register(ctx),
                         layout.LAUNCH_CONTEXT.offset("dynamic_shared_size"))))
            out.append(I("cvt.u64.u32", self.reg("dyn", ".b64"), d32))
        if self.uses_cache:
            out.append(I("mov.u64", self.reg("uclo", ".b64"), layout.EMPTY_WINDOW[0]))
            out.append(I("mov.u64", self.reg("uchi", ".b64"), layout.EMPTY_WINDOW[1]))
        return out

    def _emit_unit(self, unit: _Unit, conds: list[_Cond], slow: str,
                   seed: str | None) -> list[Statement]:
        """The filter of a unit other filters are dominated by: its predicate
        in a register nothing else writes (or, when every condition went to
        the loop's preheader, the loop's invariant predicate, written once)."""
        assert not any(self._constant_failure(c) for c in conds)
        if not conds:
            assert seed is not None
            unit.pred = seed
            return self.emit(conds, slow, seed=seed)
        unit.pred = self.reg(f"d{len(self.extra_regs)}", ".pred")
        return self.emit(conds, slow, pred=unit.pred, seed=seed)

    def _checked(self, acc: _Access, unit: _Unit | None = None,
                 ) -> tuple[list[Statement], list[Statement], list[Statement]]:
        """(before, after, out-of-line slow path) of one access checked on its
        own; ``unit``: the access's unit, when it dominates others or is
        dominated (then the filter is one branch on the dominating predicate)."""
        slow, do, skip = self.label("slow"), self.label("do"), self.label("skip")
        if unit is not None and unit.dom is not None:
            assert unit.dom.pred is not None
            pre: list[Statement] = [I("bra", slow, guard=ptx.Guard(unit.dom.pred))]
            pre.append(ptx.Label(do))
            return pre, [ptx.Label(skip)], self.slow_path(acc, slow, do, skip)
        pre = self.fast_filter(acc, slow, unit if unit is not None and unit.used else None)
        pre.append(ptx.Label(do))
        return pre, [ptx.Label(skip)], self.slow_path(acc, slow, do, skip)

    def regions(self) -> list[list[_Access]]:
        """Runs of root/window accesses inside one basic block whose checks can
        all be made before the first: no register a check reads is written in
        between, and nothing in between needs the warp converged."""
        graph = self.graph
        body = self.fn.body
        assert graph is not None and body is not None
        by_pos = {a.path[0]: a for a in self.accesses
                  if len(a.path) == 1 and self._groupable(a)}
        out: list[list[_Access]] = []
        for bb in graph.blocks:
            region: list[_Access] = []
            written: set[str] = set()
            for i in range(bb.start, bb.end):
                st = body[i]
                if region and _ends_region(st):
                    if len(region) > 1:
                        out.append(region)
                    region, written = [], set()
                acc = by_pos.get(i)
                if acc is not None:
                    if not region:
                        region = [acc]
                    elif not (self._inputs(acc) & written):
                        region.append(acc)
                if region and type(st) is Instruction:
                    written.update(prov.defs(st))
            if len(region) > 1:
                out.append(region)
        return out

    def _groupable(self, acc: _Access) -> bool:
        if acc.mode in ("root", "window"):
            return True
        a = acc.access
        base = a.address.base
        return (acc.mode == "lookup" and a.space in ("global", "generic")
                and isinstance(base, Register) and _bits_of(self.types, base.name) == 64
                and a.address.offset >= 0)

    def _inputs(self, acc: _Access) -> set[str]:
        return {c.reg for c in self.conditions(acc) if c.reg is not None}

    # -- checks implied by a dominating check ------------------------------

    def _dominated(self, units: list[_Unit]) -> None:
        """Mark each unit whose every condition is implied by a condition of a
        unit that dominates it ("dominated"): its filter becomes one branch on
        the dominating filter's predicate, ``@p bra slow``.

        Why this keeps every violation: a failing check does not stop the
        thread (the slow path skips only its own access and continues), so a
        dominated access can never simply go unchecked, or a bad access after a
        failed dominating check would run.  Instead the dominating filter
        leaves its predicate ``p`` in a register of its own, true when any of
        its conditions may hold (its loop-hoisted conditions included: they
        are ORed in).  At the dominated access:

        * ``p`` false: every condition of the dominating filter was false when
          it ran, i.e. each range it checks was in bounds (and each alignment
          held).  Each condition of the dominated filter tests the same kind of
          range against the same root or variable through the same register
          (or alignment of the same register), a sub-range ``[start, end)`` of
          one the dominating filter tested, with an alignment dividing it; and
          that register holds the same value at both places (below).  So the
          dominated access is in bounds and aligned: performing it unchecked
          is what its own filter would have done.
        * ``p`` true: the dominated access's own slow path runs, which checks it
          precisely and records it exactly as its own failing filter would.

        The register argument: a register with no definition in the function
        never changes; one with a single definition ``D`` that dominates the
        dominating filter ``A`` is not redefined on any path from ``A`` to the
        dominated filter ``B``: such a path through ``D`` would, after its last
        ``A``, reach ``B`` from ``D`` avoiding ``A``, and a path from the entry
        to ``D`` avoiding ``A`` exists (``D`` dominates ``A``), so ``B`` would
        be reachable avoiding ``A``, against ``A`` dominating ``B``.  Any other
        register (two definitions or more, e.g. a loop's induction variable;
        a definition not dominating ``A``) disqualifies the pair.  Loops need
        nothing more: a filter in a loop body that dominates an access after
        the loop covers it only through such stable registers, and ``p`` is
        then the last iteration's, computed from the same values.  The
        dominating access's guard does not matter: its filter runs whatever
        the guard (only its slow path looks at the guard), so ``p`` is set on
        every path through it.  Bounds do not depend on the access kind, so a
        load's filter covers a store or an atomic of a covered range.

        A unit reusing another's predicate computes none of its own, so it
        dominates nothing; units that may fail unconditionally (their filter
        is a bare ``bra.uni`` that sets no predicate) dominate nothing."""
        graph = self.graph
        body = self.fn.body
        assert graph is not None and body is not None
        idom = graph.dominators()
        depth: dict[int, int] = {}
        for b in range(len(graph.blocks)):
            d, x = 0, idom[b]
            while x is not None:
                d, x = d + 1, idom[x]
            depth[b] = d
        sites: dict[str, list[int]] = {}
        for i, st in enumerate(body):
            for r in _writes(st):
                sites.setdefault(r, []).append(i)

        def dom_pos(i: int, j: int) -> bool:
            bi, bj = graph.block_of[i], graph.block_of[j]
            if bi == bj:
                return i < j
            return graph.dominates(idom, bi, bj)

        def stable(reg: str | None, at: int) -> bool:
            if reg is None:
                return True
            where = sites.get(reg, [])
            return not where or (len(where) == 1 and dom_pos(where[0], at))

        candidates: dict[tuple, list[_Unit]] = {}
        for u in sorted(units, key=lambda u: (depth[graph.block_of[u.index]], u.index)):
            if not u.conds:
                continue
            key = self._cond_key(u.conds[0])
            for a in reversed(candidates.get(key, [])[-64:]):
                if dom_pos(a.index, u.index) and all(
                        any(self._implies(c, d) and stable(c.reg, a.index) for c in a.conds)
                        for d in u.conds):
                    u.dom = a
                    a.used = True
                    break
            if u.dom is None and not any(self._constant_failure(c) for c in u.conds):
                for c in u.conds:
                    candidates.setdefault(self._cond_key(c), []).append(u)

    def _cond_key(self, c: _Cond) -> tuple:
        if c.form in ("R", "C"):
            return (c.form, c.reg, self._find(c.root))
        if c.form == "A":
            return (c.form, c.reg)
        return (c.form, c.reg, c.root)

    def _implies(self, a: _Cond, b: _Cond) -> bool:
        """Whether ``a`` false (when checked) means ``b`` false (same registers)."""
        if a.form != b.form or a.reg != b.reg or self._constant_failure(a):
            return False
        if b.form == "A":
            return (a.reg is not None and a.align % b.align == 0
                    and (b.root[0] - a.root[0]) % b.align == 0)
        if b.form not in ("R", "C", "F", "W", "WR"):
            return False
        if b.form in ("R", "C"):
            if self._find(a.root) != self._find(b.root):
                return False
        elif a.root != b.root:
            return False
        return a.align % b.align == 0 and a.start <= b.start and b.end <= a.end

    def rewrite(self, needy: set[str]) -> None:
        fn = self.fn
        body = fn.body
        assert body is not None
        before: dict[tuple[int, ...], list[Statement]] = {}
        after: dict[tuple[int, ...], list[Statement]] = {}
        slow_paths: list[Statement] = []
        grouped: set[int] = set()
        units: list[_Unit] = []
        for region in (self.regions() if self.optimize else []):
            grouped.update(id(a) for a in region)
            units.append(_Unit(region[0].path[0], region, True,
                               self.merge([c for a in region for c in self.conditions(a)])))
        for acc in self.accesses:
            if acc.mode in ("root", "window") and id(acc) not in grouped and len(acc.path) == 1:
                units.append(_Unit(acc.path[0], [acc], False,
                                   self.merge(self.conditions(acc))))
        if self.optimize:
            self._dominated(units)
        unit_of = {id(u.accesses[0]): u for u in units if not u.region}

        def emit_region(region_unit: _Unit) -> None:
            region = region_unit.accesses
            self.stats.removed["grouped-in-block"] += len(region) - 1
            copy, rejoin = self.label("copy"), self.label("rejoin")
            conds = region_unit.conds
            start, end = region[0].path[0], region[-1].path[0]
            dom = region_unit.dom
            if dom is not None:
                assert dom.pred is not None
                before[(start,)] = [I("bra", copy, guard=ptx.Guard(dom.pred))]
                self.stats.removed["dominated"] += 1
            else:
                self.in_loop = graph_loop(self, start)
                conds, seed = self._hoist(conds, start)
                if region_unit.used:
                    before[(start,)] = self._emit_unit(region_unit, conds, copy, seed)
                else:
                    before[(start,)] = self.emit(conds, copy, seed=seed)
                self.in_loop = False
            after[(end,)] = [ptx.Label(rejoin)]
            # the slow copy: the same statements, every access checked on its own
            slow_paths.append(ptx.Label(copy))
            by_pos = {a.path[0]: a for a in self.accesses if len(a.path) == 1}
            for i in range(start, end + 1):
                acc = by_pos.get(i)
                if acc is None or acc.mode in ("static", "none"):
                    slow_paths.append(body[i])
                    continue
                pre, post, slow = self._checked(acc)
                slow_paths.extend(pre + [body[i]] + post)
                self._deferred.extend(slow)
            slow_paths.append(I("bra.uni", rejoin))

        def emit_access(acc: _Access) -> None:
            unit = unit_of.get(id(acc))
            if unit is not None and unit.dom is not None:
                self.stats.removed["dominated"] += 1
            self.in_loop = graph_loop(self, acc.path[0])
            self.hoisting = True
            pre, post, slow = self._checked(acc, unit)
            self.in_loop = self.hoisting = False
            before[acc.path] = before.get(acc.path, []) + pre
            after[acc.path] = post + after.get(acc.path, [])
            slow_paths.extend(slow)

        single = [acc for acc in self.accesses
                  if acc.mode not in ("static", "none") and id(acc) not in grouped]
        # dominating filters first: the dominated ones branch on their predicates
        for late in (False, True):
            for u in units:
                if u.region and (u.dom is not None) == late:
                    emit_region(u)
            for acc in single:
                u = unit_of.get(id(acc))
                if (u is not None and u.dom is not None) == late:
                    emit_access(acc)
        slow_paths.extend(self._deferred)
        if before and any(len(p) > 1 for p in before):
            # accesses inside nested blocks: insert there
            for path in [p for p in before if len(p) > 1]:
                i, j = path
                blk = body[i]
                assert type(blk) is Block
                raise InstrumentError(
                    "memory access inside a nested { } block (inline assembly) is not "
                    "supported", self.display, blk.statements[j].line,  # type: ignore[union-attr]
                    blk.statements[j].canonical())  # type: ignore[union-attr]
        preheaders = self._preheader_code()
        new_body: list[Statement] = []
        for i, s in enumerate(body):
            if i in preheaders:
                new_body.extend(preheaders[i])
            if (i,) in before:
                new_body.extend(before[(i,)])
            if type(s) is Block:
                self._rewrite_calls_in_block(s, needy)
                new_body.append(s)
            elif type(s) is Instruction and s.op == "call" and _call_target(s) in needy:
                new_body.append(self._wrap_call(s))
            else:
                new_body.append(s)
            if (i,) in after:
                new_body.extend(after[(i,)])
        if len(body) in preheaders:
            new_body.extend(preheaders[len(body)])
        if self.needs_ctx or self.kernel:
            self.reg("ctx", ".b64")
            prologue = self.prologue()
            at = _prologue_position(new_body)
            new_body[at:at] = prologue
        new_body.extend(slow_paths)
        decls: list[Statement] = [RegisterDecl(t, ((n, None),)) for n, t in self.extra_regs.items()]
        fn.body = decls + new_body

    def _rewrite_calls_in_block(self, blk: Block, needy: set[str]) -> None:
        for j, s in enumerate(blk.statements):
            if type(s) is Instruction and s.op == "call":
                target = _call_target(s)
                if target in needy:
                    blk.statements[j:j + 1] = _ctx_argument(s, self.reg("ctx", ".b64"))
                    return
            elif type(s) is Block:
                self._rewrite_calls_in_block(s, needy)

    def _wrap_call(self, s: Instruction) -> Block:
        return Block(_ctx_argument(s, self.reg("ctx", ".b64")))


def _writes(st: Statement) -> set[str]:
    """Registers a top-level statement may write: its definitions and the
    registers in a call's return list."""
    out = _all_defs(st)
    stack = [st]
    while stack:
        x = stack.pop()
        if type(x) is Block:
            stack.extend(x.statements)
        elif type(x) is Instruction and x.op == "call" and x.operands \
                and isinstance(x.operands[0], ArgumentList):
            out.update(r.name for r in x.operands[0].items if isinstance(r, Register))
    return out


def _all_defs(st: Statement) -> set[str]:
    """Registers a top-level statement (an instruction or a ``{ }`` block) writes."""
    if type(st) is Instruction:
        return set(prov.defs(st))
    if type(st) is Block:
        out: set[str] = set()
        for inner in st.statements:
            out |= _all_defs(inner)
        return out
    return set()


def graph_loop(fp: _FunctionPass, index: int) -> bool:
    """Whether top-level statement ``index`` of ``fp``'s function sits in a loop."""
    assert fp.graph is not None
    return fp.graph.block_of[index] in fp.loop_blocks


_CONVERGENT = frozenset({
    "bar", "barrier", "shfl", "vote", "match", "redux", "activemask", "elect", "mma", "wmma",
    "wgmma", "ldmatrix", "stmatrix", "call", "setmaxnreg", "griddepcontrol", "tcgen05",
}) | cfg_mod.TERMINATORS


def _ends_region(st: Statement) -> bool:
    if type(st) is Instruction:
        return st.op in _CONVERGENT
    return type(st) not in (Loc, ptx.Pragma)


def _call_target(instr: Instruction) -> str | None:
    for o in instr.operands:
        if isinstance(o, Symbol):
            return o.name
        if isinstance(o, Register):
            return None
    return None


def _ctx_argument(call: Instruction, ctx_reg: str) -> list[Statement]:
    """The statements replacing ``call``: the context argument declared and
    stored, and the call with it appended to its argument list."""
    name = "__gs_ctxarg"
    ops = list(call.operands)
    idx = next(i for i, o in enumerate(ops) if isinstance(o, Symbol))
    if idx + 1 < len(ops) and isinstance(ops[idx + 1], ArgumentList):
        args = ops[idx + 1]
        assert isinstance(args, ArgumentList)
        ops[idx + 1] = ArgumentList(args.items + (Symbol(name),))
    else:
        ops.insert(idx + 1, ArgumentList((Symbol(name),)))
    new_call = Instruction(call.opcode, tuple(ops), call.guard, line=call.line)
    return [
        Variable(".param", ".b64", name),
        I("ld.param.u64", ctx_reg, Address(Symbol(CONTEXT_PARAM))),
        I("st.param.b64", Address(Symbol(name)), ctx_reg),
        new_call,
    ]


def _prologue_position(body: list[Statement]) -> int:
    first = next((i for i, s in enumerate(body) if type(s) in (Instruction, Block)), len(body))
    at = 0
    for i in range(first):
        if type(body[i]) in (RegisterDecl, Variable):
            at = i + 1
    return at


def _param_offsets(params: list[Param]) -> list[int]:
    return [slot.offset for slot in query.param_layout(params)[0]]


# --------------------------------------------------------------------------
# the pass


def instrument(source: str | Module, *,
               select: Callable[[str], bool] | None = None) -> InstrumentResult:
    """Instrument a PTX module (text or parsed; a parsed module is not modified).

    ``select``: which kernels to check (``gpusafe run --kernel-filter``); None
    checks every kernel.  A kernel for which ``select(name)`` is false is left
    exactly as it was (signature and body, no hidden parameter) and keeps
    calling the original, unchecked device functions; the selected kernels
    call checked copies of the device functions they reach, named
    ``__gpusafe_<name>`` (see :func:`_split_selected`).  ``sites.kernels`` and
    ``stats`` then list only the selected kernels and the copies (under the
    original function names)."""
    module = ptx.parse(source) if isinstance(source, str) else copy.deepcopy(source)
    reason = is_instrumented(module)
    if reason is not None:
        raise InstrumentError(f"this module is already instrumented by gpusafe: {reason}")
    if module.address_size != 64:
        raise InstrumentError(
            f".address_size {module.address_size}: gpusafe supports 64-bit PTX only")
    version = module.version
    if version is not None and version.number < (7, 0):
        raise InstrumentError(f"PTX ISA {version.text} is older than 7.0, which gpusafe needs")

    module_vars: dict[str, prov.VarRoot] = {}
    for v in module.variables:
        root = prov.variable_root(v)
        if root is not None:
            module_vars[v.name] = root
    targets, display = _split_selected(module, select)
    defined = {f.name for f in module.functions if f.body is not None and not f.is_kernel}
    sites = SiteTable()
    passes: list[_FunctionPass] = []
    for fn in module.functions:
        if fn.body is None or (targets is not None and fn.name not in targets):
            continue
        fp = _FunctionPass(module, fn, module_vars, sites, defined,
                           display=display.get(fn.name, fn.name))
        fp.plan()
        passes.append(fp)

    # which device functions need the launch context (transitively)
    needy = {fp.fn.name for fp in passes if not fp.kernel and fp.needs_ctx}
    changed = True
    while changed:
        changed = False
        for fp in passes:
            if fp.kernel or fp.fn.name in needy:
                continue
            if fp.calls & needy:
                needy.add(fp.fn.name)
                changed = True
    _refuse_indirect_calls(module, needy, targets)

    stats: dict[str, FunctionStats] = {}
    for fp in passes:
        if fp.fn.name in needy:
            fp.needs_ctx = True
        fp.rewrite(needy)
        fp.stats.slots = len(fp.slots)
        stats[fp.display] = fp.stats
        if fp.kernel:
            offsets = _param_offsets(fp.fn.params)
            in_param = min(len(fp.slots), fp.param_limit_cap)
            if in_param:
                hidden = Param(CONTEXT_PARAM, ".b8", align=8, dims=(8 + 8 * in_param,))
            else:
                hidden = Param(CONTEXT_PARAM, ".u64")
            fp.fn.params.append(hidden)
            ctx_off = _param_offsets(fp.fn.params)[-1]
            sites.kernels[fp.fn.name] = KernelInfo(
                name=fp.fn.name,
                params=tuple((p.name, off, p.size)
                             for p, off in zip(fp.fn.params[:-1], offsets, strict=True)),
                context_param_offset=ctx_off,
                roots=tuple(RootInfo(r.index, r.param, r.offset, offsets[r.index])
                            for r in fp.roots),
                slots=tuple(SlotInfo(s.roots, s.end, s.align) for s in fp.slots),
                param_limits=in_param,
            )
    for fn in module.functions:
        if not fn.is_kernel and fn.name in needy:
            fn.params.append(Param(CONTEXT_PARAM, ".b64"))
    if targets is not None:
        # copies no selected kernel reaches through a checked call path are dead
        _drop_unused_copies(module, set(display))
    link(module)
    return InstrumentResult(ptx.emit(module), sites, stats, module)


def _calls_in(stmts: list[Statement]) -> set[str]:
    out: set[str] = set()
    for st in stmts:
        if type(st) is Instruction and st.op == "call":
            t = _call_target(st)
            if t is not None:
                out.add(t)
        elif type(st) is Block:
            out |= _calls_in(st.statements)
    return out


def _retarget(stmts: list[Statement], names: dict[str, str]) -> None:
    """Point every direct call in ``stmts`` to a function in ``names`` at its new name."""
    for i, st in enumerate(stmts):
        if type(st) is Instruction and st.op == "call":
            t = _call_target(st)
            if t in names:
                ops = tuple(Symbol(names[t]) if isinstance(o, Symbol) and o.name == t else o
                            for o in st.operands)
                stmts[i] = Instruction(st.opcode, ops, st.guard, line=st.line)
        elif type(st) is Block:
            _retarget(st.statements, names)


def _split_selected(module: Module, select: Callable[[str], bool] | None,
                    ) -> tuple[set[str] | None, dict[str, str]]:
    """For a kernel filter: add a copy ``__gpusafe_<f>`` of every device
    function a selected kernel reaches by direct calls (a declaration too, for
    forward declarations), right after the original, with no linkage of its
    own; point the selected kernels' and the copies' calls at the copies.  The
    originals and the unselected kernels stay untouched.  Returns (names of the
    functions to instrument, copy name -> original name); (None, {}) without a
    filter."""
    if select is None:
        return None, {}
    defined = {f.name: f for f in module.functions if f.body is not None and not f.is_kernel}
    kernels = [f for f in module.functions
               if f.is_kernel and f.body is not None and select(f.name)]
    reach: set[str] = set()
    work = [c for k in kernels for c in _calls_in(k.body or [])]
    while work:
        name = work.pop()
        if name in reach or name not in defined:
            continue
        reach.add(name)
        work.extend(_calls_in(defined[name].body or []))
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


def _drop_unused_copies(module: Module, copies: set[str]) -> None:
    """Remove copies (and their declarations) that no kernel or other function
    left in the module calls."""
    while True:
        called: set[str] = set()
        for f in module.functions:
            if f.body is not None:
                called |= _calls_in(f.body)
        dead = {f.name for f in module.functions if f.name in copies and f.name not in called}
        if not dead:
            return
        module.items[:] = [i for i in module.items
                           if not (isinstance(i, Function) and i.name in dead)]
        copies -= dead


def _refuse_indirect_calls(module: Module, needy: set[str], targets: set[str] | None) -> None:
    for fn in module.functions:
        if fn.body is None or (targets is not None and fn.name not in targets):
            continue
        for instr in query.instructions(fn):
            if instr.op == "call":
                target = _call_target(instr)
                if target is None and needy:
                    raise InstrumentError(
                        "indirect call in a module whose device functions need gpusafe's "
                        "launch context: not supported", fn.name, instr.line,
                        instr.canonical())
            else:
                for o in instr.operands:
                    if isinstance(o, Symbol) and o.name in needy:
                        raise InstrumentError(
                            f"the address of device function {o.name} is taken; indirect "
                            f"calls to instrumented functions are not supported",
                            fn.name, instr.line, instr.canonical())


__all__ = ["instrument", "InstrumentError", "InstrumentResult", "FunctionStats", "AccessKind"]
