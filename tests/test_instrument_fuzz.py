"""Hypothesis-generated kernels (random index expressions over several
buffers, a shared array, a local array, a pointer table, a loop and a device
function call), compiled with NVRTC and run on the CPU device: the
instrumented run reports exactly the oracle's violations and computes the
same outputs.

Indices are folded into a band of 60 elements around each array so that a bad
access lands in the red zone next to its allocation (or outside the shared or
local window), where the oracle, which knows only the allocation map, sees
it too.  Stores that can race write one value, so the outputs do not depend
on the order threads run in."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_instrument_cpu import Buf, PtrTable, run_both, same_violations

N = 64  # elements of a and b
SH = 32  # shared floats
LOC = 8  # local floats
T = 4  # pointer-table entries

TERMS = ["i", "t", "k", "n", "(i * 3)", "(t >> 1)", "(k * k)"]


@st.composite
def expr(draw) -> str:
    parts = [draw(st.sampled_from(TERMS)) for _ in range(draw(st.integers(1, 3)))]
    ops = [draw(st.sampled_from(["+", "-", "^", "+"])) for _ in range(len(parts) - 1)]
    text = parts[0]
    for op, p in zip(ops, parts[1:], strict=True):
        text = f"({text} {op} {p})"
    c = draw(st.integers(-70, 70))
    return f"({text} + {c})"


def band(e: str, size: int, slack: int) -> str:
    """e folded into [-slack, size + slack)."""
    return f"((({e}) & 0x7fffffff) % {size + 2 * slack} - {slack})"


@st.composite
def kernel_source(draw) -> str:
    e = [draw(expr()) for _ in range(8)]
    loop = draw(st.integers(1, 3))
    return f"""
__device__ __noinline__ float dev_get(const float* p, int j) {{ return p[j]; }}

extern "C" __global__ void fuzz(float* out, const float* a, const float* b,
                                const float* const* tab, int n, float* out2)
{{
    __shared__ float sh[{SH}];
    float loc[{LOC}];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    int k = 0;
    sh[t % {SH}] = a[{band(e[0], N, 60)}];
    for (k = 0; k < {LOC}; ++k) loc[k] = b[{band(e[1], N, 60)}];
    __syncthreads();
    float acc = 0.0f;
    for (k = 0; k < {loop}; ++k) {{
        acc += sh[{band(e[2], SH, 8)}];
        acc += loc[{band(e[3], LOC, 4)}];
        acc += tab[(({e[4]}) & 0x7fffffff) % {T}][{band(e[5], N, 60)}];
        acc += dev_get(a, {band(e[6], N, 60)});
    }}
    out[i] = acc;
    out2[{band(e[7], N, 60)}] = 1.0f;  // stores that may race write one value
}}
"""


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(src=kernel_source())
def test_generated_kernels_report_what_the_oracle_reports(src):
    rng = np.random.default_rng(0)
    a = (rng.integers(0, 64, N) / 8).astype(np.float32)
    b = (rng.integers(0, 64, N) / 8).astype(np.float32)
    args = [Buf(np.zeros(N, np.float32)), Buf(a), Buf(b), PtrTable([(1, 0), (2, 0), (1, 0), (2, 0)]),
            np.int32(N), Buf(np.zeros(N, np.float32))]
    o = run_both(src, "fuzz", (2, 1, 1), (32, 1, 1), args)
    assert o.dropped == 0
    assert same_violations(o), src
    assert o.checked_out == o.plain_out, src
