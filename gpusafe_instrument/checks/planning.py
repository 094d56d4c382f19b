"""Planning: which check each memory access of one function gets.

Built on the query layer's answer (``query.instruction_accesses``: space,
kind, width, address) and the provenance of the address
(``gpusafe_instrument.provenance``):

* **root**: derived from a kernel pointer parameter, checked against a limit
  the host computes per launch (a *check slot*: roots checked together, an end
  offset, an alignment; ``gpusafe_instrument/layout.py``);
* **window**: derived from a ``.shared``/``.local``/``.global`` variable,
  checked against the variable's extent; **static** when a constant offset is
  in bounds, or the branches dominating the access keep its offset register
  in bounds (``guards``): no check;
* **argument**: derived from a device function's pointer parameter whose
  callers pass a window (``arguments``): when every caller passes a known
  one (a root's allocation, a variable), the access is checked against it
  and decided inline; otherwise (some caller passes a local variable) a
  local access is checked against the window, a generic one as a lookup
  whose slow path knows the window;
* **heap**: not an access but a call of the device heap's ``malloc``/``free``,
  which goes to the runtime's wrapper (``heap_calls``);
* **lookup**: unknown provenance in global or generic memory (the runtime
  searches the allocation table); **alignment**: unknown provenance in local
  memory (only alignment can be checked); **none**: a byte access there.

Every checked access gets a site in the site table.  An instruction the pass
cannot check raises :class:`~gpusafe_instrument.checks.outcome.CannotCheck`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .. import cfg as cfg_mod
from .. import provenance as prov
from .. import query
from ..nodes import Function, Instruction, Module, Register, Statement, Symbol, Variable
from ..runtime import HEAP_WRAPPERS
from ..sites import SiteTable
from . import guards
from .early_loads import hoist_loads
from .outcome import CannotCheck, FunctionStats

CHECKED_SPACES = ("global", "shared", "local", "generic")
MERGE_END_LIMIT = 64
"""Accesses through one root whose end offset is at most this share one check
slot (the largest end); a larger end offset gets a slot of its own."""


_NESTED = "a memory access inside a nested { } block (inline assembly) is not supported"


class Mode(enum.Enum):
    """How one access is checked; the value is the site table's ``check``."""

    ROOT = "root"
    WINDOW = "window"
    ARGUMENT = "argument"
    LOOKUP = "lookup"
    ALIGNMENT = "alignment"
    STATIC = "static"  # a constant offset inside a variable: no check
    NONE = "none"  # a byte of local memory through an unknown pointer: nothing to check


UNCHECKED_MODES = (Mode.STATIC, Mode.NONE)


@dataclass
class Access:
    """One memory access of the function and the check planned for it."""

    path: tuple[int, ...]  # where the instruction sits (query.StatementPath)
    instr: Instruction
    access: query.MemoryAccess
    value: prov.Value | None  # provenance of the base register (None: no register)
    site: int = -1
    mode: Mode = Mode.NONE
    root: int = -1
    fallback_root: int = -1  # root index whose value is subtracted (sub form)


@dataclass
class Slot:
    roots: tuple[int, ...]
    end: int
    align: int


@dataclass
class Calls:
    """What the function calls and whose address it takes (the pass driver
    decides from these which functions need the launch context)."""

    direct: set[str] = field(default_factory=set)
    indirect: list[Instruction] = field(default_factory=list)
    symbols: dict[str, Instruction] = field(default_factory=dict)  # operand name -> first use


class FunctionPlan:
    """The checks of one function: its accesses, pointer roots and check slots."""

    def __init__(self, module: Module, fn: Function, module_vars: dict[str, prov.VarRoot],
                 sites: SiteTable, display: str | None = None,
                 files: dict[int, str] | None = None, every_offender: bool = False) -> None:
        self.module = module
        self.every_offender = every_offender  # records, not tallies (``instrument``)
        self.files = module.files if files is None else files
        self.fn = fn
        self.display = display or fn.name  # the name reports use (a copy's original)
        self.sites = sites
        self.kernel = fn.is_kernel
        # before any analysis, so that they all see the order ptxas gets
        self.unscheduled = None if fn.body is None else hoist_loads(fn.body)
        """The body as it came when loads moved: a proven entry's (no check
        there to schedule around)."""
        self.stats = FunctionStats(self.display, "kernel" if self.kernel else "function")
        self.types = query.register_types(fn)
        own = {}
        for s in fn.body or []:
            if type(s) is Variable:
                root = prov.variable_root(s)
                if root is not None:
                    own[s.name] = root
        # the module's variables are shared by every plan (read only), not
        # copied into each: a module of many kernels and many globals
        self.vars = {**module_vars, **own} if own else module_vars
        self.kernel_params: dict[str, tuple[int, int]] = {}
        self.function_params: dict[str, int] = {}
        if self.kernel:
            self.kernel_params = {p.name: (i, p.size) for i, p in enumerate(fn.params)}
        else:
            self.function_params = {p.name: i for i, p in enumerate(fn.params)
                                    if p.space == ".param" and p.size == 8 and not p.dims}
        self.windows: set[int] = set()
        """Parameters whose callers pass a window (``arguments``)."""
        self.decided: set[int] = set()
        """Those every caller passes a known window: their accesses are decided inline."""
        self.window_kinds: dict[int, frozenset[str]] = {}
        """What each decided parameter's window may hold (``arguments.ROOT``, ...)."""
        self.analysis: prov.Provenance | None = None
        self.launch_proof: str | None = None  # JSON (``launch_proof``), set by the rewrite
        self.original_body: list[Statement] | None = None  # kept for the proven entry
        self.finished = False  # rewritten and printed (the driver's)
        self.accesses: list[Access] = []
        self.roots: list[prov.ParamRoot] = []
        self.root_index: dict[prov.ParamRoot, int] = {}
        self.slots: list[Slot] = []
        self.union: list[int] = []  # union-find over roots sharing an offset register
        self.graph = cfg_mod.build(fn)
        self.domtree = self.graph.dominator_tree()
        self.loops = self.graph.loops(self.domtree)  # header block -> body blocks
        self._guards: guards.Guards | None = None  # built for the first window access
        self.needs_ctx = False
        self.calls = Calls()
        self.fallback_roots: set[int] = set()
        self.uses_cache = False  # some lookup keeps the last allocation found in registers
        self.uses_dyn = False  # some check needs the launch's dynamic shared size
        self.heap_calls: dict[int, int] = {}
        """Calls of the device heap's ``malloc``/``free``: id of the call -> its site."""
        self.frees_heap = False
        """It calls the device heap's ``free``, itself or through a call (the
        driver's): a heap block's window it cached may be stale after that call."""

    # -- the plan -----------------------------------------------------------

    def analyze(self) -> prov.Provenance:
        """The provenance of every register (computed once: the argument
        windows ask for it before :meth:`plan`)."""
        if self.analysis is None:
            ctx = prov.AnalysisContext(self.kernel_params, self.vars, self.types,
                                       self.function_params)
            self.analysis = prov.analyze(self.fn, ctx, self.graph)
        return self.analysis

    def plan(self) -> None:
        analysis = self.analyze()
        self.analysis = None  # planned once: its memory goes
        locs = {path: loc for path, _, loc in
                query.located_instructions(self.module, self.fn, self.files)}
        for path, instr, state in analysis.states():
            self._note_calls(instr)
            if instr.op == "call":
                self._note_heap_call(instr, locs.get(path))
            try:
                accesses = query.instruction_accesses(instr, locs.get(path), self.types)
            except query.Unsupported as e:
                raise CannotCheck(instr, str(e)) from None
            if accesses:
                self.stats.memory_instructions += 1
            for access in accesses:
                self._plan_access(path, instr, access, state)
        self._share_offset_registers()

    def _note_calls(self, instr: Instruction) -> None:
        if instr.op == "call":
            target = query.call_target(instr)
            if target is None:
                self.calls.indirect.append(instr)
            else:
                self.calls.direct.add(target)
            return
        for o in instr.operands:
            if isinstance(o, Symbol):
                self.calls.symbols.setdefault(o.name, instr)

    def _note_heap_call(self, instr: Instruction, loc: query.SourceLocation | None) -> None:
        """A call of the ``malloc``/``free`` the CUDA runtime provides (the
        module declares it, defines nothing of that name) gets a site: the
        wrapper it becomes records its block, or its bad free, there."""
        target = query.call_target(instr)
        if target not in HEAP_WRAPPERS:
            return
        declared = next((f for f in self.module.functions if f.name == target), None)
        if declared is None or declared.body is not None:
            return
        site = self.sites.add(
            function=self.display, ptx_line=instr.line,
            file=loc.file if loc else None, line=loc.line if loc else None,
            column=loc.column if loc else None, instruction=instr.canonical(),
            access=target, width=0, space="global", check="heap", root=None,
        )
        self.heap_calls[id(instr)] = site.id
        self.needs_ctx = True
        if target == "free":
            self.frees_heap = True

    def _plan_access(self, path: tuple[int, ...], instr: Instruction,
                     access: query.MemoryAccess, state: dict[str, prov.Value]) -> None:
        if access.space not in CHECKED_SPACES:
            self.stats.unchecked[access.space] += 1
            return
        if access.width <= 0 and access.size is None:
            raise CannotCheck(instr, "cannot tell the width of this access")
        base = access.address.base
        value: prov.Value | None
        if isinstance(base, Register):
            value = state.get(base.name)
            if value is None:
                value = (prov.UNKNOWN if prov.reg_bits(self.types, base.name) == 64
                         else prov.Scalar(1))
        elif isinstance(base, Symbol):
            root = self.vars.get(base.name)
            if root is None:
                raise CannotCheck(instr, _NESTED if len(path) > 1
                                  else f"address of unknown symbol {base.name}")
            value = prov.Ptr(root, root.space, None, 0, prov.MAX_ALIGN)
        else:
            value = None
        acc = Access(path, instr, access, value)
        self._classify(acc)
        if len(path) > 1 and acc.mode not in UNCHECKED_MODES:
            raise CannotCheck(instr, _NESTED)
        self.accesses.append(acc)

    def _share_offset_registers(self) -> None:
        """Roots whose accesses in one block use the same offset register are
        checked together (one slot for the group)."""
        sharing: dict[tuple[int, str], int] = {}
        for acc in self.accesses:
            v = acc.value
            if acc.mode is Mode.ROOT and isinstance(v, prov.Ptr) and v.off_reg is not None:
                key = (self.graph.block_of[acc.path[0]], v.off_reg)
                if key in sharing:
                    a, b = self.find(sharing[key]), self.find(acc.root)
                    self.union[a] = b
                else:
                    sharing[key] = acc.root

    def _classify(self, acc: Access) -> None:
        a = acc.access
        v = acc.value
        w = a.width
        imm = a.address.offset
        space = a.space
        if isinstance(v, prov.Ptr) and isinstance(v.root, prov.ParamRoot) \
                and v.space in ("global", "generic") and space in ("global", "generic"):
            acc.mode = Mode.ROOT
            ridx = self._root(v.root)
            acc.root = ridx
            start = None if v.off_const is None else v.off_const + imm
            if start is None:
                acc.fallback_root = ridx
                self.fallback_roots.add(ridx)
            self._new_site(acc, str(v.root))
            return
        if isinstance(v, prov.Ptr) and isinstance(v.root, prov.ArgRoot) and (
                (v.root.index in self.decided
                 and (v.space == space or (v.space, space) == ("generic", "global")))
                or (v.root.index in self.windows and v.space == space
                    and space in ("local", "generic"))):
            # a generic pointer read with ld.global (``__ldg``) is a global
            # address, as a kernel's root is
            acc.mode = Mode.ARGUMENT
            if space == "generic" and v.root.index not in self.decided:
                self.uses_cache = True  # the runtime looks it up
            self._new_site(acc, v.root.param)
            return
        if isinstance(v, prov.Ptr) and isinstance(v.root, prov.VarRoot) and (
                v.space == space or (space == "generic" and v.space == "generic")):
            root = v.root
            if v.off_const is not None and v.off_reg is None and root.size is not None \
                    and w > 0:
                s = v.off_const + imm
                al = a.alignment
                if 0 <= s and s + w <= root.size and root.align % al == 0 and s % al == 0:
                    acc.mode = Mode.STATIC
                    self.stats.removed["static-in-bounds"] += 1
                    return
            if self._guarded(acc, v, root):
                acc.mode = Mode.STATIC
                self.stats.removed["guarded-in-bounds"] += 1
                return
            acc.mode = Mode.WINDOW
            if root.size is None:
                self.uses_dyn = True
            self._new_site(acc, root.name)
            return
        # unknown provenance
        if space == "local":
            if w == 1:
                acc.mode = Mode.NONE
                self.stats.removed["local-byte-unknown-frame"] += 1
                return
            acc.mode = Mode.ALIGNMENT
            self._new_site(acc, None)
            return
        acc.mode = Mode.LOOKUP
        if space in ("global", "generic"):
            self.uses_cache = True
        self._new_site(acc, None)

    def _guarded(self, acc: Access, v: prov.Ptr, root: prov.VarRoot) -> bool:
        """Whether the branches dominating ``acc`` keep its offset register
        in a range that puts the whole access inside the variable, aligned
        (``guards``: a shared tree reduction's ``if (t < w)`` steps)."""
        a = acc.access
        w, al = a.width, a.alignment
        if v.off_reg is None or v.off_const is None or root.size is None or w <= 0 \
                or len(acc.path) != 1 or not (root.align % al == 0 and v.align % al == 0):
            return False
        r = self.guards().offset_range(v.off_reg, acc.path[0])
        if r is None:
            return False
        s = v.off_const + a.address.offset
        return s % al == 0 and 0 <= r[0] + s and r[1] + s + w <= root.size

    def guards(self) -> guards.Guards:
        """Ranges and alignments from the function's definitions and
        branches (built when first asked for)."""
        if self._guards is None:
            assert self.fn.body is not None
            self._guards = guards.Guards(self.fn.body, self.graph, self.domtree)
        return self._guards

    def _new_site(self, acc: Access, root: str | None) -> None:
        a = acc.access
        loc = a.location
        check = acc.mode.value
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

    def release(self) -> None:
        """Drop what only planning and rewriting need, once the function is
        rewritten (its statistics, roots and slots stay)."""
        self.accesses = []
        self.graph = self.domtree = self.loops = None  # type: ignore[assignment]
        self._guards = None
        self.types = {}
        self.analysis = None
        self.unscheduled = None

    # -- roots and check slots ------------------------------------------------

    def argument_root(self, root: prov.ParamRoot) -> int:
        """The index of a root the kernel passes to a device function's
        decided parameter (``arguments``): its bounds go in the launch
        context, whether or not the kernel accesses memory through it."""
        return self._root(root)

    def _root(self, root: prov.ParamRoot) -> int:
        if root not in self.root_index:
            self.root_index[root] = len(self.roots)
            self.union.append(len(self.roots))
            self.roots.append(root)
        return self.root_index[root]

    def group(self, root: int) -> tuple[int, ...]:
        """The roots checked together with ``root`` (they share offset registers)."""
        rep = self.find(root)
        return tuple(sorted(r for r in range(len(self.roots)) if self.find(r) == rep))

    def find(self, r: int) -> int:
        while self.union[r] != r:
            self.union[r] = self.union[self.union[r]]
            r = self.union[r]
        return r

    def slot(self, root: int, end: int, align: int) -> int:
        """The check slot covering an access through ``root`` ending ``end``
        bytes after its offset (a new one when none does)."""
        roots = self.group(root)
        for i, s in enumerate(self.slots):
            if s.roots == roots and s.align == align:
                if end <= MERGE_END_LIMIT and s.end <= MERGE_END_LIMIT:
                    s.end = max(s.end, end)
                    return i
                if s.end == end:
                    return i
        self.slots.append(Slot(roots, end, align))
        return len(self.slots) - 1

    def bits(self, reg: str) -> int:
        return prov.reg_bits(self.types, reg)
