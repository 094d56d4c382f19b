"""The compiled launch loop, block by block, and the block's memories.

``@kernel`` runs the blocks of the grid in order (x fastest); for each it
zeroes the block's shared window and its threads' local frames (the
interpreter starts every block with zeros), then runs rounds: every thread
not yet finished is called (``@thread``, :mod:`.lower`) from its resume
point, x fastest, and runs to its next barrier or its end
(:mod:`.regions`); a round where some thread stopped at a barrier is
followed by another.  A fault (``@thread`` returns 1) stops the launch.

The launch's buffers come through ``ctx`` (:func:`.engine.run` fills it):
slot 6 the shared window (one block's), 7 its size, 8 the threads' frames,
9 a frame's bytes, 10 the threads' resume points (i32; -1 when finished),
11 the local frames, 12 one frame's bytes, 13 the shared variables' offsets.

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

CTX_SLOTS = 14

_WINDOW_PTR = """
define internal ptr @{name}(ptr %ctx, ptr nonnull %base, i64 %stride, i64 %addr, i64 %width,
                           i32 %kind, i32 %line) alwaysinline {{
entry:
  %off = sub i64 %addr, {bias}
  %lim = sub i64 %stride, %width
  %over = icmp ugt i64 %off, %lim
  %m = sub i64 %width, 1
  %mis = and i64 %addr, %m
  %odd = icmp ne i64 %mis, 0
  %bad = or i1 %over, %odd
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

_LOOP = """
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define i32 @kernel(ptr noalias %params, ptr noalias %ctx, ptr noalias %count,
                   i32 %gx, i32 %gy, i32 %gz, i32 %bx, i32 %by, i32 %bz) {
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
  %bxy = mul i32 %bx, %by
  %tpb = mul i32 %bxy, %bz
  %tpb64 = zext i32 %tpb to i64
  %gxy = mul i32 %gx, %gy
  %nblk = mul i32 %gxy, %gz
  %lbytes = mul i64 %tpb64, %lstride
  %sbytes = mul i64 %tpb64, 4
  br label %block_head
block_head:
  %b = phi i32 [0, %entry], [%b1, %block_next]
  %more = icmp ult i32 %b, %nblk
  br i1 %more, label %block_init, label %exit
block_init:
  %cx = urem i32 %b, %gx
  %bq = udiv i32 %b, %gx
  %cy = urem i32 %bq, %gy
  %cz = udiv i32 %b, %gxy
  call void @llvm.memset.p0.i64(ptr %shared, i8 0, i64 %sstride, i1 false)
  call void @llvm.memset.p0.i64(ptr %local, i8 0, i64 %lbytes, i1 false)
  call void @llvm.memset.p0.i64(ptr %state, i8 0, i64 %sbytes, i1 false)
  br label %round
round:
  br label %thr_head
thr_head:
  %t = phi i32 [0, %round], [%t1, %thr_next]
  %wait = phi i1 [false, %round], [%wait2, %thr_next]
  %tm = icmp ult i32 %t, %tpb
  br i1 %tm, label %thr_body, label %round_end
thr_body:
  %t64 = zext i32 %t to i64
  %sp = getelementptr i32, ptr %state, i64 %t64
  %st = load i32, ptr %sp
  %finished = icmp slt i32 %st, 0
  br i1 %finished, label %thr_next, label %thr_run
thr_run:
  %tx = urem i32 %t, %bx
  %tq = udiv i32 %t, %bx
  %ty = urem i32 %tq, %by
  %tz = udiv i32 %t, %bxy
  %fo = mul i64 %t64, %fbytes
  %fp = getelementptr i8, ptr %frame, i64 %fo
  %lo = mul i64 %t64, %lstride
  %lp = getelementptr i8, ptr %local, i64 %lo
  %r = call i32 @thread(ptr %params, ptr %ctx, ptr %count, i32 %tx, i32 %ty, i32 %tz,
                        i32 %bx, i32 %by, i32 %bz, i32 %cx, i32 %cy, i32 %cz,
                        i32 %gx, i32 %gy, i32 %gz, ptr %fp, i32 %st, ptr %shared,
                        i64 %sstride, ptr %lp, i64 %lstride, ptr %syms)
  %fault = icmp eq i32 %r, 1
  br i1 %fault, label %stop, label %thr_store
thr_store:
  %fin = icmp eq i32 %r, 0
  %rm = sub i32 %r, 1
  %ns = select i1 %fin, i32 -1, i32 %rm
  store i32 %ns, ptr %sp
  %waits = xor i1 %fin, true
  %wait1 = or i1 %wait, %waits
  br label %thr_next
thr_next:
  %wait2 = phi i1 [%wait, %thr_body], [%wait1, %thr_store]
  %t1 = add i32 %t, 1
  br label %thr_head
round_end:
  br i1 %wait, label %round, label %block_next
block_next:
  %b1 = add i32 %b, 1
  br label %block_head
stop:
  ret i32 1
exit:
  ret i32 0
}
"""


def launch_ir() -> str:
    """``@kernel`` and the window helpers ``@thread`` calls (``@resolve`` is
    the engine's)."""
    return (_WINDOW_PTR.format(name="shared_ptr", bias=0)
            + _WINDOW_PTR.format(name="local_ptr", bias=LOCAL_STACK_BASE)
            + _GENERIC + _LOOP)
