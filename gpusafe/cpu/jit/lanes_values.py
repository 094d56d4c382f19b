"""Operands of the lanes lowering: every PTX register a ``<32 x iN>`` vector.

A register is an ``alloca`` of its vector (LLVM promotes it), or a slot of the
warp's frame when it is live where the warp may resume (:mod:`.lanes`).  A
write stores ``select(active, new, old)``: lanes that do not execute the
instruction keep their value.  Two cheaper forms, decided from a first
lowering's liveness (:meth:`LaneValues.plan`):

- a *plain* register (never live where lanes wait, never the source of a
  ``shfl``) is stored whole: no inactive lane will read it before writing
  it, and keeping it free of the mask keeps uniform values uniform;
- a *constant* register (every write an unguarded ``mov`` of one immediate,
  never read before written) reads as that constant: NVRTC moves a shuffle's
  offset, clamp and mask into registers, and a constant offset is what lets
  LLVM make the shuffle a ``shufflevector``.

- a *uniform* register (one unguarded write from parameters, ``%ntid``,
  ``%ctaid``, immediates, symbols or other uniform registers, never read
  before written, never a ``shfl`` source: :meth:`LaneValues.uniform_registers`)
  is one scalar for the warp, broadcast where read.

Values every lane agrees on (immediates, parameters, ``%ntid``, ``%ctaid``,
shared variables' offsets) are splats, which LLVM folds.
"""

from __future__ import annotations

from gpusafe_instrument import nodes

from .lanes_vec import LANES, is_constant, splat, vec_type, vectorize
from .values import AXES, BITS, HALVES, SPECIAL, Values

LANE_SPECIALS = {"%laneid", "%warpid"}


class LaneValues(Values):
    """Reads and writes of ``<32 x T>`` registers; ALU lines vectorised."""

    eff = "%noeff"  # the lanes that execute the instruction being lowered (an <32 x i1>)
    plain: frozenset = frozenset()
    consts: dict = {}
    uniform: frozenset = frozenset()

    def emit(self, text: str) -> None:
        """An ALU method's scalar IR, made a warp's (:mod:`.lanes_vec`)."""
        self.lines.append("  " + vectorize(text))

    def raw(self, text: str) -> None:
        self.lines.append("  " + text)

    def half_compare(self, instr: nodes.Instruction) -> None:
        if any(m in HALVES for m in instr.modifiers):
            raise self.fail("f16/bf16 (not in the lanes lowering)")
        return None

    def declare(self, name: str, t: str) -> None:
        width = BITS.get(t)
        if width is None:
            raise self.fail(f"registers of type .{t} (not in the lanes lowering)")
        slot = f"%v{len(self.allocas)}"
        self.widths[slot] = width
        vt = f"i{width}" if slot in self.uniform else vec_type(f"i{width}")
        self.allocas.append(f"  {slot} = alloca {vt}\n  store {vt} zeroinitializer, ptr {slot}")
        self.scopes[-1][name] = (slot, width)

    def vconst(self, value: str, ty: str) -> str:
        """``value`` as a vector operand of element type ``ty``."""
        return splat(ty, value) if is_constant(value) else value

    def broadcast(self, scalar: str, ty: str) -> str:
        """A scalar SSA value in every lane."""
        one, out = self.new(), self.new()
        self.raw(f"{one} = insertelement {vec_type(ty)} poison, {ty} {scalar}, i64 0\n"
                 f"  {out} = shufflevector {vec_type(ty)} {one}, {vec_type(ty)} poison, "
                 f"<{LANES} x i32> zeroinitializer")
        return out

    def symbol_address(self, name: str, offset: int) -> str:
        """A shared variable's offset or a module variable's address: the
        launch's (through ``%syms``, as the per-thread lowering), in every lane."""
        for scope in reversed(self.scopes):
            if ("local", name) in scope:
                raise self.fail(".local variables (not in the lanes lowering)")
        if name in self.kparams:
            raise self.fail(f"address of the kernel parameter {name}")
        key = self.shared_key(name)
        if key == name and name in self.module_globals:
            key = ("%global", name)
        if key not in self.shared_keys:
            self.shared_keys.append(key)
        p, v = self.new(), self.new()
        self.raw(f"{p} = getelementptr i64, ptr %syms, i64 {self.shared_keys.index(key)}\n"
                 f"  {v} = load i64, ptr {p}")
        if offset:
            w = self.new()
            self.raw(f"{w} = add i64 {v}, {offset}")
            v = w
        return self.broadcast(v, "i64")

    def special(self, name: str) -> str:
        if name == "%laneid":
            return "%lanev"
        if name == "%warpid":
            out = self.new()
            self.raw(f"{out} = lshr {vec_type('i32')} %linv, {splat('i32', '5')}")
            return out
        raise self.fail(f"special register {name} (not in the lanes lowering)")

    def read(self, operand: nodes.Operand, t: str) -> str:
        width = BITS[t]
        if isinstance(operand, nodes.Register) and not self.is_register(operand.name):
            name = operand.name
            self.special_reads.setdefault(self.index, set()).add(name.partition(".")[0])
            if name in LANE_SPECIALS:
                if t == "pred":
                    raise self.fail(f"special register {name} as .{t}")
                return self.to_type(self.adapt(self.special(name), 32, width, False), t)
            head, _, axis = name.partition(".")
            if head in SPECIAL and axis in AXES:
                if t == "pred":
                    raise self.fail("special register as predicate")
                v = self.adapt(f"%sv{SPECIAL[head] + AXES[axis]}", 32, width, False)
                return self.to_type(v, t)
            raise self.fail(f"special register {name} (not in the lanes lowering)")
        if not isinstance(operand, nodes.Register) and not (
                isinstance(operand, nodes.Symbol) and self.is_register(operand.name)):
            return super().read(operand, t)  # immediates, negations, symbols
        slot, have = self.register(operand.name)
        if (have == 1) != (t == "pred"):
            raise self.fail(f"register {operand.name} used as .{t}")
        self.uses[self.index].add(slot)
        if slot in self.consts:
            v = self.consts[slot]
        elif slot in self.uniform:
            v = self.new()
            self.raw(f"{v} = load i{have}, ptr {slot}")
            v = self.broadcast(v, f"i{have}")
        else:
            v = self.new()
            self.raw(f"{v} = load {vec_type(f'i{have}')}, ptr {slot}, align 8")
        v = self.adapt(v, have, width, t.startswith("s"))
        return self.to_type(v, t)

    def write(self, operand: nodes.Operand, t: str, value: str) -> None:
        if isinstance(operand, nodes.Sink):
            return
        if isinstance(operand, nodes.Symbol) and self.is_register(operand.name):
            operand = nodes.Register(operand.name)
        if not isinstance(operand, nodes.Register):
            raise self.fail(f"destination {operand}")
        slot, have = self.register(operand.name)
        if (have == 1) != (t == "pred"):
            raise self.fail(f"register {operand.name} written as .{t}")
        guarded = self.instr is not None and self.instr.guard is not None
        if not guarded:
            self.defs[self.index].add(slot)
        self.note_write(slot, guarded)
        if t in ("f32", "f64"):
            bits = self.new()
            self.emit(f"{bits} = bitcast {'float' if t == 'f32' else 'double'} {value} "
                      f"to i{BITS[t]}")
            value = bits
        value = self.adapt(value, BITS[t], have, t.startswith("s"))
        vt = vec_type(f"i{have}")
        value = self.vconst(value, f"i{have}")
        if slot in self.uniform:  # the same in every lane (a splat LLVM folds): lane 0's
            one = self.new()
            self.raw(f"{one} = extractelement {vt} {value}, i64 0\n"
                     f"  store i{have} {one}, ptr {slot}")
            return
        if slot in self.plain and not guarded and not self.masked_write:
            self.raw(f"store {vt} {value}, ptr {slot}, align 8")
            return
        old, new = self.new(), self.new()
        self.raw(f"{old} = load {vt}, ptr {slot}, align 8\n"
                 f"  {new} = select {vec_type('i1')} {self.eff}, {vt} {value}, {vt} {old}\n"
                 f"  store {vt} {new}, ptr {slot}, align 8")

    masked_write = False  # set where even a plain register must keep inactive lanes

    def note_write(self, slot: str, guarded: bool) -> None:
        """The first lowering's record of how each register is written
        (:meth:`plan`): an unguarded ``mov`` of an immediate, or anything else."""
        instr = self.instr
        kind: object = "other"
        if not guarded and instr is not None and instr.op == "mov" and len(instr.operands) == 2 \
                and isinstance(instr.operands[1], nodes.Immediate) and self.widths[slot] > 1:
            kind = ("imm", instr.operands[1].text, tuple(instr.modifiers))
        self.write_kinds.setdefault(slot, set()).add(kind)
        self.write_sites.setdefault(slot, set()).add((self.index, guarded))

    write_kinds: dict
    write_sites: dict  # slot -> {(instruction index, guarded)}
    special_reads: dict  # instruction index -> special registers it reads (heads)

    def constant_value(self, slot: str) -> str | None:
        """The constant a register always holds when read, from its writes
        (an integer ``mov`` of one immediate at its own width), or None."""
        kinds = self.write_kinds.get(slot, set())
        if len(kinds) != 1:
            return None
        kind = next(iter(kinds))
        if kind == "other":
            return None
        _, text, mods = kind
        types = [m for m in mods if m in BITS]
        if not types or types[-1] in ("f32", "f64", "pred") \
                or BITS[types[-1]] != self.widths[slot]:
            return None
        if isinstance(nodes.Immediate(text).value, float):
            return None
        return self.immediate(nodes.Immediate(text), types[-1])

    def uniform_registers(self, entry: set, shfl_sources: set, consts: set) -> frozenset:
        """Registers the same in every lane whenever a lane reads them, from
        the first lowering's writes: one unguarded write (an op of
        :data:`UNIFORM_OPS`, a load only of a kernel parameter) whose operands
        are immediates, constant or uniform registers, symbols, ``%ntid``,
        ``%nctaid`` or ``%ctaid``; never read before written (so a lane that
        reads one executed that write, which gives every lane, every time, the
        same value); never a ``shfl`` source (another lane's value is read
        there, which may never have run the write).  Kept scalar: LLVM keeps
        them in general registers and folds what is computed from them, and
        no ``select`` keeps inactive lanes (the ``<32 x i64>`` address
        vectors that spilled)."""
        candidates: dict[str, int] = {}
        for slot, sites in self.write_sites.items():
            if len(sites) != 1 or slot in entry or slot in shfl_sources or slot in consts \
                    or self.widths[slot] == 1:
                continue
            index, guarded = next(iter(sites))
            instr = self.flat[index]
            if guarded or instr.op not in UNIFORM_OPS \
                    or (instr.op == "ld" and "param" not in instr.modifiers) \
                    or not self.special_reads.get(index, set()) <= UNIFORM_SPECIALS:
                continue
            candidates[slot] = index
        changed = True
        while changed:  # operands uniform too: drop what reads a dropped register
            changed = False
            for slot, index in list(candidates.items()):
                if not self.uses[index] <= set(candidates) | consts:
                    del candidates[slot]
                    changed = True
        return frozenset(candidates)


UNIFORM_OPS = {"mov", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not",
               "cvta", "ld"}
UNIFORM_SPECIALS = {"%ntid", "%nctaid", "%ctaid"}
