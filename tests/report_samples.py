"""Realistic sessions for the report tests, built the way `gpusafe run` will
build them: through ReportBuilder, one occurrence at a time.

The program (app.py) allocates a 256-byte output buffer at line 31 and launches
``oob_write``, which indexes it as if it were twice as long; it frees a 64-byte
buffer at line 12 and then launches ``uaf_read`` on it; it frees that buffer
again at line 40; it never frees the 128-byte buffer it allocated at line 20.
"""

from __future__ import annotations

from pathlib import Path

from gpusafe.report import AllocationInfo, Report, ReportBuilder, SourceLocation
from gpusafe_instrument.kinds import ViolationKind

OOB_CU = """\
extern "C" __global__ void oob_write(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = 2.0f * i;
        out[2 * i + 1] = v;   // out holds n floats, not 2 * n
    }
}
"""
OOB_LINE = 5

UAF_CU = """\
extern "C" __global__ void uaf_read(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i] * 0.5f;
    }
}
"""
UAF_LINE = 4

OUT_BASE = 0x7F0000001000   # 256 bytes, tag 3, allocated at app.py:31
FREED_BASE = 0x7F0000003000  # 64 bytes, tag 2, allocated at app.py:10, freed at app.py:12
LEAK_BASE = 0x7F0000005000   # 128 bytes, tag 4, allocated at app.py:20, never freed
HALO_BASE = 0x7F0000007000   # 512 bytes, tag 5, allocated at app.py:50


def write_sources(directory: Path) -> None:
    (directory / "oob.cu").write_text(OOB_CU)
    (directory / "uaf.cu").write_text(UAF_CU)


def out_of_bounds(builder: ReportBuilder) -> None:
    """n = 64: threads 32..63 of block 0 store past the 64-float buffer, the
    first of them (out[65]) 4 bytes past its end."""
    for t in range(32, 64):
        offset = 4 * (2 * t + 1)
        builder.add_device_violation(
            ViolationKind.GLOBAL_OUT_OF_BOUNDS,
            access="write", size=4, address=OUT_BASE + offset,
            kernel="oob_write", ptx_line=41, instruction="st.global.f32 [%rd8], %f2;",
            location=SourceLocation("oob.cu", OOB_LINE, 9),
            block=(0, 0, 0), thread=(t, 0, 0),
            allocation=AllocationInfo(tag=3, base=OUT_BASE, size=256, offset=offset,
                                      allocated_at="app.py:31"),
        )


def underflow(builder: ReportBuilder) -> None:
    """A stencil reading 12 bytes before its buffer (index -3)."""
    builder.add_device_violation(
        ViolationKind.GLOBAL_OUT_OF_BOUNDS,
        access="read", size=4, address=HALO_BASE - 12,
        kernel="stencil", ptx_line=77, instruction="ld.global.f32 %f3, [%rd12];",
        location=SourceLocation("stencil.cu", 9, 17),
        block=(0, 0, 0), thread=(0, 0, 0),
        allocation=AllocationInfo(tag=5, base=HALO_BASE, size=512, offset=-12,
                                  allocated_at="app.py:50"),
    )


def use_after_free(builder: ReportBuilder) -> None:
    builder.add_device_violation(
        ViolationKind.USE_AFTER_FREE,
        access="read", size=4, address=FREED_BASE + 8,
        kernel="uaf_read", ptx_line=30, instruction="ld.global.nc.f32 %f1, [%rd5];",
        location=SourceLocation("uaf.cu", UAF_LINE, 18),
        block=(0, 0, 0), thread=(2, 0, 0),
        allocation=AllocationInfo(tag=2, base=FREED_BASE, size=64, offset=8,
                                  allocated_at="app.py:10", freed_at="app.py:12"),
    )


def double_free(builder: ReportBuilder) -> None:
    builder.add_host_violation(
        ViolationKind.DOUBLE_FREE,
        location=SourceLocation("app.py", 40),
        address=FREED_BASE,
        allocation=AllocationInfo(tag=2, base=FREED_BASE, size=64, offset=0,
                                  allocated_at="app.py:10", freed_at="app.py:12"),
    )


def leak(builder: ReportBuilder) -> None:
    builder.add_host_violation(
        ViolationKind.LEAK,
        location=SourceLocation("app.py", 20),
        address=LEAK_BASE, size=128,
        allocation=AllocationInfo(tag=4, base=LEAK_BASE, size=128,
                                  allocated_at="app.py:20"),
    )


def buggy_session() -> ReportBuilder:
    """An out-of-bounds write, an underflow, a use-after-free, a double free, a
    leak, and one kernel that could not be checked."""
    b = ReportBuilder(["python", "app.py", "--n", "64"], device="cpu")
    b.record_launch("oob_write")
    out_of_bounds(b)
    b.record_launch("stencil")
    underflow(b)
    b.record_launch("uaf_read")
    use_after_free(b)
    double_free(b)
    b.record_launch("oob_write")
    leak(b)
    b.record_unchecked("cublas_sgemm", "module loaded from a cubin: no PTX to instrument")
    return b


def buggy_report() -> Report:
    return buggy_session().build(exit_code=0)


def clean_report() -> Report:
    b = ReportBuilder(["python", "saxpy.py"], device="NVIDIA H200")
    b.record_launch("saxpy")
    b.record_launch("saxpy")
    return b.build(exit_code=0)


# The example of DESIGN.md "JSON report", verbatim.
DESIGN_EXAMPLE = """
{
  "schema": "gpusafe-report/1",
  "tool": {"name": "gpusafe", "version": "0.1.0"},
  "command": ["python", "app.py"],
  "device": "cpu" ,
  "exit_code": 0,
  "violations": [
    {
      "kind": "global-out-of-bounds",
      "access": "write",
      "size": 4,
      "address": "0x7f0000001040",
      "kernel": "oob_write",
      "location": {"file": "oob.cu", "line": 5, "column": 5},
      "ptx_line": 41,
      "instruction": "st.global.f32 [%rd8], %f2;",
      "count": 32,
      "threads": [{"block": [0, 0, 0], "thread": [16, 0, 0]}],
      "allocation": {"tag": 3, "base": "0x7f0000001000", "size": 64,
                     "offset": 64, "allocated_at": "app.py:31", "freed_at": null}
    }
  ],
  "summary": {"violations": 1, "occurrences": 32, "kernels_checked": 2,
              "launches": 2, "dropped": 0}
}
"""
