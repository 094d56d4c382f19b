"""A launch's kernel parameters as the driver reads them, and back.

``cuLaunchKernel`` takes its arguments either as ``kernelParams`` (cuda-python's
forms, converted by :func:`gpusafe.cudaapi.args.convert_kernel_params`) or as
an ``extra`` array naming one packed buffer.  Both the CPU device (which runs
the kernel) and the engine (which reads the pointer arguments and appends the
hidden parameter) need the packed bytes; this is the one packer.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from . import args

ParamSpan = tuple[str, int, int]
"""``(name, offset, size)`` of one parameter in the packed buffer."""


class ParamError(ValueError):
    """Arguments the driver refuses with CUDA_ERROR_INVALID_VALUE; the message
    says why."""


def pack(kernel: str, params: Sequence[ParamSpan], size: int,
         kernel_params: args.KernelParams, extra: int) -> bytes:
    """The ``size``-byte parameter buffer the driver would copy for a launch."""
    if kernel_params.kind != "null" and extra:
        raise ParamError("both kernelParams and extra are given")
    if extra:
        try:
            buf, bufsize = args.read_extra(extra)
        except ValueError as e:
            raise ParamError(f"extra: {e}") from None
        if buf is None or bufsize is None:
            if params:
                raise ParamError("extra lacks CU_LAUNCH_PARAM_BUFFER_POINTER or _SIZE")
            return b""
        if bufsize < size:
            raise ParamError(f"extra's parameter buffer holds {bufsize} bytes, "
                             f"{kernel} takes {size}")
        return args.read_host(buf, size) if size else b""
    if kernel_params.kind == "null":
        if params:
            raise ParamError(f"{kernel} takes {len(params)} parameters and none were given")
        return b""
    if kernel_params.kind == "tuple" and len(kernel_params.sources) != len(params):
        raise ParamError(f"{kernel} takes {len(params)} parameters, kernelParams holds "
                         f"{len(kernel_params.sources)}")
    out = bytearray(size)
    for i, (name, offset, psize) in enumerate(params):
        data = kernel_params.param_bytes(i, psize)
        if data is None:
            raise ParamError(f"kernelParams[{i}] ({name}) is a NULL pointer")
        out[offset:offset + psize] = data
    return bytes(out)


class PointerArray:
    """A ``void*[]`` pointing at each parameter inside a private copy of a
    packed buffer: the ``kernelParams`` form every driver takes.  Keep the
    object alive until the launch call has returned."""

    def __init__(self, buffer: bytes, offsets: Sequence[int]) -> None:
        self._storage = ctypes.create_string_buffer(buffer, max(len(buffer), 1))
        base = ctypes.addressof(self._storage)
        self._array = (ctypes.c_void_p * max(len(offsets), 1))(*(base + o for o in offsets))

    @property
    def address(self) -> int:
        return ctypes.addressof(self._array)
