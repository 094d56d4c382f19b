"""The work of ``gpusafe inspect`` and of the pass grows linearly with the
module: twice the input, at most a little over twice the work.

Wall-clock time is not measured (``bench/instrument_speed.py`` does that);
the work is the number of Python lines executed in the toolkit
(``gpusafe_instrument/``) and in ``gpusafe inspect``'s summary, counted with a trace
function: a deterministic count, in which a step that is quadratic in the
number of functions, statements, blocks or registers shows as a ratio well
above 2 (the quadratic ``.file`` lookup per function made the summary's ratio
2.5 at these sizes; the register scan per instruction of the provenance
analysis and the dominator walks made the pass's ratio 3.0 on one large
kernel).  The modules are ``bench/instrument_speed.py``'s generated ones: many
small kernels, and one kernel of straight-line code with a branch every few
accesses.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType

import pytest

import gpusafe_instrument as toolkit
from gpusafe.commands import inspect as inspect_command
from gpusafe_instrument import ptx
from gpusafe_instrument.checks import instrument

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench" / "instrument_speed.py"
RATIO = 2.2
"""Work at twice the size over work at the size: 2 plus room for what does
not grow evenly (caches filling, blocks of different lengths)."""


def _generators() -> ModuleType:
    spec = importlib.util.spec_from_file_location("instrument_speed", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHAPES = _generators().SHAPES
WATCHED = (str(Path(toolkit.__file__).parent), inspect_command.__file__)


def lines_executed(work: Callable[[], object]) -> int:
    """Lines of the toolkit and of the inspect command that ``work`` executes."""
    count = 0

    def local(frame: FrameType, event: str, arg: object):  # type: ignore[no-untyped-def]
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame: FrameType, event: str, arg: object):  # type: ignore[no-untyped-def]
        return local if frame.f_code.co_filename.startswith(WATCHED) else None

    sys.settrace(calls)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def _inspect(text: str) -> Callable[[], object]:
    module = ptx.parse(text)
    return lambda: inspect_command.module_summary(module, "generated.ptx")


def _instrument(text: str) -> Callable[[], object]:
    return lambda: instrument(text)


CASES = [
    # (shape, step, size in bytes): the sizes keep each case to seconds
    ("kernels", _inspect, 400_000),
    ("kernels", _instrument, 100_000),
    ("kernel", _inspect, 100_000),
    ("kernel", _instrument, 40_000),
]


@pytest.mark.parametrize("shape,step,size", CASES,
                         ids=[f"{s}-{f.__name__.strip('_')}" for s, f, _ in CASES])
def test_twice_the_module_is_at_most_a_little_over_twice_the_work(shape, step, size) -> None:
    generate = SHAPES[shape]
    instrument(generate(1000))  # the runtime parsed, caches warm: not part of the count
    small = lines_executed(step(generate(size)))
    large = lines_executed(step(generate(2 * size)))
    assert large <= RATIO * small, f"{shape}: {small} lines, then {large} at twice the size"
