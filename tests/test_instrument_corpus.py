"""The pass over the whole foundation corpus: every module (NVRTC for every
architecture at -O3, -G and -lineinfo; numba-cuda; LLVM NVPTX) instruments
with every kernel checked (none left unchecked), and ptxas accepts the result
for the module's own sm_XX.

ptxas runs cost 0.1-1 s each, so the module-scoped fixture runs them all in a
thread pool (ptxas is a separate process) and the per-module tests read the
results.  The register-count change is measured by ``bench/overhead.py
--registers``, not here.
"""

from __future__ import annotations

import concurrent.futures
import os

import pytest

from gpusafe_instrument import ptx
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.runtime import CONTEXT_PARAM
from gpusafe_testkit.corpus import CompileError, corpus_module_names, corpus_modules, ptxas

NAMES = corpus_module_names()


def _check(module) -> tuple[str, str]:
    try:
        result = instrument(module.ptx)
    except Exception as e:  # reported per module below
        return "instrument", f"{type(e).__name__}: {e}"
    if result.sites.unchecked:
        return "unchecked", "\n".join(f"{k}: {why}" for k, why in result.sites.unchecked.items())
    try:
        ptxas(result.ptx, module.arch)
    except CompileError as e:
        return "ptxas", str(e)[:4000]
    return "ok", result.ptx


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[str, str]]:
    modules = corpus_modules()
    workers = max(2, min(16, (os.cpu_count() or 2) * 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        outcomes = list(ex.map(_check, modules))
    return {m.name: o for m, o in zip(modules, outcomes, strict=True)}


@pytest.mark.parametrize("name", NAMES)
def test_module_instruments_and_ptxas_accepts_it(results, name):
    status, detail = results[name]
    assert status == "ok", f"{status} failed for {name}:\n{detail}"


@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_gets_the_hidden_parameter(results, name):
    status, text = results[name]
    assert status == "ok", text
    module = ptx.parse(text)
    for fn in module.functions:
        if fn.is_kernel and fn.body is not None:
            # the context pointer, then (limits_as_params) the slots' limits
            own = [p for p in fn.params if not p.name.startswith("__gpusafe_lim")]
            hidden = own[-1]
            assert hidden.name == CONTEXT_PARAM
            assert (hidden.type, hidden.dims) == (".u64", ())
            limits = fn.params[len(own):]
            assert all((p.type, p.dims) == (".u64", ()) for p in limits)
            assert [p.name for p in limits] == [f"__gpusafe_lim{i}" for i in range(len(limits))]


def test_the_whole_corpus_is_covered(results):
    assert set(results) == set(NAMES)
    assert len(NAMES) >= 200
