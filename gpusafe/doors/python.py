"""Installing the Python door: the functions of ``cuda.bindings.driver`` and
``cuda.bindings.runtime`` (and NVRTC's ``nvrtcCreateProgram``, whose
sources the report quotes) are replaced in place before the program's first
line, so every import style sees the replacements (``from cuda.bindings
import driver``, ``import cuda.bindings.driver as cuda``, ``from
cuda.bindings.driver import cuMemAlloc``)."""

from __future__ import annotations

from typing import Any

from ..backends import Backend
from ..engine.checking import Engine
from .python_driver import DriverDoor
from .python_nvrtc import install_nvrtc_door
from .python_runtime import RuntimeDoor
from .wrappers import backend_functions, install

INSTALLED: dict[str, Any] = {}
"""The functions the door replaced, by name (what the program would have called)."""


def install_python_door(backend: Backend, engine: Engine | None) -> None:
    """Route both modules to ``backend``; with an ``engine``, through the
    checking wrappers (without one, as ``--no-check`` asks, unchecked)."""
    from cuda.bindings import driver, runtime

    real = backend_functions(driver, "cu", backend.driver)
    wrappers = DriverDoor(engine, real).wrappers() if engine is not None else {}
    install(driver, real, wrappers, INSTALLED)
    real = backend_functions(runtime, "cuda", backend.runtime)
    wrappers = RuntimeDoor(engine, real).wrappers() if engine is not None else {}
    install(runtime, real, wrappers, INSTALLED)
    if engine is not None:
        install_nvrtc_door(engine, INSTALLED)
