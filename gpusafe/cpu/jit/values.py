"""Operands of the JIT's lowering: registers, immediates, special registers.

Registers are ``alloca`` slots holding their bits as integers (predicates as
``i1``); LLVM's optimizer promotes them.  A register read as a narrower or
wider type is truncated or extended as PTX says (sign-extended for ``.s``
types); f32/f64 values are bitcasts of those bits.
"""

from __future__ import annotations

import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.query import param_layout

from ..memory import LOCAL_STACK_BASE, LOCAL_WINDOW, SHARED_WINDOW
from ..special_registers import NSMID

BITS = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16,
         "b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64}
HALVES = {"f16": 16, "bf16": 16, "f16x2": 32, "bf16x2": 32}
"""16-bit float types (and pairs) and the bits of a register holding one: kept
out of :data:`BITS`, so that only :mod:`.halves` reads them as floats."""
QUALIFIERS = {"weak", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt"}
"""Modifiers that change nothing for one thread running alone.  ``.volatile``,
``.relaxed``/``.acquire`` and scopes are refused: they are how threads wait
on each other, and a thread that runs to completion before the next starts
would wait forever."""
SPECIAL = {"%tid": 0, "%ntid": 3, "%ctaid": 6, "%nctaid": 9}
AXES = {"x": 0, "y": 1, "z": 2}
ICMP = {"eq": "eq", "ne": "ne", "lo": "ult", "ls": "ule", "hi": "ugt", "hs": "uge"}
ICMP_ORDER = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
FCMP = {"eq": "oeq", "ne": "one", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge",
         "equ": "ueq", "neu": "une", "ltu": "ult", "leu": "ule", "gtu": "ugt", "geu": "uge",
         "num": "ord", "nan": "uno"}
CANONICAL_NAN_F32 = 0x7FFFFFFF
INT_ROUNDING = {"rzi": "trunc", "rni": "roundeven", "rmi": "floor", "rpi": "ceil"}
"""cvt's rounding to an integer, as LLVM intrinsics; a float-to-int conversion
after it saturates and gives 0 for NaN, as the interpreter's."""

_LANE_SPECIALS = {"%laneid", "%warpid", "%smid", "%lanemask_eq", "%lanemask_lt",
                  "%lanemask_le", "%lanemask_ge", "%lanemask_gt"}
_UNIFORM_SPECIALS = {"%nwarpid", "%nsmid", "%dynamic_smem_size", "%total_smem_size",
                     "%aggr_smem_size"}
"""Special registers the lowering covers besides %tid/%ntid/%ctaid/%nctaid;
the uniform ones are the launch's (:func:`gpusafe.cpu.special_registers.uniform_value`)."""

_NAN_PROPAGATING = {"add", "sub", "mul", "fma", "mad"}
"""f32 operations whose result is a NaN when an operand is, whatever its payload,
and is canonicalised (:meth:`Values.lazy_slots`)."""

ACCESS_READ, ACCESS_WRITE, ACCESS_ATOMIC = 0, 1, 2
GENERIC, GLOBAL, SHARED, LOCAL, CONST = 0, 1, 2, 3, 4
TRAP_BRX = 256
"""The access callback's kind for a ``brx.idx`` index past its table (the
address argument is the index, the width the table's length)."""


class Unsupported(Exception):
    """A kernel the JIT does not compile: why, and the PTX line of the cause."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason, line)
        self.reason = reason
        self.line = line

    def __str__(self) -> str:
        return f"{self.reason} (PTX line {self.line})" if self.line else self.reason


def llvm_type(t: str) -> str:
    if t == "f32":
        return "float"
    if t == "f64":
        return "double"
    return f"i{BITS[t]}"


def int_type(t: str) -> str:
    return f"i{BITS[t]}"


def split_type(instr: nodes.Instruction) -> tuple[list[str], str]:
    """Modifiers without the type ones, and the last type modifier."""
    mods = list(instr.modifiers)
    types = [m for m in mods if m in BITS]
    if not types:
        raise Unsupported(f"{instr.opcode}: no type this slice knows", instr.line)
    return [m for m in mods if m not in BITS], types[-1]


class Values:
    """Emits IR lines for one kernel and turns PTX operands into LLVM values."""

    def __init__(self, function: nodes.Function) -> None:
        self.function = function
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.tmp = 0
        # register name -> (slot, bits); ("label", name) -> instruction index
        self.scopes: list[dict] = [{}]
        layout, _ = param_layout(function.params)
        self.kparams = {slot.name: slot.offset for slot in layout}
        self.instr: nodes.Instruction | None = None
        self.intrinsics: set[str] = set()
        self.sites = 0  # accesses that call @resolve, each with its own segment hint
        # per flat instruction: register slots read, and slots surely written (liveness)
        self.index = 0
        self.uses: list[set[str]] = [set()]
        self.defs: list[set[str]] = [set()]
        self.widths: dict[str, int] = {}  # register slot -> bits
        self.shared_keys: list = []  # shared symbols, resolved to offsets at each launch
        self.local_size = 0  # the kernel's .local frame, laid out as the interpreter does
        self.barriers: list[int] = []  # flat index of each suspension point, in order
        self.live_points: list[int] = []  # per suspension: the flat index whose live-in it saves
        self.resume_labels: list[str] = []  # where each resumes
        self.frame_slots = 0  # 8-byte slots of a thread's frame: registers live at a barrier
        self.module_globals: frozenset = frozenset()  # module .global/.const variables
        # lazy canonical NaNs (:meth:`canon`): slots holding raw f32 results, and per
        # slot whether every write so far stored a canonicalised f32 result
        self.lazy: frozenset = frozenset()
        self.canon_raw: dict[str, str] = {}
        self.canon_writes: dict[str, bool] = {}
        self.last_label: str | None = None  # the label a .branchtargets list names

    # -- helpers --------------------------------------------------------------

    def fail(self, why: str) -> Unsupported:
        line = self.instr.line if self.instr is not None else self.function.line
        return Unsupported(f"{self.instr.opcode if self.instr else 'kernel'}: {why}", line)

    def new(self) -> str:
        self.tmp += 1
        return f"%t{self.tmp}"

    def emit(self, text: str) -> None:
        self.lines.append("  " + text)

    def declare(self, name: str, t: str) -> None:
        width = BITS.get(t) or HALVES.get(t)
        if width is None:
            raise Unsupported(f"registers of type .{t}", self.function.line)
        slot = f"%v{len(self.allocas)}"
        self.widths[slot] = width
        self.allocas.append(f"  {slot} = alloca i{width}\n  store i{width} 0, ptr {slot}")
        self.scopes[-1][name] = (slot, width)

    def register(self, name: str) -> tuple[str, int]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.fail(f"register {name}")

    def special(self, name: str) -> str:
        """An i32 special register the interpreter computes per lane from the
        thread's place in the block (:mod:`gpusafe.cpu.special_registers`),
        or per launch (those come through ``%syms``)."""
        out = self.new()
        if name in _UNIFORM_SPECIALS:
            key = ("%special", name)
            if key not in self.shared_keys:
                self.shared_keys.append(key)
            p, v = self.new(), self.new()
            self.emit(f"{p} = getelementptr i64, ptr %syms, i64 {self.shared_keys.index(key)}\n"
                      f"  {v} = load i64, ptr {p}\n  {out} = trunc i64 {v} to i32")
            return out
        if name == "%warpid":
            self.emit(f"{out} = lshr i32 %lin, 5")
            return out
        if name == "%smid":  # the block's linear index modulo the SMs the device has
            a, b, c, d = self.new(), self.new(), self.new(), self.new()
            self.emit(f"{a} = mul i32 %sr8, %sr10\n  {b} = add i32 {a}, %sr7\n"
                      f"  {c} = mul i32 {b}, %sr9\n  {d} = add i32 {c}, %sr6\n"
                      f"  {out} = urem i32 {d}, {NSMID}")
            return out
        lane, eq = self.new(), self.new()
        self.emit(f"{lane} = and i32 %lin, 31\n  {eq} = shl i32 1, {lane}")
        if name == "%laneid":
            return lane
        if name == "%lanemask_eq":
            return eq
        le, lt = self.new(), self.new()
        self.emit(f"{lt} = sub i32 {eq}, 1\n  {le} = or i32 {lt}, {eq}")
        op = {"%lanemask_lt": f"add i32 {lt}, 0", "%lanemask_le": f"add i32 {le}, 0",
              "%lanemask_ge": f"xor i32 {lt}, -1", "%lanemask_gt": f"xor i32 {le}, -1"}[name]
        self.emit(f"{out} = {op}")
        return out

    def volatile(self, instr: nodes.Instruction, space: int, rest: list[str]) -> str:
        """``"volatile "`` for an ``ld/st.volatile`` the JIT lowers (taking the
        modifier out of ``rest``), ``""`` for an access without it.

        A volatile access stays an LLVM ``volatile`` one (never hoisted out of
        a spin loop, whose back edge yields: :meth:`.regions.BarrierLowering.backward`).
        Lowered for ``.global`` and generic addresses; refused where the
        interpreter's lockstep is what the code relies on: ``.shared`` (and a
        generic access in a kernel that makes shared addresses, ``cvta.shared``
        or any ``.shared`` access), the warp-synchronous idiom, and a kernel
        with ``atom.cas`` (a volatile read seeding a compare-and-swap retry
        loop: how often each thread retries, and for floats the order of the
        updates, is the schedule's; both engines' are valid GPU schedules, not
        the same one)."""
        if "volatile" not in rest:
            return ""
        rest.remove("volatile")
        if space not in (GLOBAL, GENERIC):
            raise self.fail("volatile access outside global memory (warp-synchronous code "
                            "needs the interpreter's lockstep)")
        flat = getattr(self, "flat", [])
        if space == GENERIC and any(m.startswith("shared") for i in flat for m in i.modifiers):
            raise self.fail("volatile generic access in a kernel with shared memory "
                            "(warp-synchronous code needs the interpreter's lockstep)")
        if any(i.op == "atom" and "cas" in i.modifiers for i in flat):
            raise self.fail("volatile access in a kernel with atom.cas (a retry loop's trips "
                            "are the interpreter's lockstep schedule's)")
        return "volatile "

    def is_register(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def symbol_address(self, name: str, offset: int) -> str:
        """A variable's address in its own state space, as the interpreter gives
        it: a ``.local`` variable's is its place in the frame above
        :data:`LOCAL_STACK_BASE`; a module ``.global``/``.const`` variable's is
        the device address where the interpreter's :class:`~gpusafe.cpu.program.Program`
        placed it, and any other symbol is taken for a ``.shared`` variable
        whose offset the launch supplies.  Both come through ``%syms`` at each
        launch, not baked into the code: the compiled-code cache is keyed by
        the kernel's text, which another module (another place) shares; a
        launch where the symbol is neither falls back (:func:`.engine.run`)."""
        for scope in reversed(self.scopes):
            local = scope.get(("local", name))
            if local is not None:
                return str(LOCAL_STACK_BASE + local + offset)
        if name in self.kparams:
            raise self.fail(f"address of the kernel parameter {name}")
        key = self.shared_key(name)
        if key == name and name in self.module_globals:  # not shadowed by a kernel's .shared
            key = ("%global", name)
        if key not in self.shared_keys:
            self.shared_keys.append(key)
        p = self.new()
        self.emit(f"{p} = getelementptr i64, ptr %syms, i64 {self.shared_keys.index(key)}")
        v = self.new()
        self.emit(f"{v} = load i64, ptr {p}")
        if not offset:
            return v
        out = self.new()
        self.emit(f"{out} = add i64 {v}, {offset}")
        return out

    def generic_window(self, name: str) -> int:
        """What the decoder adds to a variable's address for its generic one:
        the local or shared window, nothing for a module variable (global)."""
        if any(("local", name) in scope for scope in self.scopes):
            return LOCAL_WINDOW
        if self.shared_key(name) == name and name in self.module_globals:
            return 0
        return SHARED_WINDOW

    def shared_key(self, name: str) -> object:
        """The interpreter's key of a shared variable (``Launch.shared_offsets``):
        (function, name) for one declared in the kernel, the name otherwise."""
        for scope in self.scopes:
            if ("shared", name) in scope:
                return (self.function.name, name)
        return name

    def adapt(self, value: str, have: int, want: int, signed: bool) -> str:
        if have == want:
            return value
        out = self.new()
        if have > want:
            self.emit(f"{out} = trunc i{have} {value} to i{want}")
        else:
            self.emit(f"{out} = {'sext' if signed else 'zext'} i{have} {value} to i{want}")
        return out

    def to_type(self, bits_value: str, t: str) -> str:
        if t in ("f32", "f64"):
            out = self.new()
            self.emit(f"{out} = bitcast {int_type(t)} {bits_value} to {llvm_type(t)}")
            return out
        return bits_value

    def read(self, operand: nodes.Operand, t: str) -> str:
        """``operand`` as an LLVM value of PTX type ``t``."""
        width = BITS[t]
        if isinstance(operand, nodes.Negated):
            v = self.read(operand.operand, "pred")
            out = self.new()
            self.emit(f"{out} = xor i1 {v}, true")
            return out
        if isinstance(operand, nodes.Immediate):
            return self.immediate(operand, t)
        if isinstance(operand, (nodes.Symbol, nodes.SymbolOffset)):
            if isinstance(operand, nodes.Symbol) and self.is_register(operand.name):
                operand = nodes.Register(operand.name)  # inline-asm registers have no '%'
            else:
                offset = operand.offset if isinstance(operand, nodes.SymbolOffset) else 0
                v = self.adapt(self.symbol_address(operand.name, offset), 64, width, False)
                return self.to_type(v, t)
        if not isinstance(operand, nodes.Register):
            raise self.fail(f"operand {operand}")
        name = operand.name
        if name in _LANE_SPECIALS or name in _UNIFORM_SPECIALS:
            if t == "pred" or self.is_register(name):
                raise self.fail(f"special register {name} as .{t}")
            return self.to_type(self.adapt(self.special(name), 32, width, False), t)
        head, _, axis = name.partition(".")
        if head in SPECIAL and axis in AXES:
            if t == "pred":
                raise self.fail("special register as predicate")
            v = self.adapt(f"%sr{SPECIAL[head] + AXES[axis]}", 32, width, False)
            return self.to_type(v, t)
        slot, have = self.register(name)
        if (have == 1) != (t == "pred"):
            raise self.fail(f"register {name} used as .{t}")
        self.uses[self.index].add(slot)
        v = self.new()
        self.emit(f"{v} = load i{have}, ptr {slot}")
        if slot in self.lazy and not self._propagates_nan(t):
            v = self._canon_bits(v)
        v = self.adapt(v, have, width, t.startswith("s"))
        return self.to_type(v, t)

    def immediate(self, imm: nodes.Immediate, t: str) -> str:
        text = imm.text
        neg = text.startswith("-")
        body = text[1:] if neg else text
        if t in ("f32", "f64"):
            if body[:2] in ("0f", "0F") and t == "f32":
                bits = int(body[2:], 16) ^ (0x8000_0000 if neg else 0)
            elif body[:2] in ("0d", "0D") and t == "f64":
                bits = int(body[2:], 16) ^ (1 << 63 if neg else 0)
            elif body[:2] in ("0f", "0F", "0d", "0D"):
                raise self.fail(f"immediate {text} for .{t}")
            else:  # a decimal or integer literal: the value converted, as the interpreter's
                with np.errstate(over="ignore"):
                    value = np.array(imm.value, np.float32 if t == "f32" else np.float64)
                bits = int(value.view(np.uint32 if t == "f32" else np.uint64))
            out = self.new()
            self.emit(f"{out} = bitcast {int_type(t)} {self._signed(bits, BITS[t])} to {llvm_type(t)}")
            return out
        value = imm.value
        if isinstance(value, float):
            raise self.fail(f"float immediate {text} for .{t}")
        width = BITS[t]
        if t == "pred":
            return "true" if value else "false"
        return str(self._signed(value & ((1 << width) - 1), width))

    @staticmethod
    def _signed(value: int, width: int) -> int:
        value &= (1 << width) - 1
        return value - (1 << width) if value >> (width - 1) else value

    def write(self, operand: nodes.Operand, t: str, value: str) -> None:
        if isinstance(operand, nodes.Sink):
            return
        if isinstance(operand, nodes.Symbol) and self.is_register(operand.name):
            operand = nodes.Register(operand.name)  # inline-asm registers have no '%'
        if not isinstance(operand, nodes.Register):
            raise self.fail(f"destination {operand}")
        slot, have = self.register(operand.name)
        if (have == 1) != (t == "pred"):
            raise self.fail(f"register {operand.name} written as .{t}")
        if self.instr is None or self.instr.guard is None:
            self.defs[self.index].add(slot)
        raw = self.canon_raw.get(value) if t == "f32" and have == 32 else None
        self.canon_writes[slot] = self.canon_writes.get(slot, True) and raw is not None
        if raw is not None and slot in self.lazy:
            value = raw
        if t in ("f32", "f64"):
            bits = self.new()
            self.emit(f"{bits} = bitcast {llvm_type(t)} {value} to {int_type(t)}")
            value = bits
        value = self.adapt(value, BITS[t], have, t.startswith("s"))
        self.emit(f"store i{have} {value}, ptr {slot}")

    def canon(self, value: str, t: str) -> str:
        """The GPU's canonical NaN for f32 results, as the interpreter gives.

        Tested on the bits: LLVM may fold ``select (fcmp uno x), NaN, x`` to
        ``x`` (any NaN may stand for another in its semantics), and did so
        after ``llvm.sqrt``, which left x86's default NaN (0xffc00000)."""
        if t != "f32":
            return value
        bits, out = self.new(), self.new()
        self.emit(f"{bits} = bitcast float {value} to i32")
        self.emit(f"{out} = bitcast i32 {self._canon_bits(bits)} to float")
        self.canon_raw[out] = value
        return out

    def _canon_bits(self, bits: str) -> str:
        magnitude, isnan, chosen = self.new(), self.new(), self.new()
        self.emit(f"{magnitude} = and i32 {bits}, 2147483647")
        self.emit(f"{isnan} = icmp ugt i32 {magnitude}, 2139095040")
        self.emit(f"{chosen} = select i1 {isnan}, i32 {CANONICAL_NAN_F32}, i32 {bits}")
        return chosen

    def lazy_slots(self) -> frozenset:
        """The registers every write of which stored a canonicalised f32 result
        (after a first lowering): a second lowering keeps their results raw
        (:attr:`lazy`) and canonicalises where they are read.

        Why: in a chain of f32 operations (the matmul's 16 ``fma`` per tile)
        the canonicalisation sat between each result and the next operation,
        three integer operations and two domain crossings on the critical
        path.  Deferring it is exact: an ``add/sub/mul/fma/mad.f32`` result is
        a NaN whatever the payload of a NaN operand, and is canonicalised
        itself, so such an operation reads the raw value
        (:meth:`_propagates_nan`); every other reader (a move, a store, a
        conversion, a shuffle, a compare) gets the canonical bits."""
        return frozenset(s for s, ok in self.canon_writes.items() if ok)

    def _propagates_nan(self, t: str) -> bool:
        """Whether the instruction being lowered reads an f32 operand only for
        whether it is a NaN, not for its bits (see :meth:`lazy_slots`)."""
        instr = self.instr
        return (t == "f32" and instr is not None and instr.op in _NAN_PROPAGATING
                and split_type(instr)[1] == "f32")
