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


@pytest.mark.parametrize(("name", "kernels"), [("simple_graphs", 2),
                                               ("simple_graphs_runtime", 1)])
def test_graph_launched_kernels_are_checked_at_each_launch(tmp_path: Path, name: str,
                                                           kernels: int) -> None:
    app = install(tmp_path, name)
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "PASSED" in out, out
    assert doc["violations"] == []
    summary = doc["summary"]
    # each kernel node checked at each of the three graph launches
    assert summary["kernels_checked"] == kernels and summary["launches"] == 3 * kernels, summary
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


def test_an_overflow_in_a_runtime_graph_kernel_is_reported_at_its_line(tmp_path: Path) -> None:
    old, new = "y[i] = y[i] + x[i] * x[i];", "y[i] = y[i] + x[i] * x[i + 1];"
    app = install(tmp_path, "simple_graphs_runtime", [(old, new)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    found = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    assert len(found) == 1 and found[0]["access"] == "read", out
    v = found[0]
    assert v["location"]["line"] == kernel_line(app, new), v
    allocated = line_of(app, "d_x = checkCudaErrors(runtime.cudaMalloc(nbytes))")
    assert v["allocation"]["allocated_at"] == f"{app.name}:{allocated}", v


def test_a_graph_memcpy_node_past_its_allocation_is_refused_and_reported(
        tmp_path: Path) -> None:
    old = "graph, None, 0, d_x, h_x, nbytes, K.cudaMemcpyHostToDevice))"
    app = install(tmp_path, "simple_graphs_runtime",
                  [(old, old.replace("nbytes,", "nbytes + 4,")),
                   ("h_x = np.linspace(0, 1, n, dtype=np.float32)",
                    "h_x = np.linspace(0, 1, n + 1, dtype=np.float32)")])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    assert any(v["kind"] == "api-out-of-bounds" and
               v["allocation"]["allocated_at"] ==
               f"{app.name}:{line_of(app, 'd_x = checkCudaErrors(runtime.cudaMalloc(nbytes))')}"
               for v in doc["violations"]), out
