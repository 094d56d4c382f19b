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


def test_simple_cuda_graphs_explicit_and_captured_runs_checked(tmp_path: Path) -> None:
    """The explicit graph, the captured one (three streams forked and joined
    with events) and a clone of each: 4 graphs x 3 launches x 2 kernels."""
    app = install(tmp_path, "simple_cuda_graphs")
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "simpleCudaGraphs: PASSED" in out, out
    assert doc["violations"] == []
    summary = doc["summary"]
    assert summary["kernels_checked"] == 2 and summary["launches"] == 24, summary
    assert summary["unchecked_launches"] == 0 and summary["unimplemented_calls"] == 0


def test_an_overflow_in_a_captured_kernel_is_reported_at_its_line(tmp_path: Path) -> None:
    """Only the captured launch reads one element too many: the capture's
    graph and its clone, three launches each."""
    old = "_reduce, numOfBlocks, 1, 1, THREADS_PER_BLOCK, 1, 1, 0, stream1, kernelArgs, 0))"
    new = old.replace("kernelArgs, 0", "((inputVec_d, outputVec_d, inputSize + 1, numOfBlocks), "
                                       "kernelArgs[1]), 0")
    app = install(tmp_path, "simple_cuda_graphs", [(old, new)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    found = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    assert len(found) == 1 and found[0]["access"] == "read", out
    v = found[0]
    assert v["kernel"] == "reduce", v
    assert v["location"]["file"].endswith("simpleCudaGraphs.cu") and \
        v["location"]["line"] == kernel_line(app, "temp_sum += (double)inputVec[i];"), v
    allocated = line_of(app, "inputVec_d = checkCudaErrors(runtime.cudaMalloc(")
    assert v["allocation"]["allocated_at"] == f"{app.name}:{allocated}", v
    assert v["count"] == 6, v


def test_an_updated_executable_graph_stays_checked(tmp_path: Path) -> None:
    app = install(tmp_path, "graph_update")
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "graphUpdate: PASSED" in out, out
    summary = doc["summary"]
    # three launches after kernel-node updates, one after cudaGraphExecUpdate
    assert summary["kernels_checked"] == 1 and summary["launches"] == 4, summary
    assert summary["unchecked_launches"] == 0 and summary["unimplemented_calls"] == 0


def test_an_overflow_through_updated_node_arguments_is_reported(tmp_path: Path) -> None:
    old = "params.kernelParams = saxpy_args(a, d_x, d_y, n)"
    app = install(tmp_path, "graph_update", [(old, old.replace("n)", "n + 1)"))])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    found = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    line = kernel_line(app, "y[i] = a * x[i] + y[i];")
    assert found and all(v["kernel"] == "saxpy" and v["location"]["line"] == line
                         for v in found), out
    allocated = line_of(app, "d_x = checkCudaErrors(runtime.cudaMalloc(n * 4))")
    x_reads = [v for v in found if v["access"] == "read"
               and v["allocation"]["allocated_at"] == f"{app.name}:{allocated}"]
    assert len(x_reads) == 1 and x_reads[0]["count"] == 3, out  # one per updated launch


def test_no_check_counts_captured_launches_when_their_graphs_run(tmp_path: Path) -> None:
    app = install(tmp_path, "simple_cuda_graphs")
    rc, doc, out = gpusafe_run(tmp_path, "--no-check", "python", app.name)
    assert rc == 0 and "simpleCudaGraphs: PASSED" in out, out
    # 24 kernel launches by graphs; the two captured cuLaunchKernel calls are not launches
    assert doc["summary"]["unchecked_launches"] == 24, doc["summary"]
