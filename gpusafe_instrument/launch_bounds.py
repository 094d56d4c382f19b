"""The host's half of a launch proof (``checks/launch_proof.py``): does this
launch keep every access of the kernel in bounds?

Each expression of the proof is evaluated over intervals of mathematical
integers, with the launch's values at the leaves: the kernel's scalar
parameters (read from the packed buffer), the grid and block dimensions
(``%tid`` in ``[0, ntid - 1]``, ``%ctaid`` in ``[0, nctaid - 1]``) and
constants.  A node whose interval leaves its register's signed range (where
the machine would wrap) or a 32-bit value read as unsigned that could be
negative ends the proof: the launch then runs the checked body.  An access
is proven when every offset its interval allows, plus its constant and its
width, stays inside its root's allocation (live, not a device-heap block,
the pointer aligned for the access) or its shared variable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache

from .sites import KernelInfo


class _Unproven(Exception):
    pass


class _Unreached(Exception):
    """The access is in a loop this launch never enters (``passes``)."""


Interval = tuple[int, int]
_AXES = "xyz"


def _fits(iv: Interval, bits: int) -> Interval:
    lo, hi = iv
    if lo < -(1 << (bits - 1)) or hi >= 1 << (bits - 1):
        raise _Unproven
    return iv


class _Evaluator:
    def __init__(self, kernel: KernelInfo, params: bytes,
                 grid: Sequence[int], block: Sequence[int]) -> None:
        self.kernel = kernel
        self.params = params
        self.dims = {"ntid": tuple(block), "nctaid": tuple(grid)}

    def reached(self, conds: list) -> bool:
        """False when the launch's values contradict an equality compare a
        branch to the access saw (``launch_loops.reach_conditions``)."""
        for e, op, k in conds:
            try:
                lo, hi = self.interval(e)
            except (_Unproven, _Unreached):
                continue
            if (op == "ne" and lo == hi == k) or (op == "eq" and not lo <= k <= hi):
                return False
        return True

    def interval(self, e: list) -> Interval:
        op = e[0]
        if op == "k":
            return e[1], e[1]
        if op == "k_range":
            return e[1], e[2]
        if op == "p":
            _, off, size = self.kernel.params[e[1]]
            if size != e[2]:
                raise _Unproven
            v = int.from_bytes(self.params[off:off + size], "little", signed=e[3])
            return v, v
        if op == "s":
            sreg, axis = e[1], _AXES.index(e[2])
            if sreg in self.dims:
                v = self.dims[sreg][axis]
                return v, v
            n = self.dims["ntid" if sreg == "tid" else "nctaid"][axis]
            return 0, n - 1
        if op == "u":
            lo, hi = self.interval(e[1])
            if lo < 0:
                raise _Unproven
            return lo, hi
        if op in ("add", "sub", "mul"):
            a, b = self.interval(e[1]), self.interval(e[2])
            if op == "add":
                iv = (a[0] + b[0], a[1] + b[1])
            elif op == "sub":
                iv = (a[0] - b[1], a[1] - b[0])
            else:
                prods = [x * y for x in a for y in b]
                iv = (min(prods), max(prods))
            return _fits(iv, e[3])
        if op == "induct":
            # a loop counter: its entry value, or an earlier value plus the
            # step that passed value < bound (``ranges``' argument)
            a, b = self.interval(e[1])
            step, bound = self.interval(e[2]), self.interval(e[3])
            top = max(b, bound[1] - 1)
            if a < 0 or step[0] < 0 or top + step[1] >= 1 << 31:
                raise _Unproven
            return a, top
        if op == "derive":
            # a register stepped beside a loop counter (``launch_proof._derived``):
            # X0 + S * k for the passes k the counter's exit compare allows
            x0, step = self.interval(e[1]), self.interval(e[2])
            i0, istep, bound = self.interval(e[3]), self.interval(e[4]), self.interval(e[5])
            top = max(i0[1], bound[1] - 1)
            if i0[0] < 0 or istep[0] < 1 or top + istep[1] >= 1 << 31:
                raise _Unproven
            k = max(0, (bound[1] - 1 - i0[0]) // istep[0])
            ends = [x + s * n for x in x0 for s in step for n in (0, k)]
            return _fits((min(ends), max(ends)), 32)
        if op == "passes":
            # the passes of a down-counting loop (``checks/launch_loops.py``):
            # C0 / d of them when C0 is one positive multiple of d
            lo, hi = self.interval(e[1])
            d, guarded = e[2], e[3]
            if lo != hi or lo < 0 or lo % d:
                raise _Unproven
            if lo == 0:
                if guarded:  # the loop's entry saw C0 != 0: its accesses are not reached
                    raise _Unreached
                raise _Unproven  # entered, it would count through the wrap
            return 0, lo // d - 1
        if op == "band":
            # x & k (0 <= k < 2^31): exact for one value, else in [0, k] whatever x is
            try:
                lo, hi = self.interval(e[1])
            except _Unproven:
                return 0, e[2]
            return (lo & e[2], lo & e[2]) if lo == hi else (0, e[2])
        if op == "trunc":
            return _fits(self.interval(e[1]), 32)
        if op == "hull":
            a, b = self.interval(e[1]), self.interval(e[2])
            return min(a[0], b[0]), max(a[1], b[1])
        if op in ("max", "min"):
            a, b = self.interval(e[1]), self.interval(e[2])
            f = max if op == "max" else min
            return f(a[0], b[0]), f(a[1], b[1])
        if op in ("cap", "floor"):
            lo, hi = self.interval(e[1])
            blo, bhi = self.interval(e[2])
            delta, unsigned, k, bits = e[3], e[4], e[5], e[6]
            if bits:  # the compare saw x + k: it must not have wrapped
                _fits((lo + k, hi + k), bits)
            if unsigned:
                # x <u b with b non-negative: x is in [0, b - 1] whatever its sign
                if blo < 0 or bhi >= 1 << 31 or (op == "floor" and lo < 0):
                    raise _Unproven
                if op == "cap":
                    lo = max(lo, 0)
            if op == "cap":
                hi = min(hi, bhi + delta)
            else:
                lo = max(lo, blo + delta)
            if lo > hi:
                # no value satisfies the compare: the access is unreachable, or
                # the analysis misread a value; either way, nothing is proven
                raise _Unproven
            return lo, hi
        raise _Unproven


@lru_cache(maxsize=1024)
def _accesses(proof: str) -> list:
    """A proof's accesses, parsed once per proof (read-only): a kernel launched
    in a loop parsed its JSON on every launch."""
    return json.loads(proof)


def launch_proven(kernel: KernelInfo, params: bytes, roots: Sequence, grid: Sequence[int],
                  block: Sequence[int], heap_tag=lambda tag: False) -> bool:
    """Whether every access of ``kernel``'s launch proof is in bounds for
    this launch (``roots``: the kernel's resolved roots, ``host.resolve``;
    ``heap_tag``: whether a tag names a device-heap block)."""
    if kernel.proof is None:
        return False
    ev = _Evaluator(kernel, params, grid, block)
    try:
        for acc in _accesses(kernel.proof):
            if acc[0] == "reach":
                if not ev.reached(acc[1]):
                    continue
                acc = acc[2]
            kind, where, offset, const, width = acc[:5]
            try:
                lo, hi = ev.interval(offset)
            except _Unreached:
                continue
            lo, hi = lo + const, hi + const + width
            if kind == "root":
                r = roots[where]
                if r.tag == 0 or not r.live or heap_tag(r.tag) or r.value % acc[5] \
                        or r.value < r.low:
                    return False
                if r.value + lo < r.low or r.value + hi > r.high:
                    return False
            elif lo < 0 or hi > where:
                return False
    except _Unproven:
        return False
    return True
