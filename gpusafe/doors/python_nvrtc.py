"""The Python door for ``cuda.bindings.nvrtc``: the source of every program
handed to ``nvrtcCreateProgram`` goes to the engine with the program's site
of the call, so a kernel compiled from a string is reported where that
string is written (:mod:`gpusafe.engine.sources`).  NVRTC itself is the
real one, whatever the device: it compiles on the host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..engine.callsite import DEFAULT_STACK_DEPTH, program_site, stack_depth
from ..engine.checking import Engine
from .binding import bound


def nvrtc_wrappers(engine: Engine, real: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    create = real["nvrtcCreateProgram"]

    def nvrtcCreateProgram(src, name, *rest):  # noqa: N802 - the API's name
        result = create(src, name, *rest)
        if int(result[0]) == 0 and src is not None:
            text = src.decode("utf-8", "replace") if isinstance(src, bytes) else str(src)
            shown = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
            # the literal may sit a few frames out (a compile helper): look that far at least
            site = program_site(depth=max(stack_depth(), DEFAULT_STACK_DEPTH))
            engine.kernel_source(shown or "default_program", text, site)
        return result

    return {"nvrtcCreateProgram": nvrtcCreateProgram}


def install_nvrtc_door(engine: Engine, installed: dict[str, Any]) -> None:
    """Wrap ``nvrtcCreateProgram`` in place; nothing when NVRTC's bindings
    cannot be imported (the program cannot compile kernels then either)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return
    original = nvrtc.nvrtcCreateProgram
    wrapper = nvrtc_wrappers(engine, {"nvrtcCreateProgram": original})["nvrtcCreateProgram"]
    installed.setdefault("nvrtcCreateProgram", original)
    nvrtc.nvrtcCreateProgram = bound(original, wrapper)
