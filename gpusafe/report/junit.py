"""The report as JUnit XML, for CI systems that show test results.

One test case per checked kernel, failing with the violations found in it; a
test case named ``host`` for the host-side checks (bad frees and copies,
leaks), failing with those that name no kernel; and a skipped test case for
each kernel that ran unchecked, giving the reason, so that an unchecked kernel
never reads as a pass; and a test case in error for each call the device
could not serve (named ``call NAME``, at its call site), so that a run that
stopped short never reads as a pass either.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET

from .describe import describe_allocation, describe_threads, message
from .display import with_display_paths
from .model import Report, Violation, hex_address

HOST_CASE = "host"


def classname(report: Report) -> str:
    """``gpusafe.<device>.<command>``, each part reduced to a dotted-name-safe word
    (CI viewers split the class name at dots)."""
    return f"gpusafe.{_word(report.device)}.{_word(shlex.join(report.command))}"


def _word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "unnamed"


def to_element(report: Report) -> ET.Element:
    cls = classname(report)
    by_kernel: dict[str, list[Violation]] = {}
    for v in report.violations:
        by_kernel.setdefault(v.kernel if v.kernel is not None else HOST_CASE, []).append(v)

    kernels = [k.name for k in report.checked_kernels] if report.checked_kernels is not None \
        else []
    for name in by_kernel:
        if name != HOST_CASE and name not in kernels:
            kernels.append(name)

    suite = ET.Element("testsuite", name=f"gpusafe {shlex.join(report.command)}".rstrip())
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="command", value=shlex.join(report.command))
    ET.SubElement(props, "property", name="device", value=report.device)
    if report.exit_code is not None:
        ET.SubElement(props, "property", name="exit_code", value=str(report.exit_code))
    if report.summary.dropped:
        ET.SubElement(props, "property", name="dropped_records",
                      value=str(report.summary.dropped))
    if report.summary.suppressed is not None:
        ET.SubElement(props, "property", name="suppressed",
                      value=str(report.summary.suppressed))
    for name, value in (("checked_launches", report.summary.launches),
                        ("unchecked_launches", report.summary.unchecked_launches)):
        ET.SubElement(props, "property", name=name, value=str(value))

    failures = skipped = tests = errors = 0
    for name in [*kernels, HOST_CASE]:
        case = ET.SubElement(suite, "testcase", name=name, classname=cls)
        tests += 1
        found = by_kernel.get(name, [])
        if found:
            failures += 1
            occurrences = sum(v.count for v in found)
            kinds = sorted({v.kind.value for v in found})
            fail = ET.SubElement(
                case, "failure",
                message=f"{len(found)} violation{'s' if len(found) != 1 else ''} "
                        f"({occurrences} occurrence{'s' if occurrences != 1 else ''}): "
                        + ", ".join(kinds),
                type=kinds[0] if len(kinds) == 1 else "gpusafe-violations",
            )
            fail.text = "\n\n".join(failure_text(with_display_paths(v)) for v in found) + "\n"
    for k in report.unchecked_kernels or ():
        case = ET.SubElement(suite, "testcase", name=k.name, classname=cls)
        ET.SubElement(case, "skipped", message=f"not checked: {k.reason}")
        tests += 1
        skipped += 1
    for c in report.unimplemented_calls:
        case = ET.SubElement(suite, "testcase", name=f"call {c.name}", classname=cls)
        error = ET.SubElement(case, "error", type="unimplemented-call",
                              message=f"{c.name} could not be served: {c.reason}")
        error.text = f"called {c.count} time{'s' if c.count != 1 else ''} at " \
                     f"{c.site or 'an unknown site'}\n"
        tests += 1
        errors += 1

    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="gpusafe", tests=str(tests), failures=str(failures),
                      errors=str(errors), skipped=str(skipped))
    root.append(suite)
    return root


def failure_text(v: Violation) -> str:
    """One violation as the plain lines a CI log shows."""
    lines = [message(v)]
    if v.location is not None:
        loc = str(v.location) + (f":{v.location.column}" if v.location.column else "")
        lines.append(f"  at {loc}")
    if v.instruction is not None:
        lines.append(f"  PTX line {v.ptx_line}: {v.instruction}" if v.ptx_line
                     else f"  PTX: {v.instruction}")
    threads = describe_threads(v)
    if threads:
        lines.append(f"  {threads}")
    if v.address is not None:
        lines.append(f"  address {hex_address(v.address)}")
    where = describe_allocation(v)
    if where:
        lines.append(f"  {where}")
    return "\n".join(lines)


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(root: ET.Element) -> None:
    """Replace characters XML 1.0 cannot carry (control bytes in an
    instruction or a file name) so the document always parses."""
    for el in root.iter():
        if el.text:
            el.text = _NOT_XML.sub("\ufffd", el.text)
        for key, value in el.attrib.items():
            el.set(key, _NOT_XML.sub("\ufffd", value))


def render(report: Report) -> str:
    """The JUnit XML document as text."""
    root = to_element(report)
    _xml_safe(root)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
