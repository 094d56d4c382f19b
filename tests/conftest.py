import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

# CI runs the property tests on a fixed example sequence: a red build must be
# reproducible from its log, not a roll of the dice.  Locally they explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Every test run instruments into a cache of its own, inherited by the programs
# it starts: a result cached by an earlier checkout can never answer for this one.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="gpusafe-test-cache-")

SLOW_MODULES = {
    # corpus: every kernel of tests/kernels through NVRTC, ptxas, numba, LLVM
    "test_corpus_toolchain", "test_ptx_corpus", "test_instrument_corpus",
    "test_instrument_specs", "test_cpu_kernels",
    # subprocesses: gpusafe run on whole programs, gpusafe inspect, a wheel install
    "test_run_cli", "test_run_runtime_api", "test_run_hardening", "test_samples_programs",
    "test_cpu_programs", "test_cli_inspect", "test_packaging", "test_run_heap",
    "test_run_incomplete", "test_memory_kind_programs", "test_multidevice_programs",
    "test_cooperative_programs", "test_native_stacks", "test_native_preload",
    "test_texture_programs", "test_instrument_ranges", "test_native_runtime", "test_native_gpu",
    "test_cpu_jit_corpus", "test_cpu_jit_blocks", "test_launch_proof", "test_instrument_pinned",
    "test_cpu_jit_lanes",
    # property tests
    "test_ptx_fuzz", "test_instrument_fuzz",
}
"""Modules whose tests are all ``slow``; ``make check`` runs everything else."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark corpus, subprocess and property tests ``slow`` (``make check``
    leaves them out; ``make test`` runs them)."""
    slow = pytest.mark.slow
    for item in items:
        module = item.module.__name__ if item.module is not None else ""
        if module in SLOW_MODULES or getattr(item.obj, "is_hypothesis_test", False):
            item.add_marker(slow)
