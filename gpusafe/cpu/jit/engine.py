"""Compile a lowered kernel with llvmlite's MCJIT and run a launch in compiled code.

The compiled ``@kernel`` (:mod:`.blocks`) runs a range of blocks of the
grid; in a block, each thread runs alone up to its next barrier or
warp-synchronous instruction (:mod:`.regions`, :mod:`.warps`), then the next
thread, in rounds until every thread has finished.  Ranges of blocks run on
several OS threads (:mod:`.cores`).

Global accesses call ``@resolve``: the segment the access site hit last
(its start, the last address where an access of the site's width fits, and
its bytes, kept per site in the range's hints: one cache line, two loads and
three compares on a hit), else a binary search of the arena's
segment table (start, end, bytes) built at the launch.  Anything the table does not
answer (a misaligned address, an address outside every segment with bytes,
a generic address in the param window) and any bad shared or local access
calls back into Python, which gives the bytes or records the error the
interpreter would raise (same class, same message) and makes the compiled
code stop.

Compiled kernels are cached by the SHA-256 of the kernel's PTX text and of
this package's source, so an edit of the compiler never reuses old code: in
the process, and their object code on disk (:mod:`.cache`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from gpusafe_instrument import nodes
from gpusafe_instrument.kinds import AccessKind

from ..errors import DeviceError, IllegalAddress, LaunchTimeout, MisalignedAddress, TrapError
from ..frames import Launch
from ..memory import PARAM_WINDOW, WINDOW_SIZE, plain_segments
from ..special_registers import uniform_value
from . import cache as jitcache
from . import cores
from .blocks import CTX_SLOTS, launch_ir
from .devcalls import PRINTF, PRINTF_LOCAL, PRINTF_SHARED, Printf
from .lanes import FRAME_SLOT, lower_lanes
from .lanes_loop import lanes_launch_ir
from .lower import lower_kernel
from .values import (
    ACCESS_ATOMIC,
    ACCESS_READ,
    CONST,
    GENERIC,
    LOCAL,
    SHARED,
    TRAP_BRX,
    Unsupported,
)
from .watchdog import WATCHDOG

_RESOLVE = """
define internal ptr @resolve(ptr %ctx, i64 %site, i64 %addr, i64 %width, i32 %kind,
                             i32 %line) alwaysinline {
entry:
  %hp = getelementptr i64, ptr %ctx, i64 5
  %hints = load ptr, ptr %hp
  %slot = mul i64 %site, 4
  %sp = getelementptr i64, ptr %hints, i64 %slot
  %s = load i64, ptr %sp
  %ep = getelementptr i64, ptr %sp, i64 1
  %elim = load i64, ptr %ep
  %m = sub i64 %width, 1
  %mis = and i64 %addr, %m
  %c1 = icmp ne i64 %mis, 0
  %c2 = icmp ult i64 %addr, %s
  %c3 = icmp ugt i64 %addr, %elim
  %o1 = or i1 %c1, %c2
  %o3 = or i1 %o1, %c3
  br i1 %o3, label %miss, label %ok
ok:
  %pp = getelementptr i64, ptr %sp, i64 2
  %p = load ptr, ptr %pp
  %off = sub i64 %addr, %s
  %r = getelementptr i8, ptr %p, i64 %off
  ret ptr %r
miss:
  %res = call ptr @resolve_miss(ptr %ctx, i64 %site, i64 %addr, i64 %width, i32 %kind,
                                i32 %line)
  ret ptr %res
}

define internal ptr @resolve_miss(ptr %ctx, i64 %site, i64 %addr, i64 %width, i32 %kind,
                                  i32 %line) noinline {
entry:
  %m = sub i64 %width, 1
  %mis = and i64 %addr, %m
  %aligned = icmp eq i64 %mis, 0
  br i1 %aligned, label %search, label %slow
search:
  %sp = getelementptr i64, ptr %ctx, i64 1
  %starts = load ptr, ptr %sp
  %n = load i64, ptr %ctx
  br label %loop
loop:
  %lo = phi i64 [0, %search], [%lo2, %body]
  %hi = phi i64 [%n, %search], [%hi2, %body]
  %more = icmp ult i64 %lo, %hi
  br i1 %more, label %body, label %found
body:
  %sum = add i64 %lo, %hi
  %mid = lshr i64 %sum, 1
  %smp = getelementptr i64, ptr %starts, i64 %mid
  %sm = load i64, ptr %smp
  %le = icmp ule i64 %sm, %addr
  %mid1 = add i64 %mid, 1
  %lo2 = select i1 %le, i64 %mid1, i64 %lo
  %hi2 = select i1 %le, i64 %hi, i64 %mid
  br label %loop
found:
  %none = icmp eq i64 %lo, 0
  br i1 %none, label %slow, label %check
check:
  %i = sub i64 %lo, 1
  %sip = getelementptr i64, ptr %starts, i64 %i
  %s = load i64, ptr %sip
  %ep = getelementptr i64, ptr %ctx, i64 2
  %ends = load ptr, ptr %ep
  %eip = getelementptr i64, ptr %ends, i64 %i
  %e = load i64, ptr %eip
  %last = add i64 %addr, %width
  %below = icmp ult i64 %addr, %s
  %over = icmp ugt i64 %last, %e
  %wrap = icmp ult i64 %last, %addr
  %out1 = or i1 %over, %wrap
  %out = or i1 %out1, %below
  %pp = getelementptr i64, ptr %ctx, i64 3
  %ptrs = load ptr, ptr %pp
  %pip = getelementptr ptr, ptr %ptrs, i64 %i
  %p = load ptr, ptr %pip
  %null = icmp eq ptr %p, null
  %miss = or i1 %out, %null
  br i1 %miss, label %slow, label %ok
ok:
  %hp = getelementptr i64, ptr %ctx, i64 5
  %hints = load ptr, ptr %hp
  %slot = mul i64 %site, 4
  %hs = getelementptr i64, ptr %hints, i64 %slot
  store i64 %s, ptr %hs
  %he = getelementptr i64, ptr %hs, i64 1
  %elim = sub i64 %e, %width
  store i64 %elim, ptr %he
  %hpp = getelementptr i64, ptr %hs, i64 2
  store ptr %p, ptr %hpp
  %off = sub i64 %addr, %s
  %r = getelementptr i8, ptr %p, i64 %off
  ret ptr %r
slow:
  %fpp = getelementptr i64, ptr %ctx, i64 4
  %fp = load ptr, ptr %fpp
  %res = call ptr %fp(i64 %addr, i64 %width, i32 %kind, i32 %line)
  ret ptr %res
}
"""

_SLOW = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32,
                         ctypes.c_int32)
_KERNEL = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           *([ctypes.c_int32] * 8))
_ACCESS = {ACCESS_READ: AccessKind.READ, 1: AccessKind.WRITE, ACCESS_ATOMIC: AccessKind.ATOMIC}


@dataclass
class Compiled:
    """A kernel in machine code; ``engine`` keeps the code alive."""

    engine: Any
    run: Any
    compile_seconds: float
    sites: int  # global/generic access sites: one segment hint each
    frame_slots: int = 0  # 8-byte slots per thread kept across barriers
    shared_keys: tuple = ()  # shared variables whose offsets the launch supplies
    local_size: int = 0  # bytes of the kernel's .local variables
    parallel: bool = False  # blocks may run on several threads (see .cores)
    call_depth: int = 0  # deepest nesting of inlined device-function calls
    lanes: bool = False  # warps as vectors (:mod:`.lanes`): per-warp frames and states
    per_thread: float | None = None  # instructions a thread ran in the last launch (.cores)


LANES_MODES = ("0", "1", "all", "only")


def lanes_mode() -> str:
    """``GPUSAFE_JIT_LANES``: ``1`` (the default) compiles with the lanes
    lowering (:mod:`.lanes`) the kernels it covers that have warp-synchronous
    instructions or block barriers (:func:`suspends_threads`: the per-thread
    lowering suspends every thread at each, and vectors win: the bench's
    tiled matmul 53 -> 32 ms) or no loops (:func:`has_loops`), up to a size
    (:func:`prefers_lanes`), every other kernel per thread; ``all`` every kernel it covers; ``0`` none; ``only``
    every kernel it covers and refuses the rest (for tests: the launch then
    runs on the interpreter, named)."""
    raw = os.environ.get("GPUSAFE_JIT_LANES", "").strip() or "1"
    if raw not in LANES_MODES:
        raise ValueError(f"GPUSAFE_JIT_LANES={raw!r}: expected one of {', '.join(LANES_MODES)}")
    return raw


@dataclass
class Stats:
    """What the JIT did in this process: compiled kernels, cache hits, fallbacks."""

    compiled: int = 0
    hits: int = 0
    compile_seconds: float = 0.0
    fallbacks: list[tuple[str, str]] = field(default_factory=list)


STATS = Stats()
_CACHE: dict[str, Compiled | Unsupported] = {}
_TEXTS: dict[int, str] = {}
"""Each decoded kernel's text by its identity: a launch of a kernel
met before skips walking its body (a launch's fixed cost; the hash is cheap)."""
_TARGET: list[Any] = []


def _source_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


_COMPILER_HASH = _source_hash()


def _target_machine() -> Any:
    if not _TARGET:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        # the host CPU: without its features llvm.fma is a call to libm's fmaf
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # llvmlite cannot tell on some hosts: generic code, slower
            features = ""
        _TARGET.append(llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=features, opt=3))
    return _TARGET[0]


def _function_text(function: nodes.Function, functions: dict | None = None) -> str:
    """The kernel's text, and the text of every device function it may call
    (inlined into its code: part of the cache key)."""
    text = _one_text(function)
    if not functions:
        return text
    seen = {function.name}
    todo = [function]
    parts = [text]
    while todo:
        for callee in sorted(_callees(todo.pop())):
            f = functions.get(callee)
            if f is not None and callee not in seen:
                seen.add(callee)
                todo.append(f)
                parts.append(_one_text(f))
    return "\n.func\n".join(parts)


def _callees(function: nodes.Function) -> set[str]:
    names: set[str] = set()

    def walk(statements: list) -> None:
        for s in statements:
            if isinstance(s, nodes.Block):
                walk(s.statements)
            elif isinstance(s, nodes.Instruction) and s.op == "call":
                names.update(o.name for o in s.operands if isinstance(o, nodes.Symbol))
    walk(function.body or [])
    return names


def _one_text(function: nodes.Function) -> str:
    parts = [function.name] + [f"{p.space} {p.type} {p.size} {p.alignment}"
                               for p in function.params]

    def walk(statements: list) -> None:
        for s in statements:
            if isinstance(s, nodes.Block):
                parts.append("{")
                walk(s.statements)
                parts.append("}")
            elif hasattr(s, "canonical"):
                parts.append(f"{getattr(s, 'line', 0)} {s.canonical()}")
    walk(function.body or [])
    return "\n".join(parts)


def _atomics_are_atomic(atomics: int, ir: str) -> bool:
    """Whether every ``atom``/``red`` of the kernel became an LLVM atomic (an
    ``atomicrmw`` or ``cmpxchg`` each, at least): then blocks on several
    threads cannot lose an update.  A lowering that makes one a plain
    load-op-store (exact when one thread runs at a time) keeps the kernel on
    one thread."""
    return ir.count(" atomicrmw ") + ir.count(" cmpxchg ") >= atomics


def compile_function(function: nodes.Function, holder: Any = None,
                     functions: dict | None = None,
                     module_globals: frozenset = frozenset()) -> Compiled:
    """Machine code for a kernel, from this process's cache or the disk cache
    (:mod:`.cache`) when its PTX was compiled before; raises
    :class:`Unsupported` (cached in the process) outside the slice.
    ``holder`` (the decoded kernel) keeps the kernel's text for its next launch."""
    text = (_text_of(function, holder, functions) + _globals_text(module_globals)
            + f"\n.lanes {lanes_mode()}")
    key = hashlib.sha256((_COMPILER_HASH + text).encode()).hexdigest()
    hit = _CACHE.get(key)
    if hit is not None:
        STATS.hits += 1
        if isinstance(hit, Unsupported):
            raise hit
        return hit
    compiled = _CACHE[key] = _compile_text(function, text, key, functions, module_globals)
    return compiled


def _text_of(function: nodes.Function, holder: Any, functions: dict | None = None) -> str:
    """The kernel's text, kept as long as ``holder`` lives (the parsed
    function has slots: no weak reference to it)."""
    if holder is None:
        return _function_text(function, functions)
    text = _TEXTS.get(id(holder))
    if text is None:
        text = _TEXTS[id(holder)] = _function_text(function, functions)
        weakref.finalize(holder, _TEXTS.pop, id(holder), None)
    return text


def _globals_text(module_globals: frozenset) -> str:
    """The module variables the lowering refuses: part of the cache key."""
    return "\n.globals " + " ".join(sorted(module_globals)) if module_globals else ""


def in_disk_cache(code: Any, functions: dict | None = None,
                  module_globals: frozenset = frozenset()) -> bool:
    """Whether the decoded kernel's object code is in the disk cache (not
    read: the entry is verified when it is loaded, and a damaged one compiles
    again)."""
    if not jitcache.enabled():
        return False
    text = (_text_of(code.function, code, functions) + _globals_text(module_globals)
            + f"\n.lanes {lanes_mode()}")
    return jitcache.has(jitcache.entry_key(_COMPILER_HASH, text, _target_machine().triple))


def _compile_text(function: nodes.Function, text: str, key: str,
                  functions: dict | None = None,
                  module_globals: frozenset = frozenset()) -> Compiled:
    """A miss of the process's cache: the disk cache, or lower and compile
    (an :class:`Unsupported` answer is cached under ``key`` too)."""
    start = time.perf_counter()
    tm = _target_machine()
    disk_key = jitcache.entry_key(_COMPILER_HASH, text, tm.triple)
    entry = jitcache.load(disk_key)
    if entry is None:
        try:
            code, meta = _lower_and_compile(function, functions, module_globals, tm)
        except Unsupported as e:
            _CACHE[key] = e
            raise
        jitcache.store(disk_key, code, meta)
        STATS.compiled += 1
    else:
        code, meta = entry
    engine = jitcache.link(code, tm)
    run = _KERNEL(engine.get_function_address("kernel"))
    seconds = time.perf_counter() - start
    STATS.compile_seconds += seconds
    # JSON gives lists: a special register's key is a tuple again
    shared_keys = tuple(tuple(k) if isinstance(k, list) else k for k in meta["shared_keys"])
    compiled = Compiled(engine, run, seconds, meta["sites"], meta["frame_slots"], shared_keys,
                        meta["local_size"], meta["parallel"], meta.get("call_depth", 0),
                        meta.get("lanes", False))
    return compiled


def _instructions(statements: list) -> Iterator[nodes.Instruction | nodes.Label]:
    for s in statements:
        if isinstance(s, nodes.Block):
            yield from _instructions(s.statements)
        elif isinstance(s, nodes.Instruction | nodes.Label):
            yield s


def suspends_threads(function: nodes.Function) -> bool:
    """Whether the kernel's own body has ``shfl``/``vote``/``bar.warp.sync`` or
    a block barrier: where the per-thread lowering suspends every thread (its
    frame saved, the round loop's dispatch), the lanes lowering a warp."""
    return any(isinstance(s, nodes.Instruction) and s.op in ("shfl", "vote", "bar", "barrier")
               for s in _instructions(function.body or []))


def has_loops(function: nodes.Function) -> bool:
    """Whether the kernel's own body branches back (or branches through a
    table, which may): in a loop where lanes take different trips the lanes
    lowering's masked steps cost more than the per-thread lowering's straight
    code; outside one its vectors win (the vector add 3-5x)."""
    seen: set[str] = set()
    for s in _instructions(function.body or []):
        if isinstance(s, nodes.Label):
            seen.add(s.name)
        elif s.op == "brx" or (s.op == "bra" and any(
                isinstance(o, nodes.Symbol) and o.name in seen for o in s.operands)):
            return True
    return False


LANES_MAX_INSTRUCTIONS = 1000
"""Past this many PTX instructions the default takes the per-thread lowering:
the lanes lowering's IR is about six times the per-thread one's and LLVM's
time on it grows faster than its size.  The instrumented 16x16 tiled matmul
(6,868 instructions: the checks of 32 unrolled shared loads, and the body's
checked copy) compiled in 301 s as lanes (10.5 MB of IR) against 5 s per
thread, and ran slower too (340 against 143 ms a 512^2 launch); the
instrumented histogram (705) and block sum (497) compile in 0.4-4 s as lanes
and run faster (2.4 against 2.7 ms, 5.9 against 26 ms).  The corpus's own
kernels that the default sends to lanes have at most 168."""


def prefers_lanes(function: nodes.Function) -> bool:
    """``GPUSAFE_JIT_LANES=1``'s choice: a kernel with warp instructions or
    block barriers (:func:`suspends_threads`) or without loops
    (:func:`has_loops`), of at most :data:`LANES_MAX_INSTRUCTIONS`."""
    size = sum(1 for s in _instructions(function.body or []) if isinstance(s, nodes.Instruction))
    return size <= LANES_MAX_INSTRUCTIONS and (suspends_threads(function)
                                               or not has_loops(function))


def _lower_and_compile(function: nodes.Function, functions: dict | None,
                       module_globals: frozenset, tm: Any) -> tuple[bytes, dict]:
    """Object code and its metadata: the lanes lowering where it covers the
    kernel (and ``GPUSAFE_JIT_LANES`` allows), else the per-thread one."""
    mode = lanes_mode()
    if mode in ("all", "only") or (mode == "1" and prefers_lanes(function)):
        try:
            lanes = lower_lanes(function, module_globals)
        except Unsupported:
            if mode == "only":
                raise
        else:
            meta = {"sites": lanes.sites, "frame_slots": lanes.frame_slots,
                    "shared_keys": list(lanes.shared_keys), "local_size": 0,
                    "parallel": _atomics_are_atomic(lanes.atomics, lanes.ir),
                    "call_depth": 0, "lanes": True}
            try:
                return jitcache.object_code(lanes.ir + _RESOLVE + lanes_launch_ir(), tm), meta
            except RuntimeError as e:  # LLVM rejected the lanes IR: a bug of ours, never a guess
                if mode == "only":
                    first = str(e).strip().splitlines()
                    raise Unsupported(f"lanes: LLVM rejected the IR ({first[-1] if first else e})"
                                      ) from None
    lowered = lower_kernel(function, functions, module_globals)
    meta = {"sites": lowered.sites, "frame_slots": lowered.frame_slots,
            "shared_keys": list(lowered.shared_keys), "local_size": lowered.local_size,
            "parallel": _atomics_are_atomic(lowered.atomics, lowered.ir),
            "call_depth": lowered.call_depth}
    return jitcache.object_code(lowered.ir + _RESOLVE + launch_ir(lowered.barriers > 0),
                                tm), meta


class _Access:
    """The Python side of ``@resolve``: everything the segment table does not answer."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.error: BaseException | None = None
        self.callback: Any = None  # the C callback of ``slow``, alive while code may call it
        self.printf: Printf | None = None  # this range's vprintf calls (:mod:`.devcalls`)

    def slow(self, addr: int, width: int, kind: int, line: int) -> int:
        try:
            return self._locate(addr, width, kind, line)
        except BaseException as e:  # noqa: BLE001 - re-raised after the compiled call returns
            if isinstance(e, DeviceError) and e.ptx_line is None:
                e.ptx_line = line  # as the interpreter's run_frame sets it
            self.error = e
            return 0

    def _locate(self, addr: int, width: int, kind: int, line: int) -> int:
        if kind in (PRINTF_LOCAL, PRINTF_SHARED, PRINTF):
            if self.printf is None:
                self.printf = Printf(self.launch)
            return self.printf.call(kind, addr, width)
        if kind == TRAP_BRX:  # the interpreter's control_ops.build_brx
            raise TrapError(f"kernel {self.launch.kernel}: PTX line {line}: brx.idx index "
                            f"{addr} out of range (table of {width})")
        space, access_code = divmod(kind, 4)
        access = _ACCESS[access_code]
        where = f"kernel {self.launch.kernel}: PTX line {line}"
        if space in (SHARED, LOCAL):
            self._window(where, "shared" if space == SHARED else "local", addr, width, access)
        if space == GENERIC and PARAM_WINDOW <= addr < PARAM_WINDOW + WINDOW_SIZE:
            return self._param(where, addr - PARAM_WINDOW, width, access)
        if addr % width:
            real = "const" if space == CONST else "global"
            raise MisalignedAddress(
                f"{where}: {access} of {width} bytes at misaligned {real} address {addr:#x}")
        try:
            segs = self.launch.memory.segments(np.array([addr], np.uint64), width)
        except IllegalAddress as e:
            bad = e.args[0] if e.args and isinstance(e.args[0], int) else 0
            why = e.args[1] if len(e.args) > 1 else "not device memory"
            err = IllegalAddress(f"{where}: {access} of {width} bytes at {bad:#x}: {why}")
            err.ptx_line = line
            raise err from None
        buf, offsets, _ = segs[0]
        return int(buf.ctypes.data) + int(offsets[0])

    def _window(self, where: str, space: str, addr: int, width: int,
                access: AccessKind) -> None:
        """The interpreter's error for a bad shared or local access
        (:func:`gpusafe.cpu.access.plan` and ``locate``)."""
        if addr % width:
            raise MisalignedAddress(
                f"{where}: {access} of {width} bytes at misaligned {space} address {addr:#x}")
        if space == "shared":
            raise IllegalAddress(
                f"{where}: {access} of {width} bytes at shared offset {addr:#x}: outside the "
                f"block's shared memory ({self.launch.shared_window} bytes)")
        raise IllegalAddress(f"{where}: {access} of {width} bytes at local address {addr:#x}: "
                             "outside the thread's local memory")

    def _param(self, where: str, offset: int, width: int, access: AccessKind) -> int:
        """A generic pointer to the kernel parameters (``cvta.param``): read-only."""
        if offset % width:
            raise MisalignedAddress(f"{where}: {access} of {width} bytes at misaligned param "
                                    f"address {offset:#x}")
        kp = self.launch.kparams
        if access != AccessKind.READ:
            raise IllegalAddress(f"{where}: {access} to kernel parameter memory")
        if offset > len(kp) - width:
            raise IllegalAddress(f"{where}: read of {width} bytes past the kernel parameters "
                                 f"at offset {offset}")
        return int(kp.ctypes.data) + offset


class _BlockBuffers:
    """One block's shared window, its threads' frames, resume points and local
    memory, and the offsets of the shared variables the kernel names, as
    :mod:`.blocks` reads them from ``ctx``; sizes as the interpreter's
    :class:`~gpusafe.cpu.frames.Chunk` has them."""

    def __init__(self, launch: Launch, compiled: Compiled) -> None:
        try:
            offsets = [_symbol(k, launch) for k in compiled.shared_keys]
        except KeyError as e:
            raise Unsupported(f"{e.args[0]} is neither a shared variable of the kernel nor "
                              "a module .global/.const variable with an address") from None
        if _align16(compiled.local_size) != launch.code.local_size:
            raise Unsupported(f"the JIT's .local frame ({compiled.local_size} bytes) is not "
                              f"the decoder's ({launch.code.local_size})")
        # the interpreter's stack at the deepest call (callees have no .local
        # frame): more than the launch allows is its StackOverflow to raise
        need = _align16(launch.code.local_size) + 16 * compiled.call_depth
        if compiled.call_depth and need > launch.stack_limit:
            raise Unsupported(f"calls {compiled.call_depth} deep need {need} bytes of stack, "
                              f"more than the launch's {launch.stack_limit}")
        tpb = launch.tpb
        self.sstride = _align16(max(launch.shared_window, 16))
        self.lstride = _align16(max(launch.code.local_size, 16))
        self.fbytes = 8 * max(compiled.frame_slots, 1)
        self.shared = np.zeros(self.sstride, np.uint8)
        self.local = np.zeros(tpb * self.lstride, np.uint8)
        self.frames = np.zeros(tpb * self.fbytes, np.uint8)
        self.state = np.zeros(tpb, np.int32)
        self.syms = np.array(offsets or [0], np.uint64)
        self.pub = np.zeros(tpb, np.uint64)
        if compiled.lanes:  # per warp: its frame, its state, its lanes' waiting PCs
            warps = -(-tpb // 32)
            self.fbytes = FRAME_SLOT * max(compiled.frame_slots, 1)
            self.frames = np.zeros(warps * self.fbytes, np.uint8)
            self.state = np.zeros(warps, np.int32)
            self.pub = np.zeros(warps * 16, np.uint64)
        # whole warps (the warp scans read 32 lanes, past a short last warp),
        # then @warp_bits' memo, two words a warp, and bar.red's, four (blocks.py)
        lanes = -(-tpb // 32) * 32
        self.snap = np.zeros(lanes + lanes // 16 + 4, np.uint64)
        self.sstate = np.zeros(lanes, np.int32)

    def fill(self, ctx: np.ndarray) -> None:
        ctx[6] = self.shared.ctypes.data
        ctx[7] = self.sstride
        ctx[8] = self.frames.ctypes.data
        ctx[9] = self.fbytes
        ctx[10] = self.state.ctypes.data
        ctx[11] = self.local.ctypes.data
        ctx[12] = self.lstride
        ctx[13] = self.syms.ctypes.data
        ctx[14] = self.pub.ctypes.data
        ctx[15] = self.snap.ctypes.data
        ctx[16] = self.sstate.ctypes.data


class _Worker:
    """One OS thread's share of a launch (:func:`.cores.run_ranges`), made once
    and reused for every range it runs: its own copy of ``ctx``, block
    buffers, segment hints, instruction counter and access callback (whose
    ``error`` says why its range faulted)."""

    def __init__(self, launch: Launch, compiled: Compiled, ctx: np.ndarray,
                 buffers: _BlockBuffers | None) -> None:
        self.compiled = compiled
        self.params = launch.kparams
        self.dims = (*launch.grid, *launch.block)
        self.ctx = ctx.copy()
        self.access = _Access(launch)
        self.access.callback = _SLOW(self.access.slow)
        self.ctx[4] = ctypes.cast(self.access.callback, ctypes.c_void_p).value or 0
        # per site: start, last address an access fits at, pointer, pad; start 1
        # above last 0 until a miss fills it: no address hits an empty hint
        self.hints = np.zeros(4 * max(compiled.sites, 1), np.uint64)
        self.hints[0::4] = 1
        self.ctx[5] = self.hints.ctypes.data
        self.buffers = buffers if buffers is not None else _BlockBuffers(launch, compiled)
        self.buffers.fill(self.ctx)
        self.count = _own_line()

    @property
    def instructions(self) -> int:
        return int(self.count[0])

    def run(self, first: int, last: int) -> int:
        return self.compiled.run(self.params.ctypes.data, self.ctx.ctypes.data,
                                 self.count.ctypes.data, *self.dims, first, last)


def _own_line() -> np.ndarray:
    """A worker's instruction counter, alone in its 128 bytes (two cache lines,
    the pair the adjacent-line prefetcher fetches together): the compiled code
    adds to it at every warp's suspension, and two workers' counters in one
    line made each core wait for the other's (the matmul on two cores: 1.1-1.4x
    the speed of one; 1.9x apart)."""
    line = np.zeros(48, np.uint64)
    first = (-line.ctypes.data % 128) // 8
    return line[first:first + 1]


def _symbol(key: Any, launch: Launch) -> int:
    """What ``%syms`` holds for one key of the lowering: a uniform special
    register, a module variable's device address, a shared variable's offset."""
    if isinstance(key, tuple) and key[0] == "%special":
        return uniform_value(key[1], launch)
    if isinstance(key, tuple) and key[0] == "%global":
        return launch.global_addresses[key[1]]
    return launch.shared_offsets[key]


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


def why_not(launch: Launch) -> str | None:
    """Why this launch cannot run in the JIT whatever its kernel, or None."""
    if launch.watchers:
        return "observers watch memory accesses (the oracle needs the interpreter)"
    if launch.workspace:
        return "a cooperative launch"
    if launch.memory.barred is not None:
        return "device memory fenced between devices"
    if launch.code.errors:
        return "the kernel has instructions the CPU device refuses"
    return None


_TIMED_OUT = 2  # @kernel's status when the watchdog stopped it


def run(launch: Launch) -> None:
    """Run every thread of ``launch`` in compiled code; raises :class:`Unsupported`
    before touching memory when it cannot, and the device error the interpreter
    would raise when a thread faults."""
    try:
        reason = why_not(launch)
        if reason is not None:
            raise Unsupported(reason)
        compiled = compile_function(launch.code.function, launch.code,
                                    launch.functions, launch.module_globals)
        buffers = _BlockBuffers(launch, compiled)
    except Unsupported as e:
        STATS.fallbacks.append((launch.kernel, str(e)))
        raise
    table = plain_segments(launch.memory)
    n = len(table)
    starts = np.array([s for s, _, _ in table] or [0], np.uint64)
    ends = np.array([e for _, e, _ in table] or [0], np.uint64)
    ptrs = np.array([b.ctypes.data if b is not None else 0 for _, _, b in table] or [0],
                    np.uint64)
    ctx = np.zeros(CTX_SLOTS, np.uint64)
    ctx[0] = n
    ctx[1] = starts.ctypes.data
    ctx[2] = ends.ctypes.data
    ctx[3] = ptrs.ctypes.data
    gx, gy, gz = launch.grid
    halt = np.zeros(2, np.uint32)  # [stop now, the block that stopped]
    ctx[17] = halt.ctypes.data
    keep = (table, starts, ends, ptrs, halt)
    threads = cores.thread_count() if compiled.parallel else 1

    def new_worker(k: int) -> _Worker:  # the first uses the buffers that proved the launch fits
        return _Worker(launch, compiled, ctx, buffers if k == 0 else None)

    watched = None if launch.deadline is None else \
        WATCHDOG.watch(launch.deadline - launch.clock(), halt)
    try:
        status, count, worker = cores.run_ranges(new_worker, gx * gy * gz, launch.tpb, threads,
                                                 compiled.per_thread)
    finally:
        if watched is not None:
            WATCHDOG.unwatch(watched)
    del keep
    launch.count += count
    if status == 0:
        compiled.per_thread = count / max(1, gx * gy * gz * launch.tpb)
    if status == _TIMED_OUT:
        b = int(halt[1])
        block = (b % gx, b // gx % gy, b // (gx * gy))
        raise LaunchTimeout(
            f"kernel {launch.kernel}: still running after {launch.clock() - launch.started:.2f}"
            f" s (the kernel timeout is {launch.timeout:g} s); block {block} was running "
            "(compiled: stopped between rounds of its threads)")
    if status != 0:
        err = worker.access.error
        if isinstance(err, DeviceError):
            raise err
        raise DeviceError(f"kernel {launch.kernel}: the JIT stopped: {err!r}") from err
