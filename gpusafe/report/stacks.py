"""Host stacks in a report: the frames of the program behind a call.

A stack is a tuple of :class:`Frame`, innermost first, holding only the
program's own frames (gpusafe, the CUDA bindings, the standard library and
installed packages are folded when it is recorded).  The report keeps a
site's named frame in its single ``file:line`` fields as well, so a reader
that knows nothing of stacks still finds the line to look at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Frame:
    """One frame of the program: a line of a file, inside a function."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


Stack = tuple[Frame, ...]


def stack_to_list(stack: Sequence[Frame]) -> list[dict[str, Any]]:
    return [{"file": f.file, "line": f.line, "function": f.function} for f in stack]


def numbered(stack: Sequence[Frame]) -> list[str]:
    """The frames as AddressSanitizer numbers them: ``#0 helper app.py:12``."""
    return [f"#{i} {f.function} {f.file}:{f.line}" for i, f in enumerate(stack)]
