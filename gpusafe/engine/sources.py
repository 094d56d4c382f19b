"""Kernel sources the program handed to NVRTC as strings.

A kernel compiled from a string carries line info naming a file that does
not exist (NVRTC's program name, made absolute against the working
directory).  The Python door gives every source passed to
``nvrtcCreateProgram`` to :class:`KernelSources`, with the program's site of
the call.  When the text is a string literal in one of the program's files
on that stack, written line for line (a plain or raw literal without escaped
newlines), a device access at line L of the kernel is reported at the
``.py`` file and line where L sits; otherwise the entry carries the lines
around L from the captured text, so the report still shows the code.
"""

from __future__ import annotations

import ast
import linecache
import os
import threading
from dataclasses import dataclass

from ..report import SourceLocation
from .callsite import CallSite

EXCERPT_LINES = 2
"""Captured lines kept on each side of the reported one."""


@dataclass(frozen=True)
class Captured:
    """One source handed to NVRTC: its text, and where the text is written
    in the program (the ``.py`` file and the line of the literal's first
    line), when found."""

    lines: tuple[str, ...]
    py_file: str | None = None
    py_line: int | None = None


class KernelSources:
    """Captured sources by the file names their line info will carry."""

    def __init__(self) -> None:
        self._by_name: dict[str, Captured] = {}
        self._lock = threading.Lock()

    def captured(self, name: str, text: str, site: CallSite | None) -> None:
        """``text`` was handed to NVRTC under ``name`` at ``site``."""
        captured = _find_literal(text, site)
        keys = {name, os.path.join(os.getcwd(), name), os.path.abspath(name)}
        with self._lock:
            for key in keys:
                self._by_name[key] = captured

    def locate(self, location: SourceLocation
               ) -> tuple[SourceLocation, tuple[tuple[int, str], ...] | None]:
        """Where to report a device access at ``location``, and the captured
        lines around it when no file shows them."""
        with self._lock:
            captured = self._by_name.get(location.file)
        if captured is None or not 1 <= location.line <= len(captured.lines):
            return location, None
        if captured.py_file is not None and captured.py_line is not None:
            # a column inside the literal's first line is not the .py column
            column = location.column if location.line > 1 else None
            return SourceLocation(captured.py_file, captured.py_line + location.line - 1,
                                  column), None
        if os.path.isfile(location.file):
            return location, None  # a real file of that name: it shows the code itself
        first = max(1, location.line - EXCERPT_LINES)
        last = min(len(captured.lines), location.line + EXCERPT_LINES)
        return location, tuple((n, captured.lines[n - 1]) for n in range(first, last + 1))


def _find_literal(text: str, site: CallSite | None) -> Captured:
    """``text`` with the place of the literal that holds it, searched in the
    files of the program's frames at the call, innermost first."""
    lines = tuple(text.split("\n"))
    if site is None:
        return Captured(lines)
    seen: set[str] = set()
    for path, frame in zip(site.paths, site.frames, strict=True):
        if path in seen or path.startswith("<"):
            continue
        seen.add(path)
        line = _literal_line(path, text, lines)
        if line is not None:
            return Captured(lines, frame.file, line)
    return Captured(lines)


def _literal_line(path: str, text: str, lines: tuple[str, ...]) -> int | None:
    """The line of ``path`` holding the first line of a string literal whose
    value is ``text``, when the literal is written line for line."""
    source = linecache.getlines(path)
    if not source:
        return None
    try:
        tree = ast.parse("".join(source))
    except (SyntaxError, ValueError, RecursionError):
        return None
    data = text.encode()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or node.value not in (text, data):
            continue
        start = node.lineno
        if start - 1 + len(lines) > len(source):
            continue
        # line for line: each line of the text is on its own line of the file
        if all(line in source[start - 1 + i] for i, line in enumerate(lines)) \
                and node.end_lineno == start + len(lines) - 1:
            return start
    return None
