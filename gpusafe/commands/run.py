"""``gpusafe run [options] [--] CMD [ARGS...]``: check a program while it runs.

The flags follow compute-sanitizer's where they mean the same thing
(``--leak-check``, ``--padding``, ``--print-limit``, ``--error-exitcode``,
``--log-file``). The exit status is the program's own when nothing was found,
``--error-exitcode`` (86) when something was, and 2 when gpusafe itself could
not do its job, a report file it could not write included: it never turns its
own failure into a clean pass. The report flags (``--log-file``, ``--json``,
``--sarif``, ``--junit``) are those of :mod:`gpusafe.report.formats`.
``--suppressions FILE`` leaves out the findings a suppressions file matches
(:mod:`gpusafe.report.suppressions`) before any report is written and before
the exit status is decided; a file that cannot be used stops the run before
the program starts.

A run that could not check what it was asked to is never a pass: a call the
backend does not implement (or a feature it lacks) exits 2, and so does a
kernel that ran unchecked, unless ``--allow-unchecked`` is given or the user
asked for it (``--no-check``, ``--kernel-filter``); both are listed in every
report, and a run that checked no launch says so.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..cpu.driver_profile import MAX_DEVICES
from ..doors.python import NO_CHECK
from ..engine.callsite import DEFAULT_STACK_DEPTH
from ..engine.registry import DEFAULT_PADDING, DEFAULT_QUARANTINE
from ..exitcodes import EXIT_TOOL_ERROR, EXIT_VIOLATIONS
from ..process.session import RunOptions
from ..process.start import (
    Command,
    LaunchError,
    child_environment,
    choose_device,
    classify,
    loaded_driver,
    run_program,
    stand_in_driver,
    uses_cuda_runtime,
)
from ..report import Report, ReportBuilder, formats, suppressions
from ..report.formats import RenderOptions
from . import count, reason, tool_error, write_output

PROG = "gpusafe run"

LOG_FILE_WIDTH = 100
"""The line width of the terminal report in a ``--log-file``."""


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("b")
    mult = units.get(t[-1:], 1)
    if t[-1:] in units:
        t = t[:-1]
    try:
        value = int(t, 0) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("sizes must not be negative")
    return value


def _exit_status(text: str) -> int:
    """``--error-exitcode``: an exit status is 8 bits, and 0 would read as a pass."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= 255:
        raise argparse.ArgumentTypeError(f"must be 1-255 (an exit status is 8 bits), not {n}")
    return n


def _dest(fmt: formats.Format) -> str:
    return fmt.run_flag.lstrip("-").replace("-", "_")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run", help="run a program with memory checking on and report what it hits",
        description="Run CMD with gpusafe active inside it (Python programs using "
                    "cuda-python), then report every violation found.",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where kernels run: the GPU (cuda), gpusafe's CPU device (cpu), "
                        "or the GPU when one works and the CPU device otherwise (auto)")
    for fmt in formats.FORMATS.values():
        p.add_argument(fmt.run_flag, dest=_dest(fmt), metavar="FILE", help=fmt.run_help)
    p.add_argument("--print-limit", type=count, default=0, metavar="N",
                   help="show at most N violations in the terminal report (0: all)")
    p.add_argument("--error-exitcode", type=_exit_status, default=EXIT_VIOLATIONS, metavar="N",
                   help=f"exit status (1-255) when a violation was found "
                        f"(default {EXIT_VIOLATIONS})")
    p.add_argument("--leak-check", action="store_true",
                   help="report allocations still live when the program exits")
    p.add_argument("--padding", type=_size, default=DEFAULT_PADDING, metavar="BYTES",
                   help=f"red zone after each allocation (default {DEFAULT_PADDING})")
    p.add_argument("--quarantine", type=_size, default=DEFAULT_QUARANTINE, metavar="BYTES",
                   help="freed bytes kept from reuse so stale pointers are caught "
                        f"(default {DEFAULT_QUARANTINE >> 20} MiB)")
    p.add_argument("--kernel-filter", metavar="REGEX",
                   help="check only kernels whose (mangled) name matches REGEX; the others "
                        "run unchecked and are listed as such in the report")
    p.add_argument("--every-offender", action="store_true",
                   help="keep every failing access (its thread and address), not a count "
                        "and the first 4 per source site; checked kernels then take more "
                        "registers")
    p.add_argument("--kernel-timeout", type=_seconds, default=DEFAULT_KERNEL_TIMEOUT,
                   metavar="SECONDS",
                   help="on the CPU device, end a kernel still running after SECONDS and "
                        f"report it (default {DEFAULT_KERNEL_TIMEOUT:g}; 0: no limit)")
    p.add_argument("--cpu-devices", type=_cpu_devices, default=_cpu_devices_default(),
                   metavar="N",
                   help="how many devices the CPU device gives the program, in one address "
                        f"space with peer access (1-{MAX_DEVICES}; default "
                        f"${CPU_DEVICES_ENV} or 1); ignored on a GPU")
    p.add_argument("--suppressions", action="append", default=[], metavar="FILE",
                   help="do not report (or fail on) the violations a suppressions file "
                        "matches (repeatable; see gpusafe.report.suppressions for the format)")
    p.add_argument("--stack-depth", type=count, default=DEFAULT_STACK_DEPTH, metavar="N",
                   help="frames of the program kept for each allocation, free, copy and "
                        f"launch (default {DEFAULT_STACK_DEPTH}; 0: the call's line only)")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="run on the chosen device with every check off (timing baselines, "
                        "running GPU code in CI without a GPU); the run is unchecked by "
                        "request, so that alone does not exit 2")
    p.add_argument("--allow-unchecked", action="store_true",
                   help="do not exit 2 because a kernel ran unchecked (a cubin or fatbin "
                        "module, a kernel the instrumenter cannot check); such kernels are "
                        "still listed. A call the device does not implement still exits 2")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]")
    p.set_defaults(func=cmd_run)
    return p


DEFAULT_KERNEL_TIMEOUT = 600.0
"""Seconds a kernel may run on the CPU device: far beyond what a test-sized
launch takes there (a 512x512 tiled matmul takes about 10 s), short enough
that a kernel that never ends does not hang a CI job."""


CPU_DEVICES_ENV = "GPUSAFE_CPU_DEVICES"
"""The default of ``--cpu-devices``: a CI job sets it once for every run."""


def _cpu_devices(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= MAX_DEVICES:
        raise argparse.ArgumentTypeError(f"must be 1-{MAX_DEVICES}, not {n}")
    return n


def _cpu_devices_default() -> str:
    """``$GPUSAFE_CPU_DEVICES``, else 1: a string, which argparse converts
    (and refuses) with the flag's own type when the flag is absent."""
    return os.environ.get(CPU_DEVICES_ENV) or "1"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be 0 (no limit) or more")
    return value


def cmd_run(args: argparse.Namespace) -> int:
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if args.kernel_filter is not None:
        try:
            re.compile(args.kernel_filter)
        except re.error as e:
            return tool_error(PROG, f"--kernel-filter {args.kernel_filter!r}: {e}")
    if args.padding % 256:
        return tool_error(PROG, "--padding must be a multiple of 256 (the driver's allocation "
                                "alignment)")
    try:
        suppress = suppressions.load(args.suppressions)
    except suppressions.SuppressionError as e:
        return tool_error(PROG, str(e))
    try:
        command = classify(argv)
        device, device_name, note = choose_device(args.device)
        real_driver = None if device == "cpu" else loaded_driver()
        if not command.python and device != "cpu":
            refusal = gpu_refusal(command)
            if refusal is not None:
                return tool_error(PROG, refusal)
            if real_driver is None:
                return tool_error(PROG, f"{argv[0]} is a native program: gpusafe cannot tell "
                                        "which CUDA driver this process loaded, which its "
                                        "unchecked calls must reach. Nothing was run.")
        stand_in = stand_in_driver(command) if device == "cpu" or real_driver else None
    except LaunchError as e:
        return tool_error(PROG, str(e))
    if not args.check:
        note += "; checking is off (--no-check)"
    if device == "cpu" and args.cpu_devices > 1:
        note += f"; {args.cpu_devices} CPU devices (--cpu-devices)"
    elif device != "cpu" and args.cpu_devices > 1:
        note += "; --cpu-devices is for the CPU device and is ignored"
    print(f"gpusafe: {note}", file=sys.stderr)
    options = RunOptions(device=device, device_name=device_name, padding=args.padding,
                         quarantine=args.quarantine, leak_check=args.leak_check,
                         check=args.check, kernel_filter=args.kernel_filter,
                         every_offender=args.every_offender,
                         kernel_timeout=args.kernel_timeout or None,
                         stack_depth=args.stack_depth, cpu_devices=args.cpu_devices)
    session_dir = Path(tempfile.mkdtemp(prefix="gpusafe-"))
    try:
        try:
            env = child_environment(session_dir, options.__dict__, stand_in,
                                    preload=not command.python, real_driver=real_driver)
            status = run_program(command, env)
        except LaunchError as e:
            return tool_error(PROG, str(e))
        report, problems = collect(session_dir, argv, device_name, status, args.check)
    finally:
        shutil.rmtree(session_dir, ignore_errors=True)
    for problem in problems:
        tool_error(PROG, problem)
    status = conclude(report, args, suppress)
    return EXIT_TOOL_ERROR if problems else status


def gpu_refusal(command: Command) -> str | None:
    """Why a native program is not run on a GPU, or None: driver-API programs
    and programs on the shared CUDA runtime (the stand-in, over the driver
    door) are checked there; a statically linked runtime is not (it loads
    kernels through the driver's private interface, which gpusafe cannot see)."""
    path = command.argv[0] if os.sep in command.argv[0] else shutil.which(command.argv[0])
    if path is None or uses_cuda_runtime(path) != "static":
        return None
    return (f"{command.argv[0]} is a native program with the CUDA runtime linked in "
            "statically (nvcc's default), which loads its kernels through the driver's "
            "private interface: gpusafe cannot see them. Rebuild it with `gpusafe nvcc` "
            "(or `nvcc -cudart shared`). Nothing was run.")


def conclude(report: Report, args: argparse.Namespace,
             suppress: Sequence[suppressions.Suppression] = ()) -> int:
    """The end of a run, once its report is merged: leave out what the
    suppressions match, write every report, and decide the exit status."""
    unused: list[str] = []
    if args.suppressions:
        report, unmatched = suppressions.apply(report, suppress)
        unused = [str(s) for s in unmatched]
    unwritten = write_reports(report, args, unused)
    for failure in unwritten:
        tool_error(PROG, failure)
    if unwritten:
        return EXIT_TOOL_ERROR
    allow = args.allow_unchecked
    if not report.violations:  # a violation decides the status; the report lists the rest
        for cause in incomplete_causes(report, allow):
            tool_error(PROG, cause)
    return report.exit_status(args.error_exitcode, allow_unchecked=allow)


def incomplete_causes(report: Report, allow_unchecked: bool) -> list[str]:
    """The one-line causes of an exit 2 that the report explains in full."""
    causes = []
    calls = report.unimplemented_calls
    if calls:
        first = calls[0]
        at = f" at {first.site}" if first.site else ""
        n = sum(c.count for c in calls)
        causes.append(f"the program made {n} call{'s' if n != 1 else ''} the {report.device} "
                      f"device could not serve (first: {first.name}{at}); the run is "
                      "incomplete: exit 2")
    unasked = [k for k in report.unchecked_kernels or () if not k.requested]
    if unasked and not allow_unchecked:
        names = ", ".join(k.name for k in unasked[:3]) + (" ..." if len(unasked) > 3 else "")
        causes.append(f"{len(unasked)} kernel{'s' if len(unasked) != 1 else ''} ran unchecked "
                      f"({names}): exit 2 (--allow-unchecked accepts this)")
    return causes


def collect(session_dir: Path, argv: list[str], device: str, status: int,
            check: bool = True) -> tuple[Report, list[str]]:
    """Merge every checked process's report; list what went wrong on the way."""
    builder = ReportBuilder(argv, device)
    if not check:  # a report without findings must not read as a clean pass
        builder.record_unchecked("*", NO_CHECK, launches=None, requested=True)
    problems = []
    reports = sorted(session_dir.glob("*.json"))
    for failed in sorted(session_dir.glob("*.failed")):
        problems.append(failed.read_text())
    for path in reports:
        try:
            builder.merge(Report.from_json(path.read_text()))
        except (OSError, ValueError) as e:
            problems.append(f"could not read the findings of process {path.stem}: {e}")
    if not reports and not problems:
        problems.append("the program exited before gpusafe could start inside it "
                        f"(exit status {status}); nothing was checked")
    return builder.build(exit_code=status), problems


def write_reports(report: Report, args: argparse.Namespace,
                  unused_suppressions: Sequence[str] = ()) -> list[str]:
    """Write every report file the flags name, and show the terminal report on
    standard error unless ``--log-file`` took it. Returns one line per file
    that could not be written; the terminal report is then shown all the
    same (on standard error if it was the log file), so no finding is lost."""
    search = [Path(os.getcwd())]
    script = next((a for a in args.command if a.endswith(".py")), None)
    if script:
        search.insert(0, Path(script).resolve().parent)
    to_file = RenderOptions(print_limit=args.print_limit, search_dirs=search, color=False,
                            width=LOG_FILE_WIDTH, unused_suppressions=unused_suppressions)
    unwritten = []
    logged = False
    for fmt in formats.FORMATS.values():
        path = getattr(args, _dest(fmt))
        if path is None:
            continue
        try:
            write_output(path, formats.render(report, fmt.name, to_file))
        except OSError as e:
            unwritten.append(f"cannot write {path} ({fmt.run_flag}): {reason(e)}")
            continue
        logged = logged or fmt.name == formats.TERMINAL
    if not logged:
        formats.write(report, formats.TERMINAL, sys.stderr,
                      RenderOptions(print_limit=args.print_limit, search_dirs=search,
                                    unused_suppressions=unused_suppressions))
    return unwritten
