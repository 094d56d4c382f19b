"""The report as people read it: on stderr during a run, or in a log file.

A header (command, device), one block per violation (kind, access, kernel,
``file:line`` with the CUDA source around it, threads, address, the
allocation in words and in a picture, occurrences), then a summary table.
Every line reads the same without colour: colour is added only on a
terminal, and never where NO_COLOR is set (rich's own rules).

A report may come from someone else: every string it holds is shown
:func:`~.display.printable` (no escape sequence reaches the terminal), paths
by the one rule of :func:`~.display.display_path`, and a source excerpt is
read only from a file under ``source_roots`` when the caller gives them.
"""

from __future__ import annotations

import io
import os
import shlex
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpusafe_instrument.kinds import ViolationKind

from .describe import describe_access, describe_allocation, describe_threads
from .display import as_shown, printable
from .model import Report, SourceLocation, Violation, hex_address
from .picture import picture
from .stacks import Stack, numbered

CONTEXT_LINES = 2
"""Source lines shown on each side of the faulting line."""


def render(
    report: Report,
    file: TextIO | None = None,
    *,
    print_limit: int = 0,
    search_dirs: Iterable[str | os.PathLike[str]] = (),
    source_roots: Iterable[str | os.PathLike[str]] | None = None,
    color: bool | None = None,
    width: int | None = None,
    unused_suppressions: Sequence[str] = (),
) -> None:
    """Write ``report`` to ``file`` (standard error by default).

    ``print_limit``: at most that many violation blocks (0: all); the summary
    still counts every one. ``search_dirs``: where to look for a source file
    whose name is not found as given (NVRTC names sources without a directory;
    pass the program's directory). ``source_roots``: None to read any source
    file a location names (the report of the run itself), or the directories
    a source file must lie under, its links resolved, to be read (a report
    handed to you names any file it likes). ``color``: None to colour only a
    terminal not under NO_COLOR, False never, True always.
    ``unused_suppressions``: the suppressions that matched nothing, listed
    after the summary.
    """
    console = _console(file if file is not None else sys.stderr, color, width)
    roots = None if source_roots is None else tuple(Path(d) for d in source_roots)
    renderer = _Renderer(console, tuple(Path(d) for d in search_dirs), roots)
    renderer.report(report, print_limit, tuple(unused_suppressions))


def render_text(
    report: Report,
    *,
    print_limit: int = 0,
    search_dirs: Iterable[str | os.PathLike[str]] = (),
    source_roots: Iterable[str | os.PathLike[str]] | None = None,
    width: int = 100,
    unused_suppressions: Sequence[str] = (),
) -> str:
    """The report as plain text, without colour (for log files and tests)."""
    buf = io.StringIO()
    render(report, buf, print_limit=print_limit, search_dirs=search_dirs,
           source_roots=source_roots, color=False, width=width,
           unused_suppressions=unused_suppressions)
    return buf.getvalue()


def render_entries(
    violations: Sequence[Violation],
    *,
    search_dirs: Iterable[str | os.PathLike[str]] = (),
    width: int = 100,
) -> str:
    """The blocks of ``violations`` alone, as plain text: no header and no
    summary (a test's own findings, shown in its failure)."""
    buf = io.StringIO()
    renderer = _Renderer(_console(buf, False, width), tuple(Path(d) for d in search_dirs), None)
    for i, v in enumerate(violations, 1):
        renderer.violation(i, v)
    return buf.getvalue()


def _console(file: TextIO, color: bool | None, width: int | None) -> Console:
    if color is None:
        return Console(file=file, highlight=False, width=width)
    if color:
        return Console(file=file, highlight=False, width=width, force_terminal=True,
                       no_color=False)
    return Console(file=file, highlight=False, width=width, color_system=None,
                   force_terminal=False, no_color=True)


def find_source(file: str, search_dirs: Sequence[Path],
                roots: Sequence[Path] | None = None) -> Path | None:
    """The source file a location names: as given, then under each search
    directory (by its relative path, then by its bare name). With ``roots``,
    only a file that lies under one of them once its links are resolved."""
    given = Path(file)
    candidates = [given]
    if not given.is_absolute():
        for d in search_dirs:
            candidates.append(d / given)
    for d in search_dirs:
        if given.name:
            candidates.append(d / given.name)
    for c in candidates:
        try:
            if roots is not None:
                # decide on the file the links lead to, and read that one
                c = c.resolve()
                if not any(c.is_relative_to(root.resolve()) for root in roots):
                    continue
            if c.is_file():
                return c
        except (OSError, ValueError, RuntimeError):  # a name the system refuses, a link loop
            continue
    return None


def captured_excerpt(v: Violation, context: int = CONTEXT_LINES) -> list[tuple[int, str]] | None:
    """The lines around ``v``'s line from the kernel source gpusafe captured
    when it was compiled (no file holds it: NVRTC was given a string)."""
    if v.source is None or v.location is None:
        return None
    line = v.location.line
    lines = [(n, t) for n, t in v.source if abs(n - line) <= context]
    return lines if any(n == line for n, _ in lines) else None


def source_excerpt(
    location: SourceLocation, search_dirs: Sequence[Path], context: int = CONTEXT_LINES,
    roots: Sequence[Path] | None = None,
) -> list[tuple[int, str]] | None:
    """``(line number, text)`` around ``location.line``; None when the file
    cannot be found (under ``roots``, when given) or read, or does not have
    that line. Lines end at ``\\n`` only, as compilers count them; the file
    is read no further than the excerpt."""
    path = find_source(location.file, search_dirs, roots)
    if path is None:
        return None
    first = max(1, location.line - context)
    last = location.line + context
    lines: list[tuple[int, str]] = []
    try:
        with path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                if n > last:
                    break
                if n >= first:
                    lines.append((n, raw.decode("utf-8", errors="replace").rstrip()))
    except OSError:
        return None
    if not lines or lines[-1][0] < location.line:
        return None
    return lines


class _Renderer:
    def __init__(self, console: Console, search_dirs: tuple[Path, ...],
                 roots: tuple[Path, ...] | None) -> None:
        self.out = console
        self.search_dirs = search_dirs
        self.roots = roots

    def line(self, text: Text | str = "") -> None:
        self.out.print(text, soft_wrap=True)

    def report(self, report: Report, print_limit: int, unused: tuple[str, ...]) -> None:
        self.header(report)
        shown = report.violations if print_limit <= 0 else report.violations[:print_limit]
        for i, v in enumerate(shown, 1):
            self.violation(i, v)
        hidden = len(report.violations) - len(shown)
        if hidden:
            self.line(Text(f"... {hidden} more violation{'s' if hidden != 1 else ''} not shown "
                           f"(--print-limit {print_limit}); the summary counts them all.",
                           style="yellow"))
            self.line()
        self.summary(report, unused)

    def header(self, report: Report) -> None:
        title = Text("gpusafe", style="bold")
        title.append(f" {printable(report.tool.version)}", style="dim")
        title.append(": ")
        title.append(printable(shlex.join(report.command)) or "(no command)", style="bold")
        self.line(title)
        self.line(Text(f"device: {printable(report.device)}"))
        if report.exit_code is not None:
            self.line(Text(f"program exit status: {report.exit_code}"))
        self.line()

    def violation(self, index: int, recorded: Violation) -> None:
        v = as_shown(recorded)
        head = Text(f"[{index}] ", style="dim")
        head.append(f"ERROR {v.kind.value}", style="bold red")
        head.append(f"  {v.kind.facts.title}")
        self.line(head)
        access = describe_access(v)
        if access:
            self.line(Text("    ") + Text(access, style="bold"))
        if v.argument is not None:
            self.line(Text(f"    through argument {v.argument} of the launch, a pointer into "
                           "memory freed before the launch"))
        if v.location is not None:
            at = Text("    at ")
            loc = str(v.location)
            if v.location.column is not None:
                loc += f":{v.location.column}"
            at.append(loc, style="cyan")
            self.line(at)
            excerpt = (source_excerpt(recorded.location, self.search_dirs, roots=self.roots)
                       or captured_excerpt(v))
            if excerpt:
                self.excerpt(excerpt, v.location.line)
        elif v.on_device:
            self.line(Text("    at an unknown source line (the PTX carries no line info)",
                           style="dim"))
        if v.instruction is not None:
            ptx = Text("    PTX")
            if v.ptx_line is not None:
                ptx.append(f" line {v.ptx_line}")
            ptx.append(": ")
            ptx.append(v.instruction, style="dim")
            self.line(ptx)
        if v.kind is not ViolationKind.LEAK:  # a leak's call is its allocation, shown below
            self.stack("launched here" if v.on_device else "called here", v.stack)
        threads = describe_threads(v)
        if threads:
            self.line(Text(f"    {threads}"))
        where = describe_allocation(v)
        if v.address is not None or where:
            addr = Text("    ")
            if v.address is not None:
                addr.append(f"address {hex_address(v.address)}")
                if where:
                    addr.append(": ")
            if where:
                addr.append(where, style="magenta")
            self.line(addr)
        drawn = picture(v)
        if drawn is not None:
            for row in drawn:
                self.line(Text(row))
        if v.allocation is not None:
            self.stack("allocated here", v.allocation.allocated_stack)
            self.stack("freed here", v.allocation.freed_stack)
        n = v.count
        self.line(Text(f"    {n} occurrence{'s' if n != 1 else ''}"))
        self.line()

    def stack(self, title: str, stack: Stack | None) -> None:
        """A recorded stack as AddressSanitizer shows one: numbered frames,
        innermost first (one frame says no more than the site already does)."""
        if not stack or len(stack) < 2:
            return
        self.line(Text(f"    {title}:"))
        for row in numbered(stack):
            self.line(Text(f"      {row}", style="dim"))

    def excerpt(self, excerpt: list[tuple[int, str]], target: int) -> None:
        width = len(str(excerpt[-1][0]))
        for n, text in excerpt:
            hit = n == target
            row = Text("    " + (">" if hit else " ") + f" {n:>{width}} | ",
                       style="bold red" if hit else "dim")
            row.append(printable(text, keep="\t"), style="bold" if hit else "")
            self.line(row)

    def summary(self, report: Report, unused: tuple[str, ...]) -> None:
        s = report.summary
        table = Table(title="gpusafe summary", box=box.ASCII2, title_justify="left",
                      show_edge=True)
        table.add_column("violation kind")
        table.add_column("entries", justify="right")
        table.add_column("occurrences", justify="right")
        entries: Counter[str] = Counter()
        occurrences: Counter[str] = Counter()
        for v in report.violations:
            entries[v.kind.value] += 1
            occurrences[v.kind.value] += v.count
        for kind in entries:
            table.add_row(kind, str(entries[kind]), str(occurrences[kind]))
        table.add_row("total", str(s.violations), str(s.occurrences), style="bold",
                      end_section=True)
        table.add_row("kernels checked", str(s.kernels_checked), "")
        table.add_row("checked launches", str(s.launches), "",
                      style="yellow" if s.launches == 0 else "")
        unchecked = report.unchecked_kernels or ()
        if unchecked:
            table.add_row("kernels NOT checked", str(len(unchecked)), "", style="yellow")
        if s.unchecked_launches:
            table.add_row("unchecked launches", str(s.unchecked_launches), "", style="yellow")
        if report.unimplemented_calls:
            table.add_row("calls not implemented", str(s.unimplemented_calls), "",
                          style="bold red")
        if report.faults:
            table.add_row("launches that faulted", str(len(report.faults)), "", style="yellow")
        if s.dropped:
            table.add_row("records dropped", str(s.dropped), "", style="yellow")
        if s.suppressed is not None:
            table.add_row("suppressed", str(s.suppressed), "")
        self.out.print(table)
        for c in report.unimplemented_calls:
            times = f" ({c.count} calls)" if c.count != 1 else ""
            self.line(Text(f"not implemented: {printable(c.name)} at "
                           f"{printable(c.site or 'an unknown site')}{times}: "
                           f"{printable(c.reason)}", style="bold red"))
        for k in unchecked:
            launches = f" ({k.launches} launch{'es' if k.launches != 1 else ''})" \
                if k.launches else ""
            self.line(Text(f"not checked: kernel {printable(k.name)}: "
                           f"{printable(k.reason)}{launches}", style="yellow"))
        if s.launches == 0:
            self.line(Text("warning: no kernel launch was checked (0 checked launches); "
                           "nothing a kernel of this run did was checked.", style="bold yellow"))
        for f in report.faults:
            detail = f": {printable(f.detail)}" if f.detail else ""
            self.line(Text(f"device fault: kernel {printable(f.kernel)} did not finish: "
                           f"{printable(f.error)}{detail}", style="yellow"))
        for sup in unused:
            self.line(Text(f"suppression matched nothing: {printable(sup)}", style="yellow"))
        for n in report.notes:
            self.line(Text(f"note: {printable(n)}"))
        if s.dropped:
            self.line(Text(f"warning: {s.dropped} violation records were dropped "
                           "(the violation buffer was full); more violations happened than "
                           "are counted above.", style="yellow"))
        also = f" ({s.suppressed} suppressed)" if s.suppressed else ""
        if report.violations:
            self.line(Text(f"gpusafe: {s.violations} violation"
                           f"{'s' if s.violations != 1 else ''} ({s.occurrences} occurrence"
                           f"{'s' if s.occurrences != 1 else ''}) found{also}.",
                           style="bold red"))
        elif report.unimplemented_calls or unchecked or s.launches == 0:
            self.line(Text(f"gpusafe: no violations found{also} in what was checked, but the "
                           "run was not checked whole (see above): this is no clean pass.",
                           style="bold yellow"))
        else:
            self.line(Text(f"gpusafe: no violations found{also}.", style="bold green"))
