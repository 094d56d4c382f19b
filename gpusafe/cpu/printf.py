"""Device ``printf`` (``vprintf``): C format strings over the argument buffer.

The format string is a ``.global .b8`` array (a generic pointer to it is the
first argument); the arguments are packed in a local buffer, each aligned to
its own size (ints 4 bytes, ``long``/``long long``/pointers/``double`` 8;
floats are promoted to double, chars and shorts to int).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

from .errors import IllegalAddress


def c_string(read: Callable[[int, int], bytes], address: int, limit: int = 1 << 16) -> bytes:
    """The C string at ``address``, read 64 bytes at a time through ``read``
    (address, size -> the bytes there, fewer at the end of what is mapped,
    or :class:`~gpusafe.cpu.errors.IllegalAddress`): up to its NUL, the end of
    what can be read, or ``limit`` bytes; both engines read ``%s`` and
    ``__assertfail``'s strings so."""
    out = bytearray()
    while len(out) < limit:
        try:
            piece = read(address + len(out), 64)
        except IllegalAddress:
            break
        if not piece:
            break
        nul = piece.find(b"\0")
        if nul >= 0:
            out += piece[:nul]
            break
        out += piece
    return bytes(out)


_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|L|z|j|t)?([diouxXcsfFeEgGaAp%])")


def format_printf(fmt: bytes, args: bytes, read_string: Callable[[int], bytes]) -> str:
    """Render ``fmt`` with the packed ``args``; ``read_string`` reads a C string
    at a device address (for ``%s``)."""
    text = fmt.decode("utf-8", errors="replace")
    out: list[str] = []
    pos = 0
    offset = 0

    def take(size: int, fmt_char: str) -> int | float:
        nonlocal offset
        offset = (offset + size - 1) // size * size
        chunk = args[offset:offset + size]
        offset += size
        if len(chunk) < size:
            chunk = chunk + bytes(size - len(chunk))
        return struct.unpack("<" + fmt_char, chunk)[0]

    for m in _SPEC.finditer(text):
        out.append(text[pos:m.start()])
        pos = m.end()
        flags, width, precision, length, conv = m.groups()
        if conv == "%":
            out.append("%")
            continue
        if width == "*":
            width = str(take(4, "i"))
        if precision == "*":
            precision = str(take(4, "i"))
        spec = "%" + flags + (width or "") + ("." + precision if precision is not None else "")
        wide = length in ("l", "ll", "z", "j", "t")
        if conv in "di":
            v = take(8, "q") if wide else take(4, "i")
            if length == "h":
                v = ((int(v) + 0x8000) & 0xFFFF) - 0x8000
            elif length == "hh":
                v = ((int(v) + 0x80) & 0xFF) - 0x80
            out.append((spec + "d") % v)
        elif conv in "ouxX":
            v = take(8, "Q") if wide else take(4, "I")
            if length == "h":
                v = int(v) & 0xFFFF
            elif length == "hh":
                v = int(v) & 0xFF
            out.append((spec + ("d" if conv == "u" else conv)) % v)
        elif conv == "c":
            v = take(4, "i")
            out.append((spec + "c") % chr(int(v) & 0xFF))
        elif conv == "s":
            address = take(8, "Q")
            s = "(null)" if address == 0 else read_string(int(address)).decode("utf-8", "replace")
            out.append((spec + "s") % s)
        elif conv == "p":
            address = take(8, "Q")
            out.append((spec.replace("#", "") + "s") % f"0x{int(address):x}")
        elif conv in "aA":
            v = take(8, "d")
            s = float(v).hex()
            out.append((spec + "s") % (s.upper() if conv == "A" else s))
        else:
            v = take(8, "d")
            out.append((spec + conv) % v)
    out.append(text[pos:])
    return "".join(out)
