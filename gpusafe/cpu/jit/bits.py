"""Bit-field and byte instructions of the JIT's lowering: ``prmt`` (every
mode), ``bfe``, ``bfi`` and the vector forms of ``mov`` that pack and unpack
registers, each with the interpreter's results
(:mod:`gpusafe.cpu.alu.bitwise`, :func:`gpusafe.cpu.decoder.pack_reader`).
A selector or bit position in a register costs a few more instructions than
an immediate; LLVM folds the immediate case to shifts and masks."""

from __future__ import annotations

from gpusafe_instrument import nodes

from ..alu.bitwise import _PRMT_MODES
from .values import BITS, Values, split_type


class BitLowering(Values):
    """``op_prmt``, ``op_bfe``, ``op_bfi`` and :meth:`mov_vector` (a mixin)."""

    def op_prmt(self, instr: nodes.Instruction) -> None:
        """Each result byte k picks byte ``sel & 7`` of ``{b, a}`` (a is bytes
        0-3); without a mode ``sel`` is nibble k of c and bit 3 of it
        replicates the picked byte's sign; a mode's selectors come from its
        table, by ``c & 3``."""
        mods, t = split_type(instr)
        modes = [m for m in mods if m in _PRMT_MODES]
        if t != "b32" or len(mods) != len(modes) or len(modes) > 1 or len(instr.operands) != 4:
            raise self.fail(f"form {mods}")
        mode = modes[0] if modes else None
        d, a, b, c = instr.operands
        va, vb, vc = (self.read(x, "b32") for x in (a, b, c))
        lo, hi, hs, both = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{lo} = zext i32 {va} to i64\n  {hi} = zext i32 {vb} to i64\n"
                  f"  {hs} = shl i64 {hi}, 32\n  {both} = or i64 {hs}, {lo}")
        out = "0"
        for k in range(4):
            if mode is None:
                nib, sel = self.new(), self.new()
                self.emit(f"{nib} = lshr i32 {vc}, {4 * k}\n  {sel} = and i32 {nib}, 15")
            else:  # the table's column k, one byte per value of c & 3
                word = sum(_PRMT_MODES[mode][row][k] << (8 * row) for row in range(4))
                row, at, picked, sel = self.new(), self.new(), self.new(), self.new()
                self.emit(f"{row} = and i32 {vc}, 3\n  {at} = shl i32 {row}, 3\n"
                          f"  {picked} = lshr i32 {word}, {at}\n  {sel} = and i32 {picked}, 7")
            idx, shift, shift64, moved, byte = (self.new() for _ in range(5))
            self.emit(f"{idx} = and i32 {sel}, 7\n  {shift} = shl i32 {idx}, 3\n"
                      f"  {shift64} = zext i32 {shift} to i64\n"
                      f"  {moved} = lshr i64 {both}, {shift64}\n"
                      f"  {byte} = trunc i64 {moved} to i8")
            if mode is None:  # bit 3 of the selector: the byte's sign, replicated
                flag, rep, signed, chosen = self.new(), self.new(), self.new(), self.new()
                self.emit(f"{flag} = and i32 {sel}, 8\n  {rep} = icmp ne i32 {flag}, 0\n"
                          f"  {signed} = ashr i8 {byte}, 7\n"
                          f"  {chosen} = select i1 {rep}, i8 {signed}, i8 {byte}")
                byte = chosen
            wide, placed, acc = self.new(), self.new(), self.new()
            self.emit(f"{wide} = zext i8 {byte} to i32\n  {placed} = shl i32 {wide}, {8 * k}\n"
                      f"  {acc} = or i32 {out}, {placed}")
            out = acc
        self.write(d, "b32", out)

    def _low_mask(self, length: str, w: int) -> str:
        """(1 << length) - 1 for 0 <= length <= w, as an i{w}."""
        big, short, one, mask, out = (self.new() for _ in range(5))
        self.emit(f"{big} = icmp uge i{w} {length}, {w}\n"
                  f"  {short} = select i1 {big}, i{w} {w - 1}, i{w} {length}\n"
                  f"  {one} = shl i{w} 1, {short}\n  {mask} = sub i{w} {one}, 1\n"
                  f"  {out} = select i1 {big}, i{w} -1, i{w} {mask}")
        return out

    def _field(self, pos_op: nodes.Operand, len_op: nodes.Operand,
               w: int) -> tuple[str, str, str, str]:
        """(pos, len, inside, avail) of a bit field: the low bytes of the two
        u32 operands, widened; ``avail`` is how much of it lies in the value."""
        pos, ln = [], []
        for op, out in ((pos_op, pos), (len_op, ln)):
            low = self.new()
            self.emit(f"{low} = and i32 {self.read(op, 'u32')}, 255")
            out.append(self.adapt(low, 32, w, False))
        p, n = pos[0], ln[0]
        inside, room, fits, avail = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{inside} = icmp ult i{w} {p}, {w}\n  {room} = sub i{w} {w}, {p}\n"
                  f"  {fits} = icmp ult i{w} {n}, {room}\n"
                  f"  {avail} = select i1 {fits}, i{w} {n}, i{w} {room}")
        kept = self.new()
        self.emit(f"{kept} = select i1 {inside}, i{w} {avail}, i{w} 0")
        return p, n, inside, kept

    def op_bfe(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if mods or t not in ("u32", "u64", "s32", "s64") or len(instr.operands) != 4:
            raise self.fail(f"form {mods}")
        d, a, b, c = instr.operands
        w = BITS[t]
        va = self.read(a, t)
        p, n, inside, avail = self._field(b, c, w)
        mask = self._low_mask(avail, w)
        at, shifted, field, out = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{at} = select i1 {inside}, i{w} {p}, i{w} {w - 1}\n"
                  f"  {shifted} = lshr i{w} {va}, {at}\n  {field} = and i{w} {shifted}, {mask}\n"
                  f"  {out} = select i1 {inside}, i{w} {field}, i{w} 0")
        if t.startswith("s"):  # the field's top bit (the value's, past its end) fills
            end, top, low, sb, sh, bit, nonempty, fill, filled, ored, signed = (
                self.new() for _ in range(11))
            self.emit(f"{end} = add i{w} {p}, {n}\n  {top} = sub i{w} {end}, 1\n"
                      f"  {low} = icmp ult i{w} {top}, {w - 1}\n"
                      f"  {sb} = select i1 {low}, i{w} {top}, i{w} {w - 1}\n"
                      f"  {sh} = lshr i{w} {va}, {sb}\n  {bit} = trunc i{w} {sh} to i1\n"
                      f"  {nonempty} = icmp ne i{w} {n}, 0\n"
                      f"  {fill} = and i1 {bit}, {nonempty}\n"
                      f"  {filled} = xor i{w} {mask}, -1\n  {ored} = or i{w} {out}, {filled}\n"
                      f"  {signed} = select i1 {fill}, i{w} {ored}, i{w} {out}")
            out = signed
        self.write(d, t, out)

    def op_bfi(self, instr: nodes.Instruction) -> None:
        mods, t = split_type(instr)
        if mods or t not in ("b32", "b64") or len(instr.operands) != 5:
            raise self.fail(f"form {mods}")
        d, a, b, c, e = instr.operands
        w = BITS[t]
        va, vb = self.read(a, t), self.read(b, t)
        p, _, inside, avail = self._field(c, e, w)
        low = self._low_mask(avail, w)
        at, mask, keep, kept, moved, put, out = (self.new() for _ in range(7))
        self.emit(f"{at} = select i1 {inside}, i{w} {p}, i{w} {w - 1}\n"
                  f"  {mask} = shl i{w} {low}, {at}\n  {keep} = xor i{w} {mask}, -1\n"
                  f"  {kept} = and i{w} {vb}, {keep}\n  {moved} = shl i{w} {va}, {at}\n"
                  f"  {put} = and i{w} {moved}, {mask}\n  {out} = or i{w} {kept}, {put}")
        self.write(d, t, out)

    def mov_vector(self, instr: nodes.Instruction, t: str) -> None:
        """``mov.b64 d, {a, b}`` packs (first part lowest), ``mov.b64 {a, b}, s``
        unpacks; each part is read or written as a ``.b`` of its width."""
        d, s = instr.operands
        w = BITS[t]
        vector = d if isinstance(d, nodes.Vector) else s
        if isinstance(d, nodes.Vector) == isinstance(s, nodes.Vector) or t == "pred" \
                or t.startswith("f") or w % len(vector.items):
            raise self.fail("vector form")
        pw = w // len(vector.items)
        pt = f"b{pw}"
        if pt not in BITS:
            raise self.fail(f"parts of {pw} bits")
        if isinstance(s, nodes.Vector):
            out = "0"
            for k, item in enumerate(s.items):
                part, placed, acc = self.new(), self.new(), self.new()
                self.emit(f"{part} = zext i{pw} {self.read(item, pt)} to i{w}\n"
                          f"  {placed} = shl i{w} {part}, {k * pw}\n"
                          f"  {acc} = or i{w} {out}, {placed}")
                out = acc
            self.write(d, f"b{w}", out)
            return
        whole = self.read(s, f"b{w}")
        for k, item in enumerate(d.items):
            moved = self.new()
            self.emit(f"{moved} = lshr i{w} {whole}, {k * pw}")
            self.write(item, pt, self.adapt(moved, w, pw, False))
