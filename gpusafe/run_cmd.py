"""``gpusafe run [options] [--] CMD [ARGS...]``: check a program while it runs.

The flags follow compute-sanitizer's where they mean the same thing
(``--leak-check``, ``--padding``, ``--print-limit``, ``--error-exitcode``,
``--log-file``).  The exit status
is the program's own when nothing was found, ``--error-exitcode`` (86) when
something was, and 2 when gpusafe itself could not do its job: it never turns
its own failure into a clean pass.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from .engine.registry import DEFAULT_PADDING, DEFAULT_QUARANTINE
from .process.session import RunOptions
from .process.start import LaunchError, child_environment, choose_device, classify, run_program
from .report import Report, ReportBuilder

EXIT_TOOL_ERROR = 2


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


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run a program with memory checking on and report what it hits",
        description="Run CMD with gpusafe active inside it (Python programs using "
                    "cuda-python), then report every violation found.",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where kernels run: the GPU (cuda), gpusafe's CPU device (cpu), "
                        "or the GPU when one works and the CPU device otherwise (auto)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (gpusafe-report/1)")
    p.add_argument("--sarif", metavar="FILE", help="write the report as SARIF 2.1.0")
    p.add_argument("--junit", metavar="FILE", help="write the report as JUnit XML")
    p.add_argument("--log-file", metavar="FILE",
                   help="write the terminal report to FILE instead of stderr")
    p.add_argument("--print-limit", type=int, default=0, metavar="N",
                   help="show at most N violations in the terminal report (0: all)")
    p.add_argument("--error-exitcode", type=int, default=86, metavar="N",
                   help="exit status when a violation was found (default 86)")
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
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="run on the chosen device with every check off (timing baselines, "
                        "running GPU code in CI without a GPU)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]")
    p.set_defaults(func=cmd_run)


def _err(console: Console, message: str) -> None:
    console.print(f"gpusafe run: {message}", markup=False, highlight=False, soft_wrap=True)


def cmd_run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if args.kernel_filter is not None:
        try:
            re.compile(args.kernel_filter)
        except re.error as e:
            _err(err, f"--kernel-filter {args.kernel_filter!r}: {e}")
            return EXIT_TOOL_ERROR
    if args.padding % 256:
        _err(err, "--padding must be a multiple of 256 (the driver's allocation alignment)")
        return EXIT_TOOL_ERROR
    try:
        command = classify(argv)
        if not command.python:
            _err(err, f"{argv[0]} is a native program. gpusafe checks Python programs that use "
                      "cuda-python today; native programs are not supported yet. "
                      "Nothing was run.")
            return EXIT_TOOL_ERROR
        device, device_name, note = choose_device(args.device)
    except LaunchError as e:
        _err(err, str(e))
        return EXIT_TOOL_ERROR
    if not args.check:
        note += "; checking is off (--no-check)"
    err.print(f"gpusafe: {note}", markup=False, highlight=False, soft_wrap=True)
    options = RunOptions(device=device, device_name=device_name, padding=args.padding,
                         quarantine=args.quarantine, leak_check=args.leak_check,
                         check=args.check, kernel_filter=args.kernel_filter)
    session_dir = Path(tempfile.mkdtemp(prefix="gpusafe-"))
    try:
        try:
            status = run_program(command, child_environment(session_dir, options.__dict__))
        except LaunchError as e:
            _err(err, str(e))
            return EXIT_TOOL_ERROR
        report, problems = collect(session_dir, argv, device_name, status, args.check)
    finally:
        shutil.rmtree(session_dir, ignore_errors=True)
    for problem in problems:
        _err(err, problem)
    emit_reports(report, args, err)
    if problems:
        return EXIT_TOOL_ERROR
    return report.exit_status(args.error_exitcode)


def collect(session_dir: Path, argv: list[str], device: str, status: int,
            check: bool = True) -> tuple[Report, list[str]]:
    """Merge every checked process's report; list what went wrong on the way."""
    builder = ReportBuilder(argv, device)
    if not check:  # a report without findings must not read as a clean pass
        builder.record_unchecked("*", "checking was turned off with --no-check")
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


def emit_reports(report: Report, args: argparse.Namespace, err: Console) -> None:
    from .report import junit, sarif, terminal

    search = [os.getcwd()]
    script = next((a for a in args.command if a.endswith(".py")), None)
    if script:
        search.insert(0, str(Path(script).resolve().parent))
    if args.log_file:
        Path(args.log_file).write_text(
            terminal.render_text(report, print_limit=args.print_limit, search_dirs=search))
    else:
        terminal.render(report, file=sys.stderr, print_limit=args.print_limit,
                        search_dirs=search)
    if args.json:
        Path(args.json).write_text(report.to_json())
    if args.sarif:
        Path(args.sarif).write_text(sarif.render(report))
    if args.junit:
        Path(args.junit).write_text(junit.render(report))
