"""What a texture or surface instruction reaches on the CPU device: CUDA
arrays, texture objects and surface objects, and the table that turns the
64-bit handle a kernel holds into one of them.

On a GPU a texture object is a descriptor the driver writes into device
memory and the kernel names by a 64-bit id; here the table of those
descriptors belongs to the device's memory (:func:`objects_of`), so the
driver that creates them and the executor that resolves them share it
without either importing the other, and a reset device (a new memory)
starts with none.

A CUDA array is opaque on a GPU (no device pointer reaches it); here it is a
numpy array of shape ``(slices, rows, width, channels)``: ``slices`` is the
depth of a 3D array, the layers of a layered one, the six faces (times the
layers) of a cubemap; ``rows`` is 1 for a 1D array.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ARRAY_LAYERED = 0x01
ARRAY_SURFACE_LDST = 0x02
ARRAY_CUBEMAP = 0x04
ARRAY_TEXTURE_GATHER = 0x08
"""``CUDA_ARRAY3D_*`` / ``cudaArray*`` flags (the runtime's have the same values)."""

ADDRESS_WRAP, ADDRESS_CLAMP, ADDRESS_MIRROR, ADDRESS_BORDER = range(4)
"""``CU_TR_ADDRESS_MODE_*`` / ``cudaAddressMode*`` (same values)."""

FILTER_POINT, FILTER_LINEAR = range(2)


@dataclass(frozen=True)
class ChannelFormat:
    """The element of an array or texture: ``kind`` is ``'u'``, ``'s'`` or
    ``'f'``, ``bits`` the size of one channel, ``channels`` 1, 2 or 4."""

    kind: str
    bits: int
    channels: int

    @property
    def dtype(self) -> np.dtype:
        if self.kind == "f":
            return np.dtype(np.float16 if self.bits == 16 else np.float32)
        return np.dtype(f"{'u' if self.kind == 'u' else 'i'}{self.bits // 8}")

    @property
    def element_size(self) -> int:
        return self.bits // 8 * self.channels


class CudaArray:
    """A CUDA array: its extent as created (``height``/``depth`` 0 where the
    array has no such dimension), flags, format and texels."""

    def __init__(self, fmt: ChannelFormat, width: int, height: int, depth: int,
                 flags: int) -> None:
        self.format = fmt
        self.width = width
        self.height = height
        self.depth = depth
        self.flags = flags
        self.alive = True
        self.texels = np.zeros((max(depth, 1), max(height, 1), width, fmt.channels),
                               dtype=fmt.dtype)

    @property
    def layered(self) -> bool:
        return bool(self.flags & ARRAY_LAYERED)

    @property
    def cubemap(self) -> bool:
        return bool(self.flags & ARRAY_CUBEMAP)

    @property
    def layers(self) -> int:
        """Layers of a layered array (cubemaps: of six faces each), else 0."""
        if not self.layered:
            return 0
        return self.depth // 6 if self.cubemap else self.depth

    @property
    def row_bytes(self) -> int:
        return self.width * self.format.element_size

    def bytes_view(self) -> np.ndarray:
        """The texels as ``(slices, rows, row_bytes)`` bytes, writable."""
        s, r = self.texels.shape[:2]
        return self.texels.reshape(s, r, -1).view(np.uint8).reshape(s, r, self.row_bytes)


@dataclass
class LinearResource:
    """Device memory seen as a texture: 1D (``height`` 0) or pitched 2D.
    The texels are read at each fetch, so a kernel sees the memory as it is."""

    memory: Any  # the DeviceMemory
    address: int
    format: ChannelFormat
    width: int  # elements
    height: int = 0  # rows of a pitch2D resource, 0 for linear
    pitch: int = 0  # bytes per row (pitch2D)

    def texels(self) -> np.ndarray:
        """``(1, rows, width, channels)`` view of the memory behind it."""
        fmt = self.format
        rows = max(self.height, 1)
        pitch = self.pitch or self.width * fmt.element_size
        nbytes = pitch * (rows - 1) + self.width * fmt.element_size
        raw = self.memory.view(self.address, nbytes)
        full = np.empty(pitch * rows, dtype=np.uint8)
        full[:nbytes] = raw
        rowsv = full.reshape(rows, pitch)[:, :self.width * fmt.element_size]
        return np.ascontiguousarray(rowsv).view(fmt.dtype).reshape(1, rows, self.width,
                                                                     fmt.channels)


@dataclass
class TextureObject:
    """A texture: what it reads and how it samples."""

    resource: CudaArray | LinearResource
    address_modes: tuple[int, int, int] = (ADDRESS_WRAP,) * 3
    filter: int = FILTER_POINT
    normalized: bool = False
    read_normalized: bool = False  # read mode: normalized float (integer formats)
    border: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    descriptors: dict[str, Any] = field(default_factory=dict)  # as given, for Get*Desc

    @property
    def format(self) -> ChannelFormat:
        return self.resource.format


@dataclass
class SurfaceObject:
    array: CudaArray
    descriptors: dict[str, Any] = field(default_factory=dict)


class DeviceObjects:
    """The texture and surface objects of one device, by 64-bit handle."""

    def __init__(self) -> None:
        self._objects: dict[int, TextureObject | SurfaceObject] = {}
        self._ids = itertools.count(1)

    def add(self, obj: TextureObject | SurfaceObject) -> int:
        handle = next(self._ids)
        self._objects[handle] = obj
        return handle

    def remove(self, handle: int, kind: type) -> bool:
        if isinstance(self._objects.get(handle), kind):
            del self._objects[handle]
            return True
        return False

    def get(self, handle: int, kind: type) -> Any:
        """The live object of type ``kind`` behind ``handle``, else None."""
        obj = self._objects.get(handle)
        return obj if isinstance(obj, kind) else None


_TABLES: weakref.WeakKeyDictionary[Any, DeviceObjects] = weakref.WeakKeyDictionary()


def objects_of(memory: Any) -> DeviceObjects:
    """The object table of the device whose memory is ``memory``."""
    table = _TABLES.get(memory)
    if table is None:
        table = _TABLES[memory] = DeviceObjects()
    return table
