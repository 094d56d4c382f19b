"""The window slow path decides inline (no runtime call): a kernel whose only
checks are window checks does not reach ``__gpusafe_check``, and its inline
record behaves as the runtime's ``__gpusafe_record`` (a full buffer counts the
records it drops; the access is still not performed)."""

from __future__ import annotations

import re

import numpy as np

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program
from gpusafe.engine.launches import LaunchPipeline
from gpusafe_instrument.checks import instrument
from gpusafe_testkit.corpus import nvrtc_compile

SHARED_ONLY = r"""
__device__ int results[32];
extern "C" __global__ void shift(int k)
{
    __shared__ int s[32];
    s[threadIdx.x] = threadIdx.x + 1;
    __syncthreads();
    results[threadIdx.x] = s[threadIdx.x + k];
}
"""


def _kernel_body(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}")
    end = re.compile(r"^}", re.M).search(ptx, start)
    assert end is not None
    return ptx[start:end.start()]


def test_a_kernel_with_only_window_checks_calls_no_runtime():
    result = instrument(nvrtc_compile(SHARED_ONLY, "k.cu", "compute_75"))
    assert result.stats["shift"].to_dict()["checks"].get("window", 0) >= 1
    body = _kernel_body(result.ptx, "shift")
    assert "call" not in body.replace("%__gs_", "")


def test_a_window_site_tallies_its_failing_loads_with_no_record_and_skips_them():
    """A window site counts in its tally (issue 14, design B), not in the
    record buffer: a buffer with room for one record drops nothing."""
    result = instrument(nvrtc_compile(SHARED_ONLY, "k.cu", "compute_75"))
    mem = DeviceMemory()
    prog = Program(result.ptx, mem)
    pipeline = LaunchPipeline(mem, capacity=1)
    launch = pipeline.prepare(result.sites, "shift", np.int32(3).tobytes(), [])
    prog.launch("shift", (1, 1, 1), (32, 1, 1), 0, launch.params)
    device, dropped = pipeline.collect(launch)
    assert [v.kind.value for v in device] == ["shared-out-of-bounds"] * 3
    assert sorted(v.thread[0] for v in device) == [29, 30, 31]
    assert all(v.width == 4 and v.tag == 0 and v.count == 1 for v in device)
    assert dropped == 0
    results = np.frombuffer(mem.read(prog.global_symbol("results")[0], 128), np.int32)
    assert list(results[29:]) == [0, 0, 0]  # the refused loads yield zeros
    assert list(results[:29]) == [i + 4 for i in range(29)]
