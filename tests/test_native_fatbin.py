"""Compressed fatbinary entries (issue 11): LZ4 blocks decoded by our own
decoder, Zstandard frames by the system's libzstd."""

from __future__ import annotations

import ctypes

import pytest

from gpusafe.native import fatbin


def test_lz4_literals_then_an_overlapping_match() -> None:
    # 3 literals "abc", a match of 9 at offset 3 (overlapping), then "!" alone
    block = bytes([0x35]) + b"abc" + bytes([3, 0]) + bytes([0x10]) + b"!"
    assert fatbin.lz4_block(block, 13) == b"abcabcabcabc!"


def test_lz4_long_lengths_use_extension_bytes() -> None:
    literals = bytes(range(20))  # 15 + 5
    block = bytes([0xF0, 5]) + literals
    assert fatbin.lz4_block(block, 20) == literals
    # a 1-byte literal then a match of 4 + 15 + 1 = 20 repeating it
    block = bytes([0x1F]) + b"x" + bytes([1, 0, 1]) + bytes([0x00])
    assert fatbin.lz4_block(block, 21) == b"x" * 21


@pytest.mark.parametrize("block, why", [
    (bytes([0x14]) + b"a" + bytes([2, 0]), "before the start"),
    (bytes([0x30]) + b"ab", "in the middle"),
    (bytes([0x10]) + b"a", "decodes to 1 bytes, not 2"),
])
def test_lz4_corrupt_blocks_are_refused(block: bytes, why: str) -> None:
    size = 2 if "not 2" in why else 8
    with pytest.raises(fatbin.DecompressError, match=why):
        fatbin.lz4_block(block, size)


def test_zstd_frame_through_libzstd() -> None:
    lib = fatbin._libzstd()
    if lib is None:
        pytest.skip("no libzstd.so.1 on this machine")
    text = b".version 9.0\n.target sm_75\n" * 20 + b"\0"
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.c_int]
    out = ctypes.create_string_buffer(lib.ZSTD_compressBound(ctypes.c_size_t(len(text))))
    n = lib.ZSTD_compress(out, len(out), text, len(text), 3)
    frame = out.raw[:n]
    assert len(frame) < len(text)
    assert fatbin.decompress(fatbin.ZSTD | 0x11, frame, len(text)) == text
    with pytest.raises(fatbin.DecompressError, match="libzstd"):
        fatbin.zstd_frame(frame[:-3], len(text))


def test_uncompressed_entries_pass_through() -> None:
    assert fatbin.decompress(0x11, b"ptx\0", 0) == b"ptx\0"
