"""Emission: the instructions of the fast filters and of the function prologue.

A filter is a few compares right before an access that branch to the
access's out-of-line slow path when any of its conditions may hold:

* root: ``setp.ge.u64 p, R, lim; @p bra slow`` (``R`` the offset from the
  parameter's pointer, ``lim`` the check slot's limit, loaded once per thread
  in the prologue from the launch context);
* window: ``sub t, addr, var; setp.gt t, size - end; @p bra slow`` against the
  variable's extent (dynamic shared memory: the launch's dynamic shared size);
* lookup: the address against a per-thread cache of the last allocation the
  runtime found (``uclo``/``uchi``);
* pinned lookup: ``setp.ge.u64 p, X, L; @p bra slow``, ``X`` the offset from
  a loop-invariant base and ``L`` what the base's query left for the
  access's end (``optimisation.LoopHoister``);
* alignment: ``and``/``setp.ne.or`` on the address.

The :class:`Emitter` also owns the registers and labels the pass adds to a
function; their names and declaration order are part of the output.
"""

from __future__ import annotations

import functools

from .. import layout, ptx, query
from .. import provenance as prov
from ..nodes import (
    Address,
    ArgumentList,
    Immediate,
    Instruction,
    Param,
    Register,
    Statement,
    Symbol,
    Variable,
    Vector,
)
from ..runtime import CONTEXT_PARAM
from .conditions import Cond, Form
from .planning import Access, FunctionPlan

CONTEXT_REGISTER = "%__gs_ctx"
"""The register a function holding the launch context keeps it in."""

WINDOW_PARAMS = ("__gpusafe_wlo", "__gpusafe_whi")
"""Names (before the parameter index) of the hidden parameters holding the
window a pointer argument carries (``arguments``)."""


LIMIT_PARAM = "__gpusafe_lim"
"""Name (before the slot number) of the hidden kernel parameters holding the
check slots' limits."""
PARAM_SPACE = 4096
"""Bytes of kernel parameters every driver and target accepts: the limits go
in parameters only when the kernel's fit in it with them."""


def limit_param(slot: int) -> str:
    return LIMIT_PARAM + str(slot)


def limits_as_params(params: list[Param], slots: int) -> bool:
    """Whether a kernel with ``params`` (the hidden context pointer not among
    them) and ``slots`` check slots takes the slots' limits as hidden
    parameters after the context pointer: ptxas then reads them from the
    constant bank at each filter and keeps none in a register (limits in the
    launch context, loaded into registers once, cost vector add 2 and tiled
    matmul 4 registers; median over the corpus 10 -> 7)."""
    _, end = query.param_layout(params)
    return slots > 0 and (end + 7) // 8 * 8 + 8 + 8 * slots <= PARAM_SPACE


_FORM_TAGS = {"local": "", "generic": "g", "shared": "s", "global": "x"}


def window_params(k: int) -> tuple[str, str]:
    """The hidden parameters holding the window of pointer parameter ``k``."""
    return WINDOW_PARAMS[0] + str(k), WINDOW_PARAMS[1] + str(k)


_SPELLED: dict[object, object] = {}
"""Operands by short spelling: operands are immutable, and the check code
spells the same registers and numbers over and over."""
_SPELLED_LIMIT = 1 << 16


def target_sm(module) -> int:
    """The number of the ``sm_NN`` ``module``'s ``.target`` names (0: none)."""
    target = module.target
    sm = next((t for t in target.targets if t.startswith("sm_")), "") if target else ""
    digits = "".join(ch for ch in sm[3:] if ch.isdigit())
    return int(digits) if digits else 0


def _op(x) -> object:
    t = type(x)
    if t is str or t is int:
        op = _SPELLED.get(x)
        if op is None:
            if len(_SPELLED) > _SPELLED_LIMIT:
                _SPELLED.clear()
            if t is int:
                op = Immediate.integer(x)
            elif x.startswith("%"):
                op = Register(x)
            else:
                op = Symbol(x)
            _SPELLED[x] = op
        return op
    if isinstance(x, (Register, Symbol, Immediate, Address, Vector, ArgumentList)):
        return x
    raise TypeError(x)


def I(opcode: str, *operands, guard: ptx.Guard | None = None) -> Instruction:  # noqa: E743
    """An instruction from short operand forms: ``"%r"`` a register, another
    string a symbol, an int an immediate."""
    return Instruction(opcode, tuple([_op(o) for o in operands]), guard)


class Emitter:
    """Builds the check code of one function."""

    def __init__(self, plan: FunctionPlan) -> None:
        self.plan = plan
        self.extra_regs: dict[str, str] = {}  # name -> type, in declaration order
        self.label_n = 0
        self.var_forms: dict[tuple[str, str, int], str] = {}  # (var, space, bits) -> reg
        self.hoisted_limits: set[int] = set()  # slots whose limit the prologue loads
        self.pinned: dict[tuple[str, int], str] = {}  # (base, end) -> its limit register
        self.argument_forms: dict[tuple[int, str, int], tuple[str, str]] = {}
        """(parameter, space, bits) -> the registers of its window (``argument_window``)."""

    def reg(self, name: str, type_: str) -> str:
        full = f"%__gs_{name}"
        self.extra_regs.setdefault(full, type_)
        return full

    def label(self, what: str) -> str:
        self.label_n += 1
        return f"$__gs_{what}{self.label_n}"

    def ctx(self) -> str:
        """The register holding the launch context's address."""
        return self.reg(CONTEXT_REGISTER.removeprefix("%__gs_"), ".b64")

    def load_ctx(self) -> Statement:
        return I("ld.param.u64", self.ctx(), Address(Symbol(CONTEXT_PARAM)))

    def _var_form(self, root: prov.VarRoot, space: str, bits: int) -> str:
        key = (root.name, space, bits)
        if key not in self.var_forms:
            self.var_forms[key] = self.reg(f"v{len(self.var_forms)}", f".b{bits}")
        return self.var_forms[key]

    def address_reg(self, acc: Access, out: list[Statement]) -> tuple[str, int]:
        """A register holding the full address of ``acc`` (base + offset), and its bits."""
        addr = acc.access.address
        base = addr.base
        if isinstance(base, Register):
            b = self.plan.bits(base.name)
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

    def limit(self, slot: int, out: list[Statement]) -> str:
        """The register holding check slot ``slot``'s limit: loaded by the
        prologue, or (a kernel of a debug build whose limits are parameters)
        from its parameter into ``out``, right before the compare that uses
        it.  ptxas at -O3 reads a parameter loaded once from the constant bank
        at each use and keeps none in a register, but at -O0 (``-G``) it keeps
        every value the prologue loads in a register for the whole kernel:
        two per slot (issue 14: over the corpus's 288 -G kernels, 220 need
        fewer registers loaded at each use, none more)."""
        lim = self.reg(f"lim{slot}", ".b64")
        if self.limits_at_use:
            out.append(I("ld.param.u64", lim, Address(Symbol(limit_param(slot)))))
        else:
            self.hoisted_limits.add(slot)
        return lim

    @functools.cached_property
    def debug(self) -> bool:
        """Whether the function is of a debug build (``.target ..., debug``:
        ptxas compiles it at -O0, where every value the prologue computes
        stays in a register for the whole function)."""
        target = self.plan.module.target
        return target is not None and "debug" in target.targets

    @functools.cached_property
    def limits_at_use(self) -> bool:
        """Whether each filter loads its limit from its parameter (:meth:`limit`)."""
        plan = self.plan
        return self.debug and plan.kernel and limits_as_params(plan.fn.params, len(plan.slots))

    def pinned_limit(self, base: str, end: int) -> str:
        """The register holding how many offsets ``X`` from the pinned base
        ``base`` keep ``[X, X + end)`` inside its allocation (its query sets it)."""
        key = (base, end)
        if key not in self.pinned:
            self.pinned[key] = self.reg(f"pin{len(self.pinned)}", ".b64")
        return self.pinned[key]

    # -- filters --------------------------------------------------------------

    def emit(self, conds: list[Cond], slow: str | None, *, pred: str | None = None,
             seed: str | None = None) -> list[Statement]:
        """Instructions that branch to ``slow`` when any condition holds, or
        (``slow`` None) only set ``pred`` to whether any holds (then no
        condition may fail unconditionally: see ``conditions.constant_failure``).
        ``seed``: a predicate ORed in (the loop's hoisted invariant checks)."""
        plan = self.plan
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
            form = c.form
            if form is Form.ALWAYS:
                return [I("bra.uni", slow)]
            if form in (Form.ROOT_OFFSET, Form.ROOT_CONSTANT, Form.ROOT_ADDRESS):
                if c.start < 0 and form is Form.ROOT_CONSTANT:
                    return [I("bra.uni", slow)]
                lim = self.limit(plan.slot(c.root, c.end, c.align), out)  # type: ignore[arg-type]
                if form is Form.ROOT_CONSTANT:
                    setp("eq", 64, lim, 0)
                    continue
                if form is Form.ROOT_ADDRESS:
                    out.append(I("sub.u64", t64, c.reg, self.reg(f"pv{c.root}", ".b64")))
                    x = t64
                else:
                    x = c.reg
                if c.start < 0:
                    setp("lt", 64, x, -c.start)
                setp("ge", 64, x, lim)
            elif form is Form.WINDOW_ADDRESS:
                name, vspace, bits = c.root  # type: ignore[misc]
                root = plan.vars[name]
                t = t64 if bits == 64 else self.reg("u", ".b32")
                if self.debug and c.reg != t:
                    # the variable's address where it is compared, not in
                    # the prologue (see ``debug``): 12 -G kernels of the
                    # corpus need fewer registers, none more
                    out.append(I(f"mov.u{bits}", t, name))
                    if vspace == "generic":
                        out.append(I(f"cvta.{root.space}.u64", t, t))
                    out.append(I(f"sub.u{bits}", t, c.reg, t))
                else:
                    out.append(I(f"sub.u{bits}", t, c.reg, self._var_form(root, vspace, bits)))
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
            elif form is Form.WINDOW_OFFSET:
                name, vspace, bits = c.root  # type: ignore[misc]
                root = plan.vars[name]
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
            elif form is Form.PINNED:
                setp("ge", 64, c.reg, self.pinned_limit(c.root, c.end))  # type: ignore[arg-type]
            elif form is Form.LOOKUP:
                lo, hi = self.reg("uclo", ".b64"), self.reg("uchi", ".b64")
                out.append(I("sub.u64", t64, hi, c.end))
                setp("gt", 64, c.reg, t64)
                if c.start:
                    out.append(I("sub.u64", t64, lo, c.start))
                    setp("lt", 64, c.reg, t64)
                else:
                    setp("lt", 64, c.reg, lo)
            elif form is Form.ALIGNMENT:
                imm, absolute = c.root  # type: ignore[misc]
                if c.reg is None:
                    if (absolute % c.align) != 0:
                        return [I("bra.uni", slow)]
                    continue
                bits = plan.bits(c.reg)
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

    def emit_keeping_predicate(self, conds: list[Cond], slow: str,
                               seed: str | None) -> tuple[list[Statement], str]:
        """The filter of a unit other filters are dominated by, and the
        predicate it leaves: a register nothing else writes (or, when every
        condition went to the loop's preheader, the loop's invariant predicate,
        written once)."""
        if not conds:
            assert seed is not None
            return self.emit(conds, slow, seed=seed), seed
        pred = self.reg(f"d{len(self.extra_regs)}", ".pred")
        return self.emit(conds, slow, pred=pred, seed=seed), pred

    def lookup_filter(self, acc: Access, slow: str) -> list[Statement]:
        """An unknown-provenance access: the address against the last
        allocation the runtime found, and its alignment."""
        a = acc.access
        p = self.reg("p", ".pred")
        t64 = self.reg("t", ".b64")
        out: list[Statement] = []
        if a.space not in ("global", "generic") or a.width == 0:
            return [I("bra.uni", slow)]
        addr, bits = self.address_reg(acc, out)
        if bits != 64:
            return [I("bra.uni", slow)]
        lo, hi = self.reg("uclo", ".b64"), self.reg("uchi", ".b64")
        out.append(I("sub.u64", t64, hi, a.width))
        out.append(I("setp.gt.u64", p, addr, t64))
        out.append(I("setp.lt.or.u64", p, addr, lo, p))
        if a.alignment > 1:
            out.append(I("and.b64", t64, addr, a.alignment - 1))
            out.append(I("setp.ne.or.b64", p, t64, 0, p))
        out.append(I("bra", slow, guard=ptx.Guard(p)))
        return out

    def argument_window(self, k: int, space: str = "local", bits: int = 64,
                        out: list[Statement] | None = None) -> tuple[str, str]:
        """Registers holding the window of pointer parameter ``k`` as
        ``space`` addresses of ``bits`` bits: its low end and its size (the
        prologue loads them).  Where the size is kept in 32 bits
        (:attr:`narrow_windows`) it is widened into a temporary, appended
        to ``out``, and that temporary returned."""
        key = (k, space, bits)
        tag = f"{k}{_FORM_TAGS[space]}{'' if bits == 64 else 'h'}"
        narrow = bits == 64 and self.narrow_windows
        self.argument_forms.setdefault(key, (self.reg(f"wl{tag}", f".b{bits}"),
                                             self.reg(f"wn{tag}", ".b32" if narrow
                                                      else f".b{bits}")))
        low, size = self.argument_forms[key]
        if not narrow:
            return low, size
        assert out is not None
        wide = self.reg("wz", ".b64")
        out.append(I("cvt.u64.u32", wide, size))
        return low, wide

    @functools.cached_property
    def narrow_windows(self) -> bool:
        """Whether a window's size is kept in 32 bits, at most 0xffffffff
        (a larger allocation's window shrinks to its first 4 GiB: an access
        past them goes to the slow path, which judges a root against its
        bounds in the launch context): in a device function of a debug
        build, where ptxas at -O0 keeps the window from entry in callee-saved
        registers beside the values live across the tally's call
        (``table_sum`` of ``device_global_ptr`` -G sm_80 40 -> 34), that
        makes no atomic access (the -G atomics' callees: up to 11 more,
        ptxas), when every variable of the module is smaller (a variable's
        window is judged against its size in the slow path)."""
        plan = self.plan
        if plan.kernel or not self.debug or any(
                a.instr.op in ("atom", "red") for a in plan.accesses):
            return False
        for item in plan.module.items:
            if type(item) is Variable and item.space in (".global", ".const") and (
                    item.size is None or item.size >= 0xFFFFFFFF):
                return False
        return True

    def argument_filter(self, acc: Access, slow: str) -> list[Statement]:
        """An access through a pointer parameter whose callers pass a
        window: checked against the window here when every caller passes a
        known one (``plan.decided``) or the access is local (an unknown
        window, ``[0, 0)``, always goes to the slow path); otherwise a
        lookup (the runtime's slow path knows the window)."""
        a = acc.access
        v = acc.value
        assert isinstance(v, prov.Ptr) and isinstance(v.root, prov.ArgRoot)
        if a.space != "local" and v.root.index not in self.plan.decided:
            return self.lookup_filter(acc, slow)
        if a.width == 0:
            return [I("bra.uni", slow)]
        out: list[Statement] = []
        addr, bits = self.address_reg(acc, out)
        p = self.reg("p", ".pred")
        t = self.reg("t", ".b64") if bits == 64 else self.reg("u", ".b32")
        low, size = self.argument_window(v.root.index, a.space, bits, out)
        w = a.width
        out.append(I(f"sub.u{bits}", t, addr, low))
        out.append(I(f"add.u{bits}", t, t, w))
        out.append(I(f"setp.gt.u{bits}", p, t, size))
        out.append(I(f"setp.lt.or.u{bits}", p, t, w, p))
        if a.alignment > 1:
            out.append(I(f"and.b{bits}", t, addr, a.alignment - 1))
            out.append(I(f"setp.ne.or.b{bits}", p, t, 0, p))
        out.append(I("bra", slow, guard=ptx.Guard(p)))
        return out

    def alignment_filter(self, acc: Access, slow: str) -> list[Statement]:
        """A local access through an unknown pointer: its alignment only."""
        p = self.reg("p", ".pred")
        t64 = self.reg("t", ".b64")
        out: list[Statement] = []
        addr, bits = self.address_reg(acc, out)
        t = t64 if bits == 64 else self.reg("u", ".b32")
        out.append(I(f"and.b{bits}", t, addr, acc.access.alignment - 1))
        out.append(I(f"setp.ne.b{bits}", p, t, 0))
        out.append(I("bra", slow, guard=ptx.Guard(p)))
        return out

    # -- the prologue ---------------------------------------------------------

    def prologue(self) -> list[Statement]:
        """What the function computes once on entry: the limits of its check
        slots, the pointers of fallback roots, the addresses of the variables
        its window checks compare with, the dynamic shared size and the empty
        lookup cache."""
        plan = self.plan
        out: list[Statement] = []
        ctx = self.ctx()
        if plan.uses_dyn or (self.hoisted_limits and not (
                plan.kernel and limits_as_params(plan.fn.params, len(plan.slots)))):
            out.append(self.load_ctx())
        nroots = len(plan.roots)
        in_params = plan.kernel and limits_as_params(plan.fn.params, len(plan.slots))
        for i in sorted(self.hoisted_limits):
            lim = self.reg(f"lim{i}", ".b64")
            if in_params:
                out.append(I("ld.param.u64", lim, Address(Symbol(limit_param(i)))))
            else:
                out.append(I("ld.global.u64", lim,
                             Address(Register(ctx), layout.limit_offset(nroots, i))))
        for r in sorted(plan.fallback_roots):
            root = plan.roots[r]
            out.append(I("ld.param.u64", self.reg(f"pv{r}", ".b64"),
                         Address(Symbol(root.param), root.offset)))
        for (name, space, bits), reg in self.var_forms.items():
            root = plan.vars[name]
            out.append(I(f"mov.u{bits}", reg, name))
            if space == "generic":
                out.append(I(f"cvta.{root.space}.u64", reg, reg))
        if plan.uses_dyn:
            d32 = self.reg("dyn32", ".b32")
            out.append(I("ld.global.u32", d32, Address(Register(ctx),
                         layout.LAUNCH_CONTEXT.offset("dynamic_shared_size"))))
            out.append(I("cvt.u64.u32", self.reg("dyn", ".b64"), d32))
        if plan.uses_cache:
            out.append(I("mov.u64", self.reg("uclo", ".b64"), layout.EMPTY_WINDOW[0]))
            out.append(I("mov.u64", self.reg("uchi", ".b64"), layout.EMPTY_WINDOW[1]))
        for (k, space, bits), (low, size) in sorted(self.argument_forms.items()):
            lo_param, hi_param = window_params(k)
            narrow = bits == 64 and self.narrow_windows
            lo64, size64 = (low, size) if bits == 64 and not narrow else (
                low if bits == 64 else self.reg("t", ".b64"), self.reg("a", ".b64"))
            out.append(I("ld.param.u64", lo64, Address(Symbol(lo_param))))
            out.append(I("ld.param.u64", size64, Address(Symbol(hi_param))))
            out.append(I("sub.u64", size64, size64, lo64))
            if space != "generic":
                out.append(I(f"cvta.to.{space}.u64", lo64, lo64))
            if narrow:
                out.append(I("min.u64", size64, size64, 0xFFFFFFFF))
                out.append(I("cvt.u32.u64", size, size64))
            if bits != 64:
                out.append(I("cvt.u32.u64", low, lo64))
                out.append(I("cvt.u32.u64", size, size64))
        return out
