"""The overhead benchmark's kernels (``bench/overhead.py``) stay runnable and
honest: each one, instrumented, computes what the plain kernel computes and
reports nothing, and its checks are really executed (the checked run
executes more instructions than the plain one).  Wall-clock time is not
measured here; the ratios are the benchmark's to print."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench" / "overhead.py"


def _bench(path: Path = BENCH) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


OVERHEAD = _bench()


def test_the_benchmark_has_the_kernels_the_issue_asks_for() -> None:
    assert len(OVERHEAD.BENCHES) >= 15
    assert len({b.name for b in OVERHEAD.BENCHES}) == len(OVERHEAD.BENCHES)


@pytest.mark.parametrize("bench", OVERHEAD.BENCHES, ids=lambda b: b.name)
def test_each_benchmark_kernel_checked_computes_the_same_and_reports_nothing(bench) -> None:
    plain, checked, stats = OVERHEAD.run(bench)  # SystemExit on a difference or a report
    # a launch whose values prove every access in bounds runs the unchecked
    # copy (launch proofs): exactly the plain kernel's instructions
    assert checked == plain > 0 if stats["proven"] else checked > plain > 0
    assert sum(stats["checks"].values()) > 0


def test_occupancy_follows_the_sm_90_calculator() -> None:
    assert [OVERHEAD.occupancy(r) for r in (32, 40, 64, 72, 128, 255)] == [
        1.0, 0.75, 0.5, 0.375, 0.25, 0.125]


def test_the_gpu_timing_runs_its_three_variants_on_the_cpu_device(capsys) -> None:
    """``bench/gpu_overhead.py`` is run on a GPU by hand; here its whole path
    (gpusafe's launch pipeline on a driver, the three variants' outputs
    compared, the records read back) runs on the CPU device.  A proven launch
    times its checked kernel as a third variant; an unproven one does not."""
    gpu_overhead = _bench(BENCH.parent / "gpu_overhead.py")
    assert gpu_overhead.main(["--driver", "cpu", "--n", "4096", "--launches", "1", "--rounds",
                              "1", "--only", "vector add,pointer-chasing gather"]) == 0
    out = capsys.readouterr().out
    assert "gpusafe CPU device" in out and "N = 4096" in out
    assert re.search(r"^vector add +4096 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+", out, re.M)
    assert re.search(r"^pointer-chasing gather .*\(not proven: gpusafe = checked\)$", out, re.M)
    assert "geometric mean over all kernels (2)" in out
