"""Texture and surface instructions: ``tex``, ``tld4``, ``txq``, ``suq``,
``suld.b``, ``sust.b`` and ``sust.p``.

The texture or surface is a 64-bit object (``cudaTextureObject_t``,
``cudaSurfaceObject_t``) the device resolves through its object table
(:func:`gpusafe.cpu.texture_objects.objects_of`); the sampling itself is
:mod:`gpusafe.cpu.texture_sampling`'s.  A surface access outside the array
does what its mode says: ``.trap`` fails the launch
(:class:`SurfaceOutOfRange`, naming the kernel, the PTX line and the lane),
``.clamp`` uses the nearest element, ``.zero`` reads zero and writes
nothing.  What the CPU device cannot do exactly (texture references,
mipmap levels, independent samplers, sparse residency, formatted stores to
integer surfaces, ...) is refused by name, at decode time or at the fetch.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from . import texture_sampling as ts
from .decoded import DecodeError, Op
from .decoder import DecodeContext, guard_simple
from .errors import (
    IllegalAddress,
    InvalidAddress,
    MisalignedAddress,
    TrapError,
    UnsupportedInstruction,
)
from .frames import Frame, as_index
from .texture_objects import CudaArray, SurfaceObject, TextureObject, objects_of

_GEOMETRY_AXES = {"1d": 1, "2d": 2, "3d": 3, "a1d": 1, "a2d": 2, "cube": 3, "acube": 3}
"""Coordinates of each geometry (after the layer index of the array forms)."""

_LAYERED = {"a1d", "a2d", "acube"}
_CACHE = {"ca", "cg", "cs", "cv", "wb", "wt", "lu", "nc"}


class SurfaceOutOfRange(TrapError):
    """A ``.trap`` surface access outside its array: the hardware traps."""


def _geometry(instr: nodes.Instruction, allowed: frozenset[str] | set[str]) -> str:
    found = [m for m in instr.modifiers if m in _GEOMETRY_AXES or m in ("2dms", "a2dms")]
    if len(found) != 1:
        raise DecodeError("no geometry (.1d, .2d, ...)")
    if found[0] not in allowed:
        raise DecodeError(f".{found[0]} {instr.op}")
    return found[0]


def _object_operand(instr: nodes.Instruction) -> nodes.TextureOperand:
    found = [o for o in instr.operands if isinstance(o, nodes.TextureOperand)]
    if len(found) != 1:
        raise DecodeError("not one [object, coordinates] operand")
    operand = found[0]
    if isinstance(operand.items[0], nodes.Symbol):
        raise DecodeError(f"texture and surface references ({operand.items[0].name}); "
                          "only texture and surface objects are supported")
    return operand


def _items(operand: nodes.Operand) -> tuple[nodes.Operand, ...]:
    return operand.items if isinstance(operand, nodes.Vector) else (operand,)


def _handles(ctx: DecodeContext, operand: nodes.TextureOperand) -> Callable[..., np.ndarray]:
    return ctx.reader(operand.items[0], "u64")


def _lane_groups(handles: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The lanes (positions) that name each distinct object."""
    if len(handles) == 0:
        return []
    first = int(handles[0])
    if (handles == handles[0]).all():
        return [(first, np.arange(len(handles)))]
    return [(int(h), np.flatnonzero(handles == h)) for h in np.unique(handles)]


def _resolve(fr: Frame, instr: nodes.Instruction, handle: int, kind: type, act: Any,
             pos: np.ndarray) -> Any:
    obj = objects_of(fr.launch.memory).get(handle, kind)
    array = None if obj is None else _array_of(obj)
    if isinstance(array, CudaArray) and not array.alive:
        lane = int(as_index(act, fr.n)[pos[0]])
        raise IllegalAddress(f"kernel {fr.launch.kernel}: PTX line {instr.line}: {instr.op} "
                             f"through {handle:#x}, whose CUDA array has been destroyed "
                             f"({fr.describe_lane(lane)})")
    if obj is None:
        what = "texture" if kind is TextureObject else "surface"
        lane = int(as_index(act, fr.n)[pos[0]])
        raise IllegalAddress(f"kernel {fr.launch.kernel}: PTX line {instr.line}: {instr.op} "
                             f"with {handle:#x}, which is no live {what} object "
                             f"({fr.describe_lane(lane)})")
    return obj


_TEXELS: weakref.WeakKeyDictionary[Any, dict[int, tuple[Any, np.ndarray, bool]]] = (
    weakref.WeakKeyDictionary())


def _texels(fr: Frame, tex: TextureObject) -> tuple[np.ndarray, bool]:
    """The texels a texture reads, converted once per launch: the texture
    unit's cache is not kept coherent with writes during a launch either
    (surface or global stores to what a texture reads, in the same launch,
    are undefined on a GPU), so one snapshot per launch is faithful."""
    per_launch = _TEXELS.setdefault(fr.launch, {})
    hit = per_launch.get(id(tex))
    if hit is None or hit[0] is not tex:
        try:
            values, is_float = ts.texel_values(tex)
        except InvalidAddress as e:  # linear memory freed under the texture
            raise IllegalAddress(f"kernel {fr.launch.kernel}: a texture over device memory that "
                                 f"is no longer allocated ({e})") from None
        hit = per_launch[id(tex)] = (tex, values, is_float)
    return hit[1], hit[2]


def _unsupported(fr: Frame, instr: nodes.Instruction, reason: str) -> UnsupportedInstruction:
    return UnsupportedInstruction(fr.launch.kernel, instr.line, instr.opcode, reason)


def _vector_writers(ctx: DecodeContext, operand: nodes.Operand, type_: str, count: int) -> list:
    items = _items(operand)
    if len(items) != count:
        raise DecodeError(f"expected a {count}-element destination")
    return [ctx.writer(i, type_) for i in items]


# ---------------------------------------------------------------------------
# tex, tld4


def _coordinate_readers(ctx: DecodeContext, coords: nodes.Operand, geometry: str,
                        ctype: str) -> tuple[Any, list]:
    items = _items(coords)
    layer = None
    if geometry in _LAYERED:
        layer = ctx.reader(items[0], "u32")
        items = items[1:]
    need = _GEOMETRY_AXES[geometry]
    if len(items) < need:
        raise DecodeError(f"{len(items)} coordinates for .{geometry}")
    return layer, [ctx.reader(i, ctype) for i in items[:need]]


def _slices(tex: TextureObject, geometry: str, layer: np.ndarray | None,
            face: np.ndarray | None) -> np.ndarray | None:
    """The slice of each lane: layer (clamped to the array's), face, or both."""
    res = tex.resource
    if layer is not None:
        layers = res.layers if isinstance(res, CudaArray) and res.layered else 1
        layer = np.minimum(layer.astype(np.int64), layers - 1)
    if face is not None:
        return face if layer is None else layer * 6 + face
    return layer


def _check_geometry(fr: Frame, instr: nodes.Instruction, tex: TextureObject,
                    geometry: str) -> None:
    res = tex.resource
    if isinstance(res, CudaArray):
        if res.cubemap != geometry.endswith("cube") or res.layered != (geometry in _LAYERED):
            raise _unsupported(fr, instr, f".{geometry} fetch from a "
                               f"{'layered ' if res.layered else ''}"
                               f"{'cubemap' if res.cubemap else 'array'} texture")
    elif geometry not in ("1d", "2d"):
        raise _unsupported(fr, instr, f".{geometry} fetch from linear memory")


def build_tex(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    extra = [m for m in mods if m in ("level", "grad", "base")]
    geometry = _geometry(instr, set(_GEOMETRY_AXES))
    if "v4" not in mods:
        raise DecodeError("tex without .v4")
    types = [m for m in mods if m in ("f32", "s32", "u32", "f16", "f16x2")]
    if len(types) != 2 or types[0] not in ("f32", "s32", "u32") \
            or types[1] not in ("f32", "s32"):
        raise DecodeError(f"tex .{'.'.join(types)}")
    dtype, ctype = types
    ops = instr.operands
    if isinstance(ops[0], nodes.PredicatePair) or "|" in str(ops[0]):
        raise DecodeError("sparse texture residency (|p destination)")
    operand = _object_operand(instr)
    if len(operand.items) != 2:
        raise DecodeError("independent texture samplers")
    if len(ops) != 2 + (1 if extra == ["level"] else 2 if extra == ["grad"] else 0):
        raise DecodeError("texel offsets and depth compare")
    write = _vector_writers(ctx, ops[0], dtype, 4)
    handles = _handles(ctx, operand)
    layer_r, coord_r = _coordinate_readers(ctx, operand.items[1], geometry, ctype)
    # a level or gradient chooses among mipmap levels; a texture of one level
    # (every texture here: mipmapped arrays are not supported) reads level 0
    want_float = dtype == "f32"

    def run(fr: Frame, act: Any, nact: int) -> None:
        hs = handles(fr, act, nact)
        coords = [r(fr, act, nact) for r in coord_r]
        layers = layer_r(fr, act, nact) if layer_r is not None else None
        result = np.zeros((nact, 4), dtype=np.float32 if want_float else np.int64)
        for h, pos in _lane_groups(hs):
            tex = _resolve(fr, instr, h, TextureObject, act, pos)
            _check_geometry(fr, instr, tex, geometry)
            values, is_float = _texels(fr, tex)
            if is_float != want_float:
                raise _unsupported(fr, instr, f"a {'float' if is_float else 'integer'} texture "
                                   f"read as .{dtype}")
            cs = [c[pos] for c in coords]
            face = None
            try:
                if geometry.endswith("cube"):
                    face, s, t = ts.cube_face(*cs)
                    cs = [s, t]
                slices = _slices(tex, geometry, None if layers is None else layers[pos], face)
                if ctype == "s32":
                    got = ts.fetch_integer(tex, values, is_float, cs, slices)
                else:
                    got = ts.sample(tex, values, is_float, cs, slices,
                                    normalized=True if face is not None else None,
                                    face_edge=face is not None)
            except ts.SamplingUnsupported as e:
                raise _unsupported(fr, instr, str(e)) from None
            result[pos] = got
        if not want_float:
            result = result.astype(np.int32 if dtype == "s32" else np.uint32)
        for i, w in enumerate(write):
            w(fr, act, result[:, i])

    return guard_simple(ctx, instr, Op(True, run, instr))


def build_tld4(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    mods = instr.modifiers
    component = next((i for i, c in enumerate("rgba") if c in mods), None)
    if component is None:
        raise DecodeError("tld4 without a component (.r, .g, .b, .a)")
    geometry = _geometry(instr, {"2d", "a2d"})
    dtype = next((m for m in mods if m in ("f32", "s32", "u32")), None)
    if dtype is None:
        raise DecodeError("tld4 without a .f32, .s32 or .u32 destination")
    operand = _object_operand(instr)
    if len(operand.items) != 2 or len(instr.operands) != 2:
        raise DecodeError("tld4 with a sampler, offsets or depth compare")
    write = _vector_writers(ctx, instr.operands[0], dtype, 4)
    handles = _handles(ctx, operand)
    layer_r, coord_r = _coordinate_readers(ctx, operand.items[1], geometry, "f32")

    def run(fr: Frame, act: Any, nact: int) -> None:
        hs = handles(fr, act, nact)
        coords = [r(fr, act, nact) for r in coord_r]
        layers = layer_r(fr, act, nact) if layer_r is not None else None
        result = np.zeros((nact, 4), dtype=np.float32 if dtype == "f32" else np.int64)
        for h, pos in _lane_groups(hs):
            tex = _resolve(fr, instr, h, TextureObject, act, pos)
            _check_geometry(fr, instr, tex, geometry)
            values, is_float = _texels(fr, tex)
            if is_float != (dtype == "f32"):
                raise _unsupported(fr, instr, f"a {'float' if is_float else 'integer'} texture "
                                   f"gathered as .{dtype}")
            slices = _slices(tex, geometry, None if layers is None else layers[pos], None)
            try:
                result[pos] = ts.gather(tex, values, [c[pos] for c in coords], slices, component)
            except ts.SamplingUnsupported as e:
                raise _unsupported(fr, instr, str(e)) from None
        if dtype != "f32":
            result = result.astype(np.int32 if dtype == "s32" else np.uint32)
        for i, w in enumerate(write):
            w(fr, act, result[:, i])

    return guard_simple(ctx, instr, Op(True, run, instr))


# ---------------------------------------------------------------------------
# txq, suq


def _array_of(obj: TextureObject | SurfaceObject) -> Any:
    return obj.array if isinstance(obj, SurfaceObject) else obj.resource


def _query_value(query: str, obj: TextureObject | SurfaceObject) -> int | None:
    res = _array_of(obj)
    if isinstance(res, CudaArray):
        width, height = res.width, res.height
        depth = 0 if (res.layered or res.cubemap) else res.depth
        layers = res.layers
    else:
        width, height, depth, layers = res.width, res.height, 0, 0
    tex = obj if isinstance(obj, TextureObject) else None
    answers: dict[str, int | None] = {
        "width": width, "height": height, "depth": depth, "array_size": layers,
        "num_mipmap_levels": 1 if tex is not None else None,
        "normalized_coords": int(tex.normalized) if tex is not None else None,
        "filter_mode": tex.filter if tex is not None else None,
        "addr_mode_0": tex.address_modes[0] if tex is not None else None,
        "addr_mode_1": tex.address_modes[1] if tex is not None else None,
        "addr_mode_2": tex.address_modes[2] if tex is not None else None,
    }
    return answers.get(query)


def build_query(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    """``txq.query.b32 d, [obj]`` and ``suq.query.b32 d, [obj]``: sizes,
    layers and sampling modes; the channel and layout encodings, sample
    counts and per-level queries are refused by name."""
    mods = instr.modifiers
    if "level" in mods:
        raise DecodeError("queries of a mipmap level")
    query = mods[0]
    kind = TextureObject if instr.op == "txq" else SurfaceObject
    if query not in ("width", "height", "depth", "array_size", "num_mipmap_levels",
                     "normalized_coords", "filter_mode", "addr_mode_0", "addr_mode_1",
                     "addr_mode_2"):
        raise DecodeError(f"{instr.op}.{query}")
    dst, operand = instr.operands[0], instr.operands[1]
    target = operand.items[0] if isinstance(operand, nodes.TextureOperand) else operand
    if isinstance(target, nodes.Address):
        target = target.base
    if isinstance(target, nodes.Symbol):
        raise DecodeError(f"texture and surface references ({target.name})")
    write = ctx.writer(dst, "b32")
    handles = ctx.reader(target, "u64")

    def run(fr: Frame, act: Any, nact: int) -> None:
        hs = handles(fr, act, nact)
        out = np.zeros(nact, dtype=np.uint32)
        for h, pos in _lane_groups(hs):
            obj = _resolve(fr, instr, h, kind, act, pos)
            value = _query_value(query, obj)
            if value is None:
                raise _unsupported(fr, instr, f"{instr.op}.{query} of this object")
            out[pos] = value
        write(fr, act, out)

    return guard_simple(ctx, instr, Op(True, run, instr))


# ---------------------------------------------------------------------------
# suld, sust


def _surface_form(instr: nodes.Instruction) -> tuple[str, str, int, str, str]:
    """(b or p, geometry, vector length, element type, out-of-range mode)."""
    mods = instr.modifiers
    form = mods[0]
    if form not in ("b", "p"):
        raise DecodeError(f"{instr.op} without .b or .p")
    if instr.op == "suld" and form == "p":
        raise DecodeError("suld.p (formatted surface loads)")
    geometry = _geometry(instr, {"1d", "2d", "3d", "a1d", "a2d"})
    vec = 4 if "v4" in mods else 2 if "v2" in mods else 1
    etype = next((m for m in mods if m in ("b8", "b16", "b32", "b64")), None)
    if etype is None:
        raise DecodeError("no element type")
    mode = next((m for m in mods if m in ("trap", "clamp", "zero")), "trap")
    rest = set(mods) - {form, geometry, "v2", "v4", etype, mode} - _CACHE
    if rest:
        raise DecodeError(f"modifier .{sorted(rest)[0]}")
    return form, geometry, vec, etype, mode


def _surface_coordinates(ctx: DecodeContext, operand: nodes.TextureOperand,
                         geometry: str) -> tuple[Any, list]:
    if len(operand.items) != 2:
        raise DecodeError("a surface operand is [surface, coordinates]")
    return _coordinate_readers(ctx, operand.items[1], geometry, "s32")


def _surface_index(fr: Frame, instr: nodes.Instruction, surf: SurfaceObject, geometry: str,
                   mode: str, coords: list[np.ndarray], layer: np.ndarray | None, size: int,
                   x_unit: int, act: Any, pos: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Element indices (slice, row, byte) of each lane, and which lanes are
    inside; ``.trap`` fails the launch for a lane outside."""
    arr = surf.array
    if arr.cubemap and geometry != "a2d":
        raise _unsupported(fr, instr, f".{geometry} access to a cubemap surface")
    if (arr.layered or arr.cubemap) != (geometry in _LAYERED):  # a cubemap's faces are layers
        raise _unsupported(fr, instr, f".{geometry} access to a "
                           f"{'layered' if arr.layered else 'non-layered'} surface")
    slices, rows = arr.texels.shape[:2]
    x = coords[0].astype(np.int64) * x_unit
    y = coords[1].astype(np.int64) if len(coords) > 1 else np.zeros_like(x)
    if geometry == "3d":
        z = coords[2].astype(np.int64)
    elif layer is not None:
        z = layer.astype(np.int64)
    else:
        z = np.zeros_like(x)
    misaligned = x % size != 0
    if misaligned.any():
        lane = int(as_index(act, fr.n)[pos[np.flatnonzero(misaligned)[0]]])
        raise MisalignedAddress(
            f"kernel {fr.launch.kernel}: PTX line {instr.line}: {instr.op} of {size} bytes at "
            f"byte {int(x[misaligned][0])} of a surface row ({fr.describe_lane(lane)})")
    limit = arr.row_bytes - size
    inside = (x >= 0) & (x <= limit) & (y >= 0) & (y < rows) & (z >= 0) & (z < slices)
    if mode == "trap" and not inside.all():
        bad = np.flatnonzero(~inside)[0]
        lane = int(as_index(act, fr.n)[pos[bad]])
        where = f"x={int(x[bad])} bytes, y={int(y[bad])}, z/layer={int(z[bad])}"
        raise SurfaceOutOfRange(
            f"kernel {fr.launch.kernel}: PTX line {instr.line}: {instr.op} outside its surface "
            f"({where}; the array is {arr.row_bytes} bytes x {rows} rows x {slices} slices) "
            f"with .trap ({fr.describe_lane(lane)})")
    x = np.clip(x, 0, limit)
    return [np.clip(z, 0, slices - 1), np.clip(y, 0, rows - 1), x], inside


def build_suld(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    form, geometry, vec, etype, mode = _surface_form(instr)
    operand = _object_operand(instr)
    write = _vector_writers(ctx, instr.operands[0], etype, vec)
    handles = _handles(ctx, operand)
    layer_r, coord_r = _surface_coordinates(ctx, operand, geometry)
    esize = int(etype[1:]) // 8
    size = esize * vec
    edt = np.dtype(f"u{esize}")

    def run(fr: Frame, act: Any, nact: int) -> None:
        hs = handles(fr, act, nact)
        coords = [r(fr, act, nact) for r in coord_r]
        layers = layer_r(fr, act, nact) if layer_r is not None else None
        out = np.zeros((nact, size), dtype=np.uint8)
        for h, pos in _lane_groups(hs):
            surf = _resolve(fr, instr, h, SurfaceObject, act, pos)
            (z, y, x), inside = _surface_index(
                fr, instr, surf, geometry, mode, [c[pos] for c in coords],
                None if layers is None else layers[pos], size, 1, act, pos)
            data = surf.array.bytes_view()
            got = data[z[:, None], y[:, None], x[:, None] + np.arange(size)[None, :]]
            if mode == "zero":
                got[~inside] = 0
            out[pos] = got
        values = out.view(edt).reshape(nact, vec)
        for i, w in enumerate(write):
            w(fr, act, values[:, i])

    return guard_simple(ctx, instr, Op(True, run, instr))


def _formatted(fr: Frame, instr: nodes.Instruction, surf: SurfaceObject,
               values: np.ndarray) -> np.ndarray:
    """``sust.p``: the 32-bit source components as the surface's elements (bytes)."""
    fmt = surf.array.format
    if fmt.kind != "f":
        raise _unsupported(fr, instr, "sust.p to an integer surface (the conversion is not "
                           "documented)")
    comps = values[:, :fmt.channels]
    if comps.shape[1] < fmt.channels:
        raise _unsupported(fr, instr, f"sust.p of {comps.shape[1]} components to a surface of "
                           f"{fmt.channels} channels (the rest would be unpredictable)")
    as_float = np.ascontiguousarray(comps, dtype=np.uint32).view(np.float32)
    return np.ascontiguousarray(as_float.astype(fmt.dtype)).view(np.uint8).reshape(
        len(values), -1)


def build_sust(ctx: DecodeContext, instr: nodes.Instruction) -> Op:
    form, geometry, vec, etype, mode = _surface_form(instr)
    if form == "p" and etype != "b32":
        raise DecodeError("sust.p stores .b32 components")
    operand = _object_operand(instr)
    items = _items(instr.operands[1])
    if len(items) != vec:
        raise DecodeError(f"expected {vec} source values")
    readers = [ctx.reader(i, etype) for i in items]
    handles = _handles(ctx, operand)
    layer_r, coord_r = _surface_coordinates(ctx, operand, geometry)
    esize = int(etype[1:]) // 8
    edt = np.dtype(f"u{esize}")

    def run(fr: Frame, act: Any, nact: int) -> None:
        hs = handles(fr, act, nact)
        coords = [r(fr, act, nact) for r in coord_r]
        layers = layer_r(fr, act, nact) if layer_r is not None else None
        values = np.stack([np.asarray(r(fr, act, nact)).astype(edt) for r in readers], axis=1)
        for h, pos in _lane_groups(hs):
            surf = _resolve(fr, instr, h, SurfaceObject, act, pos)
            if form == "p":
                data_bytes = _formatted(fr, instr, surf, values[pos])
                unit = surf.array.format.element_size
            else:
                data_bytes = np.ascontiguousarray(values[pos]).view(np.uint8).reshape(
                    len(pos), -1)
                unit = 1
            size = data_bytes.shape[1]
            (z, y, x), inside = _surface_index(
                fr, instr, surf, geometry, mode, [c[pos] for c in coords],
                None if layers is None else layers[pos], size, unit, act, pos)
            keep = inside if mode == "zero" else np.ones(len(pos), dtype=bool)
            data = surf.array.bytes_view()
            cols = x[keep][:, None] + np.arange(size)[None, :]
            data[z[keep][:, None], y[keep][:, None], cols] = data_bytes[keep]

    return guard_simple(ctx, instr, Op(True, run, instr))
