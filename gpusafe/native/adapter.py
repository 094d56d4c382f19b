"""Where the stand-in driver's C stubs land: :func:`dispatch` runs one
driver call of a native program (or of a framework that loads the driver
itself) through the gpusafe session of its process.

A function the stand-in does not serve returns ``CUDA_ERROR_NOT_SUPPORTED``
to the program and is named in the findings as gpusafe's own limit, so a run
that needed it never reads as a clean pass.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..doors.wrappers import NOT_IMPLEMENTED
from ..engine import callsite
from ..process import session as _session
from . import libraries, symbolize
from .calls import BY_SYMBOL, CALLS, NEWER_ABI, NOT_SUPPORTED, NotServed
from .table import rows

NOT_INITIALIZED = 3
UNKNOWN = 999

_reported: set[str] = set()
_SERVED = {**CALLS, **libraries.CALLS}
if callsite.native_program():
    callsite.set_native_sites(symbolize.provider())  # its frames name its sites


def current_session() -> _session.Session | None:
    session = _session.current()
    if session is None and "GPUSAFE_SESSION" in os.environ:
        session = _session.start()  # the start-up hook did not run in this process
    return session


def not_served(label: str, session: _session.Session, why: str | None = None) -> int:
    """The program called what the CPU device does not serve (a function, or
    ``why``: a form of one, naming how to avoid it): it is one of the
    report's calls not implemented, so the run exits 2."""
    site = callsite.program_site()
    session.findings.unimplemented(label, str(site) if site else NATIVE_SITE,
                                   why or NOT_IMPLEMENTED)
    if (why or label) not in _reported:  # the findings file, once per function or form
        _reported.add(why or label)
        session.flush()
    return NOT_SUPPORTED


NATIVE_SITE = "(native code)"
"""The call site an unserved native call is listed at when the program's
frames carry no line information (built without ``-g``)."""


def dispatch(index: int, typed: bool, args: tuple[int, ...]) -> int:
    """One call of the driver function of row ``index`` with its C arguments."""
    session = current_session()
    if session is None:
        print("gpusafe: the stand-in CUDA driver runs only under `gpusafe run`",
              file=sys.stderr)
        return NOT_INITIALIZED
    row = rows()[index]
    call = None
    if typed and row.symbol in BY_SYMBOL:
        call = BY_SYMBOL[row.symbol]
    elif typed and row.symbol not in NEWER_ABI:
        call = _SERVED.get(row.base)
    if call is None:
        return not_served(row.label, session)
    try:
        return call(*args)
    except NotServed as e:  # a form of a function, or what a caller needs, not served
        return not_served(e.label or row.label, session, str(e))
    except NotImplementedError as e:  # a function not served
        return not_served(row.label, session, str(e))
    except Exception as e:  # noqa: BLE001 - gpusafe's own failure, reported as such
        session.findings.problem(
            f"the stand-in CUDA driver failed in {row.label}: {type(e).__name__}: {e}")
        session.flush()
        return UNKNOWN


def finish() -> Any:
    """At a native program's exit: its findings written for ``gpusafe run``."""
    session = _session.current()
    if session is not None:
        session.finish()
    sys.stdout.flush()
    sys.stderr.flush()
