"""The front end on real compiler output: every corpus module (NVRTC for three
architectures at -O3, -lineinfo and -G; numba-cuda; LLVM NVPTX) round-trips
exactly, reparses to an equal tree, and ptxas accepts what the printer wrote."""

from __future__ import annotations

import pytest

from gpusafe_instrument import ptx
from gpusafe_testkit.corpus import corpus_modules, ptxas

MODULES = corpus_modules()


@pytest.fixture(scope="module", params=MODULES, ids=[m.name for m in MODULES])
def corpus_module(request: pytest.FixtureRequest):
    return request.param


def test_emit_of_parse_is_the_input(corpus_module) -> None:
    text = corpus_module.ptx
    assert ptx.emit(ptx.parse(text)) == text


def test_parse_of_emit_is_the_same_tree(corpus_module) -> None:
    module = ptx.parse(corpus_module.ptx)
    assert ptx.parse(ptx.emit(module)) == module


def test_ptxas_accepts_the_printed_module(corpus_module) -> None:
    module = ptx.parse(corpus_module.ptx)
    ptxas(ptx.emit(module), corpus_module.arch)


def test_ptxas_accepts_the_canonical_printing(corpus_module) -> None:
    """Printing every node in canonical form (as a pass's new nodes are)
    still gives PTX that ptxas accepts and that parses to the same tree."""
    module = ptx.parse(corpus_module.ptx)
    canonical = ptx.emit(_forget_source_text(module))
    assert ptx.parse(canonical) == module
    ptxas(canonical, corpus_module.arch)


def _forget_source_text(module: ptx.Module) -> ptx.Module:
    from gpusafe_instrument.nodes import Block, Function

    def strip(statements):
        for s in statements:
            if type(s) is Block:
                strip(s.statements)
            else:
                object.__setattr__(s, "raw", None)

    for item in module.items:
        if type(item) is Function:
            item.header_raw = None
            if item.body is not None:
                strip(item.body)
        else:
            object.__setattr__(item, "raw", None)
    return module
