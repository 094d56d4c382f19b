"""The report as SARIF 2.1.0, for code-scanning dashboards and IDEs.

One rule per violation kind (rule id = kind string; its descriptions and
level are the kind's facts, :mod:`gpusafe_instrument.kinds`). Each result is an
``error`` (its kind's level) at the source line (or, with no line info, a logical location naming
the kernel), with the allocation site, and the free site where there is one,
as related locations; the occurrence count, the first offending threads and
the raw facts travel in the result's property bag.  What the run could not
check is a tool execution notification: an ``error`` at the call site for
each call the device could not serve (the execution is then not successful),
a ``warning`` for each kernel that ran unchecked and for a run that checked
no launch.
"""

from __future__ import annotations

import json
import shlex
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import quote

from gpusafe_instrument.kinds import ViolationKind

from .describe import message
from .display import with_display_paths
from .model import Report, SourceLocation, Violation, hex_address

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
_RULE_INDEX = {kind: i for i, kind in enumerate(ViolationKind)}


def to_sarif(report: Report) -> dict[str, Any]:
    """The SARIF log object (a dict ready for ``json.dump``)."""
    results = [_result(v) for v in report.violations]
    invocation: dict[str, Any] = {
        "executionSuccessful": not report.unimplemented_calls,
        "commandLine": shlex.join(report.command),
        "arguments": list(report.command),
        "properties": {"device": report.device},
    }
    if report.exit_code is not None:
        invocation["exitCode"] = report.exit_code
    notifications = [
        {
            "level": "warning",
            "message": {"text": f"kernel {k.name} ran without checks: {k.reason}"},
            "locations": [_logical(k.name)],
        }
        for k in report.unchecked_kernels or ()
    ]
    for c in report.unimplemented_calls:
        note: dict[str, Any] = {
            "level": "error",
            "message": {"text": f"{c.name} could not be served by the {report.device} device "
                                f"({c.reason}); called {c.count} time"
                                f"{'s' if c.count != 1 else ''}"},
            "properties": {"call": c.name, "count": c.count},
        }
        site = SourceLocation.parse(c.site)
        if site is not None:
            note["locations"] = [{"physicalLocation": _physical(site)}]
        notifications.append(note)
    if report.summary.launches == 0:
        notifications.append({"level": "warning",
                              "message": {"text": "no kernel launch was checked"}})
    if report.summary.dropped:
        notifications.append({
            "level": "warning",
            "message": {"text": f"{report.summary.dropped} violation records were dropped "
                                "(the violation buffer was full)"},
        })
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    s = report.summary
    return {
        "$schema": SARIF_SCHEMA_URI,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": report.tool.name,
                "version": report.tool.version,
                "semanticVersion": report.tool.version,
                "rules": [_rule(kind) for kind in ViolationKind],
            }},
            "invocations": [invocation],
            "results": results,
            "properties": {
                "device": report.device,
                "summary": {
                    "violations": s.violations,
                    "occurrences": s.occurrences,
                    "kernelsChecked": s.kernels_checked,
                    "launches": s.launches,
                    "dropped": s.dropped,
                    "uncheckedLaunches": s.unchecked_launches,
                    "unimplementedCalls": s.unimplemented_calls,
                    **({"suppressed": s.suppressed} if s.suppressed is not None else {}),
                },
            },
        }],
    }


def render(report: Report) -> str:
    """The SARIF log as JSON text."""
    return json.dumps(to_sarif(report), indent=2, ensure_ascii=False) + "\n"


def _rule(kind: ViolationKind) -> dict[str, Any]:
    facts = kind.facts
    return {
        "id": kind.value,
        "name": "".join(part.capitalize() for part in kind.value.split("-")),
        "shortDescription": {"text": facts.title},
        "fullDescription": {"text": facts.meaning},
        "help": {"text": f"{facts.meaning} {facts.remedy}"},
        "defaultConfiguration": {"level": facts.sarif_level},
        "properties": {"tags": ["memory-safety", "cuda"]},
    }


def _result(v: Violation) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": v.kind.value,
        "ruleIndex": _RULE_INDEX[v.kind],
        "level": v.kind.facts.sarif_level,
        "message": {"text": message(with_display_paths(v))},
    }
    location = _primary_location(v)
    if location is not None:
        result["locations"] = [location]
    related = _related_locations(v)
    if related:
        result["relatedLocations"] = related
    props: dict[str, Any] = {"count": v.count}
    if v.threads is not None:
        props["threads"] = [{"block": list(t.block), "thread": list(t.thread)}
                            for t in v.threads]
    if v.access is not None:
        props["access"] = v.access.value
    if v.size is not None:
        props["size"] = v.size
    if v.address is not None:
        props["address"] = hex_address(v.address)
    if v.kernel is not None:
        props["kernel"] = v.kernel
    if v.argument is not None:
        props["argument"] = v.argument
    if v.ptx_line is not None:
        props["ptxLine"] = v.ptx_line
    if v.instruction is not None:
        props["instruction"] = v.instruction
    if v.allocation is not None:
        a = v.allocation
        props["allocation"] = {"tag": a.tag, "base": hex_address(a.base), "size": a.size,
                               "offset": a.offset, "allocatedAt": a.allocated_at,
                               "freedAt": a.freed_at}
    result["properties"] = props
    return result


def _primary_location(v: Violation) -> dict[str, Any] | None:
    if v.location is not None:
        loc: dict[str, Any] = {"physicalLocation": _physical(v.location)}
        if v.kernel is not None:
            loc["logicalLocations"] = [_logical_location(v.kernel)]
        return loc
    if v.kernel is not None:
        return _logical(v.kernel)
    return None


def _related_locations(v: Violation) -> list[dict[str, Any]]:
    """The call stack behind the entry, then where its allocation was made
    and freed (each a stack when recorded, else the one site)."""
    related: list[dict[str, Any]] = []

    def add(loc: SourceLocation, text: str) -> None:
        related.append({"id": len(related) + 1, "physicalLocation": _physical(loc),
                        "message": {"text": text}})

    call = "launch of the kernel" if v.on_device else "call"
    for i, f in enumerate(v.stack or ()):
        add(SourceLocation(f.file, f.line), f"{call}: frame #{i} in {f.function}")
    a = v.allocation
    if a is None:
        return related
    for text, stack, what in ((a.allocated_at, a.allocated_stack, "allocated"),
                              (a.freed_at, a.freed_stack, "freed")):
        here = f"{a.size}-byte allocation (tag {a.tag}) {what} here"
        if stack:
            for i, f in enumerate(stack):
                add(SourceLocation(f.file, f.line),
                    here if str(f) == text else f"{here}: frame #{i} in {f.function}")
            continue
        site = SourceLocation.parse(text)
        if site is not None:
            add(site, here)
    return related


def _physical(loc: SourceLocation) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": loc.line}
    if loc.column is not None:
        region["startColumn"] = loc.column
    return {"artifactLocation": {"uri": file_uri(loc.file)}, "region": region}


def _logical_location(kernel: str) -> dict[str, Any]:
    return {"name": kernel, "kind": "function"}


def _logical(kernel: str) -> dict[str, Any]:
    return {"logicalLocations": [_logical_location(kernel)]}


def file_uri(path: str) -> str:
    """A SARIF ``uri`` for a file path: a relative reference for a relative
    path, a ``file:`` URI for an absolute one; unsafe characters escaped."""
    if PureWindowsPath(path).drive:
        return "file:///" + quote(PureWindowsPath(path).as_posix(), safe="/:")
    posix = PurePosixPath(path.replace("\\", "/"))
    if posix.is_absolute():
        return "file://" + quote(str(posix), safe="/")
    return quote(str(posix), safe="/")
