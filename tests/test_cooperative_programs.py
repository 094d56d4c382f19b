"""A program built the way cuda-python's conjugateGradientMultiBlockCG
example is (``tests/programs/conjugate_gradient_cg.py``: a CG solver in one
kernel whose phases are separated by ``grid.sync()``, its grid sized from the
device's occupancy and multiprocessor count, launched with
``cuLaunchCooperativeKernel`` and with ``cuLaunchKernelEx``'s cooperative
attribute) run unchanged under ``gpusafe run --device cpu``: both launches
are checked and the solution matches numpy's; a copy that reads one element
past a vector is reported at the kernel's line with the allocation, once per
CG iteration of each launch.  Subprocesses: slow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_memory_kind_programs import install, kernel_line
from test_run_cli import gpusafe_run, line_of

pytestmark = pytest.mark.slow


def _iterations(out: str) -> list[int]:
    return [int(n) for n in re.findall(r"(\d+) iterations", out)]


def test_cooperative_launches_are_checked_and_the_solver_converges(tmp_path: Path) -> None:
    app = install(tmp_path, "conjugate_gradient_cg")
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "PASSED" in out and "waived" not in out, out
    assert "cuLaunchCooperativeKernel:" in out and "cuLaunchKernelEx:" in out, out
    assert doc["violations"] == []
    summary = doc["summary"]
    assert summary["kernels_checked"] == 1 and summary["launches"] == 2, summary
    assert summary["unchecked_launches"] == 0 and summary["unimplemented_calls"] == 0, summary


def test_an_overflow_between_grid_syncs_is_reported_at_its_line(tmp_path: Path) -> None:
    old, new = "x[i] = x[i] + alpha * p[i];", "x[i] = x[i] + alpha * p[i + 1];"
    app = install(tmp_path, "conjugate_gradient_cg", [(old, new)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    assert len(doc["violations"]) == 1, out
    v = doc["violations"][0]
    assert (v["kind"], v["access"], v["kernel"]) == \
        ("global-out-of-bounds", "read", "conjugateGradient"), v
    assert v["location"]["file"].endswith("conjugateGradientCG.cu") and \
        v["location"]["line"] == kernel_line(app, new), v
    alloc = v["allocation"]
    assert alloc["offset"] == alloc["size"], alloc  # just past the end of p
    assert alloc["allocated_at"] == \
        f"{app.name}:{line_of(app, 'ptr = checkCudaErrors(runtime.cudaMallocManaged(')}"
    assert {"file": app.name, "line": line_of(app, "p_ptr, _ = managed(N"),
            "function": "main"} in alloc["allocated_stack"], alloc
    # the last thread, in every iteration of each of the two launches
    iterations = _iterations(out)
    assert len(iterations) == 2 and v["count"] == sum(iterations), (v, out)
