"""Regenerate the device runtime: ``runtime_cu/gpusafe_layout.h`` from
``gpusafe_instrument/layout.py`` and ``runtime_cu/gpusafe_runtime.ptx`` from
``runtime_cu/gpusafe_runtime.cu`` with NVRTC.

    python scripts/build_runtime.py          # write both files
    python scripts/build_runtime.py --check  # exit 1 if either is stale

The PTX is generated for the lowest target NVRTC 13 supports (compute_75);
``gpusafe_instrument/runtime.py`` rewrites nothing in it but copies its functions
into each module it links into, so the runtime uses only instructions every
supported target and PTX ISA version (7.0 and later) accepts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNTIME_DIR = REPO / "runtime_cu"
SOURCE = RUNTIME_DIR / "gpusafe_runtime.cu"
HEADER = RUNTIME_DIR / "gpusafe_layout.h"
PTX = RUNTIME_DIR / "gpusafe_runtime.ptx"

ARCH = "compute_75"
OPTIONS = ("-rdc=true", "-std=c++17", "--extra-device-vectorization")

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _nvrtc_ptx(source: str, name: str, headers: dict[str, str]) -> str:
    from cuda.bindings import nvrtc

    def check(err, what):
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"{what}: {err!r}")

    names = list(headers)
    err, prog = nvrtc.nvrtcCreateProgram(
        source.encode(), name.encode(), len(names),
        [headers[n].encode() for n in names], [n.encode() for n in names],
    )
    check(err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={ARCH}", *OPTIONS]
        (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, log)
        if cerr != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC failed on {name}:\n{log.rstrip(b' ').decode(errors='replace')}")
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        check(err, "nvrtcGetPTXSize")
        buf = bytearray(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, buf)
        check(err, "nvrtcGetPTX")
        return buf.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def generate() -> tuple[str, str]:
    """(header text, runtime PTX text) as they should be committed."""
    from gpusafe_instrument.layout import c_header

    header = c_header()
    ptx = _nvrtc_ptx(SOURCE.read_text(), SOURCE.name, {HEADER.name: header})
    return header, ptx


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether the files are current")
    args = ap.parse_args(argv)
    header, ptx = generate()
    stale = [p for p, text in ((HEADER, header), (PTX, ptx))
             if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(REPO)}", file=sys.stderr)
        return 1 if stale else 0
    for p, text in ((HEADER, header), (PTX, ptx)):
        p.write_text(text)
        print(f"wrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
