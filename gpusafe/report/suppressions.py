"""Suppressions: known findings a CI job carries without failing on them.

A suppressions file (``gpusafe run --suppressions FILE``, ``gpusafe report
--suppressions FILE``) holds one suppression a line; ``#`` starts a comment::

    # the vendored reduction reads one element past its input (upstream #123)
    kind:global-out-of-bounds kernel:reduce_* file:third_party/*
    # a leak in a helper we do not own
    kind:leak site:*/vendor/alloc.py:*
    kind:*-out-of-bounds file:"my kernels/halo.cu"

A suppression is one or more ``key:pattern`` terms, all of which must match
an entry for it to be suppressed. Patterns are shell wildcards
(:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[seq]``; case-sensitive; ``*``
crosses ``/``), and a pattern with spaces is quoted as in a shell. The keys:

``kind``
    the violation kind (``use-after-free``, ``*-out-of-bounds``); a pattern
    that names no kind is an error, so a typo cannot suppress nothing quietly.
``kernel``
    the kernel's name as reported (mangled for C++ kernels: ``*vector_add*``).
``file``
    a file the entry names: its source location, its allocation site or its
    free site, or any frame of the stacks recorded for its call (or launch),
    allocation and free. A pattern without ``/`` matches the file's name in any
    directory; one with ``/`` matches the path as recorded or as the report
    prints it (relative to the working directory when under it).
``site``
    a ``file:line`` site the entry names (the same places, stacks included), with the
    same rule for ``/``: ``site:app.py:31``, ``site:*/helpers.py:*``.

Suppressed entries leave the report before it is rendered and before the exit
status is decided; ``summary.suppressed`` counts them, and a suppression that
matched nothing is listed in the terminal report. A file that cannot be read
or parsed is a failure of gpusafe (:class:`SuppressionError`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from gpusafe_instrument.kinds import ViolationKind

from .display import display_path
from .model import Report, SourceLocation, Violation

KEYS = ("kind", "kernel", "file", "site")


class SuppressionError(ValueError):
    """A suppressions file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Suppression:
    """One line of a suppressions file: its terms, and where it was written."""

    terms: tuple[tuple[str, str], ...]
    source: str
    """``FILE:LINE``, for the listing of suppressions that matched nothing."""
    text: str
    """The line as written, comment and surrounding blanks left out."""

    def __str__(self) -> str:
        return f"{self.source}: {self.text}"

    def matches(self, v: Violation, cwd: str | os.PathLike[str] | None = None) -> bool:
        return all(_MATCHERS[key](v, pattern, cwd) for key, pattern in self.terms)


def parse(text: str, name: str) -> list[Suppression]:
    """The suppressions in ``text`` (the contents of the file ``name``)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise SuppressionError(f"{where}: {str(e).lower()}") from None
        if not words:
            continue
        terms = tuple(_term(word, where) for word in words)
        found.append(Suppression(terms, where, " ".join(shlex.quote(w) for w in words)))
    return found


def load(paths: Iterable[str]) -> list[Suppression]:
    """Every suppression in the files ``paths``, in order."""
    found: list[Suppression] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise SuppressionError(f"cannot read suppressions file {path}: "
                                   f"{e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise SuppressionError(f"cannot read suppressions file {path}: not UTF-8 "
                                   f"(byte {e.start})") from None
        found += parse(text, path)
    return found


def apply(report: Report, suppressions: Sequence[Suppression],
          cwd: str | os.PathLike[str] | None = None) -> tuple[Report, list[Suppression]]:
    """``report`` without the entries a suppression matches, its summary
    counting them; and the suppressions that matched no entry."""
    used: set[int] = set()
    kept = []
    for v in report.violations:
        hits = [i for i, s in enumerate(suppressions) if s.matches(v, cwd)]
        used.update(hits)
        if not hits:
            kept.append(v)
    s = report.summary
    removed = len(report.violations) - len(kept)
    summary = replace(s, violations=len(kept), occurrences=sum(v.count for v in kept),
                      suppressed=(s.suppressed or 0) + removed)
    unused = [sup for i, sup in enumerate(suppressions) if i not in used]
    return replace(report, violations=tuple(kept), summary=summary), unused


# --------------------------------------------------------------------------
# Terms


def _term(word: str, where: str) -> tuple[str, str]:
    key, sep, pattern = word.partition(":")
    if not sep:
        raise SuppressionError(f"{where}: {word!r} is not key:pattern "
                               f"(keys: {', '.join(KEYS)})")
    if key not in KEYS:
        raise SuppressionError(f"{where}: unknown key {key!r} (keys: {', '.join(KEYS)})")
    if not pattern:
        raise SuppressionError(f"{where}: {key}: needs a pattern")
    if key == "kind" and not any(fnmatchcase(k.value, pattern) for k in ViolationKind):
        raise SuppressionError(f"{where}: kind:{pattern} names no violation kind (kinds: "
                               f"{', '.join(k.value for k in ViolationKind)})")
    if key == "site" and not pattern.rpartition(":")[0]:
        raise SuppressionError(f"{where}: site:{pattern} is not file:line (file:{pattern} "
                               f"names a whole file, site:{pattern}:* any line of it)")
    return key, pattern


def _sites(v: Violation) -> Iterator[SourceLocation]:
    """Every ``file:line`` the entry names: where to look, where the
    allocation was made and where it was freed, and every frame of the
    stacks behind them (a bug reached through a vendored helper is
    suppressed by the helper's file)."""
    if v.location is not None:
        yield v.location
    a = v.allocation
    stacks = [v.stack]
    if a is not None:
        for text in (a.allocated_at, a.freed_at):
            site = SourceLocation.parse(text)
            if site is not None:
                yield site
        stacks += [a.allocated_stack, a.freed_stack]
    for stack in stacks:
        for frame in stack or ():
            yield SourceLocation(frame.file, frame.line)


def _path_matches(path: str, pattern: str, cwd: str | os.PathLike[str] | None) -> bool:
    if "/" not in pattern:
        return fnmatchcase(os.path.basename(path), pattern)
    return fnmatchcase(path, pattern) or fnmatchcase(display_path(path, cwd), pattern)


def _match_kind(v: Violation, pattern: str, cwd: object) -> bool:
    return fnmatchcase(v.kind.value, pattern)


def _match_kernel(v: Violation, pattern: str, cwd: object) -> bool:
    return v.kernel is not None and fnmatchcase(v.kernel, pattern)


def _match_file(v: Violation, pattern: str, cwd: str | os.PathLike[str] | None) -> bool:
    return any(_path_matches(site.file, pattern, cwd) for site in _sites(v))


def _match_site(v: Violation, pattern: str, cwd: str | os.PathLike[str] | None) -> bool:
    file_part, _, line_part = pattern.rpartition(":")
    return any(_path_matches(site.file, file_part, cwd) and fnmatchcase(str(site.line), line_part)
               for site in _sites(v))


_MATCHERS = {"kind": _match_kind, "kernel": _match_kernel, "file": _match_file,
             "site": _match_site}
