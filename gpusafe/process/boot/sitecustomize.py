"""Start gpusafe inside a Python program before any of its code runs.

``gpusafe run`` puts this directory first on ``PYTHONPATH`` and names a session
directory in ``GPUSAFE_SESSION``; the interpreter imports this module at start-up
(the ``site`` module's ``sitecustomize`` hook), so the interposer is installed
before ``__main__`` executes, whatever the program imports later.  Child Python
processes inherit the variables and are checked the same way.

Nothing else joins the program's import path: gpusafe's own packages (all named
``gpusafe...``) are found in ``GPUSAFE_HOME`` by a finder that answers for
those names only, so the child runs the same gpusafe as the parent and a
program's own ``instrument.py`` or ``tests`` package stays its own.

An existing ``sitecustomize`` further down ``sys.path`` (a virtualenv's, a
distribution's) is run first, so the program's environment is what it would
be without gpusafe.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_OWN_PACKAGES = ("gpusafe", "gpusafe_instrument")


class _GpusafeFinder:
    """Finds gpusafe's top-level packages in one folder, and nothing else."""

    def __init__(self, home: str) -> None:
        self.home = home

    def find_spec(self, name: str, path: object = None, target: object = None):  # noqa: ANN201
        if name not in _OWN_PACKAGES:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [self.home])


def _start_gpusafe() -> None:
    if not os.environ.get("GPUSAFE_SESSION"):
        return
    home = os.environ.get("GPUSAFE_HOME")
    if home:
        sys.meta_path.insert(0, _GpusafeFinder(home))
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
