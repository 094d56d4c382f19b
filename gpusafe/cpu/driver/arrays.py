"""CUDA arrays and the copies that reach them (``cuArrayCreate``,
``cuArray3DCreate``, ``cuArrayDestroy``, ``cuArray[3D]GetDescriptor``,
``cuMemcpy2D*``, ``cuMemcpy3D*``, and the 1D copies ``cuMemcpy{HtoA,AtoH,DtoA,AtoD,AtoA}``,
whose offset and count run through the array's bytes row after row).

An array is a :class:`~gpusafe.cpu.texture_objects.CudaArray` behind a
driver handle: 1D, 2D, 3D, layered (``CUDA_ARRAY3D_LAYERED``) and cubemap
(``CUDA_ARRAY3D_CUBEMAP``, six faces, or ``6 * layers`` when layered), of
the integer, half and float formats with 1, 2 or 4 channels.  Its texels
are not device memory: no kernel pointer reaches them, as on a GPU, so only
texture and surface instructions and these copies do.  Other formats
(packed, block-compressed, YUV), sparse and deferred-mapping arrays and
mipmapped arrays are ``CUDA_ERROR_NOT_SUPPORTED`` naming them.

A 2D or 3D copy moves ``Depth`` slices of ``Height`` rows of
``WidthInBytes`` between any two of host memory, device memory (a range
inside one live allocation) and an array (inside its extent); a side that
breaks those bounds is ``CUDA_ERROR_INVALID_VALUE`` naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda.bindings.driver import (
    CUDA_ARRAY3D_DESCRIPTOR,
    CUDA_ARRAY_DESCRIPTOR,
    CUDA_MEMCPY2D,
    CUDA_MEMCPY3D,
    CUarray,
    CUarray_format,
    CUdeviceptr,
    CUmemorytype,
    CUstream,
)

from ...cudaapi import args as _args
from .. import driver_profile as _profile
from ..errors import InvalidAddress
from ..memory import GLOBAL_BASE
from ..texture_objects import (
    ARRAY_CUBEMAP,
    ARRAY_LAYERED,
    ARRAY_SURFACE_LDST,
    ARRAY_TEXTURE_GATHER,
    ChannelFormat,
    CudaArray,
)
from .api import api
from .state import DriverBase, E, Fail, invalid_address

_F = CUarray_format
FORMATS: dict[CUarray_format, tuple[str, int]] = {
    _F.CU_AD_FORMAT_UNSIGNED_INT8: ("u", 8), _F.CU_AD_FORMAT_UNSIGNED_INT16: ("u", 16),
    _F.CU_AD_FORMAT_UNSIGNED_INT32: ("u", 32), _F.CU_AD_FORMAT_SIGNED_INT8: ("s", 8),
    _F.CU_AD_FORMAT_SIGNED_INT16: ("s", 16), _F.CU_AD_FORMAT_SIGNED_INT32: ("s", 32),
    _F.CU_AD_FORMAT_HALF: ("f", 16), _F.CU_AD_FORMAT_FLOAT: ("f", 32),
}
"""The array formats the CPU device holds, as (kind, bits per channel)."""

_KNOWN_FLAGS = ARRAY_LAYERED | ARRAY_SURFACE_LDST | ARRAY_CUBEMAP | ARRAY_TEXTURE_GATHER


def channel_format(fmt: Any, channels: Any) -> ChannelFormat:
    """The element of ``CUarray_format`` ``fmt`` with ``channels`` channels."""
    f = _args.require_enum(fmt, CUarray_format, "Format")
    n = _args.c_int(channels, "unsigned int", "NumChannels")
    if f not in FORMATS:
        raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                   f"arrays of format {f.name} are not supported by the CPU device "
                   "(only 8/16/32-bit integers, half and float)")
    if n not in (1, 2, 4):
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{n} channels (1, 2 or 4)")
    kind, bits = FORMATS[f]
    return ChannelFormat(kind, bits, n)


def format_enum(fmt: ChannelFormat) -> CUarray_format:
    return next(f for f, kb in FORMATS.items() if kb == (fmt.kind, fmt.bits))


def _limit(name: str) -> int:
    return _profile.DEVICE_ATTRIBUTES[f"MAXIMUM_{name}"]


def _check_extent(w: int, h: int, d: int, flags: int) -> None:
    """The shapes cuArray3DCreate accepts, within the device's limits."""
    def bad(why: str) -> Fail:
        return Fail(E.CUDA_ERROR_INVALID_VALUE, f"array of {w} x {h} x {d} (flags {flags:#x}): "
                                                f"{why}")

    if flags & ~_KNOWN_FLAGS:
        raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                   f"array flags {flags & ~_KNOWN_FLAGS:#x} (sparse, deferred mapping, depth, "
                   "colour attachment, ...) are not supported by the CPU device")
    if w == 0:
        raise bad("the width is 0")
    cube, layered = bool(flags & ARRAY_CUBEMAP), bool(flags & ARRAY_LAYERED)
    if cube:
        if w != h or d == 0 or d % 6 or (not layered and d != 6):
            raise bad("a cubemap is width x width x 6 (6 x layers when layered)")
        lim = "TEXTURECUBEMAP_LAYERED_WIDTH" if layered else "TEXTURECUBEMAP_WIDTH"
        if w > _limit(lim) or (layered and d // 6 > _limit("TEXTURECUBEMAP_LAYERED_LAYERS")):
            raise bad("beyond the device's cubemap limits")
        return
    if layered:
        if d == 0:
            raise bad("a layered array needs a depth (its layers)")
        dims = ("TEXTURE2D_LAYERED_WIDTH", "TEXTURE2D_LAYERED_HEIGHT") if h else (
            "TEXTURE1D_LAYERED_WIDTH",)
        layers = "TEXTURE2D_LAYERED_LAYERS" if h else "TEXTURE1D_LAYERED_LAYERS"
        if any(v > _limit(n) for v, n in zip((w, h), dims, strict=False)) or d > _limit(layers):
            raise bad("beyond the device's layered limits")
        return
    if h == 0 and d:
        raise bad("a depth without a height")
    dims = ("TEXTURE3D_WIDTH", "TEXTURE3D_HEIGHT", "TEXTURE3D_DEPTH") if d else (
        "TEXTURE2D_WIDTH", "TEXTURE2D_HEIGHT") if h else ("TEXTURE1D_WIDTH",)
    if any(v > _limit(n) for v, n in zip((w, h, d), dims, strict=False)):
        raise bad("beyond the device's limits")


class _Block:
    """One side of a 2D/3D copy: a ``(depth, height, width)`` byte view."""

    def __init__(self, view: np.ndarray, keep: Any = None) -> None:
        self.view = view
        self.keep = keep


class ArrayCalls(DriverBase):
    # -- arrays ------------------------------------------------------------------

    def _new_array(self, fmt: ChannelFormat, w: int, h: int, d: int, flags: int) -> CUarray:
        self._current()
        _check_extent(w, h, d, flags)
        try:
            arr = CudaArray(fmt, w, h, d, flags)
        except (MemoryError, ValueError) as e:
            raise Fail(E.CUDA_ERROR_OUT_OF_MEMORY, f"array of {w} x {h} x {d}: {e}", e) from None
        return CUarray(self._new_handle(arr))

    def _array(self, value: Any) -> CudaArray:
        h = _args.handle_value(value, CUarray) if not isinstance(value, int) else value
        return self._lookup(int(h), CudaArray, E.CUDA_ERROR_INVALID_HANDLE, "array")

    @api(1)
    def cuArrayCreate(self, pAllocateArray: Any) -> CUarray:
        _args.require_struct(pAllocateArray, CUDA_ARRAY_DESCRIPTOR, "pAllocateArray")
        if pAllocateArray is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "pAllocateArray is NULL")
        p = pAllocateArray
        fmt = channel_format(p.Format, p.NumChannels)
        return self._new_array(fmt, int(p.Width), int(p.Height), 0, 0)

    @api(1)
    def cuArray3DCreate(self, pAllocateArray: Any) -> CUarray:
        _args.require_struct(pAllocateArray, CUDA_ARRAY3D_DESCRIPTOR, "pAllocateArray")
        if pAllocateArray is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "pAllocateArray is NULL")
        p = pAllocateArray
        fmt = channel_format(p.Format, p.NumChannels)
        return self._new_array(fmt, int(p.Width), int(p.Height), int(p.Depth), int(p.Flags))

    @api(0)
    def cuArrayDestroy(self, hArray: Any) -> None:
        self._current()
        arr = self._array(hArray)
        arr.alive = False
        self._handles.pop(int(_args.handle_value(hArray, CUarray)), None)

    @api(1)
    def cuArrayGetDescriptor(self, hArray: Any) -> CUDA_ARRAY_DESCRIPTOR:
        self._current()
        arr = self._array(hArray)
        if arr.depth or arr.flags & (ARRAY_LAYERED | ARRAY_CUBEMAP):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "a 3D, layered or cubemap array (use cuArray3DGetDescriptor)")
        out = CUDA_ARRAY_DESCRIPTOR()
        out.Width, out.Height = arr.width, arr.height
        out.Format, out.NumChannels = format_enum(arr.format), arr.format.channels
        return out

    @api(1)
    def cuArray3DGetDescriptor(self, hArray: Any) -> CUDA_ARRAY3D_DESCRIPTOR:
        self._current()
        arr = self._array(hArray)
        out = CUDA_ARRAY3D_DESCRIPTOR()
        out.Width, out.Height, out.Depth = arr.width, arr.height, arr.depth
        out.Format, out.NumChannels = format_enum(arr.format), arr.format.channels
        out.Flags = arr.flags
        return out

    # -- 2D and 3D copies ----------------------------------------------------------

    def _linear_block(self, address: int, pitch: int, rows_per_slice: int, width: int,
                      height: int, depth: int, host: bool, keep: Any, what: str,
                      room: int | None = None) -> _Block:
        """``room``: the bytes a host buffer holds from ``address`` on, when known."""
        span = (depth - 1) * pitch * rows_per_slice + (height - 1) * pitch + width
        if host:
            if address == 0:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: NULL host pointer")
            if room is not None and room < span:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                           f"{what}: the host buffer holds {max(room, 0)} bytes from the "
                           f"copy's start, the copy spans {span}")
            mem = self._memory
            if room is None and GLOBAL_BASE <= address < mem.top \
                    and not mem.host_visible(address):
                raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                           f"{what}: host pointer {address:#x} is a device address")
            flat = _args.host_view(address, span)
        else:
            try:
                flat = self._memory.view(address, span)
            except InvalidAddress as e:
                raise invalid_address(e, f"{what} ({span} bytes at {address:#x})") from None
        view = np.lib.stride_tricks.as_strided(
            flat, shape=(depth, height, width), strides=(pitch * rows_per_slice, pitch, 1))
        return _Block(view, keep)

    def _side(self, p: Any, side: str, width: int, height: int, depth: int) -> _Block:
        """The bytes one side of a CUDA_MEMCPY2D/3D names."""
        what = f"{side} of the copy"
        mt = getattr(p, f"{side}MemoryType")
        kind = CUmemorytype(int(mt)) if mt is not None else None
        x = int(getattr(p, f"{side}XInBytes"))
        y = int(getattr(p, f"{side}Y"))
        z = int(getattr(p, f"{side}Z", 0) or 0)
        if int(getattr(p, f"{side}LOD", 0) or 0):
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED, f"{what}: mipmap levels")
        if kind == CUmemorytype.CU_MEMORYTYPE_ARRAY:
            arr = self._array(getattr(p, f"{side}Array"))
            data = arr.bytes_view()
            if (x + width > arr.row_bytes or y + height > data.shape[1]
                    or z + depth > data.shape[0]):
                raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                           f"{what}: {width} bytes x {height} rows x {depth} slices at "
                           f"({x}, {y}, {z}) exceed the array's {arr.row_bytes} x "
                           f"{data.shape[1]} x {data.shape[0]}")
            return _Block(data[z:z + depth, y:y + height, x:x + width])
        pitch = int(getattr(p, f"{side}Pitch"))
        rows = int(getattr(p, f"{side}Height", 0) or 0) or height
        if pitch == 0 and height * depth == 1:
            pitch = width
        if pitch < width:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: pitch {pitch} is less than WidthInBytes {width}")
        offset = x + y * pitch + z * pitch * rows
        keep = room = None
        if kind == CUmemorytype.CU_MEMORYTYPE_HOST:
            hp = _args.host_pointer(getattr(p, f"{side}Host"))
            address, host, keep = hp.address, True, hp
            room = None if hp.nbytes is None else hp.nbytes - offset
        elif kind == CUmemorytype.CU_MEMORYTYPE_DEVICE:
            address, host = int(_args.handle_value(getattr(p, f"{side}Device"), CUdeviceptr)), False
        elif kind == CUmemorytype.CU_MEMORYTYPE_UNIFIED:
            address = int(_args.handle_value(getattr(p, f"{side}Device"), CUdeviceptr))
            mem = self._memory
            host = not (GLOBAL_BASE <= address < mem.top or mem.find(address) is not None)
        else:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: memory type {mt!r}")
        return self._linear_block(address + offset, pitch, rows, width, height, depth, host,
                                  keep, what, room)

    def _copy_blocks(self, p: Any, depth: int, hs: Any) -> None:
        ctx = self._current()
        self._stream(_args.handle_value(hs, CUstream), ctx)
        width = int(p.WidthInBytes)
        height = int(p.Height)
        if width == 0 or height == 0 or depth == 0:
            return
        src = self._side(p, "src", width, height, depth)
        dst = self._side(p, "dst", width, height, depth)
        dst.view[...] = src.view.copy()

    @api(0)
    def cuMemcpy2D(self, pCopy: Any) -> None:
        _args.require_struct(pCopy, CUDA_MEMCPY2D, "pCopy")
        self._copy_blocks(pCopy, 1, None)

    @api(0)
    def cuMemcpy2DUnaligned(self, pCopy: Any) -> None:
        _args.require_struct(pCopy, CUDA_MEMCPY2D, "pCopy")
        self._copy_blocks(pCopy, 1, None)

    @api(0)
    def cuMemcpy2DAsync(self, pCopy: Any, hStream: Any) -> None:
        _args.require_struct(pCopy, CUDA_MEMCPY2D, "pCopy")
        self._copy_blocks(pCopy, 1, hStream)

    @api(0)
    def cuMemcpy3D(self, pCopy: Any) -> None:
        _args.require_struct(pCopy, CUDA_MEMCPY3D, "pCopy")
        self._copy_blocks(pCopy, int(pCopy.Depth), None)

    @api(0)
    def cuMemcpy3DAsync(self, pCopy: Any, hStream: Any) -> None:
        _args.require_struct(pCopy, CUDA_MEMCPY3D, "pCopy")
        self._copy_blocks(pCopy, int(pCopy.Depth), hStream)

    # -- 1D copies to and from arrays -----------------------------------------------

    def _array_bytes(self, hArray: Any, offset: int, n: int, what: str) -> np.ndarray:
        arr = self._array(hArray)
        flat = arr.bytes_view().reshape(-1)
        if offset + n > flat.size:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{what}: {n} bytes at offset {offset} exceed the array's {flat.size}")
        return flat[offset:offset + n]

    def _host_bytes(self, buffer: Any, n: int, what: str) -> np.ndarray:
        hp = _args.host_pointer(buffer)
        if hp.address == 0 or (hp.nbytes is not None and hp.nbytes < n):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{what}: the host buffer holds "
                                                   f"{hp.nbytes} bytes, ByteCount is {n}")
        return _args.host_view(hp.address, n)

    def _device_bytes(self, dptr: Any, n: int, what: str) -> np.ndarray:
        address = int(_args.handle_value(dptr, CUdeviceptr))
        try:
            return self._memory.view(address, n)
        except InvalidAddress as e:
            raise invalid_address(e, f"{what} ({n} bytes at {address:#x})") from None

    def _flat_copy(self, n_arg: Any, hs: Any, dst: Any, src: Any) -> None:
        """A 1D copy of ``ByteCount`` bytes: ``dst`` and ``src`` turn the
        count into the byte views of each side (an array's bytes run row
        after row, slice after slice)."""
        n = _args.c_int(n_arg, "size_t", "ByteCount")
        ctx = self._current()
        self._stream(_args.handle_value(hs, CUstream), ctx)
        if n:
            target = dst(n)
            target[:] = src(n).copy()

    def _array_side(self, hArray: Any, offset: Any, what: str) -> Any:
        off = _args.c_int(offset, "size_t", "offset")
        return lambda n: self._array_bytes(hArray, off, n, what)

    @api(0)
    def cuMemcpyHtoA(self, dstArray: Any, dstOffset: Any, srcHost: Any, ByteCount: Any) -> None:
        self._flat_copy(ByteCount, None,
                        self._array_side(dstArray, dstOffset, "cuMemcpyHtoA"),
                        lambda n: self._host_bytes(srcHost, n, "cuMemcpyHtoA"))

    @api(0)
    def cuMemcpyHtoAAsync(self, dstArray: Any, dstOffset: Any, srcHost: Any, ByteCount: Any,
                          hStream: Any) -> None:
        self._flat_copy(ByteCount, hStream,
                        self._array_side(dstArray, dstOffset, "cuMemcpyHtoAAsync"),
                        lambda n: self._host_bytes(srcHost, n, "cuMemcpyHtoAAsync"))

    @api(0)
    def cuMemcpyAtoH(self, dstHost: Any, srcArray: Any, srcOffset: Any, ByteCount: Any) -> None:
        self._flat_copy(ByteCount, None,
                        lambda n: self._host_bytes(dstHost, n, "cuMemcpyAtoH"),
                        self._array_side(srcArray, srcOffset, "cuMemcpyAtoH"))

    @api(0)
    def cuMemcpyAtoHAsync(self, dstHost: Any, srcArray: Any, srcOffset: Any, ByteCount: Any,
                          hStream: Any) -> None:
        self._flat_copy(ByteCount, hStream,
                        lambda n: self._host_bytes(dstHost, n, "cuMemcpyAtoHAsync"),
                        self._array_side(srcArray, srcOffset, "cuMemcpyAtoHAsync"))

    @api(0)
    def cuMemcpyDtoA(self, dstArray: Any, dstOffset: Any, srcDevice: Any, ByteCount: Any) -> None:
        self._flat_copy(ByteCount, None,
                        self._array_side(dstArray, dstOffset, "cuMemcpyDtoA"),
                        lambda n: self._device_bytes(srcDevice, n, "cuMemcpyDtoA"))

    @api(0)
    def cuMemcpyAtoD(self, dstDevice: Any, srcArray: Any, srcOffset: Any, ByteCount: Any) -> None:
        self._flat_copy(ByteCount, None,
                        lambda n: self._device_bytes(dstDevice, n, "cuMemcpyAtoD"),
                        self._array_side(srcArray, srcOffset, "cuMemcpyAtoD"))

    @api(0)
    def cuMemcpyAtoA(self, dstArray: Any, dstOffset: Any, srcArray: Any, srcOffset: Any,
                     ByteCount: Any) -> None:
        self._flat_copy(ByteCount, None,
                        self._array_side(dstArray, dstOffset, "cuMemcpyAtoA"),
                        self._array_side(srcArray, srcOffset, "cuMemcpyAtoA"))
