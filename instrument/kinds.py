"""The closed set of violation kinds (DESIGN.md), shared by every layer.

The numeric codes are what device-side records carry; the string values are
what every report (terminal, JSON, SARIF rule ids, JUnit) shows.
"""

from __future__ import annotations

from enum import Enum


class ViolationKind(str, Enum):
    GLOBAL_OUT_OF_BOUNDS = "global-out-of-bounds"
    SHARED_OUT_OF_BOUNDS = "shared-out-of-bounds"
    LOCAL_OUT_OF_BOUNDS = "local-out-of-bounds"
    USE_AFTER_FREE = "use-after-free"
    MISALIGNED_ACCESS = "misaligned-access"
    DOUBLE_FREE = "double-free"
    INVALID_FREE = "invalid-free"
    API_OUT_OF_BOUNDS = "api-out-of-bounds"
    LEAK = "leak"
    NULL_POINTER = "null-pointer"

    @property
    def code(self) -> int:
        """The small integer a device-side violation record stores (1-based)."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: int) -> ViolationKind:
        return _BY_CODE[code]

    def __str__(self) -> str:
        return self.value


_CODES = {kind: i + 1 for i, kind in enumerate(ViolationKind)}
_BY_CODE = {code: kind for kind, code in _CODES.items()}


class AccessKind(str, Enum):
    READ = "read"
    WRITE = "write"
    ATOMIC = "atomic"

    def __str__(self) -> str:
        return self.value
