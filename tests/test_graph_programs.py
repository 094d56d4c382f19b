"""A program built the way cuda-python's simpleCudaGraphs example is
(``tests/programs/simple_graphs.py``: an explicit graph of memcpy, memset,
kernel and host nodes, launched three times) run unchanged under
``gpusafe run --device cpu``: it passes its own check with every
graph-launched kernel checked at every launch, and a copy whose graph kernel
overflows a buffer is reported at the kernel's line with the allocation.
Subprocesses: slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_memory_kind_programs import install, kernel_line
from test_run_cli import gpusafe_run, line_of

pytestmark = pytest.mark.slow


def test_graph_launched_kernels_are_checked_at_each_launch(tmp_path: Path) -> None:
    app = install(tmp_path, "simple_graphs")
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "simpleCudaGraphs: PASSED" in out, out
    assert doc["violations"] == []
    summary = doc["summary"]
    # two kernel nodes, three graph launches: six checked launches
    assert summary["kernels_checked"] == 2 and summary["launches"] == 6, summary
    assert summary["unchecked_launches"] == 0 and summary["unimplemented_calls"] == 0


def test_an_overflow_in_a_graph_kernel_is_reported_at_its_line(tmp_path: Path) -> None:
    old, new = "acc[i] = acc[i] + x[i];", "acc[i] = acc[i] + x[i + 1];"
    app = install(tmp_path, "simple_graphs", [(old, new)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    found = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    assert len(found) == 1 and found[0]["access"] == "read", out
    v = found[0]
    assert v["kernel"] == "addInPlace", v
    assert v["location"]["file"].endswith(".cu") and \
        v["location"]["line"] == kernel_line(app, new), v
    allocated = line_of(app, "d_tmp = checkCudaErrors(driver.cuMemAlloc(nbytes))")
    assert v["allocation"]["allocated_at"] == f"{app.name}:{allocated}", v
    assert v["count"] == 3, v  # the last thread, at each of the three graph launches
