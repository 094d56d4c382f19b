"""The report's data: violations as plain facts, folded, versioned, serialised.

Detection never formats text (STYLE.md): the interposer, the registry and the
launch machinery hand this module facts (a kind, an address, a thread, the
allocation involved) and every output (terminal, JSON, SARIF, JUnit) is
rendered from the one :class:`Report` built here.

The JSON form is the contract of DESIGN.md ("JSON report"), described by
``schema/gpusafe-report-1.schema.json``. :meth:`Report.to_json` writes it in one
canonical layout, so ``Report.from_json(text).to_json() == text`` for any text
that ``to_json`` wrote; a report written by hand in another layout (other
whitespace, upper-case hex) reads back to an equal :class:`Report` and is
re-written canonically.

:meth:`Report.from_dict` checks the document itself (types, required keys,
unknown keys, kinds, hex addresses) and names the offending path in a
:class:`ReportFormatError`, so reading a report needs no JSON Schema library;
the tests hold the schema file and this reader to the same verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpusafe_instrument.kinds import AccessKind, ViolationKind

from .. import __version__
from ..exitcodes import EXIT_TOOL_ERROR, EXIT_VIOLATIONS
from . import jsonread
from .canonical import canonical_json
from .jsonread import ReportFormatError
from .stacks import Frame, Stack, stack_to_list

# the reader below is written with these short names
_object, _array, _string, _integer = (jsonread.read_object, jsonread.read_array,
                                      jsonread.read_string, jsonread.read_integer)
_address, _enum, _opt, _optional_list = (jsonread.read_address, jsonread.read_enum,
                                         jsonread.optional, jsonread.optional_list)

SCHEMA_ID = "gpusafe-report/1"
TOOL_NAME = "gpusafe"
DEFAULT_MAX_THREADS = 8
"""How many offending threads one folded entry keeps (the first ones seen)."""

Dim3 = tuple[int, int, int]

# --------------------------------------------------------------------------
# The facts


@dataclass(frozen=True)
class SourceLocation:
    """A place in the user's source: a CUDA line from the PTX line info, or a
    host call site (the innermost frame outside gpusafe and the bindings)."""

    file: str
    line: int
    column: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    @classmethod
    def parse(cls, text: str | None) -> SourceLocation | None:
        """``"app.py:31"`` -> ``SourceLocation("app.py", 31)``; None when the
        text does not end in ``:LINE``."""
        if not text:
            return None
        path, sep, line = text.rpartition(":")
        if not sep or not path or not line.isdigit():
            return None
        return cls(path, int(line))


@dataclass(frozen=True)
class ThreadId:
    """One offending thread: its block in the grid and its place in the block."""

    block: Dim3
    thread: Dim3

    def __str__(self) -> str:
        return f"thread {dim3(self.thread)} in block {dim3(self.block)}"


def dim3(v: Sequence[int]) -> str:
    """``(16,0,0)``: how a block or thread index is written everywhere."""
    return "(" + ",".join(str(x) for x in v) + ")"


@dataclass(frozen=True)
class AllocationInfo:
    """The allocation an access or call was checked against.

    ``offset`` is the faulting address minus ``base``: negative before the
    start, ``>= size`` past the end; null where no address is involved.
    ``allocated_at`` / ``freed_at`` are ``file:line`` call sites in the program
    (the named frame of ``allocated_stack`` / ``freed_stack`` when recorded).
    """

    tag: int
    base: int
    size: int
    offset: int | None = None
    allocated_at: str | None = None
    freed_at: str | None = None
    allocated_stack: Stack | None = None
    freed_stack: Stack | None = None
    allocated_by_kernel: str | None = None
    """The kernel whose in-kernel ``malloc`` made it (a device-heap block;
    ``allocated_at``/``freed_at`` are then the malloc/free lines in the
    kernel's source); null for an allocation of the host API."""


@dataclass(frozen=True)
class Violation:
    """One report entry: a kind at a site against an allocation, with the
    number of dynamic occurrences folded into it and the first offenders.

    Host-side entries (bad frees, bad copies, freed kernel arguments, leaks)
    have ``threads``, ``ptx_line`` and ``instruction`` null (DESIGN.md).
    """

    kind: ViolationKind
    access: AccessKind | None = None
    size: int | None = None
    address: int | None = None
    kernel: str | None = None
    location: SourceLocation | None = None
    ptx_line: int | None = None
    instruction: str | None = None
    count: int = 1
    threads: tuple[ThreadId, ...] | None = None
    allocation: AllocationInfo | None = None
    stack: Stack | None = None  # the host call behind it: the API call, or the kernel's launch
    argument: int | None = None  # the launch argument (0-based) a device access came through
    source: tuple[tuple[int, str], ...] | None = None  # lines of a kernel source gpusafe captured

    @property
    def on_device(self) -> bool:
        """True for an access a kernel made (it has offending threads)."""
        return self.threads is not None

    @property
    def dedup_key(self) -> tuple:
        """Entries are one per kind + site + allocation (DESIGN.md).

        The site of a device access is its instruction (kernel, PTX line,
        source line); the site of a host-side violation is the program's call
        site. The allocation is its tag, never reused within a run; the
        blocks of one in-kernel ``malloc`` (often one a thread) count as one
        allocation, named by its kernel and line: one bug, one entry.
        """
        a = self.allocation
        tag: object = None if a is None else a.tag
        if a is not None and a.allocated_by_kernel is not None:
            tag = ("device-heap", a.allocated_by_kernel, a.allocated_at)
        return (self.kind, self.kernel, self.ptx_line, self.instruction, self.location, tag)


@dataclass(frozen=True)
class ToolInfo:
    name: str = TOOL_NAME
    version: str = __version__


@dataclass(frozen=True)
class CheckedKernel:
    """A kernel that ran instrumented, and how many times it was launched."""

    name: str
    launches: int


@dataclass(frozen=True)
class UncheckedKernel:
    """A kernel that ran without checks (cubin-only module, filtered out), and why.

    ``launches`` counts its unchecked launches (None: not counted, as for the
    ``*`` of ``--no-check``); ``requested`` is true when the user asked for it
    to run unchecked (``--no-check``, ``--kernel-filter``), which alone does
    not fail a run."""

    name: str
    reason: str
    launches: int | None = None
    requested: bool = False


@dataclass(frozen=True)
class UnimplementedCall:
    """A driver or runtime call the backend could not serve: a function it
    does not implement, or a feature it lacks (why, in ``reason``), at the
    program's call site ``site`` (``file:line``), ``count`` times."""

    name: str
    site: str | None
    reason: str
    count: int = 1


@dataclass(frozen=True)
class DeviceFault:
    """A launch that ended in a device fault (a failed ``assert``, ``trap``,
    an access the device refused): the violations found before it are still
    reported; this says the kernel did not finish."""

    kernel: str
    error: str  # the driver's result name, e.g. CUDA_ERROR_ASSERT
    detail: str  # what is known of where and why, or ""


@dataclass(frozen=True)
class Summary:
    """The counts of a report. ``violations`` and ``occurrences`` count the
    entries reported; ``suppressed`` counts the entries that suppressions
    removed, and is None when no suppressions were given."""

    violations: int
    occurrences: int
    kernels_checked: int
    launches: int
    dropped: int
    suppressed: int | None = None
    unchecked_launches: int = 0
    unimplemented_calls: int = 0


@dataclass(frozen=True)
class Report:
    """A whole session's findings: the one source of every rendering."""

    command: tuple[str, ...]
    device: str
    exit_code: int | None
    violations: tuple[Violation, ...]
    summary: Summary
    tool: ToolInfo = field(default_factory=ToolInfo)
    checked_kernels: tuple[CheckedKernel, ...] | None = None
    unchecked_kernels: tuple[UncheckedKernel, ...] | None = None
    faults: tuple[DeviceFault, ...] = ()
    unimplemented_calls: tuple[UnimplementedCall, ...] = ()
    notes: tuple[str, ...] = ()
    """How the run was carried out where the user may want to know, without
    changing the verdict (a kernel the CPU device's JIT left to its
    interpreter, and why)."""
    schema: str = SCHEMA_ID

    @property
    def clean(self) -> bool:
        return not self.violations

    @property
    def incomplete(self) -> bool:
        """The run could not be checked as asked: a call the backend does not
        implement, or a kernel that ran unchecked without the user asking."""
        return bool(self.unimplemented_calls) or any(
            not k.requested for k in self.unchecked_kernels or ())

    def exit_status(self, error_exitcode: int = EXIT_VIOLATIONS,
                    allow_unchecked: bool = False) -> int:
        """DESIGN.md "Exit status": ``error_exitcode`` when a violation was
        found (a finding outranks an incomplete run: both fail a CI job, and
        the violation is what to fix first); else 2 when the program hit a
        call the backend does not implement, or a kernel ran unchecked that
        the user did not ask to run so (unless ``allow_unchecked``); else
        the program's own status."""
        if self.violations:
            return error_exitcode
        if self.unimplemented_calls or (self.incomplete and not allow_unchecked):
            return EXIT_TOOL_ERROR
        return self.exit_code if self.exit_code is not None else 0

    # -- JSON ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": self.schema,
            "tool": {"name": self.tool.name, "version": self.tool.version},
            "command": list(self.command),
            "device": self.device,
            "exit_code": self.exit_code,
            "violations": [_violation_to_dict(v) for v in self.violations],
            "summary": {
                "violations": self.summary.violations,
                "occurrences": self.summary.occurrences,
                "kernels_checked": self.summary.kernels_checked,
                "launches": self.summary.launches,
                "dropped": self.summary.dropped,
                "unchecked_launches": self.summary.unchecked_launches,
                "unimplemented_calls": self.summary.unimplemented_calls,
            },
        }
        if self.summary.suppressed is not None:
            d["summary"]["suppressed"] = self.summary.suppressed
        if self.checked_kernels is not None:
            d["checked_kernels"] = [
                {"name": k.name, "launches": k.launches} for k in self.checked_kernels
            ]
        if self.unchecked_kernels is not None:
            d["unchecked_kernels"] = [_unchecked_to_dict(k) for k in self.unchecked_kernels]
        if self.unimplemented_calls:
            d["unimplemented_calls"] = [
                {"name": c.name, "site": c.site, "reason": c.reason, "count": c.count}
                for c in self.unimplemented_calls]
        if self.faults:
            d["faults"] = [{"kernel": f.kernel, "error": f.error, "detail": f.detail}
                           for f in self.faults]
        if self.notes:
            d["notes"] = list(self.notes)
        return d

    def to_json(self) -> str:
        """The canonical text: two-space indent, short containers on one line,
        a final newline. Deterministic, so a saved report re-renders to the
        same bytes."""
        return canonical_json(self.to_dict()) + "\n"

    @classmethod
    def from_dict(cls, doc: Any) -> Report:
        return _read_report(doc)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Parse a report; :class:`json.JSONDecodeError` for text that is not
        JSON, :class:`ReportFormatError` for JSON that is not a report."""
        return _read_report(json.loads(text))


def hex_address(value: int) -> str:
    return f"0x{value:x}"


def _unchecked_to_dict(k: UncheckedKernel) -> dict[str, Any]:
    d: dict[str, Any] = {"name": k.name, "reason": k.reason}
    if k.launches is not None:
        d["launches"] = k.launches
    if k.requested:
        d["requested"] = True
    return d


def _violation_to_dict(v: Violation) -> dict[str, Any]:
    d = _required_to_dict(v)
    if v.stack is not None:
        d["stack"] = stack_to_list(v.stack)
    if v.argument is not None:
        d["argument"] = v.argument
    if v.source is not None:
        d["source"] = [[n, text] for n, text in v.source]
    a = v.allocation
    if a is not None:
        if a.allocated_stack is not None:
            d["allocation"]["allocated_stack"] = stack_to_list(a.allocated_stack)
        if a.freed_stack is not None:
            d["allocation"]["freed_stack"] = stack_to_list(a.freed_stack)
    return d


def _required_to_dict(v: Violation) -> dict[str, Any]:
    a = v.allocation
    return {
        "kind": v.kind.value,
        "access": v.access.value if v.access is not None else None,
        "size": v.size,
        "address": hex_address(v.address) if v.address is not None else None,
        "kernel": v.kernel,
        "location": (
            {"file": v.location.file, "line": v.location.line, "column": v.location.column}
            if v.location is not None else None
        ),
        "ptx_line": v.ptx_line,
        "instruction": v.instruction,
        "count": v.count,
        "threads": (
            [{"block": list(t.block), "thread": list(t.thread)} for t in v.threads]
            if v.threads is not None else None
        ),
        "allocation": _allocation_dict(a) if a is not None else None,
    }


def _allocation_dict(a: AllocationInfo) -> dict[str, Any]:
    d: dict[str, Any] = {
        "tag": a.tag,
        "base": hex_address(a.base),
        "size": a.size,
        "offset": a.offset,
        "allocated_at": a.allocated_at,
        "freed_at": a.freed_at,
    }
    if a.allocated_by_kernel is not None:  # optional: the schema stays gpusafe-report/1
        d["allocated_by_kernel"] = a.allocated_by_kernel
    return d


# --------------------------------------------------------------------------
# Reading a document back, with named errors


def _read_report(doc: Any) -> Report:
    d = _object(doc, "", required=("schema", "tool", "command", "device", "exit_code",
                                   "violations", "summary"),
                optional=("checked_kernels", "unchecked_kernels", "faults",
                          "unimplemented_calls", "notes"))
    schema = _string(d["schema"], "schema")
    if schema != SCHEMA_ID:
        raise ReportFormatError("schema", f"unsupported report schema {schema!r} "
                                          f"(this gpusafe reads {SCHEMA_ID!r})")
    t = _object(d["tool"], "tool", required=("name", "version"))
    s = _object(d["summary"], "summary",
                required=("violations", "occurrences", "kernels_checked", "launches", "dropped"),
                optional=("suppressed", "unchecked_launches", "unimplemented_calls"))
    return Report(
        schema=schema,
        tool=ToolInfo(_string(t["name"], "tool.name"), _string(t["version"], "tool.version")),
        command=tuple(_string(c, f"command[{i}]")
                      for i, c in enumerate(_array(d["command"], "command"))),
        device=_string(d["device"], "device"),
        exit_code=_opt(d["exit_code"], "exit_code", _integer),
        violations=tuple(_read_violation(v, f"violations[{i}]")
                         for i, v in enumerate(_array(d["violations"], "violations"))),
        summary=Summary(**{k: _integer(s[k], f"summary.{k}", minimum=0) for k in s}),
        checked_kernels=_optional_list(d, "checked_kernels", _read_checked),
        unchecked_kernels=_optional_list(d, "unchecked_kernels", _read_unchecked),
        faults=_optional_list(d, "faults", _read_fault) or (),
        notes=_optional_list(d, "notes", _string) or (),
        unimplemented_calls=_optional_list(d, "unimplemented_calls", _read_unimplemented) or (),
    )


def _read_violation(doc: Any, path: str) -> Violation:
    d = _object(doc, path, required=("kind", "access", "size", "address", "kernel", "location",
                                     "ptx_line", "instruction", "count", "threads",
                                     "allocation"), optional=("stack", "argument", "source"))
    return Violation(
        kind=_enum(ViolationKind, d["kind"], f"{path}.kind"),
        access=_opt(d["access"], f"{path}.access", lambda x, p: _enum(AccessKind, x, p)),
        size=_opt(d["size"], f"{path}.size", lambda x, p: _integer(x, p, minimum=0)),
        address=_opt(d["address"], f"{path}.address", _address),
        kernel=_opt(d["kernel"], f"{path}.kernel", _string),
        location=_opt(d["location"], f"{path}.location", _read_location),
        ptx_line=_opt(d["ptx_line"], f"{path}.ptx_line", lambda x, p: _integer(x, p, minimum=1)),
        instruction=_opt(d["instruction"], f"{path}.instruction", _string),
        count=_integer(d["count"], f"{path}.count", minimum=1),
        threads=_opt(d["threads"], f"{path}.threads",
                     lambda x, p: tuple(_read_thread(t, f"{p}[{i}]")
                                        for i, t in enumerate(_array(x, p)))),
        allocation=_opt(d["allocation"], f"{path}.allocation", _read_allocation),
        stack=_present(d, "stack", path, _read_stack),
        argument=_present(d, "argument", path, lambda x, p: _integer(x, p, minimum=0)),
        source=_present(d, "source", path, _read_source),
    )


def _present(d: Mapping[str, Any], key: str, path: str, read):
    """An optional property of an object: absent is None, present it is read
    (null is not a value of any of them)."""
    return read(d[key], f"{path}.{key}") if key in d else None


def _read_stack(doc: Any, path: str) -> Stack:
    frames = []
    for i, f in enumerate(_array(doc, path)):
        p = f"{path}[{i}]"
        o = _object(f, p, required=("file", "line", "function"))
        frames.append(Frame(_string(o["file"], f"{p}.file"),
                            _integer(o["line"], f"{p}.line", minimum=1),
                            _string(o["function"], f"{p}.function")))
    return tuple(frames)


def _read_source(doc: Any, path: str) -> tuple[tuple[int, str], ...]:
    lines = []
    for i, pair in enumerate(_array(doc, path)):
        p = f"{path}[{i}]"
        items = _array(pair, p)
        if len(items) != 2:
            raise ReportFormatError(p, f"expected [line, text], got {len(items)} items")
        lines.append((_integer(items[0], f"{p}[0]", minimum=1), _string(items[1], f"{p}[1]")))
    return tuple(lines)


def _read_location(doc: Any, path: str) -> SourceLocation:
    d = _object(doc, path, required=("file", "line", "column"))
    return SourceLocation(
        file=_string(d["file"], f"{path}.file"),
        line=_integer(d["line"], f"{path}.line", minimum=1),
        column=_opt(d["column"], f"{path}.column", lambda x, p: _integer(x, p, minimum=1)),
    )


def _read_thread(doc: Any, path: str) -> ThreadId:
    d = _object(doc, path, required=("block", "thread"))
    return ThreadId(_read_dim3(d["block"], f"{path}.block"),
                    _read_dim3(d["thread"], f"{path}.thread"))


def _read_dim3(doc: Any, path: str) -> Dim3:
    items = _array(doc, path)
    if len(items) != 3:
        raise ReportFormatError(path, f"expected 3 coordinates, got {len(items)}")
    x, y, z = (_integer(v, f"{path}[{i}]", minimum=0) for i, v in enumerate(items))
    return (x, y, z)


def _read_allocation(doc: Any, path: str) -> AllocationInfo:
    d = _object(doc, path, required=("tag", "base", "size", "offset", "allocated_at",
                                     "freed_at"),
                optional=("allocated_stack", "freed_stack", "allocated_by_kernel"))
    return AllocationInfo(
        tag=_integer(d["tag"], f"{path}.tag", minimum=0),
        base=_address(d["base"], f"{path}.base"),
        size=_integer(d["size"], f"{path}.size", minimum=0),
        offset=_opt(d["offset"], f"{path}.offset", _integer),
        allocated_at=_opt(d["allocated_at"], f"{path}.allocated_at", _string),
        freed_at=_opt(d["freed_at"], f"{path}.freed_at", _string),
        allocated_stack=_present(d, "allocated_stack", path, _read_stack),
        freed_stack=_present(d, "freed_stack", path, _read_stack),
        allocated_by_kernel=_opt(d.get("allocated_by_kernel"), f"{path}.allocated_by_kernel",
                                 _string),
    )


def _read_checked(doc: Any, path: str) -> CheckedKernel:
    d = _object(doc, path, required=("name", "launches"))
    return CheckedKernel(_string(d["name"], f"{path}.name"),
                         _integer(d["launches"], f"{path}.launches", minimum=0))


def _read_unchecked(doc: Any, path: str) -> UncheckedKernel:
    d = _object(doc, path, required=("name", "reason"), optional=("launches", "requested"))
    requested = d.get("requested", False)
    if not isinstance(requested, bool):
        raise ReportFormatError(f"{path}.requested", "expected a boolean")
    launches = d.get("launches")
    return UncheckedKernel(
        _string(d["name"], f"{path}.name"), _string(d["reason"], f"{path}.reason"),
        None if launches is None else _integer(launches, f"{path}.launches", minimum=0),
        requested)


def _read_unimplemented(doc: Any, path: str) -> UnimplementedCall:
    d = _object(doc, path, required=("name", "site", "reason", "count"))
    return UnimplementedCall(_string(d["name"], f"{path}.name"),
                             _opt(d["site"], f"{path}.site", _string),
                             _string(d["reason"], f"{path}.reason"),
                             _integer(d["count"], f"{path}.count", minimum=1))


def _read_fault(doc: Any, path: str) -> DeviceFault:
    d = _object(doc, path, required=("kernel", "error", "detail"))
    return DeviceFault(_string(d["kernel"], f"{path}.kernel"),
                       _string(d["error"], f"{path}.error"),
                       _string(d["detail"], f"{path}.detail"))
