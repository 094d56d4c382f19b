"""What the program said about its managed memory, page by page: advice
(``cuMemAdvise``) and the last prefetch (``cuMemPrefetchAsync``), so that
``cuMemRangeGetAttribute`` answers as a real driver does.  On the CPU device
advice moves nothing (there is one memory); it is kept, not acted on.

Locations are the driver's device ids: 0 for the device, ``CU_DEVICE_CPU``
(-1) for the host, ``CU_DEVICE_INVALID`` (-2) for none or a mix.
"""

from __future__ import annotations

import numpy as np

from ..host_memory import PAGE

CPU, INVALID = -1, -2
_ACCESSORS = (0, CPU)  # the ids ACCESSED_BY can name, as bits 0 and 1


class RangeAdvice:
    """Per page of one managed allocation based at ``base``."""

    def __init__(self, base: int, size: int) -> None:
        pages = -(-size // PAGE)
        self.base = base
        self.read_mostly = np.zeros(pages, dtype=bool)
        self.preferred = np.full(pages, INVALID, dtype=np.int32)
        self.accessed_by = np.zeros(pages, dtype=np.uint8)
        self.last_prefetch = np.full(pages, INVALID, dtype=np.int32)

    def pages(self, address: int, count: int) -> slice:
        first = (address - self.base) // PAGE
        last = (address + count - 1 - self.base) // PAGE
        return slice(first, last + 1)

    def advise(self, address: int, count: int, advice: str, where: int) -> None:
        """``advice``: the CUmem_advise name without its prefix."""
        p = self.pages(address, count)
        bit = np.uint8(1 << _ACCESSORS.index(where))
        if advice == "SET_READ_MOSTLY":
            self.read_mostly[p] = True
        elif advice == "UNSET_READ_MOSTLY":
            self.read_mostly[p] = False
        elif advice == "SET_PREFERRED_LOCATION":
            self.preferred[p] = where
        elif advice == "UNSET_PREFERRED_LOCATION":
            self.preferred[p] = INVALID
        elif advice == "SET_ACCESSED_BY":
            self.accessed_by[p] |= bit
        elif advice == "UNSET_ACCESSED_BY":
            self.accessed_by[p] &= ~bit

    def prefetched(self, address: int, count: int, where: int) -> None:
        self.last_prefetch[self.pages(address, count)] = where

    # -- what cuMemRangeGetAttribute reports for [address, +count) ----------------

    def is_read_mostly(self, address: int, count: int) -> int:
        return int(bool(self.read_mostly[self.pages(address, count)].all()))

    @staticmethod
    def _common(values: np.ndarray) -> int:
        return int(values[0]) if (values == values[0]).all() else INVALID

    def preferred_location(self, address: int, count: int) -> int:
        return self._common(self.preferred[self.pages(address, count)])

    def last_prefetch_location(self, address: int, count: int) -> int:
        return self._common(self.last_prefetch[self.pages(address, count)])

    def accessors(self, address: int, count: int) -> list[int]:
        """The ids with ACCESSED_BY set on the whole range."""
        common = np.bitwise_and.reduce(self.accessed_by[self.pages(address, count)])
        return [d for i, d in enumerate(_ACCESSORS) if common & (1 << i)]
