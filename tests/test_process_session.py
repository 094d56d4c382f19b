"""The session's report file: when a drain rewrites it."""

from __future__ import annotations

import json

from gpusafe.process import session as session_module
from gpusafe.process.session import RunOptions, Session


def _launches_on_disk(tmp_path) -> int:
    return json.loads(next(tmp_path.glob("*.json")).read_text())["summary"]["launches"]


def test_launch_counts_reach_the_disk_at_most_once_a_second(tmp_path, monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(session_module.time, "monotonic", lambda: clock[0])
    s = Session(RunOptions(), tmp_path)
    s.flush()
    s.report.record_launch("k")
    s.flush_if_new()  # the same second as the start: nothing new found, not rewritten
    assert _launches_on_disk(tmp_path) == 0
    clock[0] += 1.0
    s.flush_if_new()
    assert _launches_on_disk(tmp_path) == 1
    s.report.record_launch("k")
    clock[0] += 0.5
    s.flush_if_new()
    assert _launches_on_disk(tmp_path) == 1
    s.report.record_unchecked("u", "filtered out")
    clock[0] += 0.5
    s.flush_if_new()  # unchecked launches count too
    doc = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert (doc["summary"]["launches"], doc["summary"]["unchecked_launches"]) == (2, 1)
