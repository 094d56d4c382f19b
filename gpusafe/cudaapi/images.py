"""What a module image handed to ``cuModuleLoadData`` is: PTX text, an ELF
cubin, or a fat binary.

The engine (which instruments PTX and must list anything else as unchecked)
and the CPU device (which runs PTX only) ask the same question of the same
bytes; the magic numbers live here once.
"""

from __future__ import annotations

from enum import Enum

ELF_MAGIC = b"\x7fELF"
FATBIN_MAGICS = (
    (0xBA55ED50).to_bytes(4, "little"),  # a fatbin file / section (fatBinaryHeader)
    (0x466243B1).to_bytes(4, "little"),  # a fatbin wrapper (__fatBinC_Wrapper_t)
)


class ImageKind(str, Enum):
    PTX = "ptx"
    CUBIN = "cubin"
    FATBIN = "fatbin"

    def __str__(self) -> str:
        return self.value


def image_kind(data: bytes) -> ImageKind:
    """The kind of a module image from its first bytes."""
    if data[:4] == ELF_MAGIC:
        return ImageKind.CUBIN
    if data[:4] in FATBIN_MAGICS:
        return ImageKind.FATBIN
    return ImageKind.PTX


def ptx_text(data: bytes) -> str:
    """The PTX of an image, read as the C driver reads it: up to the first NUL.
    Bytes that are not UTF-8 (a stray byte in a comment) survive the round
    trip through :func:`ptx_bytes` as surrogate escapes."""
    return data.split(b"\0", 1)[0].decode("utf-8", errors="surrogateescape")


def ptx_bytes(text: str) -> bytes:
    """PTX text as the NUL-terminated image the driver takes."""
    return text.encode("utf-8", errors="surrogateescape") + b"\0"
