"""Starting the user's program with gpusafe inside it.

Decides what kind of program a command is (a Python program, or a native
one, checked through the stand-in driver: on the CPU device, or on a GPU
with the preload door routing to the real driver), which device
serves its CUDA calls, and runs it with the bootstrap on the interpreter's
start-up path.  The program's argv,
stdin/stdout/stderr and exit status are its own; gpusafe only adds two
environment variables and a directory where each process leaves its findings.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BOOT_DIR = Path(__file__).resolve().parent / "boot"
PACKAGES_HOME = Path(__file__).resolve().parent.parent.parent
"""The folder holding this gpusafe's packages (the checkout, or site-packages)."""

_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?$")


class LaunchError(Exception):
    """gpusafe cannot run the command as asked (not a violation, not a pass)."""


@dataclass(frozen=True)
class Command:
    argv: list[str]
    python: bool


def classify(argv: list[str]) -> Command:
    """A Python program (an interpreter, a ``.py`` file, a script with a python
    shebang such as ``pytest``) or a native one."""
    if not argv:
        raise LaunchError("no command given: gpusafe run [options] [--] CMD [ARGS...]")
    exe = argv[0]
    if exe.endswith(".py"):
        return Command([sys.executable, *argv], True)
    if _PYTHON_NAME.match(os.path.basename(exe)):
        return Command(list(argv), True)
    path = exe if os.sep in exe else shutil.which(exe)
    if path is None or not os.path.isfile(path):
        raise LaunchError(f"{exe}: command not found")
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError as e:
        raise LaunchError(f"{exe}: cannot read: {e.strerror}") from None
    return Command(list(argv), first.startswith(b"#!") and b"python" in first)


def stand_in_driver(command: Command) -> Path | None:
    """The folder of the stand-in driver for a program on the CPU device
    (built now if needed).  A native program cannot run without it; a Python
    program is served by the Python door anyway, and the stand-in only serves
    the frameworks that load the driver themselves, so there a build failure
    is said and not fatal."""
    from ..native.build import BuildError, library_dir

    try:
        return library_dir()
    except BuildError as e:
        if not command.python:
            raise LaunchError(f"{command.argv[0]} is a native program: {e}") from None
        print(f"gpusafe: {e}; frameworks that load libcuda.so.1 themselves will not find a "
              "driver", file=sys.stderr)
        return None


REAL_DRIVER_ENV = "GPUSAFE_REAL_LIBCUDA"
"""Names the CUDA driver ``--device cuda`` runs on instead of the one the
loader finds (a driver outside the library path; a simulated GPU in tests)."""


def load_named_driver() -> str | None:
    """The driver ``$GPUSAFE_REAL_LIBCUDA`` names, loaded now under its soname
    (``libcuda.so.1``) so that cuda.bindings, which opens the driver by that
    name, gets it; None when the variable is unset."""
    path = os.environ.get(REAL_DRIVER_ENV)
    if not path:
        return None
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        raise LaunchError(f"${REAL_DRIVER_ENV}={path}: cannot load it: {e}") from None
    return os.path.abspath(path)


def loaded_driver() -> str | None:
    """The path of the CUDA driver this process has loaded (after a probe),
    which a native program's checked calls run on."""
    named = os.environ.get(REAL_DRIVER_ENV)
    if named:
        return os.path.abspath(named)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libcuda.so"):
                    return path
    except OSError:
        pass
    return None


def uses_cuda_runtime(path: str) -> str | None:
    """How a native program links the CUDA runtime: ``shared`` (it names
    ``libcudart.so``), ``static`` (nvcc's default: the runtime's
    registration entry point is in the file, its library is not), or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"libcudart.so" in data:
        return "shared"
    return "static" if b"__cudaRegisterFatBinary" in data else None


def probe_gpu() -> str | None:
    """The first GPU's name if the real driver works here, else None."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count < 1:
            return None
        err, dev = driver.cuDeviceGet(0)
        err, name = driver.cuDeviceGetName(256, dev)
        return name.split(b"\0", 1)[0].decode(errors="replace")
    except Exception:
        return None


def choose_device(requested: str) -> tuple[str, str, str]:
    """(``cpu`` or ``cuda``, the device's name for the report, a sentence
    saying what was picked and why)."""
    if requested == "cpu":
        return "cpu", "cpu", "running kernels on the gpusafe CPU device (--device cpu)"
    named = load_named_driver()
    gpu = probe_gpu()
    if requested == "cuda" and named is not None and gpu is None:
        raise LaunchError(f"--device cuda: the driver ${REAL_DRIVER_ENV} names ({named}) has "
                          "no working device")
    if requested == "cuda":
        if gpu is None:
            raise LaunchError("--device cuda: no working CUDA driver and GPU on this machine")
        return "cuda", gpu, f"running kernels on {gpu} (--device cuda)"
    if gpu is None:
        return ("cpu", "cpu",
                "no working CUDA driver and GPU found: running kernels on the CPU device")
    return "cuda", gpu, f"running kernels on {gpu}"


def child_environment(session_dir: Path, options: dict,
                      stand_in: Path | None = None, preload: bool = False,
                      real_driver: str | None = None) -> dict[str, str]:
    """The program's environment with gpusafe in it; ``stand_in``: the folder
    of the stand-in ``libcuda.so.1``, found first by the dynamic loader, and
    the interpreter it starts in a native program (this one, with its
    packages).  ``preload``: the LD_PRELOAD door too, which routes a
    ``dlopen`` of the driver by any path, and ``cuGetProcAddress``, to it;
    ``real_driver``: on a GPU, the driver what gpusafe does not check goes
    to, and gpusafe's own ``cuda.bindings`` (the cuda backend) runs on; a
    Python program's ``cuda.bindings`` then loads the stand-in (frameworks
    such as numba-cuda call it from C) and gpusafe's own calls are forwarded
    to the real driver."""
    env = dict(os.environ)
    if stand_in is not None and preload:
        from ..native.build import LIBRARY, PRELOAD

        env["LD_PRELOAD"] = " ".join([str(stand_in / PRELOAD)]
                                     + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    if stand_in is not None and (preload or real_driver is not None):
        from ..native.build import LIBRARY

        env["GPUSAFE_CHECKED_DRIVER"] = str(stand_in / LIBRARY)
    if stand_in is not None and real_driver is not None:
        env["GPUSAFE_REAL_DRIVER"] = real_driver
    if stand_in is not None:
        paths = [str(stand_in)] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH")
                                   else [])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
        env["GPUSAFE_PYTHON"] = sys.executable
    # Only the start-up hook's folder (which holds nothing else) joins the
    # program's import path; the hook finds gpusafe's own packages by name in
    # GPUSAFE_HOME, so the program's modules are never shadowed by ours.
    paths = [str(BOOT_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["GPUSAFE_HOME"] = str(PACKAGES_HOME)
    env["GPUSAFE_SESSION"] = str(session_dir)
    env["GPUSAFE_OPTIONS"] = json.dumps(options)
    return env


_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals sent to gpusafe that are meant for the program it runs."""

_PR_SET_PDEATHSIG = 1


def _start_child() -> None:
    """In the child, before the program: a process group of its own (so a
    signal gpusafe forwards reaches it and its children once), and death
    with gpusafe (Linux's parent-death signal), so killing gpusafe never
    leaves the program running unobserved."""
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the program outlives a killed gpusafe


def _terminal() -> int | None:
    """Standard input's terminal, when gpusafe runs in its foreground."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def run_program(command: Command, env: dict[str, str]) -> int:
    """Run to completion; returns the exit status as a shell reports it
    (128 + N for death by signal N).

    The program runs in a process group of its own, made the terminal's
    foreground group when gpusafe has one, so Ctrl-C reaches the program (and
    not gpusafe, which waits to collect the findings); a signal sent to
    gpusafe itself (SIGINT, SIGTERM, SIGHUP, SIGQUIT) is passed on to it."""
    tty = _terminal()
    try:
        proc = subprocess.Popen(command.argv, env=env, preexec_fn=_start_child)
    except OSError as e:
        raise LaunchError(f"{command.argv[0]}: {e.strerror}") from None

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}
    ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        if tty is not None:
            os.tcsetpgrp(tty, proc.pid)
        rc = proc.wait()
    finally:
        if tty is not None:
            os.tcsetpgrp(tty, os.getpgrp())
        signal.signal(signal.SIGTTOU, ttou)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - rc if rc < 0 else rc
