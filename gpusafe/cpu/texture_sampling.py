"""Texture fetches as the texture unit computes them, one numpy pass per warp.

The rules are the CUDA C++ Programming Guide's appendix "Texture Fetching"
and the PTX ISA's ``tex``/``tld4``:

* a normalized coordinate ``x`` addresses ``x * N``; nearest-point sampling
  reads texel ``floor(x)``; linear filtering reads texels ``i = floor(x -
  0.5)`` and ``i + 1`` weighted ``1 - a`` and ``a``, ``a = frac(x - 0.5)``
  held in 9-bit fixed point with 8 fractional bits (here rounded to the
  nearest 1/256); 2D and 3D filtering is the product of the per-axis weights;
* the address mode maps each texel index outside ``[0, N)``: clamp to the
  edge, wrap (``i mod N``), mirror (period ``2N``), border (the border
  colour replaces the texel);
* read mode "normalized float" maps an 8- or 16-bit integer ``v`` to
  ``v / (2^n - 1)`` (unsigned) or ``max(v / (2^(n-1) - 1), -1)`` (signed);
* a cubemap coordinate ``(x, y, z)`` selects the face of its largest
  magnitude and the face coordinates ``((s/m + 1)/2, (t/m + 1)/2)``.

What these rules leave open is refused with :class:`SamplingUnsupported`
(the caller names the instruction), never guessed: wrap or mirror outside
the texture with unnormalized coordinates, a linear fetch or a point fetch
that needs a texel across a cubemap face's edge, a cubemap coordinate on
which two axes tie for the largest magnitude.
"""

from __future__ import annotations

import numpy as np

from .texture_objects import (
    ADDRESS_BORDER,
    ADDRESS_CLAMP,
    ADDRESS_MIRROR,
    ADDRESS_WRAP,
    FILTER_LINEAR,
    CudaArray,
    LinearResource,
    TextureObject,
)

WEIGHT_STEPS = 256
"""Linear filtering weights have 8 fractional bits."""


class SamplingUnsupported(Exception):
    """A fetch whose result the documented rules do not fix."""


def texel_values(tex: TextureObject) -> tuple[np.ndarray, bool]:
    """The texels as ``(slices, rows, width, 4)`` values the unit reads, and
    whether they are floats (read-mode normalization applied, channels that
    the format lacks zero)."""
    res = tex.resource
    raw = res.texels if isinstance(res, CudaArray) else res.texels()
    fmt = tex.format
    if fmt.kind == "f":
        values = raw.astype(np.float32)
        is_float = True
    elif tex.read_normalized:
        if fmt.kind == "u":
            values = raw.astype(np.float32) / np.float32(2 ** fmt.bits - 1)
        else:
            values = np.maximum(raw.astype(np.float32) / np.float32(2 ** (fmt.bits - 1) - 1),
                                np.float32(-1.0))
        is_float = True
    else:
        values = raw.astype(np.int64)
        is_float = False
    if values.shape[3] < 4:
        pad = np.zeros(values.shape[:3] + (4 - values.shape[3],), dtype=values.dtype)
        values = np.concatenate([values, pad], axis=3)
    return values, is_float


def _address(i: np.ndarray, n: int, mode: int, normalized: bool) -> tuple[np.ndarray, np.ndarray]:
    """Texel indices after the address mode, and which lie inside (border)."""
    outside = (i < 0) | (i >= n)
    if mode == ADDRESS_BORDER:
        return np.clip(i, 0, n - 1), ~outside
    if mode in (ADDRESS_WRAP, ADDRESS_MIRROR) and not normalized:
        if outside.any():
            raise SamplingUnsupported("wrap or mirror addressing outside the texture with "
                                      "unnormalized coordinates (defined for normalized ones)")
        return i, ~outside
    if mode == ADDRESS_WRAP:
        return np.mod(i, n), np.ones(i.shape, dtype=bool)
    if mode == ADDRESS_MIRROR:
        m = np.mod(i, 2 * n)
        return np.where(m < n, m, 2 * n - 1 - m), np.ones(i.shape, dtype=bool)
    return np.clip(i, 0, n - 1), np.ones(i.shape, dtype=bool)


def _taps(u: np.ndarray, linear: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """(texel index, weight) pairs along one axis, ``u`` in texel units."""
    if not linear:
        return [(np.floor(u).astype(np.int64), np.ones(u.shape, dtype=np.float32))]
    ub = u - np.float32(0.5)
    i0 = np.floor(ub)
    a = np.rint((ub - i0) * WEIGHT_STEPS).astype(np.float32) / np.float32(WEIGHT_STEPS)
    i0 = i0.astype(np.int64)
    return [(i0, np.float32(1.0) - a), (i0 + 1, a)]


def _scaled(x: np.ndarray, n: int, normalized: bool) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x * np.float32(n) if normalized else x


def sample(tex: TextureObject, values: np.ndarray, is_float: bool, coords: list[np.ndarray],
           slices: np.ndarray | None, normalized: bool | None = None,
           face_edge: bool = False) -> np.ndarray:
    """The ``(lanes, 4)`` results of fetching at ``coords`` (1 to 3 float
    arrays: x, y, z in the texture's units) from the texels ``values``.
    ``slices``: the slice (layer or face) of each lane, for 1D/2D fetches of
    a layered array or a cubemap; ``face_edge``: texels beyond the slice's
    edge are another face's (cubemaps), so a fetch that needs one is refused."""
    nslices, rows, width = values.shape[:3]
    sizes = [width, rows, nslices][:len(coords)]
    norm = tex.normalized if normalized is None else normalized
    linear = tex.filter == FILTER_LINEAR
    if linear and not is_float:
        raise SamplingUnsupported("linear filtering of integer texels read as integers")
    n = len(coords[0])
    per_axis = []
    for axis, (x, size) in enumerate(zip(coords, sizes, strict=True)):
        mode = ADDRESS_CLAMP if face_edge else tex.address_modes[axis]
        taps = []
        for idx, w in _taps(_scaled(x, size, norm), linear):
            if face_edge and ((idx < 0) | (idx >= size))[w > 0].any():
                raise SamplingUnsupported("a cubemap fetch that needs a texel across the "
                                          "edge of its face (seamless filtering)")
            j, inside = _address(idx, size, mode, norm)
            taps.append((j, w, inside))
        per_axis.append(taps)
    zero = np.zeros(n, dtype=np.int64)
    out = np.zeros((n, 4), dtype=np.float32 if is_float else np.int64)
    border = np.array(tex.border, dtype=np.float32 if is_float else np.float64)
    if not is_float:
        border = border.astype(np.int64)

    def combos(axis: int, weight: np.ndarray, inside: np.ndarray, idx: list[np.ndarray]) -> None:
        if axis == len(per_axis):
            x = idx[0]
            y = idx[1] if len(idx) > 1 else zero
            z = idx[2] if len(idx) > 2 else (slices if slices is not None else zero)
            texel = values[z, y, x]
            texel = np.where(inside[:, None], texel, border[None, :])
            if is_float:
                out[:] += weight[:, None] * texel
            else:
                out[:] = texel
            return
        for j, w, ins in per_axis[axis]:
            combos(axis + 1, weight * w, inside & ins, idx + [j])

    combos(0, np.ones(n, dtype=np.float32), np.ones(n, dtype=bool), [])
    return out


def fetch_integer(tex: TextureObject, values: np.ndarray, is_float: bool,
                  coords: list[np.ndarray], slices: np.ndarray | None) -> np.ndarray:
    """A fetch at integer texel coordinates (``tex`` with ``.s32``
    coordinates, ``tex1Dfetch``): no filtering; from linear memory a
    coordinate outside reads zero, from an array the address mode applies."""
    nslices, rows, width = values.shape[:3]
    sizes = [width, rows, nslices][:len(coords)]
    n = len(coords[0])
    inside = np.ones(n, dtype=bool)
    idx = []
    for axis, (c, size) in enumerate(zip(coords, sizes, strict=True)):
        i = np.asarray(c, dtype=np.int64)
        if isinstance(tex.resource, LinearResource):
            inside &= (i >= 0) & (i < size)
            j = np.clip(i, 0, size - 1)
        else:
            j, ins = _address(i, size, tex.address_modes[axis], False)
            inside &= ins
        idx.append(j)
    zero = np.zeros(n, dtype=np.int64)
    y = idx[1] if len(idx) > 1 else zero
    z = idx[2] if len(idx) > 2 else (slices if slices is not None else zero)
    texel = values[z, y, idx[0]]
    if isinstance(tex.resource, LinearResource):
        fill = np.zeros(4, dtype=values.dtype)
    else:
        fill = np.array(tex.border, dtype=np.float32).astype(values.dtype)
    return np.where(inside[:, None], texel, fill[None, :])


def gather(tex: TextureObject, values: np.ndarray, coords: list[np.ndarray],
           slices: np.ndarray | None, component: int) -> np.ndarray:
    """``tld4``: component ``component`` of the four texels a bilinear fetch
    at (x, y) reads, in the order (i, j+1), (i+1, j+1), (i+1, j), (i, j)."""
    nslices, rows, width = values.shape[:3]
    taps = []
    for axis, (x, size) in enumerate(zip(coords, (width, rows), strict=True)):
        ub = _scaled(x, size, tex.normalized) - np.float32(0.5)
        i0 = np.floor(ub).astype(np.int64)
        taps.append([_address(i0, size, tex.address_modes[axis], tex.normalized),
                     _address(i0 + 1, size, tex.address_modes[axis], tex.normalized)])
    (x0, in_x0), (x1, in_x1) = taps[0]
    (y0, in_y0), (y1, in_y1) = taps[1]
    z = slices if slices is not None else np.zeros(len(x0), dtype=np.int64)
    border = np.array(tex.border, dtype=np.float32)[component]
    out = []
    for xi, yi, ins in ((x0, y1, in_x0 & in_y1), (x1, y1, in_x1 & in_y1),
                        (x1, y0, in_x1 & in_y0), (x0, y0, in_x0 & in_y0)):
        v = values[z, yi, xi, component]
        out.append(np.where(ins, v, border.astype(values.dtype)))
    return np.stack(out, axis=1)


def cube_face(x: np.ndarray, y: np.ndarray, z: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Face (0..5: +x, -x, +y, -y, +z, -z) and normalized face coordinates
    of cubemap directions (the Programming Guide's cubemap table)."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    z = np.asarray(z, dtype=np.float32)
    ax, ay, az = np.abs(x), np.abs(y), np.abs(z)
    xmaj = (ax > ay) & (ax > az)
    ymaj = (ay > ax) & (ay > az)
    zmaj = (az > ax) & (az > ay)
    if not (xmaj | ymaj | zmaj).all():
        raise SamplingUnsupported("a cubemap direction whose largest components tie (the "
                                  "face is not defined)")
    face = np.where(xmaj, np.where(x >= 0, 0, 1),
                    np.where(ymaj, np.where(y >= 0, 2, 3), np.where(z >= 0, 4, 5)))
    m = np.where(xmaj, ax, np.where(ymaj, ay, az))
    s = np.choose(face, [-z, z, x, x, x, -x])
    t = np.choose(face, [-y, -y, z, -z, -y, -y])
    half = np.float32(0.5)
    one = np.float32(1.0)
    return face.astype(np.int64), (s / m + one) * half, (t / m + one) * half
