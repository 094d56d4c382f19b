"""Compressed fatbinary entries, decompressed: nvcc (CUDA 13) compresses
each entry by default, with Zstandard (entry flag 0x8000: the default,
``--compress-mode=size`` and ``balance``) or with LZ4 (flag 0x2000:
``--compress-mode=speed``, and older toolkits' ``-Xfatbin -compress-all``).

An entry's header gives the compressed size (at +16) and the size it
decompresses to (at +56).  LZ4's block format is a page of code, so it is
decoded here; Zstandard (entropy coding, several block types) is read by the
system's ``libzstd.so.1``, the format's reference library, which every
common Linux distribution ships as a base package.  Where it is missing,
the entry is refused by name with the flag that avoids compression.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

LZ4 = 0x2000
ZSTD = 0x8000
COMPRESSED = LZ4 | ZSTD

NO_COMPRESS = "build with `nvcc --no-compress`"


class DecompressError(Exception):
    """The entry cannot be decompressed here (the message says why and what to do)."""


def lz4_block(data: bytes, size: int) -> bytes:
    """One LZ4 block (no frame) decoded to its ``size`` bytes."""
    out = bytearray()
    i, n = 0, len(data)
    try:
        while i < n:
            token = data[i]
            i += 1
            length = token >> 4
            if length == 15:
                while True:
                    b = data[i]
                    i += 1
                    length += b
                    if b != 255:
                        break
            if i + length > n:
                raise IndexError
            out += data[i:i + length]
            i += length
            if i >= n:
                break  # the last sequence has literals only
            offset = data[i] | data[i + 1] << 8
            i += 2
            if offset == 0 or offset > len(out):
                raise DecompressError("an LZ4 match reaches before the start of the output")
            match = token & 15
            if match == 15:
                while True:
                    b = data[i]
                    i += 1
                    match += b
                    if b != 255:
                        break
            match += 4
            start = len(out) - offset
            if match <= offset:
                out += out[start:start + match]
            else:  # an overlapping match repeats the last `offset` bytes
                for k in range(match):
                    out.append(out[start + k])
    except IndexError:
        raise DecompressError("the LZ4 block ends in the middle of a sequence") from None
    if len(out) != size:
        raise DecompressError(f"the LZ4 block decodes to {len(out)} bytes, not {size}")
    return bytes(out)


@functools.cache
def _libzstd() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                    ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_getErrorName.restype = ctypes.c_char_p
    lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
    return lib


def zstd_frame(data: bytes, size: int) -> bytes:
    """A Zstandard frame decoded to its ``size`` bytes, by the system's libzstd."""
    lib = _libzstd()
    if lib is None:
        raise DecompressError(f"it is Zstandard-compressed and libzstd.so.1 is not installed; "
                              f"install it (zstd's library package) or {NO_COMPRESS}")
    out = ctypes.create_string_buffer(max(size, 1))
    got = lib.ZSTD_decompress(out, size, data, len(data))
    if lib.ZSTD_isError(got):
        raise DecompressError("libzstd: " + lib.ZSTD_getErrorName(got).decode())
    if got != size:
        raise DecompressError(f"the Zstandard frame decodes to {got} bytes, not {size}")
    return out.raw[:size]


def decompress(flags: int, data: bytes, size: int) -> bytes:
    """An entry's payload, decompressed as its ``flags`` say."""
    if flags & ZSTD:
        return zstd_frame(data, size)
    if flags & LZ4:
        return lz4_block(data, size)
    return data
