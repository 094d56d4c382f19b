"""Memory and warp instructions of the lanes lowering.

*Global and shared accesses* check every executing lane at once: a global
address against the site's segment hint (``@resolve``'s: start, last start
where the width fits, bytes), a shared one against the block's window (its
size rounded up as the interpreter's, natural alignment); when all pass, one
``llvm.masked.gather``/``scatter`` (a scatter stores its lanes in order, so
two lanes storing to one address leave the higher lane's value, as the
interpreter's lane order does).  When any lane fails, the lanes go one by
one in lane order through the per-thread lowering's ``@resolve`` /
``@shared_ptr``, which refresh the hint or record the interpreter's error
(same class, same message, the first bad lane's) and stop the launch.

*Atomics* (every form the per-thread lowering takes, :mod:`.atomics`) go
lane by lane in lane order, as the interpreter applies them: a global one an
LLVM ``atomicrmw``/``cmpxchg`` (blocks on several OS threads lose no update),
a shared one a plain load, update and store (the block's window is its OS
thread's alone).

*Warp instructions* are operations on the vectors: ``shfl.sync`` reads the
source lane's register whatever that lane does (as the interpreter reads its
frame), ``vote.sync`` reduces the executing lanes' predicates, and
``bar.warp.sync`` only synchronises.  Their waiting rule (every live lane of
the member mask present) is :mod:`.lanes`' business.
"""

from __future__ import annotations

from collections.abc import Callable

from gpusafe_instrument import nodes

from .atomics import atomic_form, compiled_atomic
from .lanes_groups import GroupedLoads
from .lanes_vec import LANES, splat, vec_type
from .values import (
    ACCESS_ATOMIC,
    ACCESS_READ,
    ACCESS_WRITE,
    BITS,
    GLOBAL,
    QUALIFIERS,
    SHARED,
    llvm_type,
    split_type,
)

_V64 = vec_type("i64")
_V32 = vec_type("i32")
_V1 = vec_type("i1")
_ELEM = {"i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "float": "f32", "double": "f64"}


def _mangle(lt: str) -> str:
    return f"v{LANES}{_ELEM[lt]}"


class LaneMemory(GroupedLoads):
    """``op_ld``, ``op_st``, ``op_atom``/``op_red``, ``op_shfl``, ``op_vote``."""

    def _space(self, instr: nodes.Instruction) -> tuple[int, str]:
        mods, t = split_type(instr)
        space = None
        for m in mods:
            if m == "global":
                space = GLOBAL
            elif m in ("shared", "shared::cta"):
                space = SHARED
            elif m not in QUALIFIERS:
                raise self.fail(f"modifier .{m} (not in the lanes lowering)")
        if space is None:
            raise self.fail("generic addresses (not in the lanes lowering)")
        if t == "pred" or t not in BITS:
            raise self.fail(f"type .{t}")
        return space, t

    def lane_address(self, operand: nodes.Operand) -> str:
        if not isinstance(operand, nodes.Address):
            raise self.fail("address operand")
        base = operand.base
        if base is None:
            v = splat("i64", "0")
        elif isinstance(base, nodes.Register) or self.is_register(base.name):
            v = self.read(nodes.Register(base.name), "u64")
        else:
            v = self.symbol_address(base.name, 0)
        if not operand.offset:
            return v
        out = self.new()
        self.raw(f"{out} = add {_V64} {v}, {splat('i64', str(operand.offset))}")
        return out

    def _window(self, space: int, width: int) -> tuple[str, str, str]:
        """The access's window: ``n``, the host pointer of its first byte
        (``%b{n}``/``%shared``) and the last start where ``width`` fits
        (``%s{n}`` is its first address); a global access's site hint."""
        n = "_" + self.new()[2:]
        if space == SHARED:
            self.raw(f"%lim{n} = sub i64 %sstride, {width}\n  %s{n} = add i64 0, 0")
            return n, "%shared", f"%lim{n}"
        site = self.sites
        self.sites += 1
        self.site_of[n] = site
        self.raw(f"%hp{n} = getelementptr i64, ptr %ctx, i64 5\n"
                 f"  %hints{n} = load ptr, ptr %hp{n}\n"
                 f"  %sp{n} = getelementptr i64, ptr %hints{n}, i64 {site * 4}\n"
                 f"  %s{n} = load i64, ptr %sp{n}\n"
                 f"  %ep{n} = getelementptr i64, ptr %sp{n}, i64 1\n"
                 f"  %e{n} = load i64, ptr %ep{n}\n"
                 f"  %bp{n} = getelementptr i64, ptr %sp{n}, i64 2\n"
                 f"  %b{n} = load ptr, ptr %bp{n}")
        return n, f"%b{n}", f"%e{n}"

    def _check(self, addr: str, space: int, width: int,
               window: tuple[str, str, str] | None = None) -> str:
        """Branches to ``con{n}`` (the executing lanes' addresses consecutive
        from lane 0's, all inside the segment or window: ``%cp{n}`` points at
        lane 0's bytes), ``gat{n}`` (scattered, all inside: ``%ptrs{n}``) or
        ``slow{n}`` (some lane fails: lane by lane); returns ``n``."""
        n, base, limit = window or self._window(space, width)
        steps = "<" + ", ".join(f"i64 {k * width}" for k in range(LANES)) + ">"
        # consecutive: lane k at lane 0's start + k * width (inactive lanes free)
        self.raw(f"%cr{n} = sub {_V64} {addr}, {steps}\n"
                 f"  %c0{n} = extractelement {_V64} %cr{n}, i64 0")
        c0 = self.broadcast(f"%c0{n}", "i64")
        self.raw(f"%ceq{n} = icmp eq {_V64} %cr{n}, {c0}\n"
                 f"  %cne{n} = xor {_V1} %ceq{n}, {splat('i1', 'true')}\n"
                 f"  %cbad{n} = and {_V1} %cne{n}, {self.eff}\n"
                 f"  %cbb{n} = bitcast {_V1} %cbad{n} to i32\n"
                 f"  %eb{n} = bitcast {_V1} {self.eff} to i32\n"
                 f"  %cok{n} = icmp eq i32 %cbb{n}, 0\n"
                 f"  %some{n} = icmp ne i32 %eb{n}, 0\n"
                 f"  %cgo{n} = and i1 %cok{n}, %some{n}\n"
                 f"  br i1 %cgo{n}, label %cchk{n}, label %vchk{n}")
        # the first and last executing lanes' addresses bound all of them
        self.lines.append(f"cchk{n}:")
        self.raw(f"%k0{n} = call i32 @llvm.cttz.i32(i32 %eb{n}, i1 true)\n"
                 f"  %kz{n} = call i32 @llvm.ctlz.i32(i32 %eb{n}, i1 true)\n"
                 f"  %kq{n} = sub i32 31, %kz{n}\n"
                 f"  %k0w{n} = zext i32 %k0{n} to i64\n  %k1w{n} = zext i32 %kq{n} to i64\n"
                 f"  %f0{n} = mul i64 %k0w{n}, {width}\n  %f1{n} = mul i64 %k1w{n}, {width}\n"
                 f"  %a0{n} = add i64 %c0{n}, %f0{n}\n  %a1{n} = add i64 %c0{n}, %f1{n}\n"
                 f"  %cm{n} = and i64 %c0{n}, {width - 1}\n  %cmis{n} = icmp ne i64 %cm{n}, 0\n"
                 f"  %clo{n} = icmp ult i64 %a0{n}, %s{n}\n"
                 f"  %chi{n} = icmp ugt i64 %a1{n}, {limit}\n"
                 f"  %cwr{n} = icmp ult i64 %a1{n}, %a0{n}\n"
                 f"  %cx1{n} = or i1 %cmis{n}, %clo{n}\n  %cx2{n} = or i1 %chi{n}, %cwr{n}\n"
                 f"  %cx{n} = or i1 %cx1{n}, %cx2{n}\n"
                 f"  br i1 %cx{n}, label %slow{n}, label %con{n}")
        self.lines.append(f"vchk{n}:")
        self.raw(f"%ma{n} = and {_V64} {addr}, {splat('i64', str(width - 1))}\n"
                 f"  %mis{n} = icmp ne {_V64} %ma{n}, zeroinitializer")
        vs, ve = self.broadcast(f"%s{n}", "i64"), self.broadcast(limit, "i64")
        self.raw(f"%lo{n} = icmp ult {_V64} {addr}, {vs}\n"
                 f"  %hi{n} = icmp ugt {_V64} {addr}, {ve}\n"
                 f"  %o{n} = or {_V1} %lo{n}, %hi{n}\n"
                 f"  %bad{n} = or {_V1} %mis{n}, %o{n}\n"
                 f"  %off{n} = sub {_V64} {addr}, {vs}\n"
                 f"  %ptrs{n} = getelementptr i8, ptr {base}, {_V64} %off{n}\n"
                 f"  %bm{n} = and {_V1} %bad{n}, {self.eff}\n"
                 f"  %bb{n} = bitcast {_V1} %bm{n} to i32\n"
                 f"  %any{n} = icmp ne i32 %bb{n}, 0\n"
                 f"  br i1 %any{n}, label %slow{n}, label %gat{n}")
        self.lines.append(f"con{n}:")
        self.raw(f"%co{n} = sub i64 %c0{n}, %s{n}\n"
                 f"  %cp{n} = getelementptr i8, ptr {base}, i64 %co{n}")
        return n

    def _lane_pointer(self, n: str, space: int, addr: str, width: int, access: int) -> str:
        """Inside a lane loop (lane ``%k{n}``): the per-thread lowering's pointer
        for the lane's address, or a jump to ``fault``."""
        kind = space * 4 + access
        line = self.instr.line if self.instr else 0
        self.raw(f"%ak{n} = extractelement {_V64} {addr}, i32 %k{n}")
        tail = f"i64 %ak{n}, i64 {width}, i32 {kind}, i32 {line}"
        if space == SHARED:
            self.raw(f"%pk{n} = call ptr @shared_ptr(ptr %ctx, ptr %shared, i64 %sstride, {tail})")
        else:
            self.raw(f"%pk{n} = call ptr @resolve(ptr %ctx, i64 {self.site_of[n]}, {tail})")
        self.raw(f"%nk{n} = icmp eq ptr %pk{n}, null\n"
                 f"  br i1 %nk{n}, label %fault, label %okk{n}")
        self.lines.append(f"okk{n}:")
        return f"%pk{n}"

    def _lane_loop(self, n: str, body: Callable[[], str], acc_ty: str | None) -> str | None:
        """A loop over the executing lanes in lane order; ``body(ptr_label)``
        emits one lane's work and returns its value (inserted into ``acc``)."""
        acc = f"%acc{n}"
        self.raw(f"br label %pre{n}")
        self.lines.append(f"pre{n}:")
        self.raw(f"br label %lh{n}")
        self.lines.append(f"lh{n}:")
        self.raw(f"%k{n} = phi i32 [0, %pre{n}], [%k1{n}, %ln{n}]")
        if acc_ty:
            self.raw(f"{acc} = phi {acc_ty} [zeroinitializer, %pre{n}], [%acc2{n}, %ln{n}]")
        self.raw(f"%ek{n} = extractelement {_V1} {self.eff}, i32 %k{n}\n"
                 f"  br i1 %ek{n}, label %ld{n}, label %ln{n}")
        self.lines.append(f"ld{n}:")
        value = body()
        if acc_ty:
            self.raw(f"%acci{n} = insertelement {acc_ty} {acc}, {acc_ty[acc_ty.index('x') + 2:-1]} "
                     f"{value}, i32 %k{n}")
        self.raw(f"br label %ln{n}")
        self.lines.append(f"ln{n}:")
        if acc_ty:
            self.raw(f"%acc2{n} = phi {acc_ty} [{acc}, %lh{n}], [%acci{n}, %okk{n}]")
        self.raw(f"%k1{n} = add i32 %k{n}, 1\n  %km{n} = icmp ult i32 %k1{n}, {LANES}\n"
                 f"  br i1 %km{n}, label %lh{n}, label %lx{n}")
        self.lines.append(f"lx{n}:")
        return f"%acc2{n}" if acc_ty else None

    def _access(self, instr: nodes.Instruction) -> tuple[int, str, int]:
        """A load's or store's space, type and width in bytes."""
        space, t = self._space(instr)
        if any(m in ("v2", "v4", "volatile") for m in instr.modifiers):
            raise self.fail("vector or volatile accesses (not in the lanes lowering)")
        return space, t, BITS[t] // 8

    def op_ld(self, instr: nodes.Instruction) -> None:
        d, a = instr.operands
        if "param" in instr.modifiers:
            _, t = split_type(instr)
            if not isinstance(a, nodes.Address) or not isinstance(a.base, nodes.Symbol) \
                    or a.base.name not in self.kparams or t == "pred" \
                    or set(instr.modifiers) - {"param", t}:
                raise self.fail("only scalar loads of kernel parameters by name")
            p, v = self.new(), self.new()
            self.raw(f"{p} = getelementptr i8, ptr %params, i64 {self.kparams[a.base.name] + a.offset}\n"
                     f"  {v} = load {llvm_type(t)}, ptr {p}, align 1")
            self.write(d, t, self.broadcast(v, llvm_type(t)))
            return
        if isinstance(d, nodes.Vector):
            raise self.fail("vector loads (not in the lanes lowering)")
        space, t, width = self._access(instr)
        lt = llvm_type(t)
        vt = vec_type(lt)
        window = self._window(space, width)
        g = self.grouped_load(a, width, lt, window)
        addr = self.lane_address(a)
        n = self._check(addr, space, width, window)
        ptrs = f"%ptrs{n}"
        self.intrinsics.add(f"declare {vt} @llvm.masked.gather.{_mangle(lt)}.v{LANES}p0"
                            f"(<{LANES} x ptr>, i32, {_V1}, {vt})")
        self.intrinsics.add(f"declare {vt} @llvm.masked.load.{_mangle(lt)}.p0"
                            f"(ptr, i32, {_V1}, {vt})")
        self.raw(f"%cl{n} = call {vt} @llvm.masked.load.{_mangle(lt)}.p0(ptr %cp{n}, i32 1, "
                 f"{_V1} {self.eff}, {vt} zeroinitializer)\n  br label %join{n}")
        self.lines.append(f"gat{n}:")
        self.raw(f"%g{n} = call {vt} @llvm.masked.gather.{_mangle(lt)}.v{LANES}p0("
                 f"<{LANES} x ptr> {ptrs}, i32 1, {_V1} {self.eff}, {vt} zeroinitializer)\n"
                 f"  br label %join{n}")
        self.lines.append(f"slow{n}:")

        def one() -> str:
            p = self._lane_pointer(n, space, addr, width, ACCESS_READ)
            self.raw(f"%lv{n} = load {lt}, ptr {p}, align 1")
            return f"%lv{n}"
        acc = self._lane_loop(n, one, vt)
        self.raw(f"br label %join{n}")
        self.lines.append(f"join{n}:")
        self.raw(f"%val{n} = phi {vt} [%g{n}, %gat{n}], [%cl{n}, %con{n}], [{acc}, %lx{n}]")
        value = f"%val{n}"
        if g is not None:
            self.raw(f"br label %GJ{g}")
            self.lines.append(f"GJ{g}:")
            self.raw(f"%gval{g} = phi {vt} [%gcv{g}, %GC{g}], [%gbv{g}, %GB{g}], "
                     f"[{value}, %join{n}]")
            value = f"%gval{g}"
        self.write(d, t, value)

    def op_st(self, instr: nodes.Instruction) -> None:
        a, s = instr.operands
        if isinstance(s, nodes.Vector):
            raise self.fail("vector stores (not in the lanes lowering)")
        space, t, width = self._access(instr)
        lt = llvm_type(t)
        vt = vec_type(lt)
        value = self.vconst(self.read(s, t), lt)
        addr = self.lane_address(a)
        n = self._check(addr, space, width)
        ptrs = f"%ptrs{n}"
        self.intrinsics.add(f"declare void @llvm.masked.scatter.{_mangle(lt)}.v{LANES}p0"
                            f"({vt}, <{LANES} x ptr>, i32, {_V1})")
        self.intrinsics.add(f"declare void @llvm.masked.store.{_mangle(lt)}.p0"
                            f"({vt}, ptr, i32, {_V1})")
        self.raw(f"call void @llvm.masked.store.{_mangle(lt)}.p0({vt} {value}, ptr %cp{n}, "
                 f"i32 1, {_V1} {self.eff})\n  br label %join{n}")
        self.lines.append(f"gat{n}:")
        self.raw(f"call void @llvm.masked.scatter.{_mangle(lt)}.v{LANES}p0({vt} {value}, "
                 f"<{LANES} x ptr> {ptrs}, i32 1, {_V1} {self.eff})\n  br label %join{n}")
        self.lines.append(f"slow{n}:")

        def one() -> str:
            p = self._lane_pointer(n, space, addr, width, ACCESS_WRITE)
            self.raw(f"%sv{n} = extractelement {vt} {value}, i32 %k{n}\n"
                     f"  store {lt} %sv{n}, ptr {p}, align 1")
            return ""
        self._lane_loop(n, one, None)
        self.raw(f"br label %join{n}")
        self.lines.append(f"join{n}:")

    def _atomic(self, instr: nodes.Instruction, dest: nodes.Operand | None,
                a: nodes.Operand, srcs: list[nodes.Operand], op: str, t: str,
                space: int) -> None:
        """Lane by lane in lane order, as the interpreter applies them, each
        lane's the per-thread lowering's (:func:`.atomics.compiled_atomic`)."""
        if space not in (GLOBAL, SHARED):
            raise self.fail("generic atomics (not in the lanes lowering)")
        lt = llvm_type(t)
        vt = vec_type(lt)
        values = [self.vconst(self.read(x, t), lt) for x in srcs]
        addr = self.lane_address(a)
        n = "_" + self.new()[2:]
        if space == GLOBAL:
            self.site_of[n] = self.sites
            self.sites += 1
            self.atomics += 1

        def one() -> str:
            p = self._lane_pointer(n, space, addr, BITS[t] // 8, ACCESS_ATOMIC)
            lane = []
            for k, v in enumerate(values):
                self.raw(f"%xv{n}_{k} = extractelement {vt} {v}, i32 %k{n}")
                lane.append(f"%xv{n}_{k}")
            text, intrinsics = compiled_atomic(f"%old{n}", p, op, t, lt, lane, space, self.new)
            self.intrinsics.update(intrinsics)
            self.raw(text)
            return f"%old{n}"
        old = self._lane_loop(n, one, vt)
        if dest is not None:
            self.write(dest, t, old)

    def op_atom(self, instr: nodes.Instruction) -> None:
        op, t, space = atomic_form(instr, self.fail)
        if len(instr.operands) != (4 if op == "cas" else 3):
            raise self.fail("form")
        d, a, *srcs = instr.operands
        self._atomic(instr, d, a, srcs, op, t, space)

    def op_red(self, instr: nodes.Instruction) -> None:
        op, t, space = atomic_form(instr, self.fail)
        if op == "cas" or len(instr.operands) != 2:
            raise self.fail("form")
        a, b = instr.operands
        self._atomic(instr, None, a, [b], op, t, space)

    # -- warp instructions (after the wait of :mod:`.lanes`) ---------------------

    def op_shfl(self, instr: nodes.Instruction) -> None:
        """The interpreter's ``build_shfl``: source lane j, clamped by the
        segment; a source past the warp's end gives the lane's own value."""
        mods = instr.modifiers
        mode = next((m for m in mods if m in ("up", "down", "bfly", "idx")), None)
        if mode is None or "sync" not in mods or set(mods) - {"sync", mode, "b32"} \
                or len(instr.operands) != 5:
            raise self.fail(f"shfl form {mods}")
        dst, a, b, c, _ = instr.operands
        self.shfl_sources.update(self.register(x.name)[0] for x in (a,)
                                 if isinstance(x, nodes.Register) and self.is_register(x.name))
        va = self.vconst(self.read(a, "b32"), "i32")
        vb = self.vconst(self.read(b, "u32"), "i32")
        vc = self.vconst(self.read(c, "u32"), "i32")
        n = "_" + self.new()[2:]
        s31 = splat("i32", "31")
        self.raw(f"%sb{n} = and {_V32} {vb}, {s31}\n"
                 f"  %sc8{n} = lshr {_V32} {vc}, {splat('i32', '8')}\n"
                 f"  %seg{n} = and {_V32} %sc8{n}, {s31}\n"
                 f"  %clamp{n} = and {_V32} {vc}, {s31}\n"
                 f"  %nseg{n} = xor {_V32} %seg{n}, {splat('i32', '-1')}\n"
                 f"  %ml1{n} = and {_V32} %lanev, %seg{n}\n"
                 f"  %ml2{n} = and {_V32} %clamp{n}, %nseg{n}\n"
                 f"  %maxl{n} = or {_V32} %ml1{n}, %ml2{n}")
        if mode == "up":
            self.raw(f"%j{n} = sub {_V32} %lanev, %sb{n}\n"
                     f"  %p{n} = icmp sge {_V32} %j{n}, %maxl{n}")
        elif mode == "down":
            self.raw(f"%j{n} = add {_V32} %lanev, %sb{n}\n"
                     f"  %p{n} = icmp sle {_V32} %j{n}, %maxl{n}")
        elif mode == "bfly":
            self.raw(f"%j{n} = xor {_V32} %lanev, %sb{n}\n"
                     f"  %p{n} = icmp sle {_V32} %j{n}, %maxl{n}")
        else:
            self.raw(f"%bn{n} = and {_V32} %sb{n}, %nseg{n}\n"
                     f"  %j{n} = or {_V32} %ml1{n}, %bn{n}\n"
                     f"  %p{n} = icmp sle {_V32} %j{n}, %maxl{n}")
        self.raw(f"%src{n} = select {_V1} %p{n}, {_V32} %j{n}, {_V32} %lanev")
        prev = va
        for k in range(LANES):  # a constant %src folds to one shufflevector
            self.raw(f"%si{n}_{k} = extractelement {_V32} %src{n}, i32 {k}\n"
                     f"  %sv{n}_{k} = extractelement {_V32} {va}, i32 %si{n}_{k}\n"
                     f"  %sr{n}_{k} = insertelement {_V32} {prev}, i32 %sv{n}_{k}, i32 {k}")
            prev = f"%sr{n}_{k}"
        self.raw(f"%ex{n} = icmp ult {_V32} %src{n}, %wsv\n"
                 f"  %val{n} = select {_V1} %ex{n}, {_V32} {prev}, {_V32} {va}")
        if isinstance(dst, nodes.PredicatePair):
            self.write(dst.first, "b32", f"%val{n}")
            self.write(dst.second, "pred", f"%p{n}")
        else:
            self.write(dst, "b32", f"%val{n}")

    def op_vote(self, instr: nodes.Instruction) -> None:
        """Over the executing lanes (guard true), as the interpreter's body runs
        for them only: ballot, all, any, uni, each with the lane's member mask."""
        mods = instr.modifiers
        mode = next((m for m in mods if m in ("all", "any", "uni", "ballot")), None)
        if mode is None or "sync" not in mods or len(instr.operands) != 3:
            raise self.fail(f"vote form {mods}")
        d, p, mask = instr.operands
        vp = self.vconst(self.read(p, "pred"), "i1")
        m = self.vconst(self.read(mask, "b32"), "i32")
        n = "_" + self.new()[2:]
        self.raw(f"%vt{n} = and {_V1} {vp}, {self.eff}\n"
                 f"  %vtb{n} = bitcast {_V1} %vt{n} to i32\n"
                 f"  %vpb{n} = bitcast {_V1} {self.eff} to i32")
        trues, present = self.broadcast(f"%vtb{n}", "i32"), self.broadcast(f"%vpb{n}", "i32")
        if mode == "ballot":
            self.raw(f"%vr{n} = and {_V32} {trues}, {m}")
            self.write(d, "b32", f"%vr{n}")
            return
        self.raw(f"%part{n} = and {_V32} {m}, {present}\n"
                 f"  %pt{n} = and {_V32} %part{n}, {trues}\n"
                 f"  %nt{n} = xor {_V32} {trues}, {splat('i32', '-1')}\n"
                 f"  %pf{n} = and {_V32} %part{n}, %nt{n}\n"
                 f"  %nof{n} = icmp eq {_V32} %pf{n}, zeroinitializer\n"
                 f"  %not{n} = icmp eq {_V32} %pt{n}, zeroinitializer")
        if mode == "all":
            r = f"%nof{n}"
        elif mode == "any":
            self.raw(f"%any{n} = xor {_V1} %not{n}, {splat('i1', 'true')}")
            r = f"%any{n}"
        else:
            self.raw(f"%uni{n} = or {_V1} %not{n}, %nof{n}")
            r = f"%uni{n}"
        self.write(d, "pred", r)
