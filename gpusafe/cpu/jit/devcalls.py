"""Device ``printf`` (``vprintf``) in compiled code: the Python side.

A compiled thread that calls ``vprintf`` calls the launch's access callback
three times (kinds :data:`PRINTF_LOCAL`, :data:`PRINTF_SHARED`, then
:data:`PRINTF`): its own local memory and its block's shared window (real
pointers and sizes), then the format's and the argument buffer's generic
addresses.  :class:`Printf` reads them as the interpreter's
:func:`gpusafe.cpu.device_calls.read_generic` does (the windows, a string up
to its NUL, at most 256 bytes of arguments, clamped at the end of the
thread's memory), formats with the interpreter's :func:`format_printf` and
writes to the launch's output.  Each range of blocks has its own callback,
hence its own :class:`Printf`; a call is one ``write`` (the lines of
threads on several OS threads may interleave, as on a GPU)."""

from __future__ import annotations

import ctypes

from ..errors import IllegalAddress
from ..frames import Launch
from ..memory import LOCAL_STACK_BASE, LOCAL_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from ..printf import c_string, format_printf

PRINTF_LOCAL, PRINTF_SHARED, PRINTF = 257, 258, 259
"""Kinds of the access callback for a ``vprintf`` (address, width): the
thread's local memory (pointer, bytes), the block's shared window (pointer,
bytes), the call (format address, argument buffer address)."""


class Printf:
    """One range's ``vprintf`` calls."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.local = (0, 0)
        self.shared = (0, 0)

    def call(self, kind: int, addr: int, width: int) -> int:
        """Handles one callback; for the call, the length written plus one (0
        is the callback's error)."""
        if kind == PRINTF_LOCAL:
            self.local = (addr, width)
            return 1
        if kind == PRINTF_SHARED:
            self.shared = (addr, width)
            return 1
        fmt = self.cstring(addr)
        raw = self.read(width, 256) if width else b""
        text = format_printf(fmt, raw, self.cstring)
        self.launch.out().write(text)
        return len(text) + 1

    def read(self, address: int, size: int) -> bytes:
        """``size`` bytes at a generic address, as the interpreter reads them."""
        if 0 <= address - SHARED_WINDOW < WINDOW_SIZE:
            return self._window(self.shared, address - SHARED_WINDOW, size)
        if 0 <= address - LOCAL_WINDOW < WINDOW_SIZE:
            off = address - LOCAL_WINDOW - LOCAL_STACK_BASE
            if off < 0:
                raise IllegalAddress(address)
            return self._window(self.local, off, size)
        memory = self.launch.memory
        return memory.peek(address, max(0, min(size, memory.top - address)))

    @staticmethod
    def _window(where: tuple[int, int], off: int, size: int) -> bytes:
        base, stride = where
        n = min(size, stride - off)
        return ctypes.string_at(base + off, n) if n > 0 else b""

    def cstring(self, address: int, limit: int = 1 << 16) -> bytes:
        return c_string(self.read, address, limit)
