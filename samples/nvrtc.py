"""Compile CUDA C++ to PTX with NVRTC, as the samples' own programs do.

Shared by the samples and the demo so that each sample stays a short,
ordinary cuda-python program.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def cuda_include_dirs() -> list[str]:
    """The CUDA headers shipped by the pip packages (nvidia-cuda-runtime, -cccl).

    The samples include no headers, so a machine whose CUDA is installed
    system-wide (no ``nvidia`` pip namespace) gets an empty list, not an error.
    Both the CUDA 13 wheel layout (``nvidia/cu13/include``) and the CUDA 12 one
    (``nvidia/cuda_runtime/include``, ``nvidia/cuda_cccl/include``) are found.
    """
    try:
        import nvidia
    except ImportError:
        return []
    dirs = []
    for root in nvidia.__path__:
        inc = os.path.join(root, "cu13", "include")
        if os.path.isdir(inc):
            dirs += [inc, os.path.join(inc, "cccl")]
        for pkg in ("cuda_runtime", "cuda_cccl"):
            inc12 = os.path.join(root, pkg, "include")
            if os.path.isdir(inc12):
                dirs.append(inc12)
    return [d for d in dirs if os.path.isdir(d)]


def compile_to_ptx(source: str, name: str, arch: str = "compute_75",
                   options: Sequence[str] = ("-lineinfo",)) -> str:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"nvrtcCreateProgram: {err}")
    try:
        opts = [f"--gpu-architecture={arch}", *options]
        opts += [f"-I{d}" for d in cuda_include_dirs()]
        encoded = [o.encode() for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = bytearray(size)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC could not compile {name}:\n{log.decode(errors='replace')}")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = bytearray(size)
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
