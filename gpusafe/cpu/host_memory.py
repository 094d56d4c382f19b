"""Device memory that is also host memory: the bytes behind pinned, managed
and registered allocations of the CPU device.

Ordinary device memory lives in numpy buffers behind addresses of the arena
that the process does not map (a host access there would fault), which is
what keeps device and host memory apart.  Pinned (``cuMemHostAlloc``) and
managed (``cuMemAllocManaged``) memory must be reachable from both sides
through *one* pointer, so their arena range is backed by real pages mapped at
that very address (:class:`FreshPages`): the pointer a kernel uses is the
pointer ``ctypes``/numpy read on the host.  Registered memory
(``cuMemHostRegister``) already has a host address; its arena range is a view
of those bytes (:class:`HostBytes`), so the device pointer differs from the
host pointer but both reach the same bytes.

The pages are placed with ``MAP_FIXED_NOREPLACE``: an arena address that the
process already uses for something else (another CPU device's pages, a
library) is never overwritten; :class:`AddressTaken` says where the arena
may try next.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
from typing import Protocol

import numpy as np

PAGE = mmap.PAGESIZE

_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
_MAP_FIXED_NOREPLACE = 0x100000
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED_NOREPLACE
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


class AddressTaken(Exception):
    """The process already maps part of the range; ``next_free`` is the first
    address after the mappings in the way."""

    def __init__(self, address: int, next_free: int) -> None:
        super().__init__(f"{address:#x} is already mapped in this process")
        self.next_free = next_free


def page_round(n: int) -> int:
    return -(-n // PAGE) * PAGE


def host_bytes(address: int, size: int) -> np.ndarray:
    """A writable uint8 view of ``size`` bytes of process memory at ``address``."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))


def _mappings_end(address: int, length: int) -> int:
    """The end of the last mapping of this process overlapping ``[address, +length)``."""
    end = address + length
    with open("/proc/self/maps") as maps:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            if lo < address + length and hi > address:
                end = max(end, hi)
    return end


class Backing(Protocol):
    """Where the bytes of a host-visible allocation come from."""

    owns_bytes: bool
    """False: the bytes stay the program's after the free, so the arena keeps
    a copy of them for its quarantine instead of a window onto them."""

    def place(self, base: int, size: int) -> np.ndarray:
        """The allocation's ``size`` bytes for arena address ``base`` (page aligned)."""

    def release(self) -> None:
        """The arena dropped the bytes: give back what ``place`` took."""


class FreshPages:
    """Zeroed pages mapped at the arena address itself (pinned and managed
    memory): host pointer and device pointer are one."""

    owns_bytes = True

    def __init__(self) -> None:
        self._mapped: tuple[int, int] | None = None

    def place(self, base: int, size: int) -> np.ndarray:
        length = page_round(max(size, 1))
        got = _libc.mmap(base, length, _PROT_RW, _FLAGS, -1, 0)
        if got is None or got == _MAP_FAILED:
            err = ctypes.get_errno()
            if err == errno.EEXIST:
                raise AddressTaken(base, _mappings_end(base, length))
            if err == errno.ENOMEM:
                raise MemoryError(f"no host memory for {size} bytes of pinned/managed memory")
            raise OSError(err, f"mmap at {base:#x}: {errno.errorcode.get(err, err)}")
        if got != base:  # a kernel without MAP_FIXED_NOREPLACE took it as a hint
            _libc.munmap(got, length)
            raise AddressTaken(base, _mappings_end(base, length))
        self._mapped = (base, length)
        return host_bytes(base, size)

    def release(self) -> None:
        if self._mapped is not None:
            _libc.munmap(*self._mapped)
            self._mapped = None


class HostBytes:
    """Memory the program already has (``cuMemHostRegister``): the arena
    range is a window onto it; nothing is given back, the memory stays the
    program's."""

    owns_bytes = False

    def __init__(self, address: int, keep: object = None) -> None:
        self.address = address
        self._keep = keep  # the buffer object the address came from, kept alive

    def place(self, base: int, size: int) -> np.ndarray:
        return host_bytes(self.address, size)

    def release(self) -> None:
        self._keep = None
