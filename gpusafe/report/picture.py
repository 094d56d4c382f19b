"""A picture of where a bad access fell, for people who would rather look than read.

In the spirit of AddressSanitizer's shadow-memory legend, but one line of
memory and one line of marks, plain ASCII that reads the same without colour
and fits in 100 columns::

    [=================== 256 B ===================]..
                                                    ^ +260: 4 B past the end

The allocation is the box (``=`` while live, ``x`` once freed), memory outside
it is ``.``, and the carets under the map mark the bytes the access (or the
host call's range) touched. Distances outside the box are drawn to the box's
scale up to :data:`GAP_CAP` columns; a longer gap is drawn broken (``//``), so
"just past the end" and "far past the end" look different at a glance. The
caption gives the exact offset from the allocation's base.

The report does not say how large each allocation's red zone is (module
globals and pinned host memory have none), so the picture shows distances,
not red-zone membership.
"""

from __future__ import annotations

from gpusafe_instrument.kinds import ViolationKind

from .model import Violation

BOX = 40
"""Columns inside the allocation's box, whatever its size."""
GAP_CAP = 16
"""The widest gap drawn to scale; a longer one is drawn broken, this wide."""
ACCESS_CAP = 8
"""The most columns of marks for the part of an access outside the box."""
WIDTH = 100
"""The line width the picture keeps to (with its indent)."""


def has_picture(v: Violation) -> bool:
    """An access (device) or a host call's range (api-out-of-bounds) against
    a known allocation at a known address; never a free, a leak or a launch
    argument, which have no range."""
    a = v.allocation
    if a is None or v.address is None or a.offset is None:
        return False
    return v.access is not None or (
        v.kind is ViolationKind.API_OUT_OF_BOUNDS and v.size is not None)


def picture(v: Violation, indent: str = "    ") -> tuple[str, ...] | None:
    """The map line and the marks line for ``v`` (and the caption on a line
    of its own when neither side of the marks has room for it), each starting
    with ``indent``; None when :func:`has_picture` says there is none."""
    if not has_picture(v):
        return None
    a = v.allocation
    assert a is not None and a.offset is not None
    freed = a.freed_at is not None or v.kind.facts.freed_allocation
    size = a.size
    start = a.offset
    end = start + max(v.size or 1, 1)
    scale = _Scale(size)

    drawn: list[str] = []
    marks: list[str] = []
    if start < 0:  # the part of the access before the base, then the gap to it
        acc = min(scale.columns(min(end, 0) - start), ACCESS_CAP)
        gap = scale.gap(-min(end, 0))
        drawn += ["." * acc, gap]
        marks += ["^" * acc, " " * len(gap)]
    label = f" {size} B freed " if freed else f" {size} B "
    fill = "x" if freed else "="
    drawn.append("[" + label.center(BOX, fill) + "]")
    inside = [" "] * BOX
    if size > 0 and start < size and end > 0:
        first = min(max(start, 0) * BOX // size, BOX - 1)
        last = max(-(-min(end, size) * BOX // size), first + 1)
        inside[first:last] = "^" * (last - first)
    marks.append(" " + "".join(inside) + " ")
    if end > size:  # the gap past the end, then the part of the access there
        gap = scale.gap(max(start, size) - size)
        acc = min(scale.columns(end - max(start, size)), ACCESS_CAP)
        drawn += [gap, "." * acc]
        marks += [" " * len(gap), "^" * acc]

    map_line = indent + "".join(drawn)
    mark_line = (indent + "".join(marks)).rstrip()
    caption = _caption(v, start, end, size, freed)
    first_mark = mark_line.index("^")
    left = first_mark - len(caption) - 1
    if len(mark_line) + 1 + len(caption) <= WIDTH:
        return map_line, mark_line + " " + caption
    if left >= len(indent):  # no room on the right: it ends just before the first caret
        return map_line, " " * left + caption + " " + mark_line[first_mark:]
    return map_line, mark_line, indent + caption  # no room on either side: a line of its own


class _Scale:
    """Bytes to columns at the box's scale: ``size`` bytes are :data:`BOX` columns."""

    def __init__(self, size: int) -> None:
        self.size = max(size, 1)

    def columns(self, nbytes: int) -> int:
        """At least one column for any byte at all, rounded to the nearest."""
        if nbytes <= 0:
            return 0
        return max(1, (nbytes * BOX + self.size // 2) // self.size)

    def gap(self, nbytes: int) -> str:
        cols = self.columns(nbytes)
        if cols <= GAP_CAP:
            return "." * cols
        side = (GAP_CAP - 2) // 2
        return "." * side + "//" + "." * (GAP_CAP - 2 - side)


def _caption(v: Violation, start: int, end: int, size: int, freed: bool) -> str:
    where = f"{start:+d}" if v.access is not None else f"{start:+d}..{end:+d}"
    if start >= size:
        relation = f"{start - size} B past the end"
    elif end <= 0:
        relation = f"{-start} B before the start"
    elif start < 0:
        relation = f"starts {-start} B before the start"
    elif end > size:
        relation = f"ends {end - size} B past the end"
    else:
        relation = f"inside the {'freed ' if freed else ''}allocation"
    return f"{where}: {relation}"
