"""One thread that stops compiled launches at their kernel timeout.

Compiled code reads ``halt[0]`` after every round of a block's threads (and
a thread in a loop yields to the round every few thousand iterations,
:meth:`.regions.BarrierLowering.backward`), so setting it stops a launch
that never ends, as the interpreter's deadline check does.  Who sets it is
this module's one daemon thread, for every launch of the process: a
``threading.Timer`` per launch started an OS thread each time: a one-block
launch with a timeout (``gpusafe run`` sets one by default) took 742 us
against 65 us with this thread.

The thread sleeps until the earliest deadline it holds; a launch that ends
first takes its entry out and does not wake it (the thread finds nothing
due at that time and sleeps on), so a launch costs a lock and a dict entry.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np


class Watchdog:
    """Deadlines (``time.monotonic()``) and the ``halt`` word each sets."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._reset()
        if hasattr(os, "register_at_fork"):
            # a forked child has no thread, and its copy of the lock may be held
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._entries: dict[int, tuple[float, np.ndarray]] = {}
        self._wake = float("inf")  # when the thread wakes next (inf: when told)
        self._pid = -1  # the process whose thread this is: a forked child starts its own

    def watch(self, seconds: float, halt: np.ndarray) -> int:
        """Set ``halt[0] = 1`` ``seconds`` from now unless :meth:`unwatch` comes first."""
        due = time.monotonic() + max(0.0, seconds)
        with self._cond:
            if self._pid != os.getpid():
                self._pid, self._wake = os.getpid(), float("inf")
                threading.Thread(target=self._run, name="gpusafe-jit-watchdog",
                                 daemon=True).start()
            token = next(self._ids)
            self._entries[token] = (due, halt)
            if due < self._wake:
                self._cond.notify()
        return token

    def unwatch(self, token: int) -> None:
        with self._cond:
            self._entries.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token, (due, halt) in list(self._entries.items()):
                    if due <= now:
                        halt[0] = 1
                        del self._entries[token]
                self._wake = min((due for due, _ in self._entries.values()),
                                 default=float("inf"))
                self._cond.wait(None if self._wake == float("inf") else self._wake - now)


WATCHDOG = Watchdog()
