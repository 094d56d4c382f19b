"""A simulated GPU: a ``libcuda.so.1`` that is not gpusafe's checked driver,
for proving ``gpusafe run --device cuda`` on a machine without a GPU.

It is the stand-in driver's C stubs built with this module as their
dispatcher (``simulated_driver`` in :mod:`gpusafe.native.build`): each call
runs on a plain CPU device of its own (no red zones, no quarantine, no
checks, no session: what a GPU is to gpusafe), through the same C-call
adapters as the checked driver (a second copy of :mod:`gpusafe.native.calls`
whose ``D`` is that device).  Named by ``GPUSAFE_REAL_LIBCUDA``, it is the
"real" driver: gpusafe's ``cuda.bindings`` loads it, the preload door routes
what it does not check to it, and the cuda backend runs on it.  It is test
equipment, never a device a user checks on.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType, SimpleNamespace
from typing import Any

from .table import rows

NOT_SUPPORTED = 801

_state: dict[str, Any] = {}
_lock = threading.Lock()
_named: set[str] = set()


def _calls() -> ModuleType:
    """The adapters over this process's simulated device (made once)."""
    with _lock:
        if "calls" not in _state:
            from cuda.bindings import driver

            from ..cpu.driver import Driver
            from . import calls

            device = Driver(red_zone=0, quarantine=0)
            # cuda.bindings' types and enums, the device's functions (the
            # module's functions may be the Python door's wrappers by now)
            names = {n: getattr(driver, n) for n in dir(driver)
                     if not n.startswith("__") and isinstance(getattr(driver, n), type)}
            names.update({n: getattr(device, n) for n in dir(device) if n.startswith("cu")})
            spec = importlib.util.spec_from_file_location("gpusafe.native._simulated_calls",
                                                          calls.__file__)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.D = SimpleNamespace(**names)
            _state["calls"] = module
        return _state["calls"]


def dispatch(index: int, typed: bool, args: tuple[int, ...]) -> int:
    """One call of the simulated driver (row ``index`` of the driver table)."""
    calls = _calls()
    row = rows()[index]
    call = calls.BY_SYMBOL.get(row.symbol) if typed else None
    if call is None and typed and row.symbol not in calls.NEWER_ABI:
        call = calls.CALLS.get(row.base)
    if call is None or row.base == "cuGetExportTable":
        if row.label not in _named:
            _named.add(row.label)
            print(f"gpusafe simulated GPU: {row.label} is not served", file=sys.stderr)
        return NOT_SUPPORTED
    try:
        return int(call(*args))
    except Exception as e:  # noqa: BLE001 - a simulated device's failure, said
        print(f"gpusafe simulated GPU: {row.label} failed: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 999


def finish() -> None:
    """Nothing to write: the simulated GPU keeps no findings."""
