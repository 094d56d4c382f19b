"""A kernel of a debug build loads each root filter's limit from its hidden
parameter right before the compare (``Emitter.limit``), and a window filter
of a debug build computes its variable's address right before the compare,
instead of once in the prologue: ptxas at -O0 (``-G``) keeps every value the
prologue computes in a register for the whole kernel, two per check slot
and per variable, where at -O3 it reads the parameter from the constant
bank at each use and folds the address.

The register bounds fail with the limits loaded in the prologue
(``stencil_2d_5pt`` -G 48, ``matmul_tiled16`` -G 43 at sm_80) and with the
variables' addresses computed there (40, 37); the differential runs prove
each filter still compares with its own slot's limit (two roots of
different sizes, both overrun) and finds a shared array's overrun."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_instrument_cpu import DYNSHARED, SHARED, STENCIL, Buf, assert_same, f32, kinds, run_both

from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

KERNELS = Path(__file__).parent / "kernels"


def _kernel_body(ptx: str, name: str) -> str:
    start = re.search(rf"\.entry {re.escape(name)}\(", ptx).start()
    return ptx[start:ptx.index("\n}", start)]


@pytest.mark.parametrize(("source", "kernel", "bound"), [
    ("stencil.cu", "stencil_2d_5pt", 34),
    ("matmul.cu", "matmul_tiled16", 33),
])
def test_a_debug_kernel_loads_each_limit_where_it_compares(source, kernel, bound):
    text = (KERNELS / source).read_text()
    debug = instrument(nvrtc_compile(text, source, "compute_80", ("-G",))).ptx
    body = _kernel_body(debug, kernel)
    compares = re.findall(r"\n\t(.*)\n\tsetp\.ge(?:\.or)?\.u64 \t%__gs_p, %\w+, (%__gs_lim\d+)",
                          body)
    assert compares
    for before, lim in compares:
        assert before == f"ld.param.u64 \t{lim}, [__gpusafe_{lim.removeprefix('%__gs_')}];"
    assert "%__gs_v" not in body  # no variable's address kept from the prologue
    assert ptxas(debug, "sm_80", verbose=True).registers()[kernel] <= bound
    optimised = _kernel_body(instrument(nvrtc_compile(text, source, "compute_80")).ptx, kernel)
    loads = re.findall(r"ld\.param\.u64 \t(%__gs_lim\d+)", optimised)
    assert loads and len(loads) == len(set(loads))  # once each, in the prologue


def test_a_debug_kernel_judges_each_root_by_its_own_limit():
    """``out`` has 30 elements and ``in`` 32: the writes past ``out`` (two
    threads) and the reads before and past ``in`` (threads 0 and 31) are
    each judged against their own root's limit, as the oracle judges them."""
    o = run_both(STENCIL, "stencil", (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(30, np.float32)), Buf(f32(32)), np.int32(32)], options=("-G",))
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 4
    assert_same(o)



@pytest.mark.parametrize(("source", "kernel", "shared", "count"), [
    (SHARED, "shift", 0, 3),
    (DYNSHARED, "dyn", 32 * 4, 3),
], ids=["static", "dynamic"])
def test_a_debug_window_filter_finds_what_the_oracle_finds(source, kernel, shared, count):
    """A shared array read 3 elements past its end by the last 3 threads, at
    -G, found as the oracle finds it."""
    o = run_both(source, kernel, (1, 1, 1), (32, 1, 1),
                 [Buf(np.zeros(32, np.int32)), np.int32(3)], shared=shared, options=("-G",))
    assert kinds(o) == {"shared-out-of-bounds"}
    assert o.occurrences == count
    assert_same(o)
