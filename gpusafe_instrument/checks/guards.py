"""Ranges implied by dominating guards (issue 14): a variable's access whose
offset a branch in front of it keeps inside the variable needs no check.

The case this is for is the shared-memory tree reduction, which NVRTC
unrolls into steps of the form::

    mov.u32       T, %tid.x            T in [0, 1023]
    mul.wide.s32  R, T, 4
    ...
    setp.gt.s32   p, T, 127
    @p bra        SKIP
    ld.shared.f32 f, [s + R + 512]     only reached with T <= 127

:meth:`Guards.offset_range` gives the values an offset register can hold at
an access: ``R = X & K`` (``K`` a non-negative constant: ``[0, K]``), or
``R = T * c`` (``mul.wide``/``cvt`` of a 32-bit ``T``), ``T``'s
range from its definition (``%tid``, ``and`` with a constant, a byte or
16-bit load or conversion) narrowed by
every branch on ``T`` against a constant whose outcome the access's block
implies (a block entered only from that branch's one side, dominating the
access).

Why the narrowing is sound: ``T`` and ``R`` each have one unguarded
definition (``D_T`` and ``D_R``), ``D_T`` dominating ``D_R``, the compare
and the access, and ``D_R`` dominating the access.  A path from ``D_T`` to
the access that avoided ``D_R`` would, preceded by a path from the entry to
``D_T`` avoiding ``D_R`` (``D_T`` comes first on every path to ``D_R``),
reach the access without ``D_R``, against ``D_R`` dominating it: so ``R``
holds ``T * c`` for ``T``'s current value.  The same argument with the
guarded block ``B`` (entered only from the compare's block ``P``, ``D_T``
dominating ``P``) shows that after ``T``'s last definition the path went
through ``P``'s compare and into ``B``: the compare saw the value ``T`` has
at the access.  A bug the guard does not cover (a bound too large for the
variable, a guard on another register, a register written twice) leaves
the range unproven or outside the variable, and the access is checked.
"""

from __future__ import annotations

from .. import cfg as cfg_mod
from .. import provenance as prov
from ..nodes import ArgumentList, Block, Immediate, Instruction, Register, Statement

S32 = (-(1 << 31), (1 << 31) - 1)
SPECIAL = {"%tid.x": (0, 1023), "%tid.y": (0, 1023), "%tid.z": (0, 63)}
"""Registers whose range the hardware fixes (at most 1024 threads per
block, 64 in z)."""
NARROW = {"u8": (0, 255), "b8": (0, 255), "s8": (-128, 127),
          "u16": (0, 65535), "b16": (0, 65535), "s16": (-32768, 32767)}
"""Values of a narrow load or conversion: a scalar ``ld`` of such a type
into a wider register zero-extends (unsigned and bit types) or
sign-extends (signed); ``cvt.{s32,u32}`` from such a type likewise.  A
histogram's ``local[data[i]]`` with byte ``data`` is in [0, 255]."""
MAX_SCALE = 1 << 16

# a compare that is true (first) or false (second) bounds T as:
# (low, high) offsets from K; None: no bound on that side
_SIGNED = {
    "lt": ((None, -1), (0, None)),
    "le": ((None, 0), (1, None)),
    "gt": ((1, None), (None, 0)),
    "ge": ((0, None), (None, -1)),
}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "lo": "hi", "ls": "hs",
           "hi": "lo", "hs": "ls"}
_UNSIGNED = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def _defs(st: Statement) -> list[str]:
    """Registers ``st`` may write, a call's return registers included."""
    if type(st) is Instruction:
        out = list(prov.defs(st))
        if st.op == "call" and st.operands and isinstance(st.operands[0], ArgumentList):
            out.extend(r.name for r in st.operands[0].items if isinstance(r, Register))
        return out
    if type(st) is Block:
        out: list[str] = []
        for inner in st.statements:
            out.extend(_defs(inner))
        return out
    return []


def _imm(op: object) -> int | None:
    if isinstance(op, Immediate):
        v = op.value
        return v if isinstance(v, int) else None
    return None


class Guards:
    """Offset ranges at the accesses of one function body."""

    def __init__(self, body: list[Statement], graph: cfg_mod.CFG,
                 tree: cfg_mod.DominatorTree) -> None:
        self.body = body
        self.graph = graph
        self.tree = tree
        self.defs: dict[str, list[int]] = {}
        for i, st in enumerate(body):
            for r in _defs(st):
                self.defs.setdefault(r, []).append(i)
        self.label_block = {name: bb.index for bb in graph.blocks for name in bb.labels}

    def _dominates(self, i: int, j: int) -> bool:
        bi, bj = self.graph.block_of[i], self.graph.block_of[j]
        return i < j if bi == bj else self.tree.dominates(bi, bj)

    def _single(self, reg: str, at: int) -> tuple[int, Instruction] | None:
        """The one definition of ``reg`` when it is an unguarded instruction
        dominating statement ``at``."""
        where = self.defs.get(reg, [])
        if len(where) != 1 or not self._dominates(where[0], at):
            return None
        st = self.body[where[0]]
        if type(st) is not Instruction or st.guard is not None:
            return None
        return where[0], st

    def offset_range(self, reg: str, at: int) -> tuple[int, int] | None:
        """The values the 64-bit offset register ``reg`` can hold at
        statement ``at`` (inclusive), or None when not proven."""
        d = self._single(reg, at)
        if d is None:
            return None
        _, st = d
        ops = st.operands
        signed = st.opcode in ("mul.wide.s32", "cvt.s64.s32")
        if st.opcode in ("mul.wide.s32", "mul.wide.u32") and len(ops) == 3:
            regs = [o.name for o in ops[1:] if isinstance(o, Register)]
            consts = [c for c in (_imm(o) for o in ops[1:]) if c is not None]
            if len(regs) != 1 or len(consts) != 1 or not 0 < consts[0] <= MAX_SCALE:
                return None
            index, scale = regs[0], consts[0]
        elif st.opcode in ("cvt.s64.s32", "cvt.u64.u32") and len(ops) == 2 \
                and isinstance(ops[1], Register):
            index, scale = ops[1].name, 1
        elif st.opcode == "and.b64" and len(ops) == 3:
            # a wrapped index, (t + 1) % n: whatever the other operand, [0, K]
            k = next((c for c in map(_imm, ops[1:]) if c is not None), None)
            return (0, k) if k is not None and 0 <= k < 1 << 62 else None
        else:
            return None
        r = self.index_range(index, at)
        if r is None or (not signed and r[0] < 0):
            return None
        return r[0] * scale, r[1] * scale

    def index_range(self, reg: str, at: int) -> tuple[int, int] | None:
        """The signed values the 32-bit register ``reg`` can hold at ``at``."""
        d = self._single(reg, at)
        if d is None:
            return None
        def_at, st = d
        lo, hi = S32
        src = st.operands[1] if len(st.operands) == 2 else None
        if st.opcode in ("mov.u32", "mov.b32", "mov.s32") and isinstance(src, Register) \
                and src.name in SPECIAL:
            lo, hi = SPECIAL[src.name]
        elif st.op == "ld" and len(st.operands) == 2 and isinstance(st.operands[0], Register) \
                and not {"v2", "v4", "v8"} & set(st.modifiers):
            lo, hi = NARROW.get(st.modifiers[-1], S32)
        elif st.op == "cvt" and len(st.modifiers) == 2 and st.modifiers[0] in ("s32", "u32") \
                and src is not None:
            lo, hi = NARROW.get(st.modifiers[1], S32)
        elif st.op == "and" and len(st.operands) == 3:
            k = next((c for c in map(_imm, st.operands[1:]) if c is not None), None)
            if k is not None and 0 <= k <= S32[1]:
                lo, hi = 0, k
        b: int | None = self.graph.block_of[at]
        while b is not None and lo <= hi:
            bound = self._guard(b, reg, def_at)
            if bound is not None:
                lo, hi = max(lo, bound[0]), min(hi, bound[1])
            b = self.tree.idom[b]
        return (lo, hi) if lo <= hi else None

    def _guard(self, b: int, reg: str, def_at: int) -> tuple[int, int] | None:
        """The bound on ``reg`` entering block ``b`` implies: ``b``'s only
        predecessor ends with ``@p bra`` whose ``p`` the predecessor sets by
        comparing ``reg`` with a constant, and ``b`` is one side of it."""
        graph = self.graph
        preds = graph.blocks[b].predecessors
        if len(preds) != 1:
            return None
        pb = graph.blocks[preds[0]]
        idx = [i for i in range(pb.start, pb.end) if type(self.body[i]) is Instruction]
        if not idx:
            return None
        br = self.body[idx[-1]]
        if br.op != "bra" or br.guard is None or not br.operands:
            return None
        taken = self.label_block.get(getattr(br.operands[0], "name", ""))
        fall = pb.index + 1
        if taken is None or taken == fall or b not in (taken, fall):
            return None
        outcome = (b == taken) != br.guard.negated  # the value p had
        setp_at = next((i for i in range(idx[-1] - 1, pb.start - 1, -1)
                        if br.guard.register in _defs(self.body[i])), None)
        if setp_at is None or not self._dominates(def_at, setp_at):
            return None
        setp = self.body[setp_at]
        parts = setp.opcode.split(".")
        if setp.op != "setp" or setp.guard is not None or len(setp.operands) != 3 \
                or len(parts) != 3 or parts[2] not in ("s32", "u32", "b32"):
            return None
        cmp = parts[1]
        a, c = setp.operands[1], setp.operands[2]
        if isinstance(a, Register) and a.name == reg and _imm(c) is not None:
            k = _imm(c)
        elif isinstance(c, Register) and c.name == reg and _imm(a) is not None:
            k, cmp = _imm(a), _MIRROR.get(cmp, "")
        else:
            return None
        assert k is not None
        if cmp in _UNSIGNED:
            # unsigned T <= K with 0 <= K < 2**31: T is in [0, K] as signed
            rel = _UNSIGNED[cmp]
            low, high = _SIGNED[rel][0 if outcome else 1]
            if low is not None or not 0 <= k + high <= S32[1]:
                return None
            return 0, k + high
        if cmp not in _SIGNED or parts[2] != "s32":
            return None
        low, high = _SIGNED[cmp][0 if outcome else 1]
        return (S32[0] if low is None else k + low, S32[1] if high is None else k + high)

    def aligned_part(self, reg: str, at: int, align: int) -> str | None:
        """``X`` when ``reg`` is ``X + Y`` (one unguarded definition, which
        dominates statement ``at``) with every value of ``Y`` a multiple of
        ``align``: then ``reg + imm`` is aligned exactly when ``X + imm`` is.
        ``X``'s one definition dominates ``reg``'s, so (the argument of the
        module docstring) ``X`` holds at ``at`` the value ``reg`` was made
        from; an ``X`` that does not change in a loop lets the loop check the
        alignment once, before it."""
        d = self._single(reg, at)
        if d is None:
            return None
        def_at, st = d
        if st.opcode not in ("add.s64", "add.u64") or len(st.operands) != 3:
            return None
        a, b = st.operands[1], st.operands[2]
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Register) and isinstance(y, Register) and x.name != reg \
                    and self._single(x.name, def_at) is not None \
                    and self._multiple(y.name, def_at, align):
                return x.name
        return None

    def sum_parts(self, reg: str, at: int) -> list[tuple[str, str, int]]:
        """``(X, Y, d)`` for each way ``reg`` is ``X + Y`` at statement ``at``
        (one unguarded 64-bit ``add`` defining it, dominating ``at``; ``X``
        and ``Y`` each with one unguarded definition dominating that add,
        ``X``'s at statement ``d``).  By the module docstring's argument, at
        ``at`` both hold the values ``reg`` was made from, and ``X`` holds
        the value its definition at ``d`` gave it."""
        r = self._single(reg, at)
        if r is None:
            return []
        def_at, st = r
        if st.opcode not in ("add.s64", "add.u64") or len(st.operands) != 3:
            return []
        a, b = st.operands[1], st.operands[2]
        out = []
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Register) and isinstance(y, Register) \
                    and reg not in (x.name, y.name):
                dx, dy = self._single(x.name, def_at), self._single(y.name, def_at)
                if dx is not None and dy is not None:
                    out.append((x.name, y.name, dx[0]))
        return out

    def _multiple(self, reg: str, at: int, align: int) -> bool:
        """Whether every value ``reg`` can hold at ``at`` is a multiple of ``align``."""
        d = self._single(reg, at)
        if d is None:
            return False
        st = d[1]
        ops = st.operands
        if len(ops) != 3:
            return False
        if st.opcode in ("mul.wide.s32", "mul.wide.u32", "mul.lo.s64", "mul.lo.u64"):
            return any(c is not None and c % align == 0 for c in map(_imm, ops[1:]))
        if st.opcode in ("shl.b64",):
            k = _imm(ops[2])
            return k is not None and 0 <= k < 64 and (1 << k) % align == 0
        return False
