"""Every kernel of tests/kernels (specs.py), correct and made buggy, on the CPU
device: the instrumented run reports exactly what the oracle reports on the
plain run (kind, PTX line, address, thread, block; a tallied site its count
and its first offenders), its outputs equal the
plain run's, and the correct run matches the numpy reference.

The buggy variant shrinks one buffer by 64 bytes (or less for small ones), so
the kernel's last accesses to it land in the red zone after the allocation,
where the oracle sees them too."""

from __future__ import annotations

import numpy as np
import pytest
from kernels.specs import SPECS, Buffer, KernelSpec, Scalar, Struct
from test_instrument_cpu import device_view, differences

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument import host
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import compile_kernel_file

SHRINK = 64


def _ptx(spec: KernelSpec, options=()) -> str:
    return compile_kernel_file(spec.file, "compute_75", options)


def _place(mem, spec: KernelSpec, shrink: str | None):
    addrs = {}
    sizes = {}
    for b in spec.buffers:
        raw = b.data.tobytes()
        if b.name == shrink:
            raw = raw[:max(len(raw) - SHRINK, len(raw) // 2)]
        sizes[b.name] = len(raw)
        addrs[b.name] = mem.alloc(max(len(raw), 1))
    for b in spec.buffers:
        raw = bytearray(b.data.tobytes()[:sizes[b.name]])
        for r in b.relocs:
            if r.offset + 8 <= len(raw):
                raw[r.offset:r.offset + 8] = (addrs[r.target] + r.target_offset).to_bytes(8, "little")
        if raw:
            mem.write(addrs[b.name], bytes(raw))
    return addrs, sizes


def _params(info, spec: KernelSpec, addrs) -> bytes:
    size = info.params[-1][1] + info.params[-1][2] if info.params else 0
    buf = bytearray(size)
    for (_, off, _size), a in zip(info.params, spec.args, strict=True):
        if isinstance(a, Buffer):
            val = addrs[a.name].to_bytes(8, "little")
        elif isinstance(a, Scalar):
            val = np.asarray(a.value).tobytes()
        else:
            assert isinstance(a, Struct)
            val = a.data
        buf[off:off + len(val)] = val
    return bytes(buf)


def run(spec: KernelSpec, text: str, shrink: str | None):
    """The oracle's violations, the device's (:func:`device_view`), the
    buffers after the plain and the checked launch, and the violations of an
    every-offender build (``instrument(every_offender=True)``: one record per
    failing access, so they must equal the oracle's one for one)."""
    results = [instrument(text), instrument(text, every_offender=True)]
    info = results[0].sites.kernels[spec.kernel]
    outs, found = [], []
    for result in (None, *results):
        mem = DeviceMemory()
        addrs, sizes = _place(mem, spec, shrink)
        params = _params(info, spec, addrs)
        if result is not None:
            prog = Program(result.ptx, mem)
            allocs = [host.AllocationRecord(a.tag, a.base, a.size, a.live) for a in mem.allocations]
            pipeline = LaunchPipeline(mem)
            launch = pipeline.prepare(result.sites, spec.kernel, params, allocs,
                                      dynamic_shared=spec.shared_bytes, grid=spec.grid,
                                      block=spec.block)
            prog.launch(launch.entry, spec.grid, spec.block, spec.shared_bytes, launch.params)
            records, dropped = pipeline.collect(launch)
            assert dropped == 0
            found.append(device_view(records) if result is results[0] else
                         sorted((str(v.kind), v.site.ptx_line, v.address, v.thread, v.block)
                                for v in records))
        else:
            prog = Program(text, mem)
            oracle = Oracle(mem)
            prog.launch(spec.kernel, spec.grid, spec.block, spec.shared_bytes, params,
                        observers=[oracle])
            found.append(sorted((str(v.kind), v.ptx_line, v.address, v.thread, v.block)
                                for v in oracle.violations))
        outs.append({b.name: mem.read(addrs[b.name], sizes[b.name]) for b in spec.buffers})
    assert outs[2] == outs[1]
    return found[0], found[1], outs[0], outs[1], found[2]


def _shrinkable(spec: KernelSpec) -> str | None:
    for b in spec.buffers:
        if b.nbytes >= 8 and not b.relocs:
            return b.name
    return None


IDS = [s.name for s in SPECS]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_correct_kernel_reports_nothing_and_matches(spec):
    oracle, device, plain, checked, every = run(spec, _ptx(spec), None)
    assert oracle == [] and every == []
    assert device == ([], {}, set())
    assert checked == plain
    got = {name: np.frombuffer(checked[name], dtype=next(b.data.dtype for b in spec.buffers
                                                            if b.name == name))
           for name in spec.outputs}
    assert spec.check(got) == []


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_buggy_kernel_reports_what_the_oracle_reports(spec):
    name = _shrinkable(spec)
    assert name is not None, "every spec has a buffer to shrink; this one lost it"
    oracle, device, plain, checked, every = run(spec, _ptx(spec), name)
    assert differences(oracle, *device) == []
    assert every == oracle
    assert checked == plain


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_buggy_debug_build_reports_what_the_oracle_reports(spec):
    """-G code addresses through generic pointers and calls helper functions:
    the generic and device-function paths of the pass."""
    name = _shrinkable(spec)
    assert name is not None, "every spec has a buffer to shrink; this one lost it"
    oracle, device, plain, checked, every = run(spec, _ptx(spec, ("-G",)), name)
    assert differences(oracle, *device) == []
    assert every == oracle
    assert checked == plain
