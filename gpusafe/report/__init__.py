"""Reports: violations as plain data, and every output rendered from them.

In data-flow order:

- :mod:`.model`: the facts (:class:`Violation`, :class:`AllocationInfo`, ...)
  and the versioned JSON form (:meth:`Report.to_json` / :meth:`Report.from_json`);
  :mod:`.builder`: the :class:`ReportBuilder` that folds occurrences into
  deduplicated entries.
- :mod:`.suppressions`: the suppressions file format, and leaving out the
  entries it matches before anything is rendered or an exit status decided.
- :mod:`.describe`: the words for where an address lies and what was
  attempted (a kind's own words are its facts, :mod:`gpusafe_instrument.kinds`).
- :mod:`.display`: what a person is shown of a report's strings (paths by
  one rule, control characters escaped); :mod:`.picture`: the map of an
  access against its allocation.
- :mod:`.terminal`, :mod:`.sarif`, :mod:`.junit`: the renderings.
- :mod:`.formats`: every format by name, the one dispatch that ``gpusafe run``
  and ``gpusafe report`` share (imported on demand: the terminal renderer
  loads rich, which a checked program has no use for).

The JSON Schema of the JSON form is ``schema/gpusafe-report-1.schema.json``
(:data:`SCHEMA_PATH`).
"""

from __future__ import annotations

from pathlib import Path

from .builder import ReportBuilder
from .model import (
    DEFAULT_MAX_THREADS,
    SCHEMA_ID,
    AllocationInfo,
    CheckedKernel,
    Report,
    ReportFormatError,
    SourceLocation,
    Summary,
    ThreadId,
    ToolInfo,
    UncheckedKernel,
    UnimplementedCall,
    Violation,
)
from .stacks import Frame, Stack

SCHEMA_PATH = Path(__file__).with_name("schema") / "gpusafe-report-1.schema.json"

__all__ = [
    "DEFAULT_MAX_THREADS",
    "SCHEMA_ID",
    "SCHEMA_PATH",
    "AllocationInfo",
    "CheckedKernel",
    "Frame",
    "Report",
    "ReportBuilder",
    "ReportFormatError",
    "SourceLocation",
    "Stack",
    "Summary",
    "ThreadId",
    "ToolInfo",
    "UncheckedKernel",
    "UnimplementedCall",
    "Violation",
]
