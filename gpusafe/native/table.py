"""The driver API as the stand-in driver exports it: one row of
``driver_api.tsv`` per function version (generated from the CUDA headers by
``scripts/gen_driver_api.py``).  The C stubs and the Python adapter index the
same rows, so a stub passes its row number and nothing else names it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "driver_api.tsv"

C_TYPES = {"i32": "int", "u32": "unsigned int", "i64": "long long",
           "u64": "unsigned long long", "ptr": "void *", "f32": "float", "f64": "double"}
"""The C type a stub declares for each parameter code of the table."""

HAND_WRITTEN = frozenset({"cuGetProcAddress", "cuGetExportTable"})
"""Functions shim.c defines itself."""


@dataclass(frozen=True)
class Row:
    index: int
    symbol: str | None  # None: an older ABI, reached through cuGetProcAddress only
    base: str  # the name cuGetProcAddress is asked for
    version: int  # the CUDA version that introduced this ABI (12050 = 12.5)
    per_thread: bool  # the _ptds/_ptsz variant (per-thread default stream)
    params: tuple[tuple[str, str], ...]  # (code, name)

    @property
    def typed(self) -> bool:
        """Whether the stub passes its arguments (a struct passed by value, or
        an older ABI, is refused without reading them)."""
        return self.symbol is not None and all(c in C_TYPES for c, _ in self.params)

    @property
    def label(self) -> str:
        """The function as a report names it."""
        name = self.symbol or f"{self.base} (the ABI of CUDA {self.version // 1000}."\
            f"{self.version % 1000 // 10})"
        return name


@functools.cache
def rows() -> tuple[Row, ...]:
    out = []
    for line in TABLE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        symbol, base, version, flavor, params = line.split("\t")
        out.append(Row(
            len(out), None if symbol == "-" else symbol, base, int(version), flavor != "-",
            () if params == "-" else tuple(tuple(p.split(":", 1)) for p in params.split(","))))
    return tuple(out)
