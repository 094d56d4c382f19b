"""Device-function calls in the JIT: each direct ``call`` of a ``.func`` of
the module is inlined into the kernel before lowering.

``.param`` variables (the caller's argument and return variables of ``-G``
and ``-O3`` builds, the callee's parameters and return values) become
registers of 8 bytes each (hidden names ``var#k``), so they are saved across
suspensions like any register and their byte layout is the interpreter's
(:mod:`gpusafe.cpu.call_operands`: arguments copied into a fresh, zeroed
parameter area, return values copied back for as many bytes as both have).
Each inlined copy of a callee gets its own scope, hence its own registers and
labels; ``vprintf`` calls back into Python (:meth:`CallLowering.printf_call`).
Refused, with the reason: indirect calls, external functions other than
``vprintf`` (``malloc``, ``free``, ``__assertfail``), recursion, callees with ``.local``/``.shared``
variables (the interpreter grows the thread's stack for their frame, which
moves the bound of a bad local access).  A barrier or warp-synchronous
instruction in a callee suspends as in the kernel: the lanes that meet at it
are those at the same instruction of the same inlined copy, as the
interpreter gathers the lanes that reach one call site before they call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpusafe_instrument import nodes

from .devcalls import PRINTF, PRINTF_LOCAL, PRINTF_SHARED
from .values import BITS, Unsupported, Values, llvm_type, split_type

MAX_INLINED = 20000
"""Flat instructions after inlining, at most: a call tree that big stays on
the interpreter rather than make a huge LLVM function."""


@dataclass
class CallSite:
    """One inlined call: where its callee's copy ends and what moves in and out."""

    instr: nodes.Instruction
    callee: nodes.Function
    caller_scopes: list
    callee_scope: dict
    rets: tuple
    args: tuple
    after: int = -1  # flat index of the return entry
    params: list = field(default_factory=list)  # param variables of the callee: zeroed at entry


class CallLowering(Values):
    """Inlining (:meth:`inline`) and ``.param`` variables as 8-byte registers."""

    functions: dict
    calls: dict  # flat index of a call -> CallSite
    returns: dict  # flat index of a return entry -> CallSite
    ret_to: dict  # flat index of a callee's ret -> its return entry
    inlining: list  # (CallSite, [flat indices of its rets]) of the calls being inlined
    param_sizes: dict  # hidden base name -> bytes

    def init_calls(self, functions: dict) -> None:
        self.functions = functions
        self.calls, self.returns, self.ret_to = {}, {}, {}
        self.inlining = []
        self.param_sizes = {}
        self.param_slots: dict[str, list[str]] = {}  # hidden base name -> its allocas
        self.printfs: dict[int, tuple] = {}  # flat index of a vprintf call -> (rets, args)
        self.stack_depth = 0
        self.atomics = 0

    # -- .param variables as registers ----------------------------------------

    def param_var(self, name: str, size: int) -> None:
        base = f"{name}#{len(self.param_sizes)}"
        slots = []
        for k in range(max(1, -(-size // 8))):
            self.declare(f"{base}#{k}", "b64")
            slots.append(self.scopes[-1][f"{base}#{k}"][0])
        self.param_slots[base] = slots
        self.scopes[-1][("param", name)] = base
        self.param_sizes[base] = size
        if self.inlining:
            self.inlining[-1][0].params.append(base)

    def param_base(self, name: str, scopes: list | None = None) -> str | None:
        for scope in reversed(self.scopes if scopes is None else scopes):
            base = scope.get(("param", name))
            if base is not None:
                return base
        return None

    @contextmanager
    def _names_in(self, scopes: list) -> Iterator[None]:
        """Registers and ``.param`` names resolved in ``scopes`` meanwhile."""
        saved = self.scopes
        self.scopes = scopes
        try:
            yield
        finally:
            self.scopes = saved

    def _slot(self, base: str, k: int) -> nodes.Register:
        return nodes.Register(f"{base}#{k}")

    def _mask(self, bytes_: int) -> int:
        return self._signed((1 << (8 * bytes_)) - 1, 64)

    def param_access(self, instr: nodes.Instruction) -> bool:
        """``ld.param``/``st.param`` of a ``.param`` variable; False for
        anything else (a kernel parameter)."""
        a = instr.operands[0] if instr.op == "st" else instr.operands[1]
        if not isinstance(a, nodes.Address) or not isinstance(a.base, nodes.Symbol):
            return False
        base = self.param_base(a.base.name)
        if base is None:
            return False
        mods, t = split_type(instr)
        count = 1
        for m in mods:
            if m in ("v2", "v4"):
                count = int(m[1])
            elif m != "param":
                raise self.fail(f"modifier {m} on a .param variable")
        if t == "pred":
            raise self.fail("predicate in a .param variable")
        width = BITS[t]
        other = instr.operands[1] if instr.op == "st" else instr.operands[0]
        items = other.items if isinstance(other, nodes.Vector) else (other,)
        if len(items) != count:
            raise self.fail("vector length")
        for k, item in enumerate(items):
            offset = a.offset + k * width // 8
            slot, shift = divmod(offset, 8)
            if offset < 0 or shift * 8 + width > 64 or slot >= -(-self.param_sizes[base] // 8):
                raise self.fail("a .param access across 8 bytes or outside the variable")
            reg = self._slot(base, slot)
            if instr.op == "ld":
                v = self.read(reg, "b64")
                if shift:
                    s = self.new()
                    self.emit(f"{s} = lshr i64 {v}, {shift * 8}")
                    v = s
                self.write(item, t, self.to_type(self.adapt(v, 64, width, False), t))
            else:
                v = self.read(item, t)
                if t in ("f32", "f64"):
                    b = self.new()
                    self.emit(f"{b} = bitcast {llvm_type(t)} {v} to i{width}")
                    v = b
                self.merge(reg, self.adapt(v, width, 64, False), shift * 8, width)
        return True

    def merge(self, reg: nodes.Register, value: str, shift: int, width: int) -> None:
        """Store the low ``width`` bits of i64 ``value`` at bit ``shift`` of ``reg``."""
        if width == 64:
            self.write(reg, "b64", value)
            return
        old, kept, moved, out = (self.new() for _ in range(4))
        keep = self._signed(~(((1 << width) - 1) << shift), 64)
        self.emit(f"{old} = load i64, ptr {self.register(reg.name)[0]}")
        self.uses[self.index].add(self.register(reg.name)[0])
        self.emit(f"{kept} = and i64 {old}, {keep}")
        self.emit(f"{moved} = shl i64 {value}, {shift}")
        self.emit(f"{out} = or i64 {kept}, {moved}")
        self.write(reg, "b64", out)

    # -- inlining -------------------------------------------------------------

    def inline(self, instr: nodes.Instruction, out: list) -> None:
        ops = list(instr.operands)
        rets: tuple = ()
        if ops and isinstance(ops[0], nodes.ArgumentList):
            rets = tuple(ops.pop(0).items)
        if not ops or not isinstance(ops[0], nodes.Symbol):
            raise Unsupported("an indirect call", instr.line)
        name = ops[0].name
        args = tuple(ops[1].items) if len(ops) > 1 and isinstance(ops[1],
                                                                 nodes.ArgumentList) else ()
        if len(ops) > 2 or (len(ops) == 2 and not isinstance(ops[1], nodes.ArgumentList)):
            raise Unsupported(f"call of {name} with a prototype or target list", instr.line)
        callee = self.functions.get(name)
        if callee is None or callee.body is None:
            if name == "vprintf" and len(args) == 2 and len(rets) <= 1:
                self.printfs[len(out)] = (rets, args)
                out.append((instr, list(self.scopes)))
                return
            raise Unsupported(f"call of the external function {name}", instr.line)
        if any(site.callee.name == name for site, _ in self.inlining):
            raise Unsupported(f"a recursive call of {name}", instr.line)
        self._check_callee(callee)
        params = callee.params
        returns = callee.returns or []
        if len(args) != len(params) or len(rets) > len(returns):
            raise Unsupported(f"call of {name} with {len(args)} arguments and {len(rets)} "
                              "results", instr.line)
        if any(p.space != ".param" for p in [*params, *returns]):
            raise Unsupported(f"call of {name}: .reg parameters", instr.line)
        scope: dict = {}
        site = CallSite(instr, callee, list(self.scopes), scope, rets, args)
        with self._names_in([scope]):
            for p in [*params, *returns]:
                self.param_var(p.name, p.size)
            site.params = [self.param_base(p.name) for p in returns]
        self.calls[len(out)] = site
        out.append((instr, list(self.scopes)))
        self.inlining.append((site, []))
        self.stack_depth = max(self.stack_depth, len(self.inlining))
        with self._names_in([scope]):
            self.flatten(callee.body, out)
            # the decoder's implicit return of a function: one instruction
            ret = nodes.Instruction("ret", line=callee.line)
            self.inlining[-1][1].append(len(out))
            out.append((ret, [scope]))
            _, rets_at = self.inlining.pop()
        site.after = len(out)
        for i in rets_at:
            self.ret_to[i] = site.after
        self.returns[len(out)] = site
        out.append((nodes.Instruction("ret", line=instr.line), list(self.scopes)))
        if len(out) > MAX_INLINED:
            raise Unsupported(f"more than {MAX_INLINED} instructions after inlining calls",
                              instr.line)

    def _check_callee(self, callee: nodes.Function) -> None:
        def walk(statements: list) -> None:
            for s in statements:
                if isinstance(s, nodes.Block):
                    walk(s.statements)
                elif isinstance(s, nodes.Variable) and s.space != ".param":
                    raise Unsupported(f"call of {callee.name}: a device function with "
                                      f"{s.space} variables", s.line)
        walk(callee.body or [])

    def note_ret(self, index: int) -> None:
        if self.inlining:
            self.inlining[-1][1].append(index)

    # -- vprintf ----------------------------------------------------------------

    def printf_call(self, index: int) -> None:
        """``vprintf(format, arguments)``: the access callback reads this
        thread's memory and writes the text (:mod:`.devcalls`); its length is
        the result, as the interpreter's ``device_calls._vprintf`` returns."""
        rets, args = self.printfs[index]
        vals = []
        for a in args:
            base = self.param_base(a.name) if isinstance(a, nodes.Symbol) else None
            if base is None:
                raise self.fail("vprintf arguments other than .param variables")
            vals.append(self.read(self._slot(base, 0), "b64"))
        line = self.instr.line if self.instr else 0
        fpp, fp, lp, sp, r, ri, bad, n = (self.new() for _ in range(8))
        self.emit(f"{fpp} = getelementptr i64, ptr %ctx, i64 4\n  {fp} = load ptr, ptr {fpp}\n"
                  f"  {lp} = ptrtoint ptr %local to i64\n  {sp} = ptrtoint ptr %shared to i64\n"
                  f"  call ptr {fp}(i64 {lp}, i64 %lstride, i32 {PRINTF_LOCAL}, i32 {line})\n"
                  f"  call ptr {fp}(i64 {sp}, i64 %sstride, i32 {PRINTF_SHARED}, i32 {line})\n"
                  f"  {r} = call ptr {fp}(i64 {vals[0]}, i64 {vals[1]}, i32 {PRINTF}, "
                  f"i32 {line})\n  {ri} = ptrtoint ptr {r} to i64\n"
                  f"  {bad} = icmp eq i64 {ri}, 0\n  {n} = sub i64 {ri}, 1")
        self.tmp += 1
        ok = f"ok{self.tmp}"
        self.emit(f"br i1 {bad}, label %fault, label %{ok}")
        self.lines.append(f"{ok}:")
        if rets:
            base = self.param_base(rets[0].name) if isinstance(rets[0], nodes.Symbol) else None
            if base is None:
                raise self.fail("vprintf's result in other than a .param variable")
            self.write(self._slot(base, 0), "b64", n)

    # -- moving arguments and results -----------------------------------------

    def call_entry(self, site: CallSite) -> None:
        """Arguments into the callee's fresh parameter area (zeroed beyond
        what the caller supplies), its return values zeroed."""
        # the callee's scope first: the caller's names win, the hidden ones are unique
        with self._names_in([site.callee_scope, *site.caller_scopes]):
            self._enter(site)

    def _enter(self, site: CallSite) -> None:
        for base in site.params:
            for slot in self.param_slots[base]:
                if site.instr.guard is None:
                    self.defs[self.index].add(slot)
                self.emit(f"store i64 0, ptr {slot}")
        for arg, p in zip(site.args, site.callee.params, strict=True):
            dst = self.param_base(p.name, [site.callee_scope])
            chunks = self._source(arg, p.size, site.caller_scopes)
            for k in range(-(-p.size // 8)):
                self.write(self._slot(dst, k), "b64", chunks[k] if k < len(chunks) else "0")

    def _source(self, arg: nodes.Operand, size: int, scopes: list) -> list[str]:
        """The caller's first ``size`` bytes of an argument, as i64 values of
        8 bytes each (fewer: the rest is zero)."""
        with self._names_in(scopes):
            name = arg.name if isinstance(arg, (nodes.Symbol, nodes.Register)) else None
            base = self.param_base(name) if name is not None else None
            if base is not None:
                n = min(size, self.param_sizes[base])
                out = []
                for k in range(-(-n // 8)):
                    v = self.read(self._slot(base, k), "b64")
                    out.append(self._low(v, n - 8 * k))
                return out
            if name is not None and self.is_register(name):
                _, have = self.register(name)
                if have == 1:
                    raise self.fail("a predicate passed to a call")
                v = self.adapt(self.read(nodes.Register(name), f"b{have}"), have, 64, False)
                return [self._low(v, min(size, have // 8))]
            if isinstance(arg, nodes.Immediate) and isinstance(arg.value, int):
                raw = arg.value & ((1 << (8 * size)) - 1)
                return [str(self._signed(raw >> (64 * k), 64)) for k in range(-(-size // 8))]
            raise self.fail(f"call argument {arg}")

    def _low(self, v: str, n: int) -> str:
        if n >= 8:
            return v
        out = self.new()
        self.emit(f"{out} = and i64 {v}, {self._mask(n)}")
        return out

    def call_return(self, site: CallSite) -> None:
        """Return values back to the caller: as many bytes as both have."""
        with self._names_in([site.callee_scope, *site.caller_scopes]):
            self._leave(site)

    def _leave(self, site: CallSite) -> None:
        for ret, p in zip(site.rets, site.callee.returns or [], strict=False):
            src = self.param_base(p.name, [site.callee_scope])
            name = ret.name if isinstance(ret, (nodes.Symbol, nodes.Register)) else None
            base = self.param_base(name, site.caller_scopes) if name is not None else None
            if base is not None:
                width = min(self.param_sizes[base], p.size)
                for k in range(-(-width // 8)):
                    v = self.read(self._slot(src, k), "b64")
                    n = min(8, width - 8 * k)
                    self.merge(self._slot(base, k), self._low(v, n), 0, 8 * n)
            elif name is not None and any(name in sc for sc in site.caller_scopes):
                _, have = self.register(name)
                if have == 1:
                    raise self.fail("a predicate returned from a call")
                v = self._low(self.read(self._slot(src, 0), "b64"), min(8, p.size))
                self.write(nodes.Register(name), f"b{have}", self.adapt(v, 64, have, False))
            else:
                raise self.fail(f"call result {ret}")
