"""The bounds-check pass: PTX in, checked PTX and a site table out.

    result = instrument(ptx_text)       # or a parsed Module
    result.ptx      # the checked module, runtime linked in
    result.sites    # SiteTable: one Site per check, each kernel's launch ABI,
                    # and the kernels left unchecked (with the reason)
    result.stats    # per-function FunctionStats

What happens to each memory access (``query.instruction_accesses``):

* ``ld.param`` / ``ld.const`` are not checked (the statistics say how many);
  ``prefetch``/``prefetchu`` are hints that move no data: nothing to check.
* Global, shared, local and generic accesses get a *fast filter* right before
  them, chosen by the provenance of the address (``planning``; the filters:
  ``emission``), fewer of them where one filter covers several accesses
  (``optimisation``).
* A failing filter branches to the access's out-of-line *slow path* at the end
  of the function (``slow_path``), which decides precisely and leaves the
  violation for the host inline (``records``: a count in the site's tally,
  classified on the host, or a violation record; no call: the device
  runtime's verdicts, written in PTX), then performs the access or skips it.
* The driver (``driver``) handles the module: which functions need the launch
  context, their call sites, each kernel's launch ABI, and the kernels left
  unchecked.

Modules in data-flow order: ``outcome`` (results and errors), ``planning``,
``conditions``, ``emission``, ``optimisation``, ``records``, ``slow_path``, ``rewrite``
(one function), ``selection`` (checked copies for a subset of kernels),
``driver``.
"""

from ..kinds import AccessKind
from .driver import instrument
from .outcome import FunctionStats, InstrumentError, InstrumentResult

__all__ = ["instrument", "InstrumentError", "InstrumentResult", "FunctionStats", "AccessKind"]
