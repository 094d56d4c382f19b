"""The wrapper shapes the driver and runtime doors share.

``cuMemAlloc`` and ``cudaMalloc``, ``cuMemFree`` and ``cudaFree``, the copies
and memsets of both APIs ask the engine the same questions; only the result
codes and the argument positions differ.  :class:`ApiWrappers` holds the one
implementation of each shape; :mod:`.python_driver` and :mod:`.python_runtime`
give it their API's codes and say which function gets which shape.  Every
wrapper takes positional arguments: :func:`.binding.bound` puts keyword calls
into that shape when the table is installed.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

from cuda.bindings.driver import CUresult

from ..cudaapi.args import c_int
from ..engine.callsite import program_site
from ..engine.checking import Engine
from .binding import bound

Ranges = Callable[..., list[tuple[int | None, int]]]
"""``ranges(*args)``: the device ranges ``[(address or None, bytes)]`` a call touches."""

Unserved = Callable[[str, "str | None", str], None]
"""``unserved(name, site, reason)``: the program called ``name`` at ``site``
and the backend could not serve it (the report's ``unimplemented_calls``)."""

NOT_IMPLEMENTED = "not implemented by gpusafe's CPU device"
"""The reason a report gives for a function the backend does not have."""


def size(value: Any) -> int:
    """A ``size_t`` argument converted as cuda-python converts it (a float
    truncates; a str is the same ``TypeError``), so the door reads the size
    the backend will get and refuses what the bindings refuse."""
    return c_int(value, "size_t")


def address(value: Any) -> int | None:
    """A device address argument as an int; None for a host buffer object."""
    if value is None:
        return 0
    if isinstance(value, numbers.Integral):
        return int(value)
    if hasattr(value, "getPtr"):  # cuda-python handle types: CUdeviceptr, ...
        return int(value)
    return None


class ApiWrappers:
    """Wrappers around one API's allocation, free, copy and sync calls."""

    null_free_passes = False
    """Whether freeing address 0 goes to the backend unjudged (the runtime
    documents ``cudaFree(0)`` as a no-op)."""

    def __init__(self, engine: Engine, real: dict[str, Any], ok: Any, invalid: Any) -> None:
        self.engine = engine
        self.real = real  # name -> backend function
        self.ok = ok  # the API's success code
        self.invalid = invalid  # the API's invalid-value code: what a refused call returns

    def _capturing(self, stream: Any) -> bool:
        """Whether ``stream`` is capturing (an invalidated capture included:
        the backend gives the call its error).  A stream the query refuses
        (the legacy stream beside a capture, a bad handle) is taken as not
        capturing, and the backend answers the call as it answered the query."""
        query = getattr(self.engine.driver, "cuStreamIsCapturing", None)
        if query is None:
            return False
        try:
            err, status = query(stream)
        except (TypeError, ValueError, AttributeError, OverflowError):
            return False
        return err == CUresult.CUDA_SUCCESS and int(status) != 0

    # -- allocation and free -------------------------------------------------

    def alloc_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        engine = self.engine

        def wrapper(bytesize, *rest):
            n = size(bytesize)
            if n == 0:
                return real(bytesize, *rest)  # the backend's own answer to an empty request
            result = real(engine.reserve_size(n), *rest)
            if result[0] == self.ok and result[1]:
                engine.allocated(name, int(result[1]), n, program_site())
            return result

        return wrapper

    def pitch_wrapper(self, name: str) -> Callable[..., Any]:
        """``(width, height, *rest) -> (err, ptr, pitch)``: the red zone goes
        after the last row, as extra rows."""
        real = self.real[name]
        engine = self.engine

        def wrapper(width, height, *rest):
            w, h = size(width), size(height)
            if w * h == 0:
                return real(width, height, *rest)
            extra_rows = -(-engine.padding // w) if engine.padding else 0
            result = real(w, h + extra_rows, *rest)
            if result[0] == self.ok and result[1]:
                engine.allocated(name, int(result[1]), int(result[2]) * h, program_site())
            return result

        return wrapper

    def free_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        engine = self.engine

        def wrapper(pointer, *rest):
            where = address(pointer)
            if where is None or (where == 0 and self.null_free_passes):
                return real(pointer, *rest)
            if rest and self._capturing(rest[0]):
                # a stream-ordered free in a capture would be a graph node; the
                # backend answers it (the CPU device cannot record one), unjudged
                return real(pointer, *rest)
            verdict = engine.free(name, where, program_site())
            if verdict.violation is not None:
                return (self.invalid,)
            for base in verdict.release:
                real(base, *rest)
            return (self.ok,)

        return wrapper

    def mapped_wrapper(self, name: str) -> Callable[..., Any]:
        """Pinned host memory: with unified addressing a kernel may read it."""
        real = self.real[name]
        engine = self.engine

        def wrapper(bytesize, *rest):
            result = real(bytesize, *rest)
            if result[0] == self.ok and size(bytesize) > 0:
                engine.mapped(name, int(result[1]), int(bytesize), program_site())
            return result

        return wrapper

    def unmapped_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        engine = self.engine

        def wrapper(p, *rest):
            result = real(p, *rest)
            if result[0] == self.ok:  # p: an int address or a host buffer object
                engine.host_memory_gone(p, program_site())
            return result

        return wrapper

    def register_wrapper(self, name: str, device_pointer: str) -> Callable[..., Any]:
        """Registered host memory (``cuMemHostRegister``/``cudaHostRegister``):
        its device pointer, which ``device_pointer`` names, is memory a
        kernel may reach."""
        real = self.real[name]
        get_pointer = self.real[device_pointer]
        engine = self.engine

        def wrapper(p, bytesize, *rest):
            result = real(p, bytesize, *rest)
            if result[0] == self.ok and int(bytesize) > 0:
                found = get_pointer(p, 0)
                if found[0] == self.ok:
                    engine.mapped(name, int(found[1]), int(bytesize), program_site())
            return result

        return wrapper

    def unregister_wrapper(self, name: str, device_pointer: str) -> Callable[..., Any]:
        real = self.real[name]
        get_pointer = self.real[device_pointer]
        engine = self.engine

        def wrapper(p):
            found = get_pointer(p, 0)
            result = real(p)
            if result[0] == self.ok and found[0] == self.ok:
                engine.unmapped([int(found[1])], program_site())
            return result

        return wrapper

    # -- copies, memsets and synchronisation ----------------------------------

    def range_wrapper(self, name: str, ranges: Ranges, sync: bool) -> Callable[..., Any]:
        real = self.real[name]
        engine = self.engine

        def wrapper(*args):
            if not engine.ranges_ok(name, ranges(*args), program_site):
                return (self.invalid,)
            result = real(*args)
            if sync:
                engine.drain()
            return result

        return wrapper

    def sync_wrapper(self, name: str) -> Callable[..., Any]:
        real = self.real[name]
        engine = self.engine

        def wrapper(*args):
            result = real(*args)
            engine.drain()
            return result

        return wrapper


def backend_functions(module: Any, prefix: str, backend_api: Any,
                      unserved: Unserved) -> dict[str, Any]:
    """name -> the backend's function, for every function of the cuda.bindings
    ``module`` whose name starts with ``prefix`` (where the backend lacks it,
    one that tells ``unserved`` and raises)."""
    out = {}
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith(prefix) and callable(value) and not isinstance(value, type):
            out[name] = getattr(backend_api, name, None) or unimplemented(name, unserved)
    return out


def install(module: Any, real: dict[str, Any], wrappers: dict[str, Callable[..., Any]],
            installed: dict[str, Any],
            watch: Callable[[str, Callable[..., Any]], Callable[..., Any]] | None = None,
            ) -> None:
    """Replace the functions of ``module`` in place, so every import style sees
    the replacements: each wrapped one by its wrapper, bound to the real
    signature, every other one by the backend's function; ``watch(name, fn)``,
    when given, wraps each replacement once more.  The functions replaced go
    into ``installed``."""
    for name, fn in real.items():
        original = getattr(module, name)
        if name in wrappers:
            fn = bound(original, wrappers[name])
        elif fn is original:
            continue
        if watch is not None:
            fn = watch(name, fn)
        installed.setdefault(name, original)
        setattr(module, name, fn)


def unimplemented(name: str, unserved: Unserved) -> Callable[..., Any]:
    """A function the backend does not have: the call is reported, and the
    program gets a ``NotImplementedError`` (a ``RuntimeError``, as the
    examples' ``checkCudaErrors`` raises) rather than a result code: the
    number of outputs the real function returns is not known here, and a
    code a program ignores would let it go on with outputs it never got."""

    def call(*args: Any, **kwargs: Any) -> Any:
        unserved(name, _site(), NOT_IMPLEMENTED)
        raise NotImplementedError(
            f"{name} is not implemented by gpusafe's CPU device; run with a GPU "
            "(--device cuda) to use it")

    call.__name__ = name
    call.unserved = True  # type: ignore[attr-defined]  # reports itself: nothing to watch
    return call


def unsupported_watch(codes: frozenset[Any], reason: Callable[[], str],
                      unserved: Unserved) -> Callable[[str, Callable[..., Any]], Callable[..., Any]]:
    """``watch`` for :func:`install`: a call whose result code is one of
    ``codes`` (the backend lacks the feature it asked for) is reported with
    the backend's ``reason()``; the program gets the result unchanged."""

    def watch(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if getattr(fn, "unserved", False):
            return fn

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            # by identity: the codes are enum members, and a result's first
            # item need not be hashable
            if type(result) is tuple and result and any(result[0] is c for c in codes):
                unserved(name, _site(), reason())
            return result

        return call

    return watch


GRAPHS_UNROUTED = ("graph kernel nodes cannot be checked on this backend (its graph launches "
                   "do not run kernel nodes through gpusafe's checked launch)")
"""Why a graph kernel node is refused by a backend that cannot route it."""


def unrouted_graph_node(engine: Engine, name: str) -> None:
    """Report a graph kernel node the backend would run unchecked (and with
    the instrumented kernel's launch context missing): the door refuses it."""
    engine.findings.unimplemented(name, _site(), GRAPHS_UNROUTED)


def _site() -> str | None:
    """The program's call site as ``file:line`` (the report keeps one line
    per unserved call and site)."""
    site = program_site()  # gpusafe's own frames are passed over
    return None if site is None else str(site)

