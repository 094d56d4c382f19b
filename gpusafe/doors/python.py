"""Installing the Python door: the functions of ``cuda.bindings.driver`` and
``cuda.bindings.runtime`` (and NVRTC's ``nvrtcCreateProgram``, whose
sources the report quotes) are replaced in place before the program's first
line, so every import style sees the replacements (``from cuda.bindings
import driver``, ``import cuda.bindings.driver as cuda``, ``from
cuda.bindings.driver import cuMemAlloc``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends import Backend
from ..engine.checking import Engine
from ..engine.findings import Findings
from .python_driver import DriverDoor
from .python_nvrtc import install_nvrtc_door
from .python_runtime import RuntimeDoor
from .wrappers import backend_functions, install, unsupported_watch

INSTALLED: dict[str, Any] = {}
"""The functions the door replaced, by name (what the program would have called)."""

NO_CHECK = "checking was turned off with --no-check"
"""Why every kernel of a ``--no-check`` run (listed as ``*``) ran unchecked."""


def install_python_door(backend: Backend, engine: Engine | None, findings: Findings) -> None:
    """Route both modules to ``backend``; with an ``engine``, through the
    checking wrappers (without one, as ``--no-check`` asks, unchecked).
    Either way, a call the backend cannot serve (a function it lacks, a
    feature it answers as unsupported) goes into ``findings``."""
    from cuda.bindings import driver, runtime

    unserved = findings.unimplemented
    codes = backend.unsupported_results
    watch = unsupported_watch(codes, backend.unsupported_reason, unserved) if codes else None
    real = backend_functions(driver, "cu", backend.driver, unserved)
    wrappers = DriverDoor(engine, real).wrappers() if engine is not None else \
        _counted_launches(real, findings, backend.driver)
    install(driver, real, wrappers, INSTALLED, watch)
    real = backend_functions(runtime, "cuda", backend.runtime, unserved)
    wrappers = RuntimeDoor(engine, real).wrappers() if engine is not None else {}
    install(runtime, real, wrappers, INSTALLED, watch)
    if engine is not None:
        install_nvrtc_door(engine, INSTALLED)


def _counted_launches(real: dict[str, Any], findings: Findings,
                      backend_driver: Any) -> dict[str, Callable[..., Any]]:
    """Without checking, the launches still count: as launches of ``*``,
    unchecked by request, so the report says how many kernels ran unchecked."""

    capturing = getattr(backend_driver, "cuStreamIsCapturing", None)

    def counted(fn: Callable[..., Any], stream: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            # a launch on a capturing stream is a node: it counts when its graph runs
            if capturing is None or capturing(stream(*args))[1] != 1:
                findings.report.record_unchecked("*", NO_CHECK, requested=True)
            return fn(*args)

        return wrapper

    streams = {"cuLaunchKernel": lambda *a: a[8],
               "cuLaunchKernelEx": lambda *a: getattr(a[0], "hStream", None),
               "cuLaunchCooperativeKernel": lambda *a: a[8]}
    wrapped = {n: counted(real[n], stream) for n, stream in streams.items() if n in real}
    route = getattr(backend_driver, "set_graph_calls", None)
    if route is not None:
        route(wrapped)  # graph kernel nodes count as launches too
    return wrapped

