"""Shared and local accesses of a straight-line run checked once, at its
first (:meth:`RunChecks._precheck_run`), for the JIT's lowering
(:mod:`.access` emits the accesses)."""

from __future__ import annotations

from gpusafe_instrument import nodes

from ..memory import LOCAL_STACK_BASE
from .values import (
    ACCESS_READ,
    ACCESS_WRITE,
    BITS,
    CONST,
    GENERIC,
    GLOBAL,
    LOCAL,
    QUALIFIERS,
    SHARED,
    Values,
    split_type,
)


class RunChecks(Values):
    """The look-ahead over a run of flat instructions and its one check."""

    def __init__(self, function: nodes.Function) -> None:
        super().__init__(function)
        self.flat: list[nodes.Instruction] = []  # the kernel's flat instructions (lower)
        self.prechecked: set[int] = set()  # accesses a run's first access checked
        self.entries: set[int] | None = None  # where control may jump to

    # -- memory ---------------------------------------------------------------

    def _memory(self, instr: nodes.Instruction) -> tuple[int, int, str, list[str]]:
        """(space, vector length, element type, remaining modifiers)."""
        mods, t = split_type(instr)
        space = GENERIC
        count = 1
        rest = []
        for m in mods:
            if m == "global":
                space = GLOBAL
            elif m == "const":  # device memory, as the interpreter has it
                space = CONST
            elif m in ("shared", "shared::cta"):
                space = SHARED
            elif m == "local":
                space = LOCAL
            elif m in ("v2", "v4"):
                count = int(m[1])
            elif m in QUALIFIERS or m.startswith("L1::") or m.startswith("L2::"):
                continue
            else:
                rest.append(m)
        return space, count, t, rest

    # -- a run's shared/local accesses checked once -----------------------------

    def _window_pointer(self, space: int, addr: str) -> str:
        """The bytes of a shared or local access proven in bounds at its run's start."""
        base, bias = ("%shared", 0) if space == SHARED else ("%local", LOCAL_STACK_BASE)
        off, ptr = self.new(), self.new()
        self.emit(f"{off} = sub i64 {addr}, {bias}\n"
                  f"  {ptr} = getelementptr inbounds i8, ptr {base}, i64 {off}")
        return ptr

    def _run_accesses(self, start: int) -> list[tuple[int, nodes.Address, int, int, int]]:
        """The shared and local ``ld``/``st`` of the straight-line run from flat
        instruction ``start`` (an unguarded one of them), as (index, address,
        width, space, access): the run goes on while control can enter only
        at its start (no label, call or return inside), no instruction is
        guarded, and every instruction is arithmetic (cannot fault, suspend or
        touch memory) or such an access whose address registers no earlier
        instruction of the run writes."""
        flat, out, written = self.flat, [], set()
        entries = self._entry_points()
        for m in range(start, len(flat)):
            instr = flat[m]
            if m > start and (m in entries or instr.guard is not None):
                break
            if m in self.calls or m in self.returns or m in self.ret_to:
                break
            scopes = self.flat_scopes[m]
            if instr.op in ("ld", "st") and "param" not in instr.modifiers:
                space, count, t, rest = self._memory(instr)
                a = instr.operands[1 if instr.op == "ld" else 0]
                if space not in (SHARED, LOCAL) or rest or t == "pred" \
                        or not isinstance(a, nodes.Address):
                    break
                key = self._base_slot(a, scopes)
                if key is None or key in written:
                    break
                out.append((m, a, BITS[t] // 8 * count, space,
                            ACCESS_READ if instr.op == "ld" else ACCESS_WRITE))
                if instr.op == "ld":
                    written |= self._names_slots(instr.operands[0], scopes)
            elif instr.op in _ARITHMETIC and instr.guard is None:
                written |= self._names_slots(instr.operands[0], scopes) if instr.operands \
                    else set()
            else:
                break
        return out

    def _entry_points(self) -> set[int]:
        """Flat indices control may reach other than from the instruction before."""
        if self.entries is None:
            found: set[int] = set(self.ret_to.values())
            found.update(site.after + 1 for site in self.calls.values())
            for scopes in self.flat_scopes:
                for scope in scopes:
                    found.update(v for k, v in scope.items()
                                 if isinstance(k, tuple) and k[0] == "label")
            self.entries = found
        return self.entries

    def _base_slot(self, a: nodes.Address, scopes: list) -> str | None:
        """What an address's base is read from: a register slot, a variable
        (an offset the launch fixes), none; None when it is something else."""
        base = a.base
        if base is None:
            return "0"
        for scope in reversed(scopes):
            if base.name in scope:
                return scope[base.name][0]
        if isinstance(base, nodes.Symbol):
            return f"@{base.name}"
        return None

    def _names_slots(self, operand: object, scopes: list) -> set[str]:
        """The register slots an operand names (a destination: what it may write)."""
        if isinstance(operand, (nodes.Register, nodes.Symbol)):
            for scope in reversed(scopes):
                if operand.name in scope:
                    return {scope[operand.name][0]}
            return set()
        found: set[str] = set()
        for item in getattr(operand, "items", ()) or ():
            found |= self._names_slots(item, scopes)
        for name in ("first", "second", "operand"):
            if hasattr(operand, name):
                found |= self._names_slots(getattr(operand, name), scopes)
        return found

    def _precheck_run(self, space: int) -> None:
        """At the first shared or local access of a straight-line run, check
        every access of the run at once (per base register and width, the
        lowest and highest offset when all are congruent modulo the width:
        the window is contiguous) and mark the later ones checked.

        Why: the matmul's tile step is 32 ``ld.shared`` from two base
        registers; each was a rotate, a compare and a branch to its own fault
        path, which LLVM cannot merge.  Exact: a failed check takes a cold
        path that checks the accesses in program order and reports the first
        bad one, with the instruction count up to it (the run's instructions
        in between cannot fault and write nothing a failed launch shows: shared
        and local memory and registers die with it)."""
        if self.instr is None or self.instr.guard is not None:
            return
        run = self._run_accesses(self.index)
        if len(run) < 2:
            return
        start, scopes = self.index, self.scopes
        addrs = []
        for m, a, *_ in run:
            self.scopes = self.flat_scopes[m]
            base = self._base_slot(a, self.scopes)
            if base == "0":
                value = "0"
            elif base.startswith("@"):
                value = self.symbol_address(a.base.name, 0)
            else:
                value = self.read(nodes.Register(a.base.name), "u64")
            addr = self.new()
            self.emit(f"{addr} = add i64 {value}, {a.offset}")
            addrs.append(addr)
        self.scopes = scopes
        groups: dict[tuple, list[int]] = {}
        for k, (_, a, width, sp, _) in enumerate(run):
            groups.setdefault((self._base_slot(a, self.flat_scopes[run[k][0]]), width, sp),
                              []).append(k)
        fails = []
        for (_, width, sp), members in groups.items():
            offsets = [run[k][1].offset for k in members]
            if all((o - offsets[0]) % width == 0 for o in offsets):
                lo = members[offsets.index(min(offsets))]
                hi = members[offsets.index(max(offsets))]
                chosen = [lo] if lo == hi else [lo, hi]
            else:
                chosen = members
            fails += [self._outside(addrs[k], width, sp) for k in chosen]
        bad = fails[0]
        for f in fails[1:]:
            out = self.new()
            self.emit(f"{out} = or i1 {bad}, {f}")
            bad = out
        self.tmp += 1
        n = self.tmp
        self.emit(f"br i1 {bad}, label %RF{n}, label %RO{n}, "
                  f"!prof !{{!\"branch_weights\", i32 1, i32 1000000}}")
        cold = [f"RF{n}:"]
        for k, (m, _, width, sp, access) in enumerate(run):
            fn, buf, stride = (("shared_ptr", "%shared", "%sstride") if sp == SHARED
                               else ("local_ptr", "%local", "%lstride"))
            p, b = f"%rf{n}_{k}", f"%rfb{n}_{k}"
            cold += [f"  {p} = call ptr @{fn}(ptr %ctx, ptr {buf}, i64 {stride}, "
                     f"i64 {addrs[k]}, i64 {width}, i32 {sp * 4 + access}, "
                     f"i32 {self.flat[m].line})",
                     f"  {b} = icmp eq ptr {p}, null",
                     f"  br i1 {b}, label %RX{n}_{k}, label %RF{n}_{k + 1}",
                     f"RX{n}_{k}:",
                     f"  %rc{n}_{k} = load i64, ptr %cnt",
                     f"  %rd{n}_{k} = add i64 %rc{n}_{k}, {m - start}",
                     f"  store i64 %rd{n}_{k}, ptr %cnt",
                     "  br label %fault",
                     f"RF{n}_{k + 1}:"]
        cold.append("  unreachable")  # a failed group check fails one of its accesses
        self.lines.extend(cold)
        self.lines.append(f"RO{n}:")
        self.prechecked.update(m for m, *_ in run)

    def _outside(self, addr: str, width: int, space: int) -> str:
        """Whether an access is outside its window or misaligned, as
        ``@shared_ptr``/``@local_ptr`` decide (:mod:`.blocks`)."""
        bias = 0 if space == SHARED else LOCAL_STACK_BASE
        stride = "%sstride" if space == SHARED else "%lstride"
        off, lim, rot, bad = self.new(), self.new(), self.new(), self.new()
        shift = width.bit_length() - 1
        self.emit(f"{off} = sub i64 {addr}, {bias}\n  {lim} = sub i64 {stride}, {width}\n"
                  f"  {rot} = call i64 @llvm.fshr.i64(i64 {off}, i64 {off}, i64 {shift})")
        slim = self.new()
        self.emit(f"{slim} = lshr i64 {lim}, {shift}\n  {bad} = icmp ugt i64 {rot}, {slim}")
        return bad


_ARITHMETIC = {"mov", "add", "sub", "mul", "mad", "fma", "and", "or", "xor", "not", "shl",
               "shr", "setp", "selp", "cvt", "neg", "abs", "min", "max", "cvta"}
"""Instructions a run of checked accesses may hold besides them: they cannot
fault, suspend or touch memory (:meth:`RunChecks._run_accesses`)."""
