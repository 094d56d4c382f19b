"""PTX printer: the syntax tree back to text.

A node the parser made is written back from its source text and the trivia
before it, so compiler output round-trips byte for byte.  A node built or
changed by a pass has no source text and is written in a canonical form that
ptxas accepts.
"""

from __future__ import annotations

from .nodes import Block, Function, Module, Statement


def _statements(out: list[str], statements: list[Statement]) -> None:
    for s in statements:
        if type(s) is Block:
            out.append(s.lead)
            out.append("{")
            _statements(out, s.statements)
            out.append(s.close_lead)
            out.append("}")
            continue
        out.append(s.lead)
        raw = s.raw
        out.append(raw if raw is not None else s.canonical())


def statements_text(statements: list[Statement]) -> str:
    """The text of ``statements``, each after its lead (as in a function body)."""
    out: list[str] = []
    _statements(out, statements)
    return "".join(out)


def statements_chunks(statements: list[Statement], chunk: int = 1 << 20) -> list[str]:
    """The text of ``statements`` in pieces of about ``chunk`` characters;
    each statement is dropped from the list once printed, so that a caller
    giving up the list frees the nodes as the text grows (a pass printing a
    function of a million statements holds the nodes or the text, not both)."""
    out: list[str] = []
    pieces: list[str] = []
    size = 0
    for i, s in enumerate(statements):
        statements[i] = None  # type: ignore[call-overload]
        start = len(pieces)
        _statements(pieces, [s])
        size += sum(len(p) for p in pieces[start:])
        if size >= chunk:
            out.append("".join(pieces))
            pieces.clear()
            size = 0
    if pieces:
        out.append("".join(pieces))
    return out


def _function(out: list[str], fn: Function) -> None:
    if fn.header_raw is not None and fn.header_key == fn.header_state():
        out.append(fn.header_raw)
    else:
        out.append(fn.canonical_header())
    out.append(fn.body_lead)
    if fn.body is None:
        out.append(";")
        return
    out.append("{")
    _statements(out, fn.body)
    out.append(fn.close_lead)
    out.append("}")


def emit(module: Module) -> str:
    """The PTX text of ``module``."""
    out: list[str] = []
    for item in module.items:
        out.append(item.lead)
        if type(item) is Function:
            _function(out, item)
        else:
            raw = item.raw
            out.append(raw if raw is not None else item.canonical())
    out.append(module.trailing)
    return "".join(out)
