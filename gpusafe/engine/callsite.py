"""Where in the program a call came from, as a stack of the program's own frames.

A site is the Python stack of the call, innermost frame first, with the
frames that are not the program's folded away: gpusafe's own, the CUDA
bindings', the standard library's and every installed package's
(``site-packages``).  The frame a report names (``top``) is the innermost
one that is not a *helper*: a function of the program that only forwards
the call (its body is one statement, such as
``def alloc(n): return check(driver.cuMemAlloc(n))``) or that declares
``__tracebackhide__`` (pytest's mark for a frame not to blame).  Most
programs allocate, free and launch through such a helper; naming the
helper's line would point every leak at the same line.  The stack keeps
the helper frames, so nothing is hidden, only the line named first changes.

Recording costs a walk of the Python stack per intercepted call; each code
object is classified once.  :func:`configure` sets how many frames are kept
(``gpusafe run --stack-depth``).
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType

from ..report import Frame

DEFAULT_STACK_DEPTH = 8
"""Frames of the program a site keeps by default, as ASan's reports show a few."""

_PACKAGE = Path(__file__).resolve().parent.parent
# Frames inside these directories are the tool's, never the program's own call site.
_OWN_DIRS = (str(_PACKAGE) + os.sep, str(_PACKAGE.parent / "gpusafe_instrument") + os.sep)
_STDLIB_DIRS = tuple(sorted({os.path.abspath(sysconfig.get_paths()[k]) + os.sep
                             for k in ("stdlib", "platstdlib")}))

_TOOL, _LIBRARY, _PROGRAM, _HELPER = range(4)
"""What a code object is: gpusafe's or the bindings' (never named), a library's
(named only when no frame of the program is on the stack), the program's, or
one of the program's forwarding helpers."""


class CallSite:
    """A call's place in the program: its frames, innermost first, and which
    of them the report names (past the program's forwarding helpers).

    The frames are kept raw (file, line, function) and become report
    :class:`Frame` objects only when asked for: most sites are never
    reported, and recording must stay cheap."""

    __slots__ = ("_raw", "top", "recorded", "_cwd", "_frames")

    def __init__(self, raw: tuple[tuple[str, int, str], ...], top: int = 0,
                 recorded: bool = True, cwd: str | None = None) -> None:
        self._raw = raw
        self.top = top
        self.recorded = recorded  # False under --stack-depth 0: only the named frame was kept
        self._cwd = cwd
        self._frames: tuple[Frame, ...] | None = None

    @property
    def frames(self) -> tuple[Frame, ...]:
        if self._frames is None:
            self._frames = tuple(Frame(_shown(path, self._cwd), line, function)
                                 for path, line, function in self._raw)
        return self._frames

    @property
    def paths(self) -> tuple[str, ...]:
        """Each frame's file as Python names it, made absolute when recorded."""
        return tuple(path for path, _, _ in self._raw)

    @property
    def frame(self) -> Frame:
        return self.frames[self.top]

    @property
    def stack(self) -> tuple[Frame, ...] | None:
        """The frames a report carries; None when only the site was recorded."""
        return self.frames if self.recorded else None

    def __str__(self) -> str:
        return f"{self.frame.file}:{self.frame.line}"

    def __repr__(self) -> str:
        return f"CallSite({self.frames!r}, top={self.top})"


_depth = DEFAULT_STACK_DEPTH
_kinds: dict[CodeType, tuple[int, str]] = {}
_native: Callable[[int], CallSite | None] | None = None


def set_native_sites(provider: Callable[[int], CallSite | None] | None) -> None:
    """Where a call with no Python frame of the program came from: a native
    program's frames (the native door's ``provider(depth)``)."""
    global _native
    _native = provider


def configure(depth: int) -> None:
    """Keep ``depth`` frames of the program per site (0: the named frame only)."""
    global _depth
    if depth < 0:
        raise ValueError("the stack depth must not be negative")
    _depth = depth


def stack_depth() -> int:
    return _depth


def program_site(skip: int = 1, depth: int | None = None) -> CallSite | None:
    """The site of the call being intercepted (``skip`` frames above this one
    are the door's); None when no frame is anyone's but gpusafe's.  ``depth``
    overrides the configured depth (a door that needs the frames itself)."""
    frame: FrameType | None = sys._getframe(skip)
    raw: list[tuple[str, int, str]] = []
    library: tuple[str, int, str] | None = None
    top = -1
    depth = _depth if depth is None else depth
    while frame is not None:
        code = frame.f_code
        known = _kinds.get(code)
        if known is None:
            known = _kinds[code] = _classify(code)
        kind = known[0]
        if kind >= _PROGRAM:
            raw.append((known[1], frame.f_lineno, code.co_name))
            if top < 0 and kind == _PROGRAM:
                top = len(raw) - 1
                if depth == 0:
                    break
            if top >= 0 and len(raw) >= max(depth, top + 1):
                break
        elif kind == _LIBRARY and library is None and not raw:
            library = (known[1], frame.f_lineno, code.co_name)
        frame = frame.f_back
    if raw:
        # only helpers on the stack (a helper called at module level by exec): name the outermost
        top = top if top >= 0 else len(raw) - 1
        if depth == 0:
            return CallSite((raw[top],), 0, recorded=False, cwd=os.getcwd())
        return CallSite(tuple(raw), top, cwd=os.getcwd())
    if _native is not None:
        native = _native(depth)
        if native is not None:
            return native
    if library is not None:
        return CallSite((library,), 0, recorded=depth > 0, cwd=os.getcwd())
    return None


def _shown(path: str, cwd: str | None) -> str:
    """How a site names a file: relative to the working directory of the
    call, as before stacks were recorded (the report's display rule applies
    when it is printed)."""
    if path.startswith("<") or cwd is None:
        return path
    try:
        return os.path.relpath(path, cwd)
    except ValueError:  # another drive
        return path


def _classify(code: CodeType) -> tuple[int, str]:
    filename = code.co_filename
    if filename.startswith("<"):
        # <frozen ...> is the import machinery; <string>, <stdin> are the program's
        return (_TOOL if filename.startswith("<frozen") else _PROGRAM), filename
    full = os.path.abspath(filename)
    if full.startswith(_OWN_DIRS):
        return _TOOL, full
    parts = full.replace("\\", "/").split("/")
    if "cuda" in parts and ("bindings" in parts or "core" in parts):
        return _TOOL, full
    if "site-packages" in parts or "dist-packages" in parts or full.startswith(_STDLIB_DIRS):
        return _LIBRARY, full
    return (_HELPER if _is_helper(code) else _PROGRAM), full


def _is_helper(code: CodeType) -> bool:
    """A function that forwards the call: one statement, or marked with
    ``__tracebackhide__`` as pytest users mark their helpers."""
    if "__tracebackhide__" in code.co_varnames:
        return True
    if code.co_name == "<module>" or code.co_name.startswith("<"):
        return code.co_name == "<lambda>"
    node = _function_node(code)
    if node is None:
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return len(body) == 1 and not isinstance(body[0], (ast.For, ast.While, ast.If, ast.With,
                                                       ast.Try, ast.AsyncFor, ast.AsyncWith))


_trees: dict[str, ast.Module | None] = {}


def _function_node(code: CodeType) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition of ``code``'s function in its source file, if readable."""
    filename = code.co_filename
    if filename not in _trees:
        try:
            _trees[filename] = ast.parse("".join(linecache.getlines(filename)))
        except (SyntaxError, ValueError, RecursionError):
            _trees[filename] = None
    tree = _trees[filename]
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name == code.co_name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if first == code.co_firstlineno or node.lineno == code.co_firstlineno:
                return node
    return None


def native_program() -> bool:
    """Whether this interpreter runs inside a native program (started by the
    stand-in) rather than as the ``python`` of a Python program, whose own
    frames name its sites and whose interpreter frames are never the program's."""
    try:
        return os.path.realpath("/proc/self/exe") != os.path.realpath(sys.executable)
    except OSError:
        return False
