"""What a person is shown of a report's strings: paths by one rule, and text
that cannot drive their terminal.

A report is data someone may hand you: its kernel names, file names,
instructions and command line are whatever the program (or whoever wrote
the file) put there. Before the terminal report prints any of them,
:func:`printable` makes every control character visible as an escape
(``\\x1b``), so no escape sequence reaches the terminal (a cleared screen, a
changed title, a forged "no violations found" line). Bidirectional overrides
are escaped too: they make text read in an order other than the one it has.

Paths follow one rule (:func:`display_path`): relative to the working
directory when under it, otherwise absolute, whatever form the engine
recorded. The JSON keeps what was recorded; SARIF artifact locations keep
their URI rules.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace

from .model import AllocationInfo, SourceLocation, Violation
from .stacks import Frame, Stack

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls, DEL, and the bidirectional marks and overrides."""


def _escape(match: re.Match[str]) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with every control character written as an escape (``\\x1b``),
    except those in ``keep`` (a tab in a line of source code)."""
    if keep:
        return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)
    return _CONTROL.sub(_escape, text)


def display_path(path: str, cwd: str | os.PathLike[str] | None = None) -> str:
    """The path as every report prints it: relative to ``cwd`` (the working
    directory by default) when under it, otherwise absolute.

    A relative path is read as relative to ``cwd``. A name that is not a
    path (``<string>``, ``<stdin>``: Python's names for code without a file)
    is left as it is.
    """
    if not path or (path.startswith("<") and path.endswith(">")):
        return path
    base = os.path.abspath(cwd if cwd is not None else os.getcwd())
    full = os.path.normpath(os.path.join(base, path))
    if _is_under(full, base):
        return os.path.relpath(full, base)
    try:  # the same place through a symbolic link
        real_base, real = os.path.realpath(base), os.path.realpath(full)
    except (OSError, ValueError):  # a NUL in the name: no such file anywhere
        return full
    return os.path.relpath(real, real_base) if _is_under(real, real_base) else full


def _is_under(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def display_site(site: str | None, cwd: str | os.PathLike[str] | None = None) -> str | None:
    """A ``file:line`` site with its file shown by :func:`display_path`; a
    site that does not end in ``:LINE`` is left as it is."""
    loc = SourceLocation.parse(site)
    if loc is None:
        return site
    return f"{display_path(loc.file, cwd)}:{loc.line}"


def with_display_paths(v: Violation, cwd: str | os.PathLike[str] | None = None) -> Violation:
    """``v`` with each path it names (its location, the allocation and free
    sites) as :func:`display_path` shows it."""
    location = v.location
    if location is not None:
        location = replace(location, file=display_path(location.file, cwd))
    allocation = v.allocation
    if allocation is not None:
        allocation = replace(allocation,
                             allocated_at=display_site(allocation.allocated_at, cwd),
                             freed_at=display_site(allocation.freed_at, cwd),
                             allocated_stack=_stack(allocation.allocated_stack,
                                                    lambda p: display_path(p, cwd)),
                             freed_stack=_stack(allocation.freed_stack,
                                                lambda p: display_path(p, cwd)))
    return replace(v, location=location, allocation=allocation,
                   stack=_stack(v.stack, lambda p: display_path(p, cwd)))


def _stack(stack: Stack | None, path: Callable[[str], str],
           text: Callable[[str], str] = lambda t: t) -> Stack | None:
    """Each frame's file through ``path``, its function name through ``text``."""
    if stack is None:
        return None
    return tuple(Frame(path(f.file), f.line, text(f.function)) for f in stack)


def as_shown(v: Violation, cwd: str | os.PathLike[str] | None = None) -> Violation:
    """``v`` as the terminal shows it: paths by the one rule, every string
    :func:`printable`."""
    v = with_display_paths(v, cwd)
    location = v.location
    if location is not None:
        location = replace(location, file=printable(location.file))
    return replace(
        v,
        kernel=_opt(v.kernel),
        # a tab between opcode and operands is how compilers write PTX
        instruction=None if v.instruction is None else printable(v.instruction, keep="\t"),
        location=location,
        allocation=_printable_allocation(v.allocation),
        stack=_stack(v.stack, printable, printable),
        source=None if v.source is None else tuple((n, printable(t, keep="\t"))
                                                   for n, t in v.source),
    )


def _printable_allocation(a: AllocationInfo | None) -> AllocationInfo | None:
    if a is None:
        return None
    return replace(a, allocated_at=_opt(a.allocated_at), freed_at=_opt(a.freed_at),
                   allocated_stack=_stack(a.allocated_stack, printable, printable),
                   freed_stack=_stack(a.freed_stack, printable, printable))


def _opt(text: str | None) -> str | None:
    return None if text is None else printable(text)

