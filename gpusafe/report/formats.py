"""Every format a report can be written in, by name.

The one dispatch behind ``gpusafe run`` (``--log-file``, ``--json``,
``--sarif``, ``--junit``) and ``gpusafe report --format``: both look a format
up here, so a format exists for both commands or for neither. A format is its
name, the ``gpusafe run`` flag that writes it to a file, and a function that
writes a report to a text stream. Adding one is a module under
``gpusafe/report/`` that renders a :class:`~.model.Report`, and its entry in
:data:`FORMATS`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from . import junit, sarif, terminal
from .model import Report


@dataclass(frozen=True)
class RenderOptions:
    """How the terminal report is laid out; the other formats ignore them.

    ``print_limit``: at most that many violation blocks (0: all).
    ``search_dirs``: where to look for the sources a report names.
    ``source_roots``: None to read any source a report names, or the
    directories a source must lie under to be read (a report handed to you).
    ``color``: None to colour only a terminal not under NO_COLOR, False never.
    ``width``: the line width (None: the stream's own, or 80).
    ``unused_suppressions``: suppressions that matched nothing, to list.
    """

    print_limit: int = 0
    search_dirs: Sequence[Path] = ()
    source_roots: Sequence[Path] | None = None
    color: bool | None = None
    width: int | None = None
    unused_suppressions: Sequence[str] = ()


Writer = Callable[[Report, TextIO, RenderOptions], None]


@dataclass(frozen=True)
class Format:
    name: str
    """Its ``gpusafe report --format`` name."""
    run_flag: str
    """The ``gpusafe run`` flag that writes it to the file the flag names."""
    run_help: str
    """That flag's help."""
    write: Writer


def _terminal(report: Report, out: TextIO, options: RenderOptions) -> None:
    terminal.render(report, out, print_limit=options.print_limit,
                    search_dirs=options.search_dirs, source_roots=options.source_roots,
                    color=options.color, width=options.width,
                    unused_suppressions=options.unused_suppressions)


def _text(render: Callable[[Report], str]) -> Writer:
    """A writer for a format rendered as one string."""
    def write(report: Report, out: TextIO, options: RenderOptions) -> None:
        out.write(render(report))
    return write


TERMINAL = "rich"
"""The format ``gpusafe run`` shows on standard error unless ``--log-file`` is given."""

FORMATS: dict[str, Format] = {f.name: f for f in (
    Format(TERMINAL, "--log-file", "write the terminal report to FILE instead of stderr",
           _terminal),
    Format("json", "--json", "write the report as JSON (gpusafe-report/1)",
           _text(Report.to_json)),
    Format("sarif", "--sarif", "write the report as SARIF 2.1.0", _text(sarif.render)),
    Format("junit", "--junit", "write the report as JUnit XML", _text(junit.render)),
)}
"""Every format, by name, in the order ``gpusafe run`` writes them."""


def get(name: str) -> Format:
    """The format called ``name``; ValueError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        known = ", ".join(FORMATS)
        raise ValueError(f"unknown report format {name!r} (known: {known})") from None


def write(report: Report, name: str, out: TextIO, options: RenderOptions | None = None) -> None:
    """Write ``report`` in format ``name`` to ``out``."""
    get(name).write(report, out, options if options is not None else RenderOptions())


def render(report: Report, name: str, options: RenderOptions | None = None) -> str:
    """``report`` in format ``name``, as text (for a file: render first, so a
    file is opened only to be written whole)."""
    buf = io.StringIO()
    write(report, name, buf, options)
    return buf.getvalue()
