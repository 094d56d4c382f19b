"""Start gpusafe inside a Python program before any of its code runs.

``gpusafe run`` puts this directory first on ``PYTHONPATH`` and names a session
directory in ``GPUSAFE_SESSION``; the interpreter imports this module at start-up
(the ``site`` module's ``sitecustomize`` hook), so the interposer is installed
before ``__main__`` executes, whatever the program imports later.  Child Python
processes inherit both variables and are checked the same way.

An existing ``sitecustomize`` further down ``sys.path`` (a virtualenv's, a
distribution's) is run first, so the program's environment is what it would
be without gpusafe.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _start_gpusafe() -> None:
    if not os.environ.get("GPUSAFE_SESSION"):
        return
    try:
        from gpusafe.process.session import start

        start()
    except Exception as e:  # gpusafe cannot run in this process: say so, loudly
        from pathlib import Path

        session = Path(os.environ["GPUSAFE_SESSION"])
        message = f"gpusafe could not start in {sys.executable}: {type(e).__name__}: {e}"
        try:
            (session / f"{os.getpid()}.failed").write_text(message)
        finally:
            print(f"gpusafe: {message}", file=sys.stderr)


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_gpusafe_chained_sitecustomize",
                                                          candidate)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            return


_chain_next_sitecustomize()
_start_gpusafe()
