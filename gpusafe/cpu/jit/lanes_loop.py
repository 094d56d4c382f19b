"""The compiled launch loop of the lanes lowering: blocks, then warps in rounds.

As the per-thread loop (:mod:`.blocks`) with warps for threads: each block's
shared and local memory is zeroed, then every warp not finished runs
(``@warp``, :mod:`.lanes`) until all its lanes finished (it returns 0), wait
at a barrier (2), or it yields in a long loop (3); rounds repeat while a warp
yielded, then the barrier's warps are released together (the interpreter's
rule: a barrier opens once every live lane waits) and resume with their
barrier flags cleared.  A fault (1) stops the launch; the watchdog's flag
is read after every round.

Buffers through ``ctx`` as for :mod:`.blocks`: slot 8 the warps' frames
(``ctx[9]`` bytes a warp), 10 the warps' states (i32: 0 fresh, 1 yielded,
2 at a barrier, -1 finished), 14 each warp's waiting PCs (128 bytes a warp).
"""

from __future__ import annotations

from .blocks import _BLOCK_END, _BLOCK_INIT, _KERNEL_ENTRY, _WINDOW_PTR

_LOOP = """  %tpbw32 = add i32 %tpb, 31
  %nw = lshr i32 %tpbw32, 5
  %nw64 = zext i32 %nw to i64
  %wsbytes = mul i64 %nw64, 4
  call void @llvm.memset.p0.i64(ptr %state, i8 0, i64 %wsbytes, i1 false)
  br label %round
round:
  %rel = phi i1 [false, %block_init], [false, %again], [true, %release]
  br label %w_head
w_head:
  %w = phi i32 [0, %round], [%w1, %w_next]
  %yd = phi i1 [false, %round], [%yd2, %w_next]
  %bw = phi i1 [false, %round], [%bw2, %w_next]
  %wm = icmp ult i32 %w, %nw
  br i1 %wm, label %w_body, label %round_end
w_body:
  %w64 = zext i32 %w to i64
  %sp = getelementptr i32, ptr %state, i64 %w64
  %st = load i32, ptr %sp
  %fin = icmp slt i32 %st, 0
  br i1 %fin, label %w_next, label %w_check
w_check:
  %atb = icmp eq i32 %st, 2
  %norel = xor i1 %rel, true
  %skip = and i1 %atb, %norel
  br i1 %skip, label %w_next, label %w_run
w_run:
  %fo = mul i64 %w64, %fbytes
  %fp = getelementptr i8, ptr %frame, i64 %fo
  %po = mul i64 %w64, 128
  %pp = getelementptr i8, ptr %pub, i64 %po
  %wb = shl i32 %w, 5
  %r = call i32 @warp(ptr %params, ptr %ctx, ptr %count, i32 %bx, i32 %by, i32 %bz,
                      i32 %cx, i32 %cy, i32 %cz, i32 %gx, i32 %gy, i32 %gz, i32 %wb,
                      i32 %tpb, ptr %fp, ptr %pp, i32 %st, ptr %shared, i64 %sstride,
                      ptr %syms)
  %fault = icmp eq i32 %r, 1
  br i1 %fault, label %stop, label %w_store
w_store:
  %isfin = icmp eq i32 %r, 0
  %isbar = icmp eq i32 %r, 2
  %isy = icmp eq i32 %r, 3
  %ns1 = select i1 %isbar, i32 2, i32 1
  %ns = select i1 %isfin, i32 -1, i32 %ns1
  store i32 %ns, ptr %sp
  %yd1 = or i1 %yd, %isy
  %bw1 = or i1 %bw, %isbar
  br label %w_next
w_next:
  %yd2 = phi i1 [%yd, %w_body], [%yd, %w_check], [%yd1, %w_store]
  %bw2 = phi i1 [%bw, %w_body], [true, %w_check], [%bw1, %w_store]
  %w1 = add i32 %w, 1
  br label %w_head
round_end:
  %hw = load atomic i32, ptr %halt monotonic, align 4
  %halted = icmp ne i32 %hw, 0
  br i1 %halted, label %timeout, label %round_go
round_go:
  br i1 %yd, label %again, label %maybe_release
again:
  br label %round
maybe_release:
  br i1 %bw, label %release, label %block_next
release:
  br label %round
"""


def lanes_launch_ir() -> str:
    """``@kernel`` over warps and the shared window's check ``@warp`` calls
    (``@resolve`` is the engine's)."""
    return ("\ndeclare void @llvm.memset.p0.i64(ptr, i8, i64, i1)\n"
            "declare i64 @llvm.cttz.i64(i64, i1)\n"
            "declare i64 @llvm.fshr.i64(i64, i64, i64)\n"
            + _WINDOW_PTR.format(name="shared_ptr", bias=0)
            + _KERNEL_ENTRY + _BLOCK_INIT + _LOOP + _BLOCK_END)
