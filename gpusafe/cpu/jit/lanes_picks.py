"""Where a warp's lanes may wait at each pick of the lanes lowering (:mod:`.lanes`).

A lane waiting at a PC holds it with these flags: :data:`WARP_WAIT` at a warp
instruction whose members are not all there, :data:`AT_BARRIER` after a
``bar.sync``.  Each pick switches over the PCs its lanes may wait at only,
so that a register live at one join point is not live at every pick.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpusafe_instrument import nodes

from .lanes_vec import splat, vec_type

WARP_WAIT = 1 << 28
AT_BARRIER = 1 << 29
DONE = 0x7FFFFFFF
PICK_EDGES = 512
"""The most PCs all picks together switch over on their own, else every pick
goes to one shared switch (:func:`pick_blocks`)."""
_V1 = vec_type("i1")
_V32 = vec_type("i32")


def plan_picks(flat: Sequence[nodes.Instruction], warp_points: set[int],
               target: Callable[[int], int]) -> dict[tuple[int, str], frozenset[int]]:
    """Where lanes may wait at each pick: for every place the warp picks
    (a divergent branch ``div``, a forward branch past waiting lanes
    ``below``, a warp instruction's wait ``ww``, a ``ret``/``exit`` or the
    end ``ret``, a barrier ``bar``, a release ``rel`` at -1, a resume after
    a yield ``res`` at -1), the waiting PCs (flags included) its lanes may
    hold.  Each pick switches over those only: one pick for all made every
    register live at any join point live at every pick, carried (and
    zeroed at entry) through the whole kernel.

    A may-analysis over the lowering's own control flow, iterated to its
    fixed point: ``at[i]`` holds what may wait when the warp runs ``i``
    (before lanes join there); a pick's set flows to each join point and
    forced warp instruction it may choose.  A release finds its lanes
    after barriers only (a warp returns at a barrier when nothing else
    waits); a resume finds what waited where the warp yielded."""
    n = len(flat)
    at: list[set[int]] = [set() for _ in range(n + 1)]
    sites: dict[tuple[int, str], set[int]] = {
        (-1, "rel"): {i + 1 for i, x in enumerate(flat)
                      if x.op in ("bar", "barrier") and i not in warp_points},
        (-1, "res"): set()}
    changed = True

    def grow(into: set[int], more: set[int], pc: int = 0) -> None:
        # into at[pc]: only what waits at or after pc (the smallest runs
        # first: a pick chooses its minimum, a forward branch passes no
        # waiting lane, and fall-through and backward branches keep it so)
        nonlocal changed
        more = {x for x in more if x >= pc}
        if not more <= into:
            into |= more
            changed = True

    while changed:
        changed = False
        for i in range(n + 1):
            post = at[i] - {i, i | WARP_WAIT}
            instr = flat[i] if i < n else None
            if instr is None or instr.op in ("ret", "exit"):
                grow(sites.setdefault((i, "ret"), set()), post)
                if instr is not None and instr.guard is not None:
                    grow(at[i + 1], post, i + 1)
            elif instr.op == "bra":
                t = target(i)
                grow(at[t], post, t)
                if instr.guard is not None:
                    grow(at[i + 1], post, i + 1)
                    grow(sites.setdefault((i, "div"), set()), post | {t, i + 1})
                    if t <= i:
                        grow(sites[(-1, "res")], post | {t, i + 1})
                if t > i:
                    grow(sites.setdefault((i, "below"), set()), post | {t})
                else:
                    grow(sites[(-1, "res")], post | {t})
            elif instr.op in ("bar", "barrier") and i not in warp_points:
                grow(sites.setdefault((i, "bar"), set()), post | {(i + 1) | AT_BARRIER})
            elif i in warp_points:
                grow(sites.setdefault((i, "ww"), set()), post | {i | WARP_WAIT})
                grow(at[i + 1], post | {i | WARP_WAIT}, i + 1)
            else:
                grow(at[i + 1], post, i + 1)
        for waiting in sites.values():
            for pc in waiting:
                if pc < AT_BARRIER:
                    grow(at[pc & ~WARP_WAIT], waiting, pc)
    return {key: frozenset(v) for key, v in sites.items()}


def pick_label(i: int, kind: str) -> str:
    """The label of the pick after ``i`` (:func:`plan_picks`)."""
    return f"%PK{i}{kind}" if i >= 0 else f"%PKe{kind}"


def pick_blocks(picks: dict[tuple[int, str], frozenset[int]]) -> str:
    """Each pick (:func:`plan_picks`): the smallest waiting PC decides, a
    ``switch`` over the PCs that pick may find; a warp instruction's
    forced lanes (``KF``) run with whoever is there, as the interpreter
    forces them; a PC it cannot find is a fault of the lowering, never
    a guess (``kbad``: the launch stops).  Where all picks together would
    switch over more than :data:`PICK_EDGES` PCs, every pick goes to one
    shared ``pick`` over all of them instead (the lowering before the
    per-pick switches): an instrumented stencil's 24,000 cases took LLVM's
    optimiser 31 s against 14 s with one shared switch."""
    out, forced, shared = [], set(), False

    def switch(label: str, waiting: frozenset[int]) -> None:
        cases = [f"i32 {DONE}, label %done"]
        for pc in sorted(waiting):
            if pc < WARP_WAIT:
                cases.append(f"i32 {pc}, label %L{pc}")
            elif pc < AT_BARRIER:
                forced.add(pc & ~WARP_WAIT)
                cases.append(f"i32 {pc}, label %KF{pc & ~WARP_WAIT}")
            else:
                cases.append(f"i32 {pc}, label %atbar")
        out.append(f"{label}:\n  %{label}p = load {_V32}, ptr %pcv\n"
                   f"  %{label}m = call i32 @llvm.vector.reduce.umin.v32i32({_V32} "
                   f"%{label}p)\n  switch i32 %{label}m, label %kbad [{' '.join(cases)}]\n")

    alone = sum(len(w) for w in picks.values()) <= PICK_EDGES
    for (i, kind), waiting in sorted(picks.items()):
        label = pick_label(i, kind)[1:]
        if not alone:
            out.append(f"{label}:\n  br label %pick\n")
            shared = True
        else:
            switch(label, waiting)
    if shared:
        switch("pick", frozenset().union(*picks.values()))
    for w in sorted(forced):
        out.append(f"KF{w}:\n  %kp{w} = load {_V32}, ptr %pcv\n"
                   f"  %kact{w} = icmp eq {_V32} %kp{w}, {splat('i32', str(w | WARP_WAIT))}\n"
                   f"  store {_V1} %kact{w}, ptr %act\n"
                   f"  %kq{w} = select {_V1} %kact{w}, {_V32} {splat('i32', str(DONE))}, "
                   f"{_V32} %kp{w}\n  store {_V32} %kq{w}, ptr %pcv\n  br label %F{w}\n")
    return "".join(out) + "kbad:\n  br label %fault\n"
