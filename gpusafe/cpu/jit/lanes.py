"""Warps as vectors: a second lowering, ``@warp`` runs the 32 lanes of a warp.

Every PTX register is a ``<32 x iN>`` vector (:mod:`.lanes_values`); an
instruction runs for the warp's *active* lanes at once (an ``<32 x i1>``), and
each counts ``popcount(active)`` executed instructions, so a launch's total is
the interpreter's.  Only kernels whose every instruction this lowering covers
run so (:func:`why_not_lanes`, then the lowering itself may still refuse,
:class:`~.values.Unsupported`); every other kernel keeps the per-thread
lowering (:mod:`.lower`), never refused for this.

*Control flow is the interpreter's* (:mod:`gpusafe.cpu.scheduler`): the lanes
at the smallest PC run together.  Each lane not active holds in ``%pcv``
where it waits: a PC (a branch target or a conditional branch's fall-through:
the *join points*), a PC with :data:`WARP_WAIT` (at a warp instruction whose
member lanes are not all there), with :data:`AT_BARRIER` (after a
``bar.sync``), or :data:`DONE`.  A branch all active lanes agree on is a
branch (forward only when no lane waits below its target); a divergent one
stores both sides' PCs and *picks*: the smallest waiting PC's lanes become
active (a ``switch`` over the PCs lanes may wait at there, each pick its
own: :func:`.lanes_picks.plan_picks`), and at every join point the lanes
waiting there join.
When only warp-waiting lanes are left they run with whoever is there, as the
interpreter forces them; when only barrier-waiting lanes are left the warp
returns to the block loop (:mod:`.lanes_loop`), which runs warps in rounds as
the per-thread loop runs threads.  A loop yields every
:data:`~.regions.SPIN_YIELD` backward branches, as a thread does.

Registers live where the warp may resume (its join points) live in the warp's
frame (256 bytes a register); the rest are ``alloca``s.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusafe_instrument import nodes

from .alu import AluLowering
from .bits import BitLowering
from .floats import FloatLowering
from .lanes_groups import load_runs
from .lanes_mem import LaneMemory
from .lanes_picks import AT_BARRIER, DONE, WARP_WAIT, pick_blocks, pick_label, plan_picks
from .lanes_vec import LANES, splat, vec_type, vectorize_declaration
from .regions import SPIN_YIELD, live_at
from .unary import UnaryLowering
from .values import BITS, Unsupported

__all__ = ["AT_BARRIER", "DONE", "WARP_WAIT", "lower_lanes", "why_not_lanes"]

FRAME_SLOT = 256  # bytes of one register in the warp's frame (<32 x i64> at most)
_V1 = vec_type("i1")
_V32 = vec_type("i32")
_WARP_OPS = {"shfl", "vote"}
_OWN = {"ld", "st", "atom", "red", "shfl", "vote", "bar", "barrier", "bra", "ret", "exit"}
_ALU = {"mov", "add", "sub", "mul", "mad", "fma", "and", "or", "xor", "not", "shl", "shr",
        "setp", "selp", "cvt", "cvta", "min", "max", "neg", "abs", "popc", "clz", "brev",
        "bfind", "sad", "div", "rem", "sqrt", "rcp", "ex2", "lg2", "sin", "cos", "rsqrt",
        "shf", "bfe", "bfi", "prmt", "mul24", "mad24", "copysign", "testp", "lop3", "fns"}


def why_not_lanes(function: nodes.Function) -> str | None:
    """Why ``function`` is outside the lanes lowering (decided from its
    instructions alone), or None when it may be lowered so."""
    if not function.is_kernel:
        return "not a kernel"

    def walk(statements: list) -> str | None:
        for s in statements:
            if isinstance(s, nodes.Block):
                why = walk(s.statements)
                if why:
                    return why
            elif isinstance(s, nodes.Variable) and s.space != ".shared":
                return f"{s.space} variable {s.name}"
            elif isinstance(s, nodes.Targets):
                return "branch target lists"
            elif isinstance(s, nodes.Instruction):
                if s.op not in _OWN and s.op not in _ALU:
                    return f"{s.opcode} (line {s.line})"
                if s.op in ("bar", "barrier") and s.guard is not None:
                    return f"a guarded barrier (line {s.line})"
        return None
    return walk(function.body or [])


class _LaneLowerer(LaneMemory, AluLowering, UnaryLowering, BitLowering, FloatLowering):
    """The kernel's structure as a warp's: active lanes, waiting PCs, picks."""

    def flatten(self, statements: list, out: list) -> None:
        for s in statements:
            if isinstance(s, nodes.Instruction):
                out.append((s, list(self.scopes)))
            elif isinstance(s, nodes.Label):
                self.scopes[-1][("label", s.name)] = len(out)
            elif isinstance(s, nodes.RegisterDecl):
                if s.vector:
                    raise Unsupported("vector registers", s.line)
                for name in s.registers():
                    self.declare(name, s.type.lstrip("."))
            elif isinstance(s, nodes.Block):
                self.scopes.append({})
                self.flatten(s.statements, out)
                self.scopes.pop()
            elif isinstance(s, nodes.Variable) and s.space == ".shared":
                self.scopes[-1][("shared", s.name)] = True
            elif not isinstance(s, (nodes.Loc, nodes.Pragma)):
                raise Unsupported(f"statement {type(s).__name__} (lanes)", getattr(s, "line", None))

    def target(self, instr: nodes.Instruction) -> int:
        ops = instr.operands
        if len(ops) == 1 and isinstance(ops[0], nodes.Symbol):
            for scope in reversed(self.scopes):
                index = scope.get(("label", ops[0].name))
                if index is not None:
                    return index
        raise self.fail("branch target")

    def branch_target(self, i: int) -> int:
        """The index the ``bra`` at ``i`` goes to, in its own scopes."""
        self.scopes = self.flat_scopes[i]
        return self.target(self.flat[i])

    def successors(self, i: int) -> list[int]:
        instr = self.flat[i]
        guarded = instr.guard is not None
        if instr.op == "bra":
            t = self.branch_target(i)
            return [t, i + 1] if guarded else [t]
        if instr.op in ("ret", "exit"):
            return [i + 1] if guarded else []
        return [i + 1]

    # -- the mask and the waiting PCs -----------------------------------------------

    def count(self, act: str) -> None:
        n = "_" + self.new()[2:]
        self.raw(f"%cb{n} = bitcast {_V1} {act} to i32\n"
                 f"  %cp{n} = call i32 @llvm.ctpop.i32(i32 %cb{n})\n"
                 f"  %cz{n} = zext i32 %cp{n} to i64\n  %co{n} = load i64, ptr %cnt\n"
                 f"  %cs{n} = add i64 %co{n}, %cz{n}\n  store i64 %cs{n}, ptr %cnt")

    def active(self) -> str:
        a = self.new()
        self.raw(f"{a} = load {_V1}, ptr %act")
        return a

    def wait(self, lanes: str, pc: int) -> None:
        """``lanes`` wait at ``pc`` (flags included)."""
        p, q = self.new(), self.new()
        self.raw(f"{p} = load {_V32}, ptr %pcv\n"
                 f"  {q} = select {_V1} {lanes}, {_V32} {splat('i32', str(pc))}, {_V32} {p}\n"
                 f"  store {_V32} {q}, ptr %pcv\n  store i1 true, ptr %wt")

    def join(self, i: int, warp: bool) -> None:
        """Lanes waiting at ``i`` join the active ones; skipped (one branch)
        while no lane of the warp waits anywhere (``%wt``: the common,
        converged case)."""
        n = "_" + self.new()[2:]
        self.raw(f"%jt{n} = load i1, ptr %wt\n  br i1 %jt{n}, label %JS{n}, label %JF{n}")
        self.lines.append(f"JS{n}:")
        self.raw(f"%jp{n} = load {_V32}, ptr %pcv\n"
                 f"  %jw{n} = icmp eq {_V32} %jp{n}, {splat('i32', str(i))}")
        w = f"%jw{n}"
        if warp:
            self.raw(f"%jx{n} = icmp eq {_V32} %jp{n}, {splat('i32', str(i | WARP_WAIT))}\n"
                     f"  %jy{n} = or {_V1} %jw{n}, %jx{n}")
            w = f"%jy{n}"
        self.raw(f"%ja{n} = load {_V1}, ptr %act\n  %jn{n} = or {_V1} %ja{n}, {w}\n"
                 f"  store {_V1} %jn{n}, ptr %act\n"
                 f"  %jq{n} = select {_V1} {w}, {_V32} {splat('i32', str(DONE))}, {_V32} %jp{n}\n"
                 f"  store {_V32} %jq{n}, ptr %pcv\n"
                 f"  %jr{n} = icmp ne {_V32} %jq{n}, {splat('i32', str(DONE))}\n"
                 f"  %jrb{n} = bitcast {_V1} %jr{n} to i32\n"
                 f"  %jre{n} = icmp ne i32 %jrb{n}, 0\n  store i1 %jre{n}, ptr %wt\n"
                 f"  br label %JF{n}")
        self.lines.append(f"JF{n}:")

    def guard_mask(self, instr: nodes.Instruction, act: str) -> str:
        if instr.guard is None:
            return act
        g = self.read(nodes.Register(instr.guard.register), "pred")
        out = self.new()
        if instr.guard.negated:
            ng = self.new()
            self.raw(f"{ng} = xor {_V1} {g}, {splat('i1', 'true')}")
            g = ng
        self.raw(f"{out} = and {_V1} {act}, {g}")
        return out

    def spin(self, i: int, then: str) -> str:
        """A backward branch: every ``SPIN_YIELD`` the warp yields (its active
        lanes wait at the loop's head, the caller stored that), else ``then``."""
        n = "_" + self.new()[2:]
        self.raw(f"%y{n} = load i32, ptr %spin\n  %y{n}n = add i32 %y{n}, 1\n"
                 f"  store i32 %y{n}n, ptr %spin\n  %y{n}h = icmp eq i32 %y{n}n, {SPIN_YIELD}\n"
                 f"  br i1 %y{n}h, label %Y{n}, label {then}")
        self.lines.append(f"Y{n}:")
        return n

    def branch(self, i: int, instr: nodes.Instruction, act: str) -> None:
        t = self.target(instr)
        n = "_" + self.new()[2:]
        if instr.guard is not None:
            taken = self.guard_mask(instr, act)
            self.raw(f"%tb{n} = bitcast {_V1} {taken} to i32\n"
                     f"  %ab{n} = bitcast {_V1} {act} to i32\n"
                     f"  %tn{n} = icmp eq i32 %tb{n}, 0\n"
                     f"  br i1 %tn{n}, label %L{i + 1}, label %BA{n}")
            self.lines.append(f"BA{n}:")
            self.raw(f"%tall{n} = icmp eq i32 %tb{n}, %ab{n}\n"
                     f"  br i1 %tall{n}, label %BU{n}, label %BD{n}")
            self.lines.append(f"BD{n}:")
            self.raw(f"%nt{n} = xor {_V1} {taken}, {act}")
            self.wait(taken, t)
            self.wait(f"%nt{n}", i + 1)
            self.raw(f"store {_V1} zeroinitializer, ptr %act")
            if t <= i:
                self.spin(i, pick_label(i, "div"))
                self.raw("br label %yield")
            else:
                self.raw(f"br label {pick_label(i, 'div')}")
            self.lines.append(f"BU{n}:")
        if t > i:  # forward: unless a lane waits below the target
            self.raw(f"%fp{n} = load {_V32}, ptr %pcv\n"
                     f"  %fm{n} = call i32 @llvm.vector.reduce.umin.v32i32({_V32} %fp{n})\n"
                     f"  %fok{n} = icmp uge i32 %fm{n}, {t}\n"
                     f"  br i1 %fok{n}, label %L{t}, label %BJ{n}")
            self.lines.append(f"BJ{n}:")
            self.wait(act, t)
            self.raw(f"store {_V1} zeroinitializer, ptr %act\n"
                     f"  br label {pick_label(i, 'below')}")
        else:
            self.spin(i, f"%L{t}")
            self.wait(act, t)
            self.raw(f"store {_V1} zeroinitializer, ptr %act\n  br label %yield")

    def warp_wait(self, i: int, instr: nodes.Instruction, act: str) -> None:
        """The interpreter's ``_split_ready``: lanes whose member mask has a live
        lane not here wait at ``i`` (not counted: they execute it once, later)."""
        mask_op = instr.operands[-1]
        m = self.vconst(self.read(mask_op, "b32"), "i32")
        n = "_" + self.new()[2:]
        # no lane waits anywhere: every live lane is here (converged: no check)
        self.raw(f"%wt{n} = load i1, ptr %wt\n  br i1 %wt{n}, label %WC{n}, label %W{i}")
        self.lines.append(f"WC{n}:")
        self.raw(f"%wp{n} = load {_V32}, ptr %pcv\n"
                 f"  %wl{n} = icmp ne {_V32} %wp{n}, {splat('i32', str(DONE))}\n"
                 f"  %wv{n} = or {_V1} %wl{n}, {act}\n"
                 f"  %wlb{n} = bitcast {_V1} %wv{n} to i32\n"
                 f"  %wab{n} = bitcast {_V1} {act} to i32\n"
                 f"  %wmiss{n} = xor i32 %wab{n}, -1\n"
                 f"  %wgone{n} = and i32 %wlb{n}, %wmiss{n}")
        gone = self.broadcast(f"%wgone{n}", "i32")
        self.raw(f"%wneed{n} = and {_V32} {m}, {gone}\n"
                 f"  %wok{n} = icmp eq {_V32} %wneed{n}, zeroinitializer\n"
                 f"  %wbad{n} = xor {_V1} %wok{n}, {splat('i1', 'true')}\n"
                 f"  %wwait{n} = and {_V1} %wbad{n}, {act}\n"
                 f"  %wwb{n} = bitcast {_V1} %wwait{n} to i32\n"
                 f"  %wnone{n} = icmp eq i32 %wwb{n}, 0\n"
                 f"  br i1 %wnone{n}, label %W{i}, label %WS{n}")
        self.lines.append(f"WS{n}:")
        self.wait(f"%wwait{n}", i | WARP_WAIT)
        self.raw(f"%wrun{n} = and {_V1} %wok{n}, {act}\n  store {_V1} %wrun{n}, ptr %act\n"
                 f"  %wrb{n} = bitcast {_V1} %wrun{n} to i32\n  %wre{n} = icmp eq i32 %wrb{n}, 0\n"
                 f"  br i1 %wre{n}, label {pick_label(i, 'ww')}, label %W{i}")
        self.lines.append(f"F{i}:")  # forced: nothing else of the warp can run
        self.raw(f"br label %W{i}")
        self.lines.append(f"W{i}:")

    # -- the kernel ---------------------------------------------------------------------

    def lower(self) -> str:
        f = self.function
        for p in f.params:
            if p.type.lstrip(".") not in BITS and p.type.lstrip(".") != "b8":
                raise Unsupported(f"kernel parameter type {p.type}", f.line)
        flat: list = []
        self.flatten(f.body or [], flat)
        self.flat_scopes = [s for _, s in flat]
        self.flat = [instr for instr, _ in flat]
        n = len(flat)
        self.uses = [set() for _ in range(n + 1)]
        self.defs = [set() for _ in range(n + 1)]
        joins, warps, suspends = set(), set(), False
        for i, (instr, scopes) in enumerate(flat):
            self.scopes = scopes
            if instr.op == "bra":
                t = self.target(instr)
                joins.add(t)
                suspends |= t <= i
                if instr.guard is not None:
                    joins.add(i + 1)
            elif instr.op in _WARP_OPS or (instr.op == "bar" and "warp" in instr.modifiers):
                warps.add(i)
            elif instr.op in ("bar", "barrier"):
                joins.add(i + 1)
                suspends = True
        self.joins, self.warp_points, self.suspends = joins, warps, suspends
        self.load_runs = load_runs(self.flat, joins | warps)
        self.picks = plan_picks(self.flat, warps, self.branch_target)
        for i, (instr, scopes) in enumerate(flat):
            self.scopes, self.instr, self.index = scopes, instr, i
            self.masked_write = False
            self.lines.append(f"L{i}:")
            if i in joins or i in warps:
                self.join(i, i in warps)
            act = self.active()
            if i in warps:
                self.warp_wait(i, instr, act)
                act = self.active()
            self.count(act)
            if instr.op == "bra":
                self.branch(i, instr, act)
                continue
            if instr.op in ("ret", "exit"):
                if instr.guard is None:
                    self.raw(f"store {_V1} zeroinitializer, ptr %act\n"
                             f"  br label {pick_label(i, 'ret')}")
                else:
                    left = self.new()
                    g = self.guard_mask(instr, act)
                    self.raw(f"{left} = xor {_V1} {act}, {g}\n  store {_V1} {left}, ptr %act\n"
                             f"  %rb{i} = bitcast {_V1} {left} to i32\n"
                             f"  %re{i} = icmp eq i32 %rb{i}, 0\n"
                             f"  br i1 %re{i}, label {pick_label(i, 'ret')}, "
                             f"label %L{i + 1}")
                continue
            if instr.op in ("bar", "barrier") and i not in warps:
                self.barrier(instr)
                self.wait(act, (i + 1) | AT_BARRIER)
                self.raw(f"store {_V1} zeroinitializer, ptr %act\n"
                         f"  br label {pick_label(i, 'bar')}")
                continue
            self.eff = self.guard_mask(instr, act)
            if i in warps and instr.op == "bar":
                self.warp_barrier(instr)
            elif instr.op in _OWN or instr.op in _ALU:
                handler = getattr(self, "op_" + instr.op, None)
                if handler is None:
                    raise self.fail("not in the lanes lowering")
                handler(instr)
            else:
                raise self.fail("not in the lanes lowering")
            self.raw(f"br label %L{i + 1}")
        self.instr, self.index = None, n
        self.lines.append(f"L{n}:")
        if n in joins:
            self.join(n, False)
        self.count(self.active())  # the implicit return
        self.raw(f"store {_V1} zeroinitializer, ptr %act\n  br label {pick_label(n, 'ret')}")
        return self.assemble()

    def barrier(self, instr: nodes.Instruction) -> None:
        mods = [m for m in instr.modifiers if m != "aligned"]
        if mods not in ([], ["sync"], ["cta", "sync"], ["sync", "cta"]) \
                or len(instr.operands) > 1:
            raise self.fail(f"only bar.sync without a thread count ({mods})")
        if instr.operands:
            self.read(instr.operands[0], "u32")

    def warp_barrier(self, instr: nodes.Instruction) -> None:
        mods = [m for m in instr.modifiers if m != "aligned"]
        if mods != ["warp", "sync"] or len(instr.operands) != 1:
            raise self.fail(f"bar form {mods}")

    def assemble(self) -> str:
        """``@warp``: entry (fresh or resumed), the body, the pick and the exits."""
        # registers stay allocas (promoted); a suspension saves those a lane
        # may need where it waits: after a barrier, the barriers' successors'
        # live registers; at a yield (rare), those of every join point
        bars = sorted(i + 1 for i, x in enumerate(self.flat)
                      if x.op in ("bar", "barrier") and i not in self.warp_points)
        everywhere = sorted(self.joins | self.warp_points) if self.suspends else []
        at_bar = set().union(*live_at(self.flat, bars, self.uses, self.defs, self.successors))
        at_any = set().union(*live_at(self.flat, everywhere, self.uses, self.defs,
                                      self.successors))
        saved = sorted(at_bar | at_any, key=lambda x: int(x[2:]))
        self.frame_slots = len(saved)
        place = {slot: k for k, slot in enumerate(saved)}

        def moves(slots: set, save: bool) -> str:
            out = []
            for slot in sorted(slots, key=lambda x: int(x[2:])):
                vt = f"i{self.widths[slot]}"
                if slot not in self.uniform:
                    vt = vec_type(vt)
                f = f"%fs{'s' if save else 'r'}{slot[2:]}"
                out.append(f"  {f} = getelementptr i8, ptr %frame, i64 {place[slot] * FRAME_SLOT}")
                if save:
                    out.append(f"  {f}v = load {vt}, ptr {slot}\n  store {vt} {f}v, ptr {f}, "
                               "align 8")
                else:
                    out.append(f"  {f}v = load {vt}, ptr {f}, align 8\n  store {vt} {f}v, "
                               f"ptr {slot}")
            return "\n".join(out) + "\n" if out else ""
        allocas = list(self.allocas)
        lanes = "<" + ", ".join(f"i32 {k}" for k in range(LANES)) + ">"
        sv = []
        for k, arg in enumerate(("%bx", "%by", "%bz", "%cx", "%cy", "%cz", "%gx", "%gy", "%gz")):
            sv.append(f"  %svi{k + 3} = insertelement {_V32} poison, i32 {arg}, i64 0\n"
                      f"  %sv{k + 3} = shufflevector {_V32} %svi{k + 3}, {_V32} poison, "
                      f"{_V32} zeroinitializer")
        head = ("define internal i32 @warp(ptr noalias %params, ptr noalias %ctx, "
                "ptr noalias %count, i32 %bx, i32 %by, i32 %bz, i32 %cx, i32 %cy, i32 %cz, "
                "i32 %gx, i32 %gy, i32 %gz, i32 %wb, i32 %tpb, ptr noalias %frame, "
                "ptr noalias %wst, i32 %resume, ptr nonnull %shared, i64 %sstride, "
                "ptr noalias %syms) {\nentry:\n"
                "  %cnt = alloca i64\n  store i64 0, ptr %cnt\n"
                "  %spin = alloca i32\n  store i32 0, ptr %spin\n"
                f"  %act = alloca {_V1}\n  %pcv = alloca {_V32}\n"
                "  %wt = alloca i1\n  store i1 true, ptr %wt\n"
                + "\n".join(allocas) + "\n"
                + f"  %lanev = add {_V32} {lanes}, zeroinitializer\n"
                + f"  %wbi = insertelement {_V32} poison, i32 %wb, i64 0\n"
                + f"  %wbv = shufflevector {_V32} %wbi, {_V32} poison, {_V32} zeroinitializer\n"
                + f"  %linv = add {_V32} %wbv, %lanev\n"
                + "\n".join(sv) + "\n"
                + _TID
                + "  %rest = sub i32 %tpb, %wb\n  %short = icmp ult i32 %rest, 32\n"
                + "  %ws = select i1 %short, i32 %rest, i32 32\n"
                + f"  %wsi = insertelement {_V32} poison, i32 %ws, i64 0\n"
                + f"  %wsv = shufflevector {_V32} %wsi, {_V32} poison, {_V32} zeroinitializer\n"
                + "  switch i32 %resume, label %fresh [i32 1, label %resumed "
                  "i32 2, label %released]\n"
                + "fresh:\n"
                + f"  %inw = icmp ult {_V32} %lanev, %wsv\n  store {_V1} %inw, ptr %act\n"
                + f"  store {_V32} {splat('i32', str(DONE))}, ptr %pcv\n"
                + "  store i1 false, ptr %wt\n  br label %L0\n"
                + "resumed:\n" + moves(at_any, False).replace("%fsr", "%fsy")
                + f"  %rp = load {_V32}, ptr %wst, align 8\n  store {_V32} %rp, ptr %pcv\n"
                + f"  store {_V1} zeroinitializer, ptr %act\n  br label %PKeres\n"
                + "released:\n" + moves(at_bar, False)
                + f"  %lp = load {_V32}, ptr %wst, align 8\n"
                + f"  %lb = and {_V32} %lp, {splat('i32', str(~AT_BARRIER & 0xFFFFFFFF))}\n"
                + f"  %ld = icmp eq {_V32} %lp, {splat('i32', str(DONE))}\n"
                + f"  %lc = select {_V1} %ld, {_V32} %lp, {_V32} %lb\n"
                + f"  store {_V32} %lc, ptr %pcv\n  store {_V1} zeroinitializer, ptr %act\n"
                + "  br label %PKerel\n")
        flush = ("  %{p}c = load i64, ptr %cnt\n  %{p}o = load i64, ptr %count\n"
                 "  %{p}s = add i64 %{p}o, %{p}c\n  store i64 %{p}s, ptr %count\n")
        tail = (pick_blocks(self.picks)
                + f"atbar:\n  %kp = load {_V32}, ptr %pcv\n"
                f"  store {_V32} %kp, ptr %wst, align 8\n" + moves(at_bar, True)
                + flush.format(p="ab")
                + "  ret i32 2\n"
                f"yield:\n  %yp = load {_V32}, ptr %pcv\n  store {_V32} %yp, ptr %wst, align 8\n"
                + moves(at_any, True).replace("%fss", "%fsz")
                + flush.format(p="yl") + "  ret i32 3\n"
                "done:\n" + flush.format(p="dn") + "  ret i32 0\n"
                "fault:\n" + flush.format(p="ft") + "  ret i32 1\n}\n")
        return head + "\n".join(self.lines) + "\n" + tail


_TID = f"""  %tx0 = urem i32 %wb, %bx
  %tq0 = udiv i32 %wb, %bx
  %ty0 = urem i32 %tq0, %by
  %tz0 = udiv i32 %tq0, %by
  %txe = add i32 %tx0, 31
  %nowrap = icmp ult i32 %txe, %bx
  %tfx = insertelement {_V32} poison, i32 %tx0, i64 0
  %tfxv = shufflevector {_V32} %tfx, {_V32} poison, {_V32} zeroinitializer
  %tf0 = add {_V32} %tfxv, %lanev
  %tfy = insertelement {_V32} poison, i32 %ty0, i64 0
  %tf1 = shufflevector {_V32} %tfy, {_V32} poison, {_V32} zeroinitializer
  %tfz = insertelement {_V32} poison, i32 %tz0, i64 0
  %tf2 = shufflevector {_V32} %tfz, {_V32} poison, {_V32} zeroinitializer
  %tbx = insertelement {_V32} poison, i32 %bx, i64 0
  %tbxv = shufflevector {_V32} %tbx, {_V32} poison, {_V32} zeroinitializer
  %tby = insertelement {_V32} poison, i32 %by, i64 0
  %tbyv = shufflevector {_V32} %tby, {_V32} poison, {_V32} zeroinitializer
  br i1 %nowrap, label %tid_done, label %tid_wrap
tid_wrap:
  %vx = phi {_V32} [%tf0, %entry], [%vx2, %tid_wrap]
  %vy = phi {_V32} [%tf1, %entry], [%vy2, %tid_wrap]
  %vz = phi {_V32} [%tf2, %entry], [%vz2, %tid_wrap]
  %xw = icmp uge {_V32} %vx, %tbxv
  %vxs = sub {_V32} %vx, %tbxv
  %vx2 = select {_V1} %xw, {_V32} %vxs, {_V32} %vx
  %xw1 = zext {_V1} %xw to {_V32}
  %vy1 = add {_V32} %vy, %xw1
  %yw = icmp eq {_V32} %vy1, %tbyv
  %vy2 = select {_V1} %yw, {_V32} zeroinitializer, {_V32} %vy1
  %yw1 = zext {_V1} %yw to {_V32}
  %vz2 = add {_V32} %vz, %yw1
  %xwn = icmp uge {_V32} %vx2, %tbxv
  %xwb = bitcast {_V1} %xwn to i32
  %xwm = icmp ne i32 %xwb, 0
  br i1 %xwm, label %tid_wrap, label %tid_done
tid_done:
  %sv0 = phi {_V32} [%tf0, %entry], [%vx2, %tid_wrap]
  %sv1 = phi {_V32} [%tf1, %entry], [%vy2, %tid_wrap]
  %sv2 = phi {_V32} [%tf2, %entry], [%vz2, %tid_wrap]
"""
"""``%tid`` of the warp's lanes without a vector division (32 scalar ones on
AVX2): lane 0's from the warp's first linear index, x + lane in every lane,
then, while some lane's x is past the row, that row's wrap in those lanes (y
one more, and z one more where y wraps): one round for each row the warp
reaches into, all lanes at once (inserting lane by lane went through the
stack, a stalled store and reload per lane)."""

_DECLS = ("declare i32 @llvm.ctpop.i32(i32)\n"
          "declare i32 @llvm.vector.reduce.umin.v32i32(<32 x i32>)\n"
          "declare i32 @llvm.cttz.i32(i32, i1)\n"
          "declare i32 @llvm.ctlz.i32(i32, i1)\n"
          "declare <32 x float> @llvm.fma.v32f32(<32 x float>, <32 x float>, <32 x float>)\n"
          "declare <32 x double> @llvm.fma.v32f64(<32 x double>, <32 x double>, "
          "<32 x double>)\n")


@dataclass(frozen=True)
class LanesLowered:
    """A kernel's ``@warp`` and what a launch must supply to run it."""

    ir: str
    sites: int
    frame_slots: int  # registers in a warp's frame (FRAME_SLOT bytes each)
    shared_keys: tuple
    barriers: int
    atomics: int


def lower_lanes(function: nodes.Function,
                module_globals: frozenset = frozenset()) -> LanesLowered:
    """``@warp`` for ``function``; raises :class:`Unsupported` outside the
    lowering (:func:`why_not_lanes` first).  Lowered twice: the first pass's
    writes and liveness decide which registers are plain or constant
    (:mod:`.lanes_values`)."""
    why = why_not_lanes(function)
    if why is not None:
        raise Unsupported(f"lanes: {why}")

    def lowered(plain: frozenset, consts: dict, uniform: frozenset) -> _LaneLowerer:
        lw = _LaneLowerer(function)
        lw.module_globals = module_globals
        lw.plain, lw.consts, lw.uniform = plain, consts, uniform
        lw.write_kinds, lw.shfl_sources, lw.site_of, lw.bases = {}, set(), {}, {}
        lw.write_sites, lw.special_reads = {}, {}
        lw.atomics = 0
        lw.body = lw.lower()
        return lw

    first = lowered(frozenset(), {}, frozenset())
    waits = sorted(first.joins | first.warp_points)
    live = live_at(first.flat, waits, first.uses, first.defs, first.successors)
    at_joins = {s for regs in live for s in regs}
    entry = live_at(first.flat, [0], first.uses, first.defs, first.successors)[0]
    plain = frozenset(s for s in first.widths if s not in at_joins and s not in first.shfl_sources)
    consts = {}
    for slot in first.widths:
        # a shfl reads other lanes' registers: a lane that left before the
        # mov holds 0 there, so a source is never taken for a constant
        if slot in entry or slot in first.shfl_sources:
            continue
        c = first.constant_value(slot)
        if c is not None:
            consts[slot] = c
    uniform = first.uniform_registers(entry, first.shfl_sources, set(consts))
    lw = lowered(plain - uniform, consts, uniform)
    decls = sorted({vectorize_declaration(d) if "<" not in d else d for d in lw.intrinsics})
    ir = _DECLS + "\n".join(d for d in decls if "fma.v32" not in d) + "\n" + lw.body
    return LanesLowered(ir, lw.sites, lw.frame_slots, tuple(lw.shared_keys),
                        int(lw.suspends), lw.atomics)
