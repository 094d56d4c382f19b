"""Texture and surface objects (``cuTexObjectCreate``/``Destroy``/
``GetResourceDesc``/``GetTextureDesc``, ``cuSurfObjectCreate``/``Destroy``/
``GetResourceDesc``).

An object is an entry of the device's object table
(:func:`gpusafe.cpu.texture_objects.objects_of`), named by the 64-bit handle a
kernel receives; the executor resolves it there.  A texture reads a CUDA
array, linear device memory (``tex1Dfetch``) or pitched 2D device memory,
with any address mode, point or linear filtering, normalized coordinates
and either read mode.  Integer texels of 8 or 16 bits are read as
normalized floats unless ``CU_TRSF_READ_AS_INTEGER`` says otherwise, as the
driver documents.  What the CPU device cannot sample exactly is
``CUDA_ERROR_NOT_SUPPORTED`` naming it: mipmapped arrays, resource views,
sRGB conversion, seamless cubemap filtering, linear filtering of integer
texels read as integers or of 16-bit integer texels.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import (
    CU_TRSF_NORMALIZED_COORDINATES,
    CU_TRSF_READ_AS_INTEGER,
    CU_TRSF_SEAMLESS_CUBEMAP,
    CU_TRSF_SRGB,
    CUDA_RESOURCE_DESC,
    CUDA_RESOURCE_VIEW_DESC,
    CUDA_TEXTURE_DESC,
    CUaddress_mode,
    CUfilter_mode,
    CUresourcetype,
    CUsurfObject,
    CUtexObject,
)

from ...cudaapi import args as _args
from ..errors import InvalidAddress
from ..texture_objects import (
    ARRAY_SURFACE_LDST,
    FILTER_LINEAR,
    CudaArray,
    LinearResource,
    SurfaceObject,
    TextureObject,
    objects_of,
)
from .api import api
from .arrays import ArrayCalls, channel_format, format_enum
from .state import E, Fail, invalid_address

_R = CUresourcetype
_KNOWN_TEX_FLAGS = (CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB
                    | CU_TRSF_SEAMLESS_CUBEMAP | 0x20)  # 0x20: disable trilinear optimization


class TextureCalls(ArrayCalls):
    def _resource(self, desc: Any) -> tuple[CudaArray | LinearResource, int]:
        """What a CUDA_RESOURCE_DESC names (and the array's handle, or 0)."""
        kind = _args.require_enum(desc.resType, CUresourcetype, "resType")
        if int(desc.flags):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "CUDA_RESOURCE_DESC.flags must be 0")
        if kind == _R.CU_RESOURCE_TYPE_ARRAY:
            handle = int(desc.res.array.hArray)
            arr = self._array(handle)
            return arr, handle
        if kind == _R.CU_RESOURCE_TYPE_LINEAR:
            lin = desc.res.linear
            fmt = channel_format(lin.format, lin.numChannels)
            size = int(lin.sizeInBytes)
            res = LinearResource(self._memory, int(lin.devPtr), fmt, size // fmt.element_size)
            nbytes = size
        elif kind == _R.CU_RESOURCE_TYPE_PITCH2D:
            p2 = desc.res.pitch2D
            fmt = channel_format(p2.format, p2.numChannels)
            w, h, pitch = int(p2.width), int(p2.height), int(p2.pitchInBytes)
            if pitch < w * fmt.element_size or h == 0:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                           f"pitch2D resource: pitch {pitch} for {w} elements x {h} rows")
            res = LinearResource(self._memory, int(p2.devPtr), fmt, w, h, pitch)
            nbytes = pitch * (h - 1) + w * fmt.element_size
        else:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       f"{kind.name} resources (mipmapped arrays) are not supported by the CPU "
                       "device")
        if res.width == 0 or res.address % fmt.element_size:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"linear texture memory {res.address:#x}: empty or misaligned")
        try:
            self._memory.view(res.address, nbytes)
        except InvalidAddress as e:
            raise invalid_address(e, f"texture memory ({nbytes} bytes at {res.address:#x})") \
                from None
        return res, 0

    def _resource_desc(self, res: CudaArray | LinearResource, handle: int) -> CUDA_RESOURCE_DESC:
        out = CUDA_RESOURCE_DESC()
        if isinstance(res, CudaArray):
            out.resType = _R.CU_RESOURCE_TYPE_ARRAY
            out.res.array.hArray = handle
        elif res.height == 0:
            out.resType = _R.CU_RESOURCE_TYPE_LINEAR
            lin = out.res.linear
            lin.devPtr, lin.format = res.address, format_enum(res.format)
            lin.numChannels = res.format.channels
            lin.sizeInBytes = res.width * res.format.element_size
        else:
            out.resType = _R.CU_RESOURCE_TYPE_PITCH2D
            p2 = out.res.pitch2D
            p2.devPtr, p2.format = res.address, format_enum(res.format)
            p2.numChannels, p2.width, p2.height = res.format.channels, res.width, res.height
            p2.pitchInBytes = res.pitch
        return out

    @api(1)
    def cuTexObjectCreate(self, pResDesc: Any, pTexDesc: Any, pResViewDesc: Any) -> CUtexObject:
        _args.require_struct(pResDesc, CUDA_RESOURCE_DESC, "pResDesc")
        _args.require_struct(pTexDesc, CUDA_TEXTURE_DESC, "pTexDesc")
        if pResViewDesc is not None:
            _args.require_struct(pResViewDesc, CUDA_RESOURCE_VIEW_DESC, "pResViewDesc")
        self._current()
        if pResDesc is None or pTexDesc is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "pResDesc and pTexDesc are required")
        if pResViewDesc is not None and int(pResViewDesc.format) != 0:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "resource views are not supported by the CPU device")
        res, handle = self._resource(pResDesc)
        t = pTexDesc
        flags = int(t.flags)
        if flags & ~_KNOWN_TEX_FLAGS:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"texture flags {flags:#x}")
        if flags & CU_TRSF_SRGB:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED, "sRGB textures are not supported by the CPU "
                       "device")
        if flags & CU_TRSF_SEAMLESS_CUBEMAP:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED, "seamless cubemap filtering is not supported "
                       "by the CPU device")
        modes = tuple(int(_args.require_enum(m, CUaddress_mode, "addressMode"))
                      for m in list(t.addressMode)[:3])
        filt = int(_args.require_enum(t.filterMode, CUfilter_mode, "filterMode"))
        fmt = res.format
        read_normalized = (fmt.kind != "f" and fmt.bits < 32
                           and not flags & CU_TRSF_READ_AS_INTEGER)
        if filt == FILTER_LINEAR and fmt.kind != "f" and not read_normalized:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "linear filtering of integer texels read as integers (the hardware "
                       "result is not documented)")
        if filt == FILTER_LINEAR and fmt.kind != "f" and fmt.bits == 16:
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "linear filtering of 16-bit integer texels (GPUs are reported to round "
                       "the filtered value in a way the documentation does not give)")
        tex = TextureObject(res, modes, filt, bool(flags & CU_TRSF_NORMALIZED_COORDINATES),
                            read_normalized, tuple(float(c) for c in list(t.borderColor)[:4]),
                            {"array": handle, "flags": flags})
        return CUtexObject(objects_of(self._memory).add(tex))

    def _texture(self, texObject: Any) -> tuple[int, TextureObject]:
        h = int(_args.handle_value(texObject, CUtexObject))
        tex = objects_of(self._memory).get(h, TextureObject)
        if tex is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"texture object {h:#x} does not exist")
        return h, tex

    @api(0)
    def cuTexObjectDestroy(self, texObject: Any) -> None:
        self._current()
        h, _ = self._texture(texObject)
        objects_of(self._memory).remove(h, TextureObject)

    @api(1)
    def cuTexObjectGetResourceDesc(self, texObject: Any) -> CUDA_RESOURCE_DESC:
        self._current()
        _, tex = self._texture(texObject)
        return self._resource_desc(tex.resource, tex.descriptors["array"])

    @api(1)
    def cuTexObjectGetTextureDesc(self, texObject: Any) -> CUDA_TEXTURE_DESC:
        self._current()
        _, tex = self._texture(texObject)
        out = CUDA_TEXTURE_DESC()
        out.addressMode = [CUaddress_mode(m) for m in tex.address_modes]
        out.filterMode = CUfilter_mode(tex.filter)
        out.flags = tex.descriptors["flags"]
        out.borderColor = list(tex.border)
        return out

    @api(1)
    def cuSurfObjectCreate(self, pResDesc: Any) -> CUsurfObject:
        _args.require_struct(pResDesc, CUDA_RESOURCE_DESC, "pResDesc")
        self._current()
        if pResDesc is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "pResDesc is NULL")
        if _args.require_enum(pResDesc.resType, CUresourcetype, "resType") \
                != _R.CU_RESOURCE_TYPE_ARRAY:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "a surface is a CUDA array")
        res, handle = self._resource(pResDesc)
        if not res.flags & ARRAY_SURFACE_LDST:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       "the array was not created with CUDA_ARRAY3D_SURFACE_LDST")
        return CUsurfObject(objects_of(self._memory).add(SurfaceObject(res, {"array": handle})))

    def _surface(self, surfObject: Any) -> tuple[int, SurfaceObject]:
        h = int(_args.handle_value(surfObject, CUsurfObject))
        surf = objects_of(self._memory).get(h, SurfaceObject)
        if surf is None:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"surface object {h:#x} does not exist")
        return h, surf

    @api(0)
    def cuSurfObjectDestroy(self, surfObject: Any) -> None:
        self._current()
        h, _ = self._surface(surfObject)
        objects_of(self._memory).remove(h, SurfaceObject)

    @api(1)
    def cuSurfObjectGetResourceDesc(self, surfObject: Any) -> CUDA_RESOURCE_DESC:
        self._current()
        _, surf = self._surface(surfObject)
        return self._resource_desc(surf.array, surf.descriptors["array"])
