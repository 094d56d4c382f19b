"""Reading a report document: typed fields with named errors.

What :meth:`gpusafe.report.model.Report.from_dict` builds its reader from:
each function checks one JSON value (an object and its keys, an array, a
string, a 64-bit integer, a hex address, an enum member) and names the
offending path in a :class:`ReportFormatError`, so reading a report needs no
JSON Schema library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

HEX = re.compile(r"0x[0-9a-fA-F]{1,16}\Z")
LONGEST = (1 << 64) - 1
"""The largest magnitude of any integer a report holds: addresses, sizes and
offsets are 64-bit quantities, counts cannot outgrow them."""
SURROGATE = re.compile("[\ud800-\udfff]")


class ReportFormatError(ValueError):
    """A document that is not a gpusafe-report/1 report; ``path`` names where."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def type_name(x: Any) -> str:
    if x is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(x), type(x).__name__)


def json_object(doc: Any, path: str, *, required: Iterable[str],
            optional: Iterable[str] = ()) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise ReportFormatError(path, f"expected an object, got {type_name(doc)}")
    required = tuple(required)
    for key in required:
        if key not in doc:
            raise ReportFormatError(path, f"missing required property {key!r}")
    known = set(required) | set(optional)
    for key in doc:
        if key not in known:
            raise ReportFormatError(path, f"unknown property {key!r}")
    return doc


def json_array(doc: Any, path: str) -> list:
    if not isinstance(doc, list):
        raise ReportFormatError(path, f"expected an array, got {type_name(doc)}")
    return doc


def json_string(doc: Any, path: str) -> str:
    if not isinstance(doc, str):
        raise ReportFormatError(path, f"expected a string, got {type_name(doc)}")
    # JSON can spell half a UTF-16 pair ("\\ud800"); it is no character, and
    # no text holding one can be printed or written as UTF-8.
    lone = SURROGATE.search(doc)
    if lone:
        raise ReportFormatError(path, f"a lone surrogate \\u{ord(lone.group()):04x} is not a "
                                      "character")
    return doc


def json_integer(doc: Any, path: str, minimum: int | None = None) -> int:
    # JSON (and JSON Schema) has numbers, not ints: 4.0 is the integer 4.
    if isinstance(doc, float) and doc.is_integer():
        doc = int(doc)
    if isinstance(doc, bool) or not isinstance(doc, int):
        raise ReportFormatError(path, f"expected an integer, got {type_name(doc)}")
    if abs(doc) > LONGEST:
        raise ReportFormatError(path, "expected an integer of at most 64 bits, got one of "
                                      f"{doc.bit_length()} bits")
    if minimum is not None and doc < minimum:
        raise ReportFormatError(path, f"expected an integer >= {minimum}, got {doc}")
    return doc


def json_address(doc: Any, path: str) -> int:
    text = json_string(doc, path)
    if not HEX.match(text):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ReportFormatError(path, f"expected a 64-bit hex address like '0x7f0000001000', "
                                      f"got {shown!r}")
    return int(text, 16)


def json_enum(enum: type, doc: Any, path: str):
    text = json_string(doc, path)
    try:
        return enum(text)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ReportFormatError(path, f"{text!r} is not one of {allowed}") from None


def optional(doc: Any, path: str, read):
    return None if doc is None else read(doc, path)


def optional_list(d: Mapping[str, Any], key: str, read):
    """An optional property: absent is None; present, it must be an array."""
    if key not in d:
        return None
    return tuple(read(x, f"{key}[{i}]") for i, x in enumerate(json_array(d[key], key)))
