"""CUDA arrays, 2D/3D copies, texture and surface objects of the runtime
(``cudaCreateChannelDesc``, ``cudaGetChannelDesc``, ``cudaMallocArray``,
``cudaMalloc3DArray``, ``cudaFreeArray``, ``cudaArrayGetInfo``,
``cudaMemcpy2D*``, ``cudaMemcpy3D*``, the deprecated 1D array copies
``cudaMemcpy{To,From}Array*`` and ``cudaMemcpy[2D]ArrayToArray``,
``cudaCreateTextureObject``,
``cudaCreateSurfaceObject``, ...), over the driver's
(:mod:`gpusafe.cpu.driver.arrays`, :mod:`gpusafe.cpu.driver.textures`).

A channel descriptor is a driver format and a channel count: equal
non-zero bit counts from ``x`` on (1, 2 or 4 channels) of a signed,
unsigned or float kind; anything else is
``cudaErrorInvalidChannelDescriptor``.  Positions and extents of
``cudaMemcpy3D`` count elements where an array takes part and bytes
otherwise, as the runtime documents.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CU_TRSF_NORMALIZED_COORDINATES,
    CU_TRSF_READ_AS_INTEGER,
    CU_TRSF_SEAMLESS_CUBEMAP,
    CU_TRSF_SRGB,
    CUDA_ARRAY3D_DESCRIPTOR,
    CUDA_MEMCPY3D,
    CUDA_RESOURCE_DESC,
    CUDA_TEXTURE_DESC,
    CUaddress_mode,
    CUarray,
    CUarray_format,
    CUfilter_mode,
    CUmemorytype,
    CUresourcetype,
)
from cuda.bindings.runtime import (
    cudaArray_t,
    cudaChannelFormatDesc,
    cudaChannelFormatKind,
    cudaError_t,
    cudaExtent,
    cudaMemcpy3DParms,
    cudaMemcpyKind,
    cudaResourceDesc,
    cudaResourceType,
    cudaSurfaceObject_t,
    cudaTextureAddressMode,
    cudaTextureDesc,
    cudaTextureFilterMode,
    cudaTextureObject_t,
    cudaTextureReadMode,
)

from ...cudaapi import args as _args
from .base import Fail, RuntimeBase, api, check, handle

_K = cudaChannelFormatKind
_KIND_OF = {_K.cudaChannelFormatKindSigned: "SIGNED_INT", _K.cudaChannelFormatKindUnsigned:
            "UNSIGNED_INT", _K.cudaChannelFormatKindFloat: "FLOAT"}
_M = cudaMemcpyKind
_HOST, _DEVICE, _ARRAY, _UNIFIED = (CUmemorytype.CU_MEMORYTYPE_HOST,
                                    CUmemorytype.CU_MEMORYTYPE_DEVICE,
                                    CUmemorytype.CU_MEMORYTYPE_ARRAY,
                                    CUmemorytype.CU_MEMORYTYPE_UNIFIED)
_SIDES = {  # kind -> memory type of (src, dst) pointer sides
    _M.cudaMemcpyHostToDevice: (_HOST, _DEVICE), _M.cudaMemcpyDeviceToHost: (_DEVICE, _HOST),
    _M.cudaMemcpyDeviceToDevice: (_DEVICE, _DEVICE), _M.cudaMemcpyHostToHost: (_HOST, _HOST),
    _M.cudaMemcpyDefault: (_UNIFIED, _UNIFIED),
}


def driver_format(desc: Any) -> tuple[CUarray_format, int]:
    """The driver format and channel count of a cudaChannelFormatDesc."""
    _args.require_struct(desc, cudaChannelFormatDesc, "desc")
    if desc is None:
        raise Fail(cudaError_t.cudaErrorInvalidValue)
    bits = [int(desc.x), int(desc.y), int(desc.z), int(desc.w)]
    n = sum(1 for b in bits if b)
    kind = _KIND_OF.get(_args.require_enum(desc.f, cudaChannelFormatKind, "f"))
    if (kind is None or n not in (1, 2, 4) or any(b != bits[0] for b in bits[:n])
            or any(bits[n:])):
        raise Fail(cudaError_t.cudaErrorInvalidChannelDescriptor)
    name = f"CU_AD_FORMAT_{kind}{bits[0]}" if kind != "FLOAT" else {
        16: "CU_AD_FORMAT_HALF", 32: "CU_AD_FORMAT_FLOAT"}.get(bits[0], "")
    if name not in CUarray_format.__members__:
        raise Fail(cudaError_t.cudaErrorInvalidChannelDescriptor)
    return CUarray_format[name], n


def channel_desc(fmt: CUarray_format, channels: int) -> cudaChannelFormatDesc:
    name = fmt.name.removeprefix("CU_AD_FORMAT_")
    if name in ("HALF", "FLOAT"):
        kind, bits = _K.cudaChannelFormatKindFloat, 16 if name == "HALF" else 32
    else:
        signed = name.startswith("SIGNED")
        kind = _K.cudaChannelFormatKindSigned if signed else _K.cudaChannelFormatKindUnsigned
        bits = int(name.rsplit("INT", 1)[1])
    out = cudaChannelFormatDesc()
    out.x, out.y, out.z, out.w = [bits if i < channels else 0 for i in range(4)]
    out.f = kind
    return out


def _array_arg(value: Any) -> int:
    if isinstance(value, CUarray):
        return int(value)
    return int(_args.handle_value(value, cudaArray_t))


class TextureCalls(RuntimeBase):
    # -- channel descriptors and arrays -----------------------------------------------

    @api(1)
    def cudaCreateChannelDesc(self, x: Any, y: Any, z: Any, w: Any, f: Any
                              ) -> cudaChannelFormatDesc:
        out = cudaChannelFormatDesc()
        out.x, out.y, out.z, out.w = (_args.c_int(v, "int", n) for v, n in
                                      ((x, "x"), (y, "y"), (z, "z"), (w, "w")))
        out.f = _args.require_enum(f, cudaChannelFormatKind, "f")
        return out

    def _descriptor(self, array: Any) -> Any:
        self._ensure_context()
        return check(self.driver.cuArray3DGetDescriptor(CUarray(_array_arg(array))))

    @api(1)
    def cudaGetChannelDesc(self, array: Any) -> cudaChannelFormatDesc:
        d = self._descriptor(array)
        return channel_desc(d.Format, int(d.NumChannels))

    @api(3)
    def cudaArrayGetInfo(self, array: Any) -> tuple[cudaChannelFormatDesc, cudaExtent, int]:
        d = self._descriptor(array)
        extent = cudaExtent()
        extent.width, extent.height, extent.depth = int(d.Width), int(d.Height), int(d.Depth)
        return channel_desc(d.Format, int(d.NumChannels)), extent, int(d.Flags)

    def _malloc_array(self, desc: Any, w: int, h: int, d: int, flags: int) -> cudaArray_t:
        fmt, n = driver_format(desc)
        self._ensure_context()
        p = CUDA_ARRAY3D_DESCRIPTOR()
        p.Width, p.Height, p.Depth, p.Format, p.NumChannels, p.Flags = w, h, d, fmt, n, flags
        return cudaArray_t(int(check(self.driver.cuArray3DCreate(p))))

    @api(1)
    def cudaMallocArray(self, desc: Any, width: Any, height: Any, flags: Any) -> cudaArray_t:
        w = _args.c_int(width, "size_t", "width")
        h = _args.c_int(height, "size_t", "height")
        f = _args.c_int(flags, "unsigned int", "flags")
        return self._malloc_array(desc, w, h, 0, f)

    @api(1)
    def cudaMalloc3DArray(self, desc: Any, extent: Any, flags: Any) -> cudaArray_t:
        _args.require_struct(extent, cudaExtent, "extent")
        f = _args.c_int(flags, "unsigned int", "flags")
        if extent is None:
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        return self._malloc_array(desc, int(extent.width), int(extent.height),
                                  int(extent.depth), f)

    @api(0)
    def cudaFreeArray(self, array: Any) -> None:
        h = _array_arg(array)
        self._ensure_context()
        if h:
            check(self.driver.cuArrayDestroy(CUarray(h)))

    # -- 2D and 3D copies ----------------------------------------------------------------

    def _copy(self, p: CUDA_MEMCPY3D, stream: Any) -> None:
        hs = handle(stream)
        self._ensure_context()
        check(self.driver.cuMemcpy3DAsync(p, hs))

    @staticmethod
    def _pointer_side(p: CUDA_MEMCPY3D, side: str, kind: CUmemorytype, ptr: Any, pitch: int,
                      x: int, y: int, z: int = 0, rows: int = 0) -> None:
        setattr(p, f"{side}MemoryType", kind)
        if kind == _HOST:
            setattr(p, f"{side}Host", _args.host_pointer(ptr).address)
        else:
            setattr(p, f"{side}Device", _args.host_pointer(ptr).address)
        setattr(p, f"{side}Pitch", pitch)
        setattr(p, f"{side}XInBytes", x)
        setattr(p, f"{side}Y", y)
        setattr(p, f"{side}Z", z)
        setattr(p, f"{side}Height", rows)

    @staticmethod
    def _array_side(p: CUDA_MEMCPY3D, side: str, array: Any, x: int, y: int, z: int = 0) -> None:
        setattr(p, f"{side}MemoryType", _ARRAY)
        setattr(p, f"{side}Array", CUarray(_array_arg(array)))
        setattr(p, f"{side}XInBytes", x)
        setattr(p, f"{side}Y", y)
        setattr(p, f"{side}Z", z)

    def _sides(self, kind: Any) -> tuple[CUmemorytype, CUmemorytype]:
        return _SIDES[_args.require_enum(kind, cudaMemcpyKind, "kind")]

    def _memcpy2d(self, dst: Any, dpitch: Any, src: Any, spitch: Any, width: Any, height: Any,
                  kind: Any, stream: Any) -> None:
        s_kind, d_kind = self._sides(kind)
        p = CUDA_MEMCPY3D()
        self._pointer_side(p, "src", s_kind, src, _args.c_int(spitch, "size_t", "spitch"), 0, 0)
        self._pointer_side(p, "dst", d_kind, dst, _args.c_int(dpitch, "size_t", "dpitch"), 0, 0)
        p.WidthInBytes = _args.c_int(width, "size_t", "width")
        p.Height, p.Depth = _args.c_int(height, "size_t", "height"), 1
        self._copy(p, stream)

    @api(0)
    def cudaMemcpy2D(self, dst: Any, dpitch: Any, src: Any, spitch: Any, width: Any,
                     height: Any, kind: Any) -> None:
        self._memcpy2d(dst, dpitch, src, spitch, width, height, kind, 0)

    @api(0)
    def cudaMemcpy2DAsync(self, dst: Any, dpitch: Any, src: Any, spitch: Any, width: Any,
                          height: Any, kind: Any, stream: Any) -> None:
        self._memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream)

    def _to_array(self, dst: Any, wOffset: Any, hOffset: Any, src: Any, spitch: Any, width: Any,
                  height: Any, kind: Any, stream: Any) -> None:
        s_kind, _ = self._sides(kind)
        p = CUDA_MEMCPY3D()
        self._pointer_side(p, "src", s_kind, src, _args.c_int(spitch, "size_t", "spitch"), 0, 0)
        self._array_side(p, "dst", dst, _args.c_int(wOffset, "size_t", "wOffset"),
                         _args.c_int(hOffset, "size_t", "hOffset"))
        p.WidthInBytes = _args.c_int(width, "size_t", "width")
        p.Height, p.Depth = _args.c_int(height, "size_t", "height"), 1
        self._copy(p, stream)

    @api(0)
    def cudaMemcpy2DToArray(self, dst: Any, wOffset: Any, hOffset: Any, src: Any, spitch: Any,
                            width: Any, height: Any, kind: Any) -> None:
        self._to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, 0)

    @api(0)
    def cudaMemcpy2DToArrayAsync(self, dst: Any, wOffset: Any, hOffset: Any, src: Any,
                                 spitch: Any, width: Any, height: Any, kind: Any,
                                 stream: Any) -> None:
        self._to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, stream)

    def _from_array(self, dst: Any, dpitch: Any, src: Any, wOffset: Any, hOffset: Any,
                    width: Any, height: Any, kind: Any, stream: Any) -> None:
        _, d_kind = self._sides(kind)
        p = CUDA_MEMCPY3D()
        self._array_side(p, "src", src, _args.c_int(wOffset, "size_t", "wOffset"),
                         _args.c_int(hOffset, "size_t", "hOffset"))
        self._pointer_side(p, "dst", d_kind, dst, _args.c_int(dpitch, "size_t", "dpitch"), 0, 0)
        p.WidthInBytes = _args.c_int(width, "size_t", "width")
        p.Height, p.Depth = _args.c_int(height, "size_t", "height"), 1
        self._copy(p, stream)

    @api(0)
    def cudaMemcpy2DFromArray(self, dst: Any, dpitch: Any, src: Any, wOffset: Any,
                              hOffset: Any, width: Any, height: Any, kind: Any) -> None:
        self._from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, 0)

    @api(0)
    def cudaMemcpy2DFromArrayAsync(self, dst: Any, dpitch: Any, src: Any, wOffset: Any,
                                   hOffset: Any, width: Any, height: Any, kind: Any,
                                   stream: Any) -> None:
        self._from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream)

    def _memcpy3d(self, parms: Any, stream: Any) -> None:
        _args.require_struct(parms, cudaMemcpy3DParms, "p")
        if parms is None:
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        s_kind, d_kind = self._sides(parms.kind)
        self._ensure_context()
        src_arr, dst_arr = _array_arg(parms.srcArray), _array_arg(parms.dstArray)
        # extent and positions count elements where an array takes part
        elem = self._element_size(src_arr or dst_arr) if src_arr or dst_arr else 1
        p = CUDA_MEMCPY3D()
        ext = parms.extent
        for side, arr, pos, ptr, kind in (("src", src_arr, parms.srcPos, parms.srcPtr, s_kind),
                                          ("dst", dst_arr, parms.dstPos, parms.dstPtr, d_kind)):
            if arr:
                self._array_side(p, side, CUarray(arr), int(pos.x) * elem, int(pos.y),
                                 int(pos.z))
            else:
                self._pointer_side(p, side, kind, ptr.ptr, int(ptr.pitch), int(pos.x) * elem,
                                   int(pos.y), int(pos.z), int(ptr.ysize))
        p.WidthInBytes = int(ext.width) * elem
        p.Height, p.Depth = int(ext.height), int(ext.depth)
        self._copy(p, stream)

    @api(0)
    def cudaMemcpy3D(self, p: Any) -> None:
        self._memcpy3d(p, 0)

    @api(0)
    def cudaMemcpy3DAsync(self, p: Any, stream: Any) -> None:
        self._memcpy3d(p, stream)

    def _element_size(self, array: int) -> int:
        d = check(self.driver.cuArray3DGetDescriptor(CUarray(array)))
        name = d.Format.name.removeprefix("CU_AD_FORMAT_")
        bits = {"HALF": 16, "FLOAT": 32}.get(name) or int(name.rsplit("INT", 1)[1])
        return bits // 8 * int(d.NumChannels)

    def _flat_offset(self, array: Any, wOffset: Any, hOffset: Any) -> tuple[CUarray, int]:
        """The array and the byte offset of (wOffset bytes, hOffset rows) in it."""
        h = _array_arg(array)
        self._ensure_context()
        w = _args.c_int(wOffset, "size_t", "wOffset")
        rows = _args.c_int(hOffset, "size_t", "hOffset")
        d = check(self.driver.cuArray3DGetDescriptor(CUarray(h)))
        return CUarray(h), rows * int(d.Width) * self._element_size(h) + w

    def _on_device(self, pointer: Any, kind: Any, device_kind: cudaMemcpyKind) -> bool:
        """Whether the pointer side of a copy to or from an array is device
        memory: by ``kind``, or by its address for ``cudaMemcpyDefault``."""
        k = _args.require_enum(kind, cudaMemcpyKind, "kind")
        if k == _M.cudaMemcpyDefault:
            return self.driver.memory.find(_args.host_pointer(pointer).address) is not None
        if k not in (device_kind, _M.cudaMemcpyDeviceToDevice):
            raise Fail(cudaError_t.cudaErrorInvalidMemcpyDirection)
        return k == _M.cudaMemcpyDeviceToDevice

    def _to_array_1d(self, dst: Any, wOffset: Any, hOffset: Any, src: Any, count: Any,
                     kind: Any, stream: Any) -> None:
        array, off = self._flat_offset(dst, wOffset, hOffset)
        n = _args.c_int(count, "size_t", "count")
        if self._on_device(src, kind, _M.cudaMemcpyHostToDevice):
            check(self.driver.cuMemcpyDtoA(array, off, _args.host_pointer(src).address, n))
        else:
            check(self.driver.cuMemcpyHtoAAsync(array, off, src, n, handle(stream)))

    @api(0)
    def cudaMemcpyToArray(self, dst: Any, wOffset: Any, hOffset: Any, src: Any, count: Any,
                          kind: Any) -> None:
        self._to_array_1d(dst, wOffset, hOffset, src, count, kind, 0)

    @api(0)
    def cudaMemcpyToArrayAsync(self, dst: Any, wOffset: Any, hOffset: Any, src: Any, count: Any,
                               kind: Any, stream: Any) -> None:
        self._to_array_1d(dst, wOffset, hOffset, src, count, kind, stream)

    def _from_array_1d(self, dst: Any, src: Any, wOffset: Any, hOffset: Any, count: Any,
                       kind: Any, stream: Any) -> None:
        array, off = self._flat_offset(src, wOffset, hOffset)
        n = _args.c_int(count, "size_t", "count")
        if self._on_device(dst, kind, _M.cudaMemcpyDeviceToHost):
            check(self.driver.cuMemcpyAtoD(_args.host_pointer(dst).address, array, off, n))
        else:
            check(self.driver.cuMemcpyAtoHAsync(dst, array, off, n, handle(stream)))

    @api(0)
    def cudaMemcpyFromArray(self, dst: Any, src: Any, wOffset: Any, hOffset: Any, count: Any,
                            kind: Any) -> None:
        self._from_array_1d(dst, src, wOffset, hOffset, count, kind, 0)

    @api(0)
    def cudaMemcpyFromArrayAsync(self, dst: Any, src: Any, wOffset: Any, hOffset: Any,
                                 count: Any, kind: Any, stream: Any) -> None:
        self._from_array_1d(dst, src, wOffset, hOffset, count, kind, stream)

    @api(0)
    def cudaMemcpyArrayToArray(self, dst: Any, wOffsetDst: Any, hOffsetDst: Any, src: Any,
                               wOffsetSrc: Any, hOffsetSrc: Any, count: Any, kind: Any) -> None:
        d_arr, d_off = self._flat_offset(dst, wOffsetDst, hOffsetDst)
        s_arr, s_off = self._flat_offset(src, wOffsetSrc, hOffsetSrc)
        _args.require_enum(kind, cudaMemcpyKind, "kind")
        check(self.driver.cuMemcpyAtoA(d_arr, d_off, s_arr, s_off,
                                       _args.c_int(count, "size_t", "count")))

    @api(0)
    def cudaMemcpy2DArrayToArray(self, dst: Any, wOffsetDst: Any, hOffsetDst: Any, src: Any,
                                 wOffsetSrc: Any, hOffsetSrc: Any, width: Any, height: Any,
                                 kind: Any) -> None:
        _args.require_enum(kind, cudaMemcpyKind, "kind")
        p = CUDA_MEMCPY3D()
        self._array_side(p, "src", src, _args.c_int(wOffsetSrc, "size_t", "wOffsetSrc"),
                         _args.c_int(hOffsetSrc, "size_t", "hOffsetSrc"))
        self._array_side(p, "dst", dst, _args.c_int(wOffsetDst, "size_t", "wOffsetDst"),
                         _args.c_int(hOffsetDst, "size_t", "hOffsetDst"))
        p.WidthInBytes = _args.c_int(width, "size_t", "width")
        p.Height, p.Depth = _args.c_int(height, "size_t", "height"), 1
        self._copy(p, 0)

    # -- texture and surface objects -------------------------------------------------------

    def _driver_resource(self, desc: Any) -> CUDA_RESOURCE_DESC:
        _args.require_struct(desc, cudaResourceDesc, "pResDesc")
        if desc is None:
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        kind = _args.require_enum(desc.resType, cudaResourceType, "resType")
        out = CUDA_RESOURCE_DESC()
        out.resType = CUresourcetype(int(kind))
        if kind == cudaResourceType.cudaResourceTypeArray:
            out.res.array.hArray = CUarray(_array_arg(desc.res.array.array))
        elif kind == cudaResourceType.cudaResourceTypeLinear:
            lin = desc.res.linear
            fmt, n = driver_format(lin.desc)
            o = out.res.linear
            o.devPtr, o.format, o.numChannels = int(lin.devPtr), fmt, n
            o.sizeInBytes = int(lin.sizeInBytes)
        elif kind == cudaResourceType.cudaResourceTypePitch2D:
            p2 = desc.res.pitch2D
            fmt, n = driver_format(p2.desc)
            o = out.res.pitch2D
            o.devPtr, o.format, o.numChannels = int(p2.devPtr), fmt, n
            o.width, o.height, o.pitchInBytes = int(p2.width), int(p2.height), \
                int(p2.pitchInBytes)
        return out

    def _runtime_resource(self, d: CUDA_RESOURCE_DESC) -> cudaResourceDesc:
        out = cudaResourceDesc()
        out.resType = cudaResourceType(int(d.resType))
        if d.resType == CUresourcetype.CU_RESOURCE_TYPE_ARRAY:
            out.res.array.array = cudaArray_t(int(d.res.array.hArray))
        elif d.resType == CUresourcetype.CU_RESOURCE_TYPE_LINEAR:
            lin = d.res.linear
            out.res.linear.devPtr = int(lin.devPtr)
            out.res.linear.desc = channel_desc(lin.format, int(lin.numChannels))
            out.res.linear.sizeInBytes = int(lin.sizeInBytes)
        else:
            p2 = d.res.pitch2D
            o = out.res.pitch2D
            o.devPtr, o.desc = int(p2.devPtr), channel_desc(p2.format, int(p2.numChannels))
            o.width, o.height, o.pitchInBytes = int(p2.width), int(p2.height), \
                int(p2.pitchInBytes)
        return out

    @api(1)
    def cudaCreateTextureObject(self, pResDesc: Any, pTexDesc: Any, pResViewDesc: Any
                                ) -> cudaTextureObject_t:
        _args.require_struct(pTexDesc, cudaTextureDesc, "pTexDesc")
        res = self._driver_resource(pResDesc)
        if pTexDesc is None:
            raise Fail(cudaError_t.cudaErrorInvalidValue)
        t = pTexDesc
        td = CUDA_TEXTURE_DESC()
        td.addressMode = [CUaddress_mode(int(m)) for m in list(t.addressMode)[:3]]
        td.filterMode = CUfilter_mode(int(t.filterMode))
        td.borderColor = [float(c) for c in list(t.borderColor)[:4]]
        read = _args.require_enum(t.readMode, cudaTextureReadMode, "readMode")
        flags = CU_TRSF_READ_AS_INTEGER if read == cudaTextureReadMode.cudaReadModeElementType \
            else 0
        flags |= CU_TRSF_NORMALIZED_COORDINATES if int(t.normalizedCoords) else 0
        flags |= CU_TRSF_SRGB if int(t.sRGB) else 0
        flags |= CU_TRSF_SEAMLESS_CUBEMAP if int(t.seamlessCubemap) else 0
        td.flags = flags
        if pResViewDesc is not None:
            raise Fail(cudaError_t.cudaErrorNotSupported)
        self._ensure_context()
        return cudaTextureObject_t(int(check(self.driver.cuTexObjectCreate(res, td, None))))

    @api(0)
    def cudaDestroyTextureObject(self, texObject: Any) -> None:
        h = int(_args.handle_value(texObject, cudaTextureObject_t))
        self._ensure_context()
        if h:
            check(self.driver.cuTexObjectDestroy(h))

    @api(1)
    def cudaGetTextureObjectResourceDesc(self, texObject: Any) -> cudaResourceDesc:
        h = int(_args.handle_value(texObject, cudaTextureObject_t))
        self._ensure_context()
        return self._runtime_resource(check(self.driver.cuTexObjectGetResourceDesc(h)))

    @api(1)
    def cudaGetTextureObjectTextureDesc(self, texObject: Any) -> cudaTextureDesc:
        h = int(_args.handle_value(texObject, cudaTextureObject_t))
        self._ensure_context()
        d = check(self.driver.cuTexObjectGetTextureDesc(h))
        flags = int(d.flags)
        out = cudaTextureDesc()
        out.addressMode = [cudaTextureAddressMode(int(m)) for m in list(d.addressMode)]
        out.filterMode = cudaTextureFilterMode(int(d.filterMode))
        out.borderColor = list(d.borderColor)
        out.normalizedCoords = int(bool(flags & CU_TRSF_NORMALIZED_COORDINATES))
        out.readMode = (cudaTextureReadMode.cudaReadModeElementType
                        if flags & CU_TRSF_READ_AS_INTEGER
                        else cudaTextureReadMode.cudaReadModeNormalizedFloat)
        return out

    @api(1)
    def cudaCreateSurfaceObject(self, pResDesc: Any) -> cudaSurfaceObject_t:
        res = self._driver_resource(pResDesc)
        self._ensure_context()
        return cudaSurfaceObject_t(int(check(self.driver.cuSurfObjectCreate(res))))

    @api(0)
    def cudaDestroySurfaceObject(self, surfObject: Any) -> None:
        h = int(_args.handle_value(surfObject, cudaSurfaceObject_t))
        self._ensure_context()
        if h:
            check(self.driver.cuSurfObjectDestroy(h))

    @api(1)
    def cudaGetSurfaceObjectResourceDesc(self, surfObject: Any) -> cudaResourceDesc:
        h = int(_args.handle_value(surfObject, cudaSurfaceObject_t))
        self._ensure_context()
        return self._runtime_resource(check(self.driver.cuSurfObjectGetResourceDesc(h)))
