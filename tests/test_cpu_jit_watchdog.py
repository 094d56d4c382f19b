"""The compiled launches' kernel timeout (gpusafe/cpu/jit/watchdog.py): one
thread for the process, not a Timer thread per launch."""

from __future__ import annotations

import threading
import time

import numpy as np

from gpusafe.cpu.jit.watchdog import WATCHDOG, Watchdog


def _set_within(halt: np.ndarray, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if halt[0]:
            return True
        time.sleep(0.005)
    return bool(halt[0])


def test_an_earlier_deadline_wakes_the_thread_and_a_withdrawn_one_never_fires():
    dog = Watchdog()
    late, early, gone = (np.zeros(2, np.uint32) for _ in range(3))
    dog.watch(3600.0, late)  # the thread now sleeps for an hour
    dog.unwatch(dog.watch(0.05, gone))
    dog.watch(0.05, early)
    assert _set_within(early, 10.0)
    assert gone[0] == 0 and late[0] == 0


def test_launches_share_one_thread():
    halts = [np.zeros(2, np.uint32) for _ in range(50)]
    WATCHDOG.unwatch(WATCHDOG.watch(60.0, halts[0]))
    before = threading.active_count()
    for h in halts:
        WATCHDOG.unwatch(WATCHDOG.watch(60.0, h))
    assert threading.active_count() == before
    assert not any(h[0] for h in halts)


def test_a_forked_child_gets_its_own_thread_and_lock():
    import os
    halt = np.zeros(2, np.uint32)
    WATCHDOG.unwatch(WATCHDOG.watch(60.0, halt))
    with WATCHDOG._cond:  # held by the parent at the fork, as the thread may hold it
        pid = os.fork()
        if pid == 0:
            child = np.zeros(2, np.uint32)
            WATCHDOG.watch(0.05, child)
            os._exit(0 if _set_within(child, 10.0) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
