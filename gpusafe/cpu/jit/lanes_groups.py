"""Grouped loads of the lanes lowering: a warp's addresses in rows of lanes.

A tiled kernel's warp reads shared memory in a few patterns the general check
(:mod:`.lanes_mem`: consecutive from lane 0, else a gather of 32 addresses)
does not see: a 16-wide tile's row is 16 consecutive lanes, and the next 16
lanes read the next row (``Bs[k][tx]``) or all read one value of their row
(``As[ty][k]``).  Here every group of :data:`GROUP` lanes is one load: a
vector when each group's addresses are consecutive, a scalar broadcast to
the group when each group's are one address.  The test looks at every lane
(inactive ones too: their loads are inside the window and harmless, and
``write`` keeps their registers), so it depends on the base register alone,
and LLVM computes it once for all the accesses at constant offsets from that
register (a tile's unrolled inner loop: one test for 16 loads).  What fails
the test, or reaches outside the window, or is misaligned, takes the general
check, which answers exactly as the interpreter (the error of the first bad
lane included).
"""

from __future__ import annotations

from gpusafe_instrument import nodes

from .lanes_values import LaneValues
from .lanes_vec import LANES, vec_type

GROUP = 8
"""Lanes one grouped load serves: an AVX2 vector of 32-bit values."""

_V64 = vec_type("i64")
_V1 = vec_type("i1")


def load_runs(flat: list[nodes.Instruction], starts: set[int]) -> dict[int, tuple[int, int]]:
    """For each load at ``[register+offset]``: the lowest and the highest offset
    of the loads from the same register (same space and type) in its run: the
    stretch of straight code (no block starts in ``starts``) where nothing
    writes the register.  A grouped load tests its run's whole span, so the
    test is the same expression for every load of the run (a tile's 16 loads
    from one row: one test)."""
    out: dict[int, tuple[int, int]] = {}
    open_runs: dict[tuple, list[int]] = {}

    def close(keys) -> None:
        for key in list(keys):
            members = open_runs.pop(key)
            offsets = [flat[i].operands[1].offset for i in members]
            out.update(dict.fromkeys(members, (min(offsets), max(offsets))))

    for i, instr in enumerate(flat):
        if i in starts:
            close(open_runs)
        ops = instr.operands
        if instr.op == "ld" and len(ops) == 2 and isinstance(ops[1], nodes.Address) \
                and ops[1].base is not None:
            open_runs.setdefault((ops[1].base.name, tuple(instr.modifiers)), []).append(i)
        written = _written(instr)
        close(k for k in open_runs if k[0] in written)
    close(open_runs)
    return out


def _written(instr: nodes.Instruction) -> set[str]:
    """The registers an instruction may write (its first operand's), by name."""
    if not instr.operands:
        return set()
    first = instr.operands[0]
    parts = [first.first, first.second] if isinstance(first, nodes.PredicatePair) else [first]
    names = set()
    for part in parts:
        for item in part.items if isinstance(part, nodes.Vector) else (part,):
            if isinstance(item, (nodes.Register, nodes.Symbol)):
                names.add(item.name)
    return names


def _mask(values) -> str:
    return "<" + ", ".join(f"i32 {v}" for v in values) + ">"


class GroupedLoads(LaneValues):
    """``grouped_load``: the fast path in front of a load's general check."""

    load_runs: dict[int, tuple[int, int]] = {}  # instruction index -> its run's offsets

    def grouped_load(self, operand: nodes.Operand, width: int, lt: str,
                     window: tuple[str, str, str]) -> str | None:
        """Emits the test and the two grouped loads, then opens ``GN{g}``,
        where the caller emits the general check, whose result it joins with
        these at ``GJ{g}`` (``%gcv{g}`` from ``GC{g}``, ``%gbv{g}`` from
        ``GB{g}``); returns ``g``, or None (nothing emitted) when the operand
        has no base or its offset is not a multiple of ``width``.  ``window``
        is the general check's (:meth:`.LaneMemory._window`): the host
        pointer of its first address ``%s{n}`` and the last start that fits."""
        if not isinstance(operand, nodes.Address) or operand.base is None \
                or operand.offset % width:
            return None
        base = operand.base
        if isinstance(base, nodes.Register) or self.is_register(base.name):
            b = self.read(nodes.Register(base.name), "u64")
        else:
            b = self.symbol_address(base.name, 0)
        n, host, limit = window
        g = "_" + self.new()[2:]
        imm, groups = operand.offset, LANES // GROUP
        low, high = self.load_runs.get(self.index, (imm, imm))
        v4 = f"<{groups} x i64>"
        for op in ("umin", "umax", "or"):
            self.intrinsics.add(f"declare i64 @llvm.vector.reduce.{op}.v{groups}i64({v4})")
        steps = "<" + ", ".join(f"i64 {(k % GROUP) * width}" for k in range(LANES)) + ">"
        spread = _mask(k // GROUP for k in range(LANES))
        # the leaders (each group's first lane), each lane's distance from its
        # leader: all 0 (one address a group) or all (lane % GROUP) * width
        self.raw(f"%gl{g} = shufflevector {_V64} {b}, {_V64} poison, "
                 f"<{groups} x i32> {_mask(k * GROUP for k in range(groups))}\n"
                 f"  %glb{g} = shufflevector {v4} %gl{g}, {v4} poison, <{LANES} x i32> {spread}\n"
                 f"  %gd{g} = sub {_V64} {b}, %glb{g}\n"
                 f"  %gbq{g} = icmp eq {_V64} %gd{g}, zeroinitializer\n"
                 f"  %gcq{g} = icmp eq {_V64} %gd{g}, {steps}\n"
                 f"  %gbm{g} = bitcast {_V1} %gbq{g} to i32\n"
                 f"  %gcm{g} = bitcast {_V1} %gcq{g} to i32\n"
                 f"  %gib{g} = icmp eq i32 %gbm{g}, -1\n"
                 f"  %gic{g} = icmp eq i32 %gcm{g}, -1\n"
                 f"  %gpat{g} = or i1 %gib{g}, %gic{g}")
        # every lane's [address, address + width) inside the window at every
        # offset of the run: the lowest leader plus the lowest offset, the
        # highest leader's group end plus the highest, neither wrapping;
        # aligned when every leader is (so every lane is)
        wrap0 = "uge" if low >= 0 else "ule"
        wrap1 = "uge" if high >= 0 else "ule"
        self.raw(f"%glo{g} = call i64 @llvm.vector.reduce.umin.v{groups}i64({v4} %gl{g})\n"
                 f"  %ghi{g} = call i64 @llvm.vector.reduce.umax.v{groups}i64({v4} %gl{g})\n"
                 f"  %gor{g} = call i64 @llvm.vector.reduce.or.v{groups}i64({v4} %gl{g})\n"
                 f"  %gal{g} = and i64 %gor{g}, {width - 1}\n"
                 f"  %gaok{g} = icmp eq i64 %gal{g}, 0\n"
                 f"  %gspan{g} = select i1 %gic{g}, i64 {(GROUP - 1) * width}, i64 0\n"
                 f"  %ghs{g} = add i64 %ghi{g}, %gspan{g}\n"
                 f"  %ga0{g} = add i64 %glo{g}, {low}\n"
                 f"  %ga1{g} = add i64 %ghs{g}, {high}\n"
                 f"  %gw0{g} = icmp {wrap0} i64 %ga0{g}, %glo{g}\n"
                 f"  %gw1{g} = icmp uge i64 %ghs{g}, %ghi{g}\n"
                 f"  %gw3{g} = icmp {wrap1} i64 %ga1{g}, %ghs{g}\n"
                 f"  %gw2{g} = and i1 %gw0{g}, %gw3{g}\n"
                 f"  %gin0{g} = icmp uge i64 %ga0{g}, %s{n}\n"
                 f"  %gin1{g} = icmp ule i64 %ga1{g}, {limit}\n"
                 f"  %gk1{g} = and i1 %gpat{g}, %gaok{g}\n"
                 f"  %gk2{g} = and i1 %gw1{g}, %gw2{g}\n"
                 f"  %gk3{g} = and i1 %gin0{g}, %gin1{g}\n"
                 f"  %gk4{g} = and i1 %gk1{g}, %gk2{g}\n"
                 f"  %gok{g} = and i1 %gk4{g}, %gk3{g}\n"
                 f"  br i1 %gok{g}, label %GF{g}, label %GN{g}")
        self.lines.append(f"GF{g}:")
        pointers = []
        for k in range(groups):
            self.raw(f"%gx{g}_{k} = extractelement {v4} %gl{g}, i64 {k}\n"
                     f"  %go{g}_{k} = sub i64 %gx{g}_{k}, %s{n}\n"
                     f"  %gq{g}_{k} = add i64 %go{g}_{k}, {imm}\n"
                     f"  %gp{g}_{k} = getelementptr i8, ptr {host}, i64 %gq{g}_{k}")
            pointers.append(f"%gp{g}_{k}")
        self.raw(f"br i1 %gic{g}, label %GC{g}, label %GB{g}")
        self.lines.append(f"GC{g}:")
        rows = []
        for k, p in enumerate(pointers):
            self.raw(f"%gcr{g}_{k} = load <{GROUP} x {lt}>, ptr {p}, align 1")
            rows.append(f"%gcr{g}_{k}")
        size = GROUP
        while len(rows) > 1:  # the rows side by side, two at a time
            half = len(rows) // 2
            joined = [f"%gcv{g}" if half == 1 else f"%gcj{g}_{size}_{k}" for k in range(half)]
            for k, out in enumerate(joined):
                self.raw(f"{out} = shufflevector <{size} x {lt}> {rows[2 * k]}, "
                         f"<{size} x {lt}> {rows[2 * k + 1]}, "
                         f"<{2 * size} x i32> {_mask(range(2 * size))}")
            rows, size = joined, 2 * size
        self.raw(f"br label %GJ{g}")
        self.lines.append(f"GB{g}:")
        prev = "poison"
        for k, p in enumerate(pointers):
            self.raw(f"%gbs{g}_{k} = load {lt}, ptr {p}, align 1\n"
                     f"  %gbi{g}_{k} = insertelement <{groups} x {lt}> {prev}, {lt} %gbs{g}_{k}, "
                     f"i64 {k}")
            prev = f"%gbi{g}_{k}"
        self.raw(f"%gbv{g} = shufflevector <{groups} x {lt}> {prev}, <{groups} x {lt}> poison, "
                 f"<{LANES} x i32> {spread}\n  br label %GJ{g}")
        self.lines.append(f"GN{g}:")
        return g
