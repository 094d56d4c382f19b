"""Mutated compiler output: the parser either succeeds or raises ParseError,
never another exception, and whatever it accepts round-trips exactly."""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusafe_instrument import ptx
from gpusafe_testkit.corpus import corpus_modules


@functools.cache
def _seeds() -> list[str]:
    # Small modules keep each example fast; the mutations do the exploring.
    texts = sorted((m.ptx for m in corpus_modules()), key=len)
    return texts[: max(8, len(texts) // 4)]


_PIECES = ["{", "}", "[", "]", "(", ")", ";", ",", ".", "%", "@", "!", "|", "+", "-", ":",
           "_", "\"", "/*", "//", "\n", " ", "0f", "0x", ".reg", ".b32", "%r1", "[%rd1+",
           ".loc", ".param", ".entry", "\\", "\x00", "\u00e9"]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(_seeds()))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        span = draw(st.integers(1, 40))
        if action == "insert":
            piece = draw(st.one_of(st.sampled_from(_PIECES), st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=8)))
            text = text[:pos] + piece + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + span:]
        elif action == "replace":
            piece = draw(st.sampled_from(_PIECES))
            text = text[:pos] + piece + text[pos + span:]
        else:
            text = text[:pos] + text[pos:pos + span] + text[pos:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(mutated())
def test_mutated_ptx_parses_or_raises_parse_error(text: str) -> None:
    try:
        module = ptx.parse(text)
    except ptx.ParseError as e:
        assert e.line >= 1 and e.column >= 1
        return
    assert ptx.emit(module) == text
