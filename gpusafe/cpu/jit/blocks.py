"""The compiled launch loop, block by block, and the block's memories.

``@kernel`` runs the blocks of the grid in order (x fastest); for each it
zeroes the block's shared window and its threads' local frames (the
interpreter starts every block with zeros), then runs rounds: every thread
not yet finished is called (``@thread``, :mod:`.lower`) from its resume
point, x fastest, and runs to its next barrier, its next warp-synchronous
instruction or its end (:mod:`.regions`).  After a round where some thread
stopped at an instruction that exchanges values (a shuffle, a vote,
``bar.red``), the values the threads published there (``%pub``, and where
each stopped) are copied to ``%snap``/``%sstate``, which the second half of
the instruction reads.  After a round where some thread stopped at a warp
instruction, the next round runs only the threads waiting at warp
instructions; otherwise, when some thread waits at a barrier, the next round
runs them all.  A thread that yields (a long loop, :func:`.regions.BarrierLowering.backward`)
waits as at a warp instruction; in the round after a yield, a thread of
the same warp waiting at a warp instruction stays waiting until the yielding
thread has caught up (the interpreter's warp instruction waits for every
live lane).  A fault (``@thread`` returns
1) stops the launch.

The launch's buffers come through ``ctx`` (:func:`.engine.run` fills it):
slot 6 the shared window (one block's), 7 its size, 8 the threads' frames,
9 a frame's bytes, 10 the threads' resume points (i32; -1 when finished),
11 the local frames, 12 one frame's bytes, 13 the shared variables' offsets,
14 the values published at warp instructions (i64 per thread), 15 their
snapshot (whole warps, then two i64 a warp: ``@warp_bits``' memo, and four:
``bar.red``'s), 16 the snapshot of the resume points (whole warps).

``@shared_ptr``/``@local_ptr`` check an access against the window as the
interpreter does (:func:`gpusafe.cpu.access.locate`: the size rounded up to
16 bytes, natural alignment) and call back into Python for the error;
``@generic_ptr`` sends an address in the shared or local window there and
any other to ``@resolve`` (the global arena; the parameter window is
served by the Python callback).
"""

from __future__ import annotations

from ..memory import LOCAL_STACK_BASE, LOCAL_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .values import LOCAL, SHARED

CTX_SLOTS = 18

_WINDOW_PTR = """
define internal ptr @{name}(ptr %ctx, ptr nonnull %base, i64 %stride, i64 %addr, i64 %width,
                           i32 %kind, i32 %line) alwaysinline {{
entry:
  %off = sub i64 %addr, {bias}
  %lim = sub i64 %stride, %width
  %sh = call i64 @llvm.cttz.i64(i64 %width, i1 true)
  %rot = call i64 @llvm.fshr.i64(i64 %off, i64 %off, i64 %sh)
  %slim = lshr i64 %lim, %sh
  %bad = icmp ugt i64 %rot, %slim
  br i1 %bad, label %slow, label %ok, !prof !{{!"branch_weights", i32 1, i32 1000000}}
ok:
  %p = getelementptr inbounds i8, ptr %base, i64 %off
  ret ptr %p
slow:
  %fpp = getelementptr i64, ptr %ctx, i64 4
  %fp = load ptr, ptr %fpp
  %res = call ptr %fp(i64 %addr, i64 %width, i32 %kind, i32 %line) cold
  ret ptr null
}}
"""

_GENERIC = f"""
define internal ptr @generic_ptr(ptr %ctx, i64 %site, i64 %addr, i64 %width, i32 %kind,
                                 i32 %line, ptr %shared, i64 %sstride, ptr %local,
                                 i64 %lstride) alwaysinline {{
entry:
  %ds = sub i64 %addr, {SHARED_WINDOW}
  %ins = icmp ult i64 %ds, {WINDOW_SIZE}
  br i1 %ins, label %sh, label %notsh
sh:
  %ks = add i32 %kind, {SHARED * 4}
  %ps = call ptr @shared_ptr(ptr %ctx, ptr %shared, i64 %sstride, i64 %ds, i64 %width,
                             i32 %ks, i32 %line)
  ret ptr %ps
notsh:
  %dl = sub i64 %addr, {LOCAL_WINDOW}
  %inl = icmp ult i64 %dl, {WINDOW_SIZE}
  br i1 %inl, label %lo, label %gl
lo:
  %kl = add i32 %kind, {LOCAL * 4}
  %pl = call ptr @local_ptr(ptr %ctx, ptr %local, i64 %lstride, i64 %dl, i64 %width,
                            i32 %kl, i32 %line)
  ret ptr %pl
gl:
  %pg = call ptr @resolve(ptr %ctx, i64 %site, i64 %addr, i64 %width, i32 %kind, i32 %line)
  ret ptr %pg
}}
"""

WARP_SPAN = """\
  %lane = and i32 %lin, 31
  %wb = sub i32 %lin, %lane
  %rest = sub i32 %tpb, %wb
  %short = icmp ult i32 %rest, 32
  %ws = select i1 %short, i32 %rest, i32 32
"""
"""The warp of thread ``%lin`` in a block of ``%tpb``: its first thread
``%wb`` and its size ``%ws`` (the last warp may be short); the prologue of
every helper that scans a warp's threads."""


def _memo_lookup(slot: str, miss: str) -> str:
    """The start of a helper that memoises its answer in the snapshot: the
    thread's resume state ``%my``, the memo's key and value (``%mk``,
    ``%mv``, at the ``%mslot`` that ``slot`` computes from ``%wlanes``), and
    a branch to ``memo`` when the key is this state's, else to ``miss``."""
    return ("  %mysp = getelementptr i32, ptr %sstate, i32 %lin\n"
            "  %my = load i32, ptr %mysp\n"
            "  %tpbw = add i32 %tpb, 31\n"
            "  %wlanes = and i32 %tpbw, -32\n"
            + slot
            + "  %mk = getelementptr i64, ptr %snap, i32 %mslot\n"
            "  %mv = getelementptr i64, ptr %mk, i32 1\n"
            "  %key = load i64, ptr %mk\n"
            "  %my64 = zext i32 %my to i64\n"
            "  %want = add i64 %my64, 1\n"
            "  %hit = icmp eq i64 %key, %want\n"
            f"  br i1 %hit, label %memo, label %{miss}\n")


_WARP_BITS = """
define internal i64 @warp_bits(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb) {
entry:
""" + WARP_SPAN + _memo_lookup("  %wi = lshr i32 %wb, 4\n  %mslot = add i32 %wlanes, %wi\n",
                                  "loop") + """memo:
  %known = load i64, ptr %mv
  ret i64 %known
loop:
  %l = phi i32 [0, %entry], [%l1, %body]
  %pres = phi i64 [0, %entry], [%pres2, %body]
  %tr = phi i64 [0, %entry], [%tr2, %body]
  %more = icmp ult i32 %l, 32
  br i1 %more, label %body, label %done
body:
  %i = add i32 %wb, %l
  %sp = getelementptr i32, ptr %sstate, i32 %i
  %s = load i32, ptr %sp
  %inw = icmp ult i32 %l, %ws
  %eqs = icmp eq i32 %s, %my
  %same = and i1 %eqs, %inw
  %l64 = zext i32 %l to i64
  %bit = shl i64 1, %l64
  %vp = getelementptr i64, ptr %snap, i32 %i
  %v = load i64, ptr %vp
  %vp1 = and i64 %v, 1
  %vt = icmp ne i64 %vp1, 0
  %voff = and i64 %v, 2
  %von = icmp eq i64 %voff, 0
  %here = and i1 %same, %von
  %t = and i1 %here, %vt
  %pb = select i1 %here, i64 %bit, i64 0
  %tb = select i1 %t, i64 %bit, i64 0
  %pres2 = or i64 %pres, %pb
  %tr2 = or i64 %tr, %tb
  %l1 = add i32 %l, 1
  br label %loop
done:
  %hi = shl i64 %tr, 32
  %r = or i64 %hi, %pres
  store i64 %want, ptr %mk
  store i64 %r, ptr %mv
  ret i64 %r
}
"""
"""``@warp_bits``: which lanes of the thread's warp stopped at its instruction
(low word) and which of them published a true predicate (high word), over
the snapshot.  Every lane stopped at the same instruction gets the same
answer, so the first to ask stores it in its warp's memo (after the
snapshot's whole warps: the state it was asked for plus one, and the
answer; zeroed with every snapshot) and its warp-mates read it: one scan a
warp instead of one a lane (a vote cost 32 lane reads a thread).  The scan
runs over 32 lanes, masked past a short last warp, so LLVM vectorises it
(the snapshot has whole warps)."""

_WARP_EQUAL = """
define internal i64 @warp_equal(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb) {
entry:
""" + WARP_SPAN + """  %mysp = getelementptr i32, ptr %sstate, i32 %lin
  %my = load i32, ptr %mysp
  %mvp = getelementptr i64, ptr %snap, i32 %lin
  %mv = load i64, ptr %mvp
  br label %loop
loop:
  %l = phi i32 [0, %entry], [%l1, %body]
  %pres = phi i64 [0, %entry], [%pres2, %body]
  %eq = phi i64 [0, %entry], [%eq2, %body]
  %more = icmp ult i32 %l, 32
  br i1 %more, label %body, label %done
body:
  %i = add i32 %wb, %l
  %sp = getelementptr i32, ptr %sstate, i32 %i
  %s = load i32, ptr %sp
  %inw = icmp ult i32 %l, %ws
  %eqs = icmp eq i32 %s, %my
  %same = and i1 %eqs, %inw
  %l64 = zext i32 %l to i64
  %bit = shl i64 1, %l64
  %vp = getelementptr i64, ptr %snap, i32 %i
  %v = load i64, ptr %vp
  %ve = icmp eq i64 %v, %mv
  %t = and i1 %same, %ve
  %pb = select i1 %same, i64 %bit, i64 0
  %eb = select i1 %t, i64 %bit, i64 0
  %pres2 = or i64 %pres, %pb
  %eq2 = or i64 %eq, %eb
  %l1 = add i32 %l, 1
  br label %loop
done:
  %hi = shl i64 %pres, 32
  %r = or i64 %hi, %eq
  ret i64 %r
}
"""
"""``@warp_equal`` (``match``): the lanes stopped at the thread's instruction
(high word) and those of them that published its value (low word).  Each
lane's answer is its own, so no memo; the scan runs over 32 lanes, masked
past a short last warp, so that LLVM vectorises it, as ``@warp_bits``'."""

_BLOCK_MEMO = _memo_lookup("  %wmemo = lshr i32 %wlanes, 4\n  %mbase = add i32 %wlanes, %wmemo\n"
                           "  %mslot = add i32 %mbase, {slot}\n", "scan") + """memo:
  %known64 = load i64, ptr %mv
  %known = trunc i64 %known64 to i32
  ret i32 %known
scan:
"""
"""The block's memo of a ``bar.red`` count (``{slot}`` 0: ``@block_count``,
2: ``@block_here``), after the warps' memo: every thread waiting at the same
instruction gets the same count, so it is counted once a block and
snapshot, not once a thread (a block of 1024 threads scanned a million
states at each ``__syncthreads_count``)."""

_SAME_BARRIER_HEAD = """  %mypp = getelementptr i64, ptr %snap, i32 %lin
  %mypub = load i64, ptr %mypp
  %myid = lshr i64 %mypub, 1
"""
"""The barrier id the thread published at its ``bar.red`` (``regions.bar_red``)."""

_SAME_BARRIER = """  %sp = getelementptr i32, ptr %sstate, i32 %i
  %s = load i32, ptr %sp
  %s3 = and i32 %s, 3
  %red = icmp eq i32 %s3, 2
  %vp = getelementptr i64, ptr %snap, i32 %i
  %v = load i64, ptr %vp
  %vid = lshr i64 %v, 1
  %sameid = icmp eq i64 %vid, %myid
  %same = and i1 %red, %sameid
"""
"""Whether thread ``%i`` waits at a ``bar.red`` (a block-wide suspension that
exchanges values: state bits 1 and 0 are 2 and only ``bar.red`` suspends so)
of the thread's barrier id: the interpreter reduces over the lanes released
together by barrier id, whichever ``bar.red`` instruction each waits at."""

_MEMO_STORE = """  %n64 = zext i32 %n to i64
  store i64 %want, ptr %mk
  store i64 %n64, ptr %mv
  ret i32 %n
"""

_BLOCK_COUNT = """
define internal i32 @block_count(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb) {
entry:
""" + _BLOCK_MEMO.format(slot=0) + _SAME_BARRIER_HEAD + """  br label %loop
loop:
  %i = phi i32 [0, %scan], [%i1, %body]
  %n = phi i32 [0, %scan], [%n2, %body]
  %more = icmp ult i32 %i, %tpb
  br i1 %more, label %body, label %done
body:
""" + _SAME_BARRIER + """  %vb = and i64 %v, 1
  %vt = icmp ne i64 %vb, 0
  %t = and i1 %same, %vt
  %inc = zext i1 %t to i32
  %n2 = add i32 %n, %inc
  %i1 = add i32 %i, 1
  br label %loop
done:
""" + _MEMO_STORE + """}

define internal i32 @block_here(ptr %snap, ptr %sstate, i32 %lin, i32 %tpb) {
entry:
""" + _BLOCK_MEMO.format(slot=2) + _SAME_BARRIER_HEAD + """  br label %loop
loop:
  %i = phi i32 [0, %scan], [%i1, %body]
  %n = phi i32 [0, %scan], [%n2, %body]
  %more = icmp ult i32 %i, %tpb
  br i1 %more, label %body, label %done
body:
""" + _SAME_BARRIER + """  %inc = zext i1 %same to i32
  %n2 = add i32 %n, %inc
  %i1 = add i32 %i, 1
  br label %loop
done:
""" + _MEMO_STORE + """}
"""

_WARP_YIELDS = """
define internal i1 @warp_yields(ptr %sstate, i32 %lin, i32 %tpb) {
entry:
""" + WARP_SPAN + """  br label %loop
loop:
  %l = phi i32 [0, %entry], [%l1, %body]
  %more = icmp ult i32 %l, %ws
  br i1 %more, label %body, label %none
body:
  %i = add i32 %wb, %l
  %sp = getelementptr i32, ptr %sstate, i32 %i
  %s = load i32, ptr %sp
  %live = icmp sgt i32 %s, 0
  %y = and i32 %s, 4
  %isy = icmp ne i32 %y, 0
  %hit = and i1 %live, %isy
  %l1 = add i32 %l, 1
  br i1 %hit, label %found, label %loop
found:
  ret i1 true
none:
  ret i1 false
}
"""

_KERNEL_ENTRY = """define i32 @kernel(ptr noalias %params, ptr noalias %ctx, ptr noalias %count,
                   i32 %gx, i32 %gy, i32 %gz, i32 %bx, i32 %by, i32 %bz,
                   i32 %first, i32 %last) {
entry:
  %q6 = getelementptr i64, ptr %ctx, i64 6
  %shared = load ptr, ptr %q6
  %q7 = getelementptr i64, ptr %ctx, i64 7
  %sstride = load i64, ptr %q7
  %q8 = getelementptr i64, ptr %ctx, i64 8
  %frame = load ptr, ptr %q8
  %q9 = getelementptr i64, ptr %ctx, i64 9
  %fbytes = load i64, ptr %q9
  %q10 = getelementptr i64, ptr %ctx, i64 10
  %state = load ptr, ptr %q10
  %q11 = getelementptr i64, ptr %ctx, i64 11
  %local = load ptr, ptr %q11
  %q12 = getelementptr i64, ptr %ctx, i64 12
  %lstride = load i64, ptr %q12
  %q13 = getelementptr i64, ptr %ctx, i64 13
  %syms = load ptr, ptr %q13
  %q14 = getelementptr i64, ptr %ctx, i64 14
  %pub = load ptr, ptr %q14
  %q15 = getelementptr i64, ptr %ctx, i64 15
  %snap = load ptr, ptr %q15
  %q16 = getelementptr i64, ptr %ctx, i64 16
  %sstate = load ptr, ptr %q16
  %q17 = getelementptr i64, ptr %ctx, i64 17
  %halt = load ptr, ptr %q17
  %bxy = mul i32 %bx, %by
  %tpb = mul i32 %bxy, %bz
  %tpb64 = zext i32 %tpb to i64
  %gxy = mul i32 %gx, %gy
  %lbytes = mul i64 %tpb64, %lstride
  %sbytes = mul i64 %tpb64, 4
  %pbytes = mul i64 %tpb64, 8
  %tpbw = add i64 %tpb64, 31
  %wlanes = and i64 %tpbw, -32
  %wmbytes = lshr i64 %wlanes, 1
  %mbytes = add i64 %wmbytes, 32
  br label %block_head
"""
"""``@kernel``'s entry: the launch context's pointers and the block's sizes
(both block loops start so; what one of them does not use, LLVM drops)."""

_BLOCK_INIT = """block_head:
  %b = phi i32 [%first, %entry], [%b1, %block_next]
  %more = icmp ult i32 %b, %last
  br i1 %more, label %block_init, label %exit
block_init:
  %cx = urem i32 %b, %gx
  %bq = udiv i32 %b, %gx
  %cy = urem i32 %bq, %gy
  %cz = udiv i32 %b, %gxy
  call void @llvm.memset.p0.i64(ptr %shared, i8 0, i64 %sstride, i1 false)
  call void @llvm.memset.p0.i64(ptr %local, i8 0, i64 %lbytes, i1 false)
"""
"""The next block of the chunk: its coordinates, its shared memory and its
threads' local memory zeroed."""

_NEXT_THREAD = """  %t1 = add i32 %t, 1
  %tx1 = add i32 %tx, 1
  %xwrap = icmp eq i32 %tx1, %bx
  %tx2 = select i1 %xwrap, i32 0, i32 %tx1
  %tyn = add i32 %ty, 1
  %ty1 = select i1 %xwrap, i32 %tyn, i32 %ty
  %ywrap = icmp eq i32 %ty1, %by
  %ty2 = select i1 %ywrap, i32 0, i32 %ty1
  %tzn = add i32 %tz, 1
  %tz1 = select i1 %ywrap, i32 %tzn, i32 %tz
  br label %thr_head
"""
"""The next thread of the block, x fastest."""

_BLOCK_END = """block_next:
  %b1 = add i32 %b, 1
  br label %block_head
stop:
  ret i32 1
timeout:
  %hb = getelementptr i32, ptr %halt, i64 1
  store i32 %b, ptr %hb
  ret i32 2
exit:
  ret i32 0
}
"""
"""The next block, and ``@kernel``'s returns: 1 a fault, 2 the watchdog, 0 done."""

_LOOP = ("""
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.fshr.i64(i64, i64, i64)

"""
         + _KERNEL_ENTRY + _BLOCK_INIT + """  call void @llvm.memset.p0.i64(ptr %state, i8 0, i64 %sbytes, i1 false)
  call void @llvm.memset.p0.i64(ptr %pub, i8 0, i64 %pbytes, i1 false)
  br label %round
round:
  %mode = phi i1 [false, %block_init], [true, %picked], [false, %after_warp]
  %ymode = phi i1 [false, %block_init], [%yd, %picked], [false, %after_warp]
  br label %thr_head
thr_head:
  %t = phi i32 [0, %round], [%t1, %thr_next]
  %tx = phi i32 [0, %round], [%tx2, %thr_next]
  %ty = phi i32 [0, %round], [%ty2, %thr_next]
  %tz = phi i32 [0, %round], [%tz1, %thr_next]
  %aw = phi i1 [false, %round], [%aw2, %thr_next]
  %ab = phi i1 [false, %round], [%ab2, %thr_next]
  %sn = phi i1 [false, %round], [%sn2, %thr_next]
  %yd = phi i1 [false, %round], [%yd2, %thr_next]
  %tm = icmp ult i32 %t, %tpb
  br i1 %tm, label %thr_body, label %round_end
thr_body:
  %t64 = zext i32 %t to i64
  %sp = getelementptr i32, ptr %state, i64 %t64
  %st = load i32, ptr %sp
  %finished = icmp slt i32 %st, 0
  br i1 %finished, label %thr_next, label %thr_check
thr_check:
  %stw = and i32 %st, 1
  %atbar = icmp eq i32 %stw, 0
  %skip = and i1 %mode, %atbar
  br i1 %skip, label %thr_next, label %thr_yc
thr_yc:
  %sty = and i32 %st, 4
  %notyield = icmp eq i32 %sty, 0
  %chk = and i1 %ymode, %notyield
  br i1 %chk, label %thr_scan, label %thr_run
thr_scan:
  %wy = call i1 @warp_yields(ptr %sstate, i32 %t, i32 %tpb)
  br i1 %wy, label %thr_next, label %thr_run
thr_run:
  %resume = lshr i32 %st, 3
  %fo = mul i64 %t64, %fbytes
  %fp = getelementptr i8, ptr %frame, i64 %fo
  %lo = mul i64 %t64, %lstride
  %lp = getelementptr i8, ptr %local, i64 %lo
  %r = call i32 @thread(ptr %params, ptr %ctx, ptr %count, i32 %tx, i32 %ty, i32 %tz,
                        i32 %bx, i32 %by, i32 %bz, i32 %cx, i32 %cy, i32 %cz,
                        i32 %gx, i32 %gy, i32 %gz, ptr %fp, i32 %resume, ptr %shared,
                        i64 %sstride, ptr %lp, i64 %lstride, ptr %syms, i32 %t, i32 %tpb,
                        ptr %pub, ptr %snap, ptr %sstate)
  %fault = icmp eq i32 %r, 1
  br i1 %fault, label %stop, label %thr_store
thr_store:
  %fin = icmp eq i32 %r, 0
  %ns = select i1 %fin, i32 -1, i32 %r
  store i32 %ns, ptr %sp
  %rw = and i32 %r, 1
  %isw = icmp ne i32 %rw, 0
  %rs = and i32 %r, 2
  %iss = icmp ne i32 %rs, 0
  %sn1 = or i1 %sn, %iss
  %ry = and i32 %r, 4
  %isy = icmp ne i32 %ry, 0
  %yd1 = or i1 %yd, %isy
  %notfin = xor i1 %fin, true
  %notw = xor i1 %isw, true
  %isb = and i1 %notfin, %notw
  %aw1 = or i1 %aw, %isw
  %ab1 = or i1 %ab, %isb
  br label %thr_next
thr_next:
  %aw2 = phi i1 [%aw, %thr_body], [%aw, %thr_check], [true, %thr_scan], [%aw1, %thr_store]
  %ab2 = phi i1 [%ab, %thr_body], [true, %thr_check], [%ab, %thr_scan], [%ab1, %thr_store]
  %sn2 = phi i1 [%sn, %thr_body], [%sn, %thr_check], [%sn, %thr_scan], [%sn1, %thr_store]
  %yd2 = phi i1 [%yd, %thr_body], [%yd, %thr_check], [%yd, %thr_scan], [%yd1, %thr_store]
"""
         + _NEXT_THREAD + """round_end:
  %hw = load atomic i32, ptr %halt monotonic, align 4
  %halted = icmp ne i32 %hw, 0
  br i1 %halted, label %timeout, label %round_go
round_go:
  %need = or i1 %sn, %yd
  br i1 %need, label %snapshot, label %picked
snapshot:
  call void @llvm.memcpy.p0.p0.i64(ptr %snap, ptr %pub, i64 %pbytes, i1 false)
  call void @llvm.memcpy.p0.p0.i64(ptr %sstate, ptr %state, i64 %sbytes, i1 false)
  %memo = getelementptr i64, ptr %snap, i64 %wlanes
  call void @llvm.memset.p0.i64(ptr %memo, i8 0, i64 %mbytes, i1 false)
  br label %picked
picked:
  br i1 %aw, label %round, label %after_warp
after_warp:
  br i1 %ab, label %round, label %block_next
"""
         + _BLOCK_END)


_STRAIGHT = ("""
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.fshr.i64(i64, i64, i64)

"""
             + _KERNEL_ENTRY + _BLOCK_INIT + """  br label %thr_head
thr_head:
  %t = phi i32 [0, %block_init], [%t1, %thr_next]
  %tx = phi i32 [0, %block_init], [%tx2, %thr_next]
  %ty = phi i32 [0, %block_init], [%ty2, %thr_next]
  %tz = phi i32 [0, %block_init], [%tz1, %thr_next]
  %tm = icmp ult i32 %t, %tpb
  br i1 %tm, label %thr_run, label %block_end
thr_run:
  %t64 = zext i32 %t to i64
  %lo = mul i64 %t64, %lstride
  %lp = getelementptr i8, ptr %local, i64 %lo
  %r = call i32 @thread(ptr %params, ptr %ctx, ptr %count, i32 %tx, i32 %ty, i32 %tz,
                        i32 %bx, i32 %by, i32 %bz, i32 %cx, i32 %cy, i32 %cz,
                        i32 %gx, i32 %gy, i32 %gz, ptr %frame, i32 0, ptr %shared,
                        i64 %sstride, ptr %lp, i64 %lstride, ptr %syms, i32 %t, i32 %tpb,
                        ptr %pub, ptr %snap, ptr %sstate)
  %fault = icmp ne i32 %r, 0
  br i1 %fault, label %stop, label %thr_next
thr_next:
"""
             + _NEXT_THREAD + """block_end:
  %hw = load atomic i32, ptr %halt monotonic, align 4
  %halted = icmp ne i32 %hw, 0
  br i1 %halted, label %timeout, label %block_next
"""
             + _BLOCK_END)
"""``@kernel`` for a kernel without suspension points (no barrier, warp
instruction or backward branch): each thread runs once from its start to its
end, so the rounds, the resume points and their bookkeeping go (the vector
add's per-thread loop); a fault (``@thread`` returns 1) stops the launch."""


def launch_ir(suspends: bool = True) -> str:
    """``@kernel`` and the window helpers ``@thread`` calls (``@resolve`` is
    the engine's); ``suspends``: whether ``@thread`` has suspension points
    (the round loop) or not (one call per thread, :data:`_STRAIGHT`)."""
    return (_WINDOW_PTR.format(name="shared_ptr", bias=0)
            + _WINDOW_PTR.format(name="local_ptr", bias=LOCAL_STACK_BASE)
            + _GENERIC + _WARP_BITS + _WARP_EQUAL + _BLOCK_COUNT + _WARP_YIELDS
            + (_LOOP if suspends else _STRAIGHT))
