"""The record layouts have one definition (gpusafe_instrument/layout.py) and both
sides agree on it: the committed C header and runtime PTX are what the build
script generates now, the C compiler accepts the header's size assertions,
and struct formats, numpy dtypes and offsets describe the same bytes."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest

from gpusafe_instrument import layout, runtime

REPO = Path(__file__).resolve().parent.parent


def _build_script():
    spec = importlib.util.spec_from_file_location("build_runtime", REPO / "scripts" / "build_runtime.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def generated():
    return _build_script().generate()


def test_the_committed_header_is_generated_from_layout(generated):
    header, _ = generated
    assert (REPO / "runtime_cu" / "gpusafe_layout.h").read_text() == header
    assert header == layout.c_header()


def test_the_committed_runtime_ptx_is_current(generated):
    _, ptx_text = generated
    assert runtime.RUNTIME_PTX.read_text() == ptx_text


@pytest.mark.parametrize("record", layout.RECORDS, ids=lambda r: r.name)
def test_struct_numpy_and_offsets_agree(record):
    assert struct.calcsize(record.format) == record.size
    assert record.dtype.itemsize == record.size
    values = {}
    for i, f in enumerate(record.fields):
        values[f.name] = tuple(range(i + 1, i + 1 + f.count)) if f.count > 1 else i + 1
    raw = record.pack(**values)
    arr = np.frombuffer(raw, dtype=record.dtype)
    for f in record.fields:
        assert record.dtype.fields[f.name][1] == record.offset(f.name)
        got = arr[f.name][0]
        want = values[f.name]
        assert (tuple(int(x) for x in got) if f.count > 1 else int(got)) == want
        size = f.size // f.count
        first = int.from_bytes(raw[record.offset(f.name):record.offset(f.name) + size], "little")
        assert first == (want[0] if f.count > 1 else want)
    assert record.unpack(raw) == values


def test_c_header_states_every_size_and_constant():
    header = layout.c_header()
    for rec in layout.RECORDS:
        assert f"sizeof({rec.name}) == {rec.size}" in header
    for name in layout.CONSTANTS:
        assert f"#define {name} " in header


def test_violation_kind_codes_reach_the_runtime():
    header = layout.c_header()
    assert "#define GPUSAFE_GLOBAL_OUT_OF_BOUNDS 1" in header
    assert "#define GPUSAFE_NULL_POINTER 10" in header


def test_context_offsets():
    assert layout.root_offset(0) == layout.LAUNCH_CONTEXT.size
    assert layout.limit_offset(2, 1) == layout.LAUNCH_CONTEXT.size + 2 * layout.ROOT_BOUNDS.size + 8
    assert layout.context_size(2, 3) == layout.limit_offset(2, 3)


def test_runtime_symbols_carry_the_prefix():
    names = runtime.runtime_function_names()
    assert runtime.CHECK_FUNCTION in names
    assert all(n.startswith(runtime.PREFIX) for n in names)
