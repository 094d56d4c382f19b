"""Where in the program a call came from: the innermost frame that is the
program's own, not gpusafe's nor the CUDA bindings'."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
# Frames inside these directories are the tool's, never the program's own call site.
_OWN_DIRS = (str(_PACKAGE) + os.sep, str(_PACKAGE.parent / "gpusafe_instrument") + os.sep)


def _is_foreign(filename: str) -> bool:
    if filename.startswith(_OWN_DIRS) or filename.startswith("<frozen"):
        return True
    parts = filename.replace("\\", "/").split("/")
    return "cuda" in parts and ("bindings" in parts or "core" in parts)


def program_site(skip: int = 1) -> str | None:
    """``file:line`` of the innermost frame outside gpusafe and the CUDA bindings."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<"):
            if not filename.startswith("<frozen"):
                return f"{filename}:{frame.f_lineno}"
        elif not _is_foreign(os.path.abspath(filename)):
            return f"{os.path.relpath(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None
