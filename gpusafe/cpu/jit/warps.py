"""Warp-synchronous instructions in the JIT: ``shfl.sync``, ``vote.sync``,
``bar.warp.sync``, through the barriers' resumable threads (:mod:`.regions`).

Each thread publishes its operand (``%pub``, one i64 per thread of the
block) and suspends; once every thread of the block has run to a
suspension point, the block loop (:mod:`.blocks`) snapshots what was
published and where each thread stopped, and resumes the threads waiting at
warp instructions, whose second half reads the snapshot: the lanes of its
warp stopped at the same instruction are the lanes that take part, as the
interpreter's lanes that run the instruction together
(:mod:`gpusafe.cpu.warp_ops`).  A shuffle reads the value its source lane
published last: at this instruction when it is there; when it is not
(undefined on a GPU) the interpreter reads that lane's register as it is
now, which agrees when the lane left before its first warp instruction
(both 0: ``%pub`` starts each block at zero, registers start at zero); a
source beyond the warp's last lane gives the thread's own value, as there.
"""

from __future__ import annotations

from gpusafe_instrument import nodes

from .blocks import WARP_SPAN
from .values import Values


class WarpLowering(Values):
    """``op_shfl``, ``op_vote``, ``op_redux``, ``op_activemask``
    (``bar.warp.sync`` is :mod:`.regions`')."""

    def publish(self, value: str, bits: int) -> None:
        wide = self.adapt(value, bits, 64, False)
        p = self.new()
        self.emit(f"{p} = getelementptr i64, ptr %pub, i32 %lin\n  store i64 {wide}, ptr {p}")

    def guarded(self, instr: nodes.Instruction) -> None:
        """After the exchange, only lanes whose guard holds compute; the others
        go on to the next instruction (they took part all the same)."""
        if instr.guard is None:
            return
        p = self.guard(instr.guard)
        self.tmp += 1
        self.emit(f"br i1 {p}, label %W{self.tmp}, label %L{self.index + 1}")
        self.lines.append(f"W{self.tmp}:")

    def _lane(self) -> tuple[str, str]:
        lane, base = self.new(), self.new()
        self.emit(f"{lane} = and i32 %lin, 31\n  {base} = sub i32 %lin, {lane}")
        return lane, base

    def op_shfl(self, instr: nodes.Instruction) -> None:
        mods = instr.modifiers
        modes = [m for m in mods if m in ("up", "down", "bfly", "idx")]
        rest = [m for m in mods if m not in ("up", "down", "bfly", "idx", "sync", "b32")]
        if "sync" not in mods or len(modes) != 1 or rest or len(instr.operands) != 5:
            raise self.fail(f"only shfl.sync.<mode>.b32 ({mods})")
        d, a, b, c, mask = instr.operands
        self.read(mask, "u32")
        self.publish(self.read(a, "b32"), 32)
        self.suspend(warp=True, exchange=True)
        self.guarded(instr)
        vb, vc = self.read(b, "u32"), self.read(c, "u32")
        lane, base = self._lane()
        t = [self.new() for _ in range(8)]
        self.emit(f"{t[0]} = and i32 {vb}, 31\n  {t[1]} = lshr i32 {vc}, 8\n"
                  f"  {t[2]} = and i32 {t[1]}, 31\n  {t[3]} = and i32 {vc}, 31\n"
                  f"  {t[4]} = xor i32 {t[2]}, -1\n  {t[5]} = and i32 {lane}, {t[2]}\n"
                  f"  {t[6]} = and i32 {t[3]}, {t[4]}\n  {t[7]} = or i32 {t[5]}, {t[6]}")
        bval, notseg, min_lane, max_lane = t[0], t[4], t[5], t[7]
        j, p = self.new(), self.new()
        mode = modes[0]
        if mode == "up":
            self.emit(f"{j} = sub i32 {lane}, {bval}\n  {p} = icmp sge i32 {j}, {max_lane}")
        elif mode == "down":
            self.emit(f"{j} = add i32 {lane}, {bval}\n  {p} = icmp sle i32 {j}, {max_lane}")
        elif mode == "bfly":
            self.emit(f"{j} = xor i32 {lane}, {bval}\n  {p} = icmp sle i32 {j}, {max_lane}")
        else:
            part = self.new()
            self.emit(f"{part} = and i32 {bval}, {notseg}\n  {j} = or i32 {min_lane}, {part}\n"
                      f"  {p} = icmp sle i32 {j}, {max_lane}")
        u = [self.new() for _ in range(8)]
        self.intrinsics.add("declare i32 @llvm.umin.i32(i32, i32)")
        self.emit(f"{u[0]} = select i1 {p}, i32 {j}, i32 {lane}\n"
                  f"  {u[1]} = sub i32 %tpb, {base}\n"
                  f"  {u[2]} = call i32 @llvm.umin.i32(i32 {u[1]}, i32 32)\n"
                  f"  {u[3]} = icmp ult i32 {u[0]}, {u[2]}\n"
                  f"  {u[4]} = add i32 {base}, {u[0]}\n"
                  f"  {u[5]} = select i1 {u[3]}, i32 {u[4]}, i32 %lin\n"
                  f"  {u[6]} = getelementptr i64, ptr %snap, i32 {u[5]}\n"
                  f"  {u[7]} = load i64, ptr {u[6]}")
        value = self.adapt(u[7], 64, 32, False)
        if isinstance(d, nodes.PredicatePair):
            self.write(d.first, "b32", value)
            self.write(d.second, "pred", p)
        else:
            self.write(d, "b32", value)

    def op_vote(self, instr: nodes.Instruction) -> None:
        mods = instr.modifiers
        modes = [m for m in mods if m in ("all", "any", "uni", "ballot")]
        rest = [m for m in mods if m not in ("all", "any", "uni", "ballot", "sync", "pred", "b32")]
        if "sync" not in mods or len(modes) != 1 or rest or len(instr.operands) != 3:
            raise self.fail(f"only vote.sync ({mods})")
        d, pred, mask = instr.operands
        self.read(mask, "u32")
        value = self.adapt(self.read(pred, "pred"), 1, 8, False)
        if instr.guard is not None:  # a lane whose guard is off is not counted (bit 1)
            off, flagged = self.new(), self.new()
            self.emit(f"{off} = select i1 {self.guard(instr.guard)}, i8 0, i8 2\n"
                      f"  {flagged} = or i8 {value}, {off}")
            value = flagged
        self.publish(value, 8)
        self.suspend(warp=True, exchange=True)
        self.guarded(instr)
        m32 = self.read(mask, "u32")
        m = self.adapt(m32, 32, 64, False)
        both, present, hi, trues = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{both} = call i64 @warp_bits(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)\n"
                  f"  {present} = and i64 {both}, 4294967295\n  {hi} = lshr i64 {both}, 32\n"
                  f"  {trues} = and i64 {hi}, {m}")
        if modes[0] == "ballot":
            self.write(d, "b32", self.adapt(trues, 64, 32, False))
            return
        part, falses, nt, nf, r = (self.new() for _ in range(5))
        self.emit(f"{part} = and i64 {m}, {present}\n  {nt} = xor i64 {hi}, -1\n"
                  f"  {falses} = and i64 {part}, {nt}\n  {nf} = and i64 {part}, {hi}")
        if modes[0] == "all":
            self.emit(f"{r} = icmp eq i64 {falses}, 0")
        elif modes[0] == "any":
            self.emit(f"{r} = icmp ne i64 {nf}, 0")
        else:
            a, b = self.new(), self.new()
            self.emit(f"{a} = icmp eq i64 {falses}, 0\n  {b} = icmp eq i64 {nf}, 0\n"
                      f"  {r} = or i1 {a}, {b}")
        self.write(d, "pred", r)

    def op_redux(self, instr: nodes.Instruction) -> None:
        """``redux.sync``: reduces over the lanes of the warp at the instruction
        whose guard holds (the interpreter's lanes that run it together)."""
        mods = instr.modifiers
        ops = [m for m in mods if m in _REDUX_INIT]
        types = [m for m in mods if m in ("u32", "s32", "b32")]
        if "sync" not in mods or len(ops) != 1 or len(types) != 1 or len(mods) != 3 \
                or len(instr.operands) != 3:
            raise self.fail(f"only redux.sync.<op>.<32-bit type> ({mods})")
        op, t = ops[0], types[0]
        if op in ("min", "max"):
            op = ("s" if t == "s32" else "u") + op
        d, a, mask = instr.operands
        self.read(mask, "u32")
        value = self.adapt(self.read(a, "b32"), 32, 64, False)
        if instr.guard is not None:  # a lane whose guard is off takes no part (bit 32)
            off, flagged = self.new(), self.new()
            self.emit(f"{off} = select i1 {self.guard(instr.guard)}, i64 0, i64 4294967296\n"
                      f"  {flagged} = or i64 {value}, {off}")
            value = flagged
        self.publish(value, 64)
        self.suspend(warp=True, exchange=True)
        self.guarded(instr)
        if op not in _REDUX_INIT:
            self.intrinsics.add(f"declare i32 @llvm.{op}.i32(i32, i32)")
        self.intrinsics.add(_redux_helper(op))
        r = self.new()
        self.emit(f"{r} = call i32 @redux_{op}(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)")
        self.write(d, "b32", r)

    def op_activemask(self, instr: nodes.Instruction) -> None:
        """The lanes of the warp at this instruction, as the interpreter's lanes
        running it together (here a warp suspension finds them)."""
        if list(instr.modifiers) != ["b32"] or len(instr.operands) != 1:
            raise self.fail("only activemask.b32 d")
        self.publish("0", 64)
        self.suspend(warp=True, exchange=True)
        both, present = self.new(), self.new()
        self.emit(f"{both} = call i64 @warp_bits(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)\n"
                  f"  {present} = trunc i64 {both} to i32")
        self.write(instr.operands[0], "b32", present)

    def op_match(self, instr: nodes.Instruction) -> None:
        """``match.{any,all}.sync``: the lanes of the warp at the instruction
        holding the same value (``.all``: all of them or none, and ``p``)."""
        mods = instr.modifiers
        modes = [m for m in mods if m in ("any", "all")]
        types = [m for m in mods if m in ("b32", "b64")]
        if "sync" not in mods or len(modes) != 1 or len(types) != 1 or len(mods) != 3 \
                or len(instr.operands) != 3 or instr.guard is not None:
            raise self.fail(f"only unguarded match.sync.{{any,all}}.b32/.b64 ({mods})")
        d, a, mask = instr.operands
        bits = 32 if types[0] == "b32" else 64
        self.publish(self.read(a, types[0]), bits)
        self.suspend(warp=True, exchange=True)
        m = self.read(mask, "u32")
        both, eq, hi, present = (self.new() for _ in range(4))
        self.emit(f"{both} = call i64 @warp_equal(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)\n"
                  f"  {eq} = trunc i64 {both} to i32\n  {hi} = lshr i64 {both}, 32\n"
                  f"  {present} = trunc i64 {hi} to i32")
        out = self.new()
        if modes[0] == "any":
            self.emit(f"{out} = and i32 {eq}, {m}")
            if isinstance(d, nodes.PredicatePair):
                raise self.fail("match.any with a predicate")
            self.write(d, "b32", out)
            return
        same, pm = self.new(), self.new()
        self.emit(f"{same} = icmp eq i32 {eq}, {present}\n  {pm} = and i32 {present}, {m}\n"
                  f"  {out} = select i1 {same}, i32 {pm}, i32 0")
        if isinstance(d, nodes.PredicatePair):
            self.write(d.first, "b32", out)
            self.write(d.second, "pred", same)
        else:
            self.write(d, "b32", out)

    def op_elect(self, instr: nodes.Instruction) -> None:
        """``elect.sync d|p, mask``: the lowest lane of the mask at the instruction."""
        ops = instr.operands
        if list(instr.modifiers) != ["sync"] or len(ops) != 2 \
                or not isinstance(ops[0], nodes.PredicatePair) or instr.guard is not None:
            raise self.fail("only unguarded elect.sync d|p, mask")
        self.read(ops[1], "u32")
        self.publish("0", 64)
        self.suspend(warp=True, exchange=True)
        m = self.read(ops[1], "u32")
        lane, _ = self._lane()
        both, present, pm, low, none, leader, me, nz, p = (self.new() for _ in range(9))
        self.intrinsics.add("declare i32 @llvm.cttz.i32(i32, i1)")
        self.emit(f"{both} = call i64 @warp_bits(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb)\n"
                  f"  {present} = trunc i64 {both} to i32\n  {pm} = and i32 {present}, {m}\n"
                  f"  {low} = call i32 @llvm.cttz.i32(i32 {pm}, i1 false)\n"
                  f"  {none} = icmp eq i32 {pm}, 0\n"
                  f"  {leader} = select i1 {none}, i32 0, i32 {low}\n"
                  f"  {me} = icmp eq i32 {lane}, {leader}\n  {nz} = xor i1 {none}, true\n"
                  f"  {p} = and i1 {me}, {nz}")
        self.write(ops[0].first, "b32", leader)
        self.write(ops[0].second, "pred", p)


_REDUX_INIT = {"add": 0, "min": 0, "max": 0, "and": -1, "or": 0, "xor": 0}
_REDUX_START = {"add": 0, "umin": -1, "smin": 0x7FFFFFFF, "umax": 0, "smax": -0x80000000,
                "and": -1, "or": 0, "xor": 0}


def _redux_helper(op: str) -> str:
    """``@redux_<op>``: the reduction over the snapshot of the thread's warp."""
    if op in ("add", "and", "or", "xor"):
        combine = f"%acc2 = {op} i32 %acc, %vv"
    else:
        combine = f"%acc2 = call i32 @llvm.{op}.i32(i32 %acc, i32 %vv)"
    return f"""define internal i32 @redux_{op}(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb) {{
entry:
{WARP_SPAN}  %mysp = getelementptr i32, ptr %sstate, i32 %lin
  %my = load i32, ptr %mysp
  br label %loop
loop:
  %l = phi i32 [0, %entry], [%l1, %body]
  %acc = phi i32 [{_REDUX_START[op]}, %entry], [%acc3, %body]
  %more = icmp ult i32 %l, %ws
  br i1 %more, label %body, label %done
body:
  %i = add i32 %wb, %l
  %sp = getelementptr i32, ptr %sstate, i32 %i
  %s = load i32, ptr %sp
  %same = icmp eq i32 %s, %my
  %vp = getelementptr i64, ptr %snap, i32 %i
  %v = load i64, ptr %vp
  %off = lshr i64 %v, 32
  %on = icmp eq i64 %off, 0
  %take = and i1 %same, %on
  %vv = trunc i64 %v to i32
  {combine}
  %acc3 = select i1 %take, i32 %acc2, i32 %acc
  %l1 = add i32 %l, 1
  br label %loop
done:
  ret i32 %acc
}}"""
