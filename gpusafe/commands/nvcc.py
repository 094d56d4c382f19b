"""``gpusafe nvcc ARGS...``: nvcc with what makes a program checkable on the
CPU device, so a CI job builds with it and runs ``gpusafe run --device cpu
-- ./app``.

It adds ``-cudart shared`` (the stand-in runtime can serve only a runtime the
program loads as a library), ``--no-compress`` (the CPU device reads the PTX
nvcc embeds; uncompressed, it needs no decompressor), ``-lineinfo`` (device
source lines in reports) and ``-g`` (host line tables: the report's native
stack frames), each unless the user chose otherwise; when nvcc links, it
also finds ``libcudart.so`` in the stand-in's folder (the pip toolkit ships
only ``libcudart.so.13``; the program's dependency is the same
``libcudart.so.13``, so on a GPU it runs on NVIDIA's).  The exit status is
nvcc's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import tool_error

PROG = "gpusafe nvcc"

_NO_LINK = ("-c", "--compile", "-ptx", "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin",
            "-E", "--preprocess", "-M", "--generate-dependencies", "-lib", "--lib")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "nvcc", help="run nvcc with the flags that make a program checkable",
        description="Run nvcc with -cudart shared, --no-compress, -lineinfo and -g added, so that "
                    "`gpusafe run --device cpu -- ./app` can check the program.")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="NVCC ARGS")
    p.set_defaults(func=cmd_nvcc, pass_through=True)  # every flag is nvcc's
    return p


def find_nvcc() -> Path | None:
    """``$NVCC``, nvcc on ``PATH``, or the pip toolkit's (nvidia-cuda-nvcc)."""
    if os.environ.get("NVCC"):
        return Path(os.environ["NVCC"])
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "cu13" / "bin" / "nvcc"
        if candidate.is_file():
            return candidate
    return None


def _has(args: list[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in args for n in names)


def nvcc_argv(nvcc: Path, args: list[str], stand_in: Path | None) -> list[str]:
    """The nvcc command line: the user's arguments and what checking needs."""
    added = []
    if not _has(args, "-cudart", "--cudart"):
        added += ["-cudart", "shared"]
    if not _has(args, "--no-compress", "-no-compress", "--compress-mode", "-compress-mode"):
        added.append("--no-compress")
    if not _has(args, "-lineinfo", "--generate-line-info", "-G", "--device-debug"):
        added.append("-lineinfo")
    if not _has(args, "-g", "--debug"):
        added.append("-g")  # host line tables: the report's native frames
    if stand_in is not None and not _has(args, *_NO_LINK):
        # The stand-in libcudart.so needs the stand-in libcuda.so.1.  ld looks
        # for a library's needs on LD_LIBRARY_PATH before its RUNPATH, and on a
        # GPU machine that holds NVIDIA's libcuda.so.1: -rpath-link comes first.
        added += [f"-L{stand_in}", "-Xlinker", f"-rpath-link={stand_in}"]
        toolkit_lib = nvcc.resolve().parent.parent / "lib"
        if (toolkit_lib / "libcudadevrt.a").is_file():  # the pip toolkit's nvcc lacks the -L
            added.append(f"-L{toolkit_lib}")
    return [str(nvcc), *args, *added]


def cmd_nvcc(args: argparse.Namespace) -> int:
    from ..native.build import BuildError, library_dir

    user = list(args.args)
    if user and user[0] == "--":
        user = user[1:]
    nvcc = find_nvcc()
    if nvcc is None:
        return tool_error(PROG, "nvcc not found (set NVCC, put it on PATH, or install "
                                "nvidia-cuda-nvcc)")
    try:
        stand_in = library_dir()
    except BuildError as e:
        return tool_error(PROG, str(e))
    argv = nvcc_argv(nvcc, user, stand_in)
    print(f"gpusafe: {' '.join(argv)}", file=sys.stderr)
    try:
        return subprocess.run(argv).returncode
    except OSError as e:
        return tool_error(PROG, f"{nvcc}: {e.strerror}")
