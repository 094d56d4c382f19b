"""Textures and surfaces on the CPU device, on its API directly: fetches
against numpy references written from the CUDA Programming Guide's
"Texture Fetching" appendix (address modes, nearest-point and linear
filtering with 8-bit fractional weights, normalized coordinates, read-mode
normalization, cubemap faces, layers, gathers), surface loads and stores in
each out-of-range mode, and the array, copy and object calls around them.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda.bindings import driver as real_driver
from cuda.bindings import runtime as real_runtime

from gpusafe.cpu.driver import Driver
from gpusafe.cpu.runtime import Runtime

R = real_driver.CUresult
OK = R.CUDA_SUCCESS
F = real_driver.CUarray_format
AM = real_driver.CUaddress_mode
RT = real_runtime

KERNELS = r"""
extern "C" __global__ void fetch2d(float4 *out, cudaTextureObject_t t, const float *xs,
                                   const float *ys, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float4>(t, xs[i], ys[i]);
}
extern "C" __global__ void fetch1d(float *out, cudaTextureObject_t t, const float *xs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1D<float>(t, xs[i]);
}
extern "C" __global__ void fetch3d(float *out, cudaTextureObject_t t, const float *xs,
                                   const float *ys, const float *zs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex3D<float>(t, xs[i], ys[i], zs[i]);
}
extern "C" __global__ void fetch_int(int *out, cudaTextureObject_t t, const int *idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<int>(t, idx[i]);
}
extern "C" __global__ void layered(float *out, cudaTextureObject_t t, const float *xs,
                                   const int *layers, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2DLayered<float>(t, xs[i], 0.5f, layers[i]);
}
extern "C" __global__ void layered1d(float *out, cudaTextureObject_t t, const float *xs,
                                     const int *layers, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1DLayered<float>(t, xs[i], layers[i]);
}
extern "C" __global__ void cube_layered(float *out, cudaTextureObject_t t, const float *xs,
                                        const float *ys, const float *zs, int layer, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = texCubemapLayered<float>(t, xs[i], ys[i], zs[i], layer);
}
extern "C" __global__ void cube(float *out, cudaTextureObject_t t, const float *xs,
                                const float *ys, const float *zs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = texCubemap<float>(t, xs[i], ys[i], zs[i]);
}
extern "C" __global__ void gather(float4 *out, cudaTextureObject_t t, const float *xs,
                                  const float *ys, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2Dgather<float4>(t, xs[i], ys[i], 0);
}
extern "C" __global__ void surface_read(int *out, cudaSurfaceObject_t s, const int *xs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[2 * i] = surf1Dread<int>(s, xs[i] * 4, cudaBoundaryModeClamp);
        out[2 * i + 1] = surf1Dread<int>(s, xs[i] * 4, cudaBoundaryModeZero);
    }
}
extern "C" __global__ void surface_write(cudaSurfaceObject_t s, const int *xs, int n, int trap) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (trap) surf1Dwrite<int>(100 + i, s, xs[i] * 4, cudaBoundaryModeTrap);
        else surf1Dwrite<int>(100 + i, s, xs[i] * 4, cudaBoundaryModeZero);
    }
}
extern "C" __global__ void surface_cube(cudaSurfaceObject_t s) {
    int x = threadIdx.x, face = blockIdx.x;
    surfCubemapwrite<int>(face * 10 + x, s, x * 4, 1, face);
}
extern "C" __global__ void surface_byte(cudaSurfaceObject_t s, int x) {
    surf1Dwrite<int>(7, s, x, cudaBoundaryModeTrap);
}
"""


@pytest.fixture(scope="module")
def ptx() -> str:
    from gpusafe_testkit.corpus import nvrtc_compile

    return nvrtc_compile(KERNELS, "textures.cu", "compute_75", ("-lineinfo",))


def ok(result):
    assert result[0] in (OK, RT.cudaError_t.cudaSuccess), result
    return result[1] if len(result) == 2 else result[1:]


class Device:
    """A fresh CPU device with a context and the module of KERNELS."""

    def __init__(self, ptx: str) -> None:
        self.drv = Driver()
        self.rt = Runtime(self.drv)
        ok(self.drv.cuInit(0))
        ok(self.drv.cuCtxCreate(None, 0, 0))
        self.module = ok(self.drv.cuModuleLoadData(ptx.encode()))

    def upload(self, a: np.ndarray) -> int:
        ptr = ok(self.drv.cuMemAlloc(max(a.nbytes, 4)))
        ok(self.drv.cuMemcpyHtoD(ptr, a, a.nbytes))
        return int(ptr)

    def run(self, kernel: str, n: int, *args) -> tuple:
        fn = ok(self.drv.cuModuleGetFunction(self.module, kernel.encode()))
        types = tuple(ctypes.c_int if isinstance(a, int) and not isinstance(a, bool)
                      and a < 2**31 else None for a in args)
        values = tuple(a if t is not None else int(a) for a, t in zip(args, types, strict=True))
        return self.drv.cuLaunchKernel(fn, (n + 63) // 64, 1, 1, 64, 1, 1, 0, 0,
                                       (values, tuple(t or ctypes.c_uint64 for t in types)), 0)

    def download(self, ptr: int, count: int, dtype) -> np.ndarray:
        out = np.zeros(count, dtype=dtype)
        ok(self.drv.cuMemcpyDtoH(out, ptr, out.nbytes))
        return out

    def array(self, data: np.ndarray, fmt: F, channels: int = 1, flags: int = 0,
              shape: tuple[int, int, int] | None = None):
        """An array of ``shape`` (width, height, depth) filled with ``data``."""
        d = real_driver.CUDA_ARRAY3D_DESCRIPTOR()
        w, h, dep = shape or (data.shape[-1] // channels, *reversed(data.shape[:-1]), 0, 0)[:3]
        d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags = w, h, dep, fmt, \
            channels, flags
        arr = ok(self.drv.cuArray3DCreate(d))
        p = real_driver.CUDA_MEMCPY3D()
        p.srcMemoryType = real_driver.CUmemorytype.CU_MEMORYTYPE_HOST
        p.srcHost = data
        row = w * channels * data.itemsize
        p.srcPitch, p.srcHeight = row, max(h, 1)
        p.dstMemoryType = real_driver.CUmemorytype.CU_MEMORYTYPE_ARRAY
        p.dstArray = arr
        p.WidthInBytes, p.Height, p.Depth = row, max(h, 1), max(dep, 1)
        ok(self.drv.cuMemcpy3D(p))
        return arr

    def texture(self, arr, modes=(AM.CU_TR_ADDRESS_MODE_CLAMP,) * 3, linear=False,
                normalized=False, as_integer=True, border=(0.0,) * 4, flags=0):
        res = real_driver.CUDA_RESOURCE_DESC()
        res.resType = real_driver.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
        res.res.array.hArray = arr
        td = real_driver.CUDA_TEXTURE_DESC()
        td.addressMode = list(modes)
        td.filterMode = real_driver.CUfilter_mode(int(linear))
        td.flags = (flags | (real_driver.CU_TRSF_NORMALIZED_COORDINATES if normalized else 0)
                    | (real_driver.CU_TRSF_READ_AS_INTEGER if as_integer else 0))
        td.borderColor = list(border)
        return self.drv.cuTexObjectCreate(res, td, None)


@pytest.fixture
def dev(ptx: str) -> Device:
    return Device(ptx)


# -- references, from the Programming Guide's formulas -----------------------------------

def address(i: int, n: int, mode: AM) -> int | None:
    """Texel index after the address mode; None: the border colour."""
    if mode == AM.CU_TR_ADDRESS_MODE_WRAP:
        return i % n
    if mode == AM.CU_TR_ADDRESS_MODE_MIRROR:
        m = i % (2 * n)
        return m if m < n else 2 * n - 1 - m
    if mode == AM.CU_TR_ADDRESS_MODE_BORDER:
        return i if 0 <= i < n else None
    return min(max(i, 0), n - 1)


def nearest_2d(img: np.ndarray, x: float, y: float, mode: AM, border: float) -> float:
    h, w = img.shape
    i, j = address(int(np.floor(np.float32(x) * np.float32(w))), w, mode), \
        address(int(np.floor(np.float32(y) * np.float32(h))), h, mode)
    return border if i is None or j is None else float(img[j, i])


def linear_1d(row: np.ndarray, x: float) -> float:
    """Unnormalized, clamped, with alpha in 9-bit fixed point (8 fractional bits)."""
    xb = x - 0.5
    i = int(np.floor(xb))
    alpha = round((xb - i) * 256) / 256
    n = len(row)
    return (1 - alpha) * row[min(max(i, 0), n - 1)] + alpha * row[min(max(i + 1, 0), n - 1)]


# -- fetches ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [AM.CU_TR_ADDRESS_MODE_WRAP, AM.CU_TR_ADDRESS_MODE_CLAMP,
                                  AM.CU_TR_ADDRESS_MODE_MIRROR, AM.CU_TR_ADDRESS_MODE_BORDER],
                         ids=lambda m: m.name.rsplit("_", 1)[1].lower())
def test_point_sampling_with_normalized_coordinates_follows_the_address_mode(
        dev: Device, mode: AM) -> None:
    img = np.arange(5 * 4, dtype=np.float32).reshape(4, 5) * 10
    tex = ok(dev.texture(dev.array(img, F.CU_AD_FORMAT_FLOAT), (mode,) * 3, normalized=True,
                         border=(-1.0, -2.0, -3.0, -4.0)))
    xs = np.array([-1.3, -0.5, -0.1, 0.05, 0.5, 0.99, 1.0, 1.25, 2.7], dtype=np.float32)
    ys = np.array([0.1, -0.2, 1.6, 0.3, 0.7, 0.9, -1.1, 0.4, 0.2], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(len(xs) * 16))
    assert dev.run("fetch2d", len(xs), out, tex, dev.upload(xs), dev.upload(ys), len(xs)) \
        == (OK,)
    got = dev.download(int(out), len(xs) * 4, np.float32).reshape(-1, 4)
    want = [nearest_2d(img, x, y, mode, -1.0) for x, y in zip(xs, ys, strict=True)]
    assert got[:, 0].tolist() == want
    inside = np.array([w != -1.0 for w in want])
    # one channel: the others read 0 (the border colour keeps its own)
    assert (got[inside, 1:] == 0).all()


def test_linear_filtering_weights_have_eight_fractional_bits(dev: Device) -> None:
    row = np.array([0.0, 256.0, 512.0, 0.0], dtype=np.float32)
    tex = ok(dev.texture(dev.array(row[None, :], F.CU_AD_FORMAT_FLOAT, shape=(4, 0, 0)),
                         linear=True))
    xs = np.array([0.5, 0.5 + 1 / 3, 1.1, 1.7, 2.999, 3.5, -2.0, 9.0], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(xs.nbytes))
    assert dev.run("fetch1d", len(xs), out, tex, dev.upload(xs), len(xs)) == (OK,)
    got = dev.download(int(out), len(xs), np.float32)
    want = [linear_1d(row, float(x)) for x in xs]
    assert got.tolist() == want
    assert got[1] == 85.0  # 1/3 is 85/256, not 85.33


# tex1D over the table [1.0, 2.0] (normalized coordinates, linear filtering),
# as measured on a GPU and posted in https://forums.developer.nvidia.com/t/tex1d-accuracy/6801
GPU_TEX1D = [(0.0, 1.0), (0.05, 1.0), (0.1, 1.0), (0.15, 1.0), (0.2, 1.0), (0.25, 1.0),
             (0.3, 1.1015625), (0.35, 1.19921875), (0.4, 1.30078125), (0.45, 1.3984375),
             (0.5, 1.5), (0.55, 1.6015625), (0.6, 1.69921875), (0.65, 1.80078125),
             (0.7, 1.8984375), (0.75, 2.0), (0.8, 2.0), (0.85, 2.0), (0.9, 2.0), (0.95, 2.0)]


def test_linear_filtering_matches_a_gpus_measured_results(dev: Device) -> None:
    """The weights round to the nearest 1/256 (truncating would give 1.09765625 at 0.3)."""
    table = np.array([[1.0, 2.0]], dtype=np.float32)
    tex = ok(dev.texture(dev.array(table, F.CU_AD_FORMAT_FLOAT, shape=(2, 0, 0)), linear=True,
                         normalized=True))
    xs = np.array([k for k, _ in GPU_TEX1D], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(xs.nbytes))
    assert dev.run("fetch1d", len(xs), out, tex, dev.upload(xs), len(xs)) == (OK,)
    assert dev.download(int(out), len(xs), np.float32).tolist() == [v for _, v in GPU_TEX1D]


def test_bilinear_filtering_of_normalized_8_bit_texels(dev: Device) -> None:
    """Read mode "normalized float": u8 v becomes v/255 before filtering."""
    img = np.array([[0, 255], [51, 102]], dtype=np.uint8)
    tex = ok(dev.texture(dev.array(img, F.CU_AD_FORMAT_UNSIGNED_INT8), linear=True,
                         as_integer=False))
    xs = np.array([1.0, 0.5, 1.5], dtype=np.float32)
    ys = np.array([1.0, 0.5, 1.5], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(len(xs) * 16))
    assert dev.run("fetch2d", len(xs), out, tex, dev.upload(xs), dev.upload(ys), 3) == (OK,)
    got = dev.download(int(out), 12, np.float32).reshape(-1, 4)[:, 0]
    norm = img.astype(np.float32) / 255
    assert got[1] == norm[0, 0] and got[2] == norm[1, 1]
    assert got[0] == pytest.approx(norm.mean(), abs=1e-7)


def test_signed_normalized_texels_reach_minus_one() -> None:
    from gpusafe.cpu import texture_sampling as ts
    from gpusafe.cpu.texture_objects import ChannelFormat, CudaArray, TextureObject

    arr = CudaArray(ChannelFormat("s", 8, 1), 3, 0, 0, 0)
    arr.texels[0, 0, :, 0] = [-128, -127, 127]
    values, is_float = ts.texel_values(TextureObject(arr, read_normalized=True))
    assert is_float and values[0, 0, :, 0].tolist() == [-1.0, -1.0, 1.0]


def test_a_3d_texture_filters_across_slices(dev: Device) -> None:
    vol = np.arange(2 * 2 * 2, dtype=np.float32).reshape(2, 2, 2) * 8
    tex = ok(dev.texture(dev.array(vol, F.CU_AD_FORMAT_FLOAT, shape=(2, 2, 2)), linear=True))
    xs = np.array([1.0, 0.5], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(8))
    assert dev.run("fetch3d", 2, out, tex, dev.upload(xs), dev.upload(xs), dev.upload(xs), 2) \
        == (OK,)
    assert dev.download(int(out), 2, np.float32).tolist() == [vol.mean(), 0.0]


def test_integer_fetches_from_linear_memory_read_zero_outside(dev: Device) -> None:
    data = np.arange(10, 20, dtype=np.int32)
    res = real_driver.CUDA_RESOURCE_DESC()
    res.resType = real_driver.CUresourcetype.CU_RESOURCE_TYPE_LINEAR
    res.res.linear.devPtr = dev.upload(data)
    res.res.linear.format = F.CU_AD_FORMAT_SIGNED_INT32
    res.res.linear.numChannels = 1
    res.res.linear.sizeInBytes = data.nbytes
    td = real_driver.CUDA_TEXTURE_DESC()
    td.flags = real_driver.CU_TRSF_READ_AS_INTEGER
    tex = ok(dev.drv.cuTexObjectCreate(res, td, None))
    idx = np.array([0, 9, 10, -1, 4], dtype=np.int32)
    out = ok(dev.drv.cuMemAlloc(idx.nbytes))
    assert dev.run("fetch_int", 5, out, tex, dev.upload(idx), 5) == (OK,)
    assert dev.download(int(out), 5, np.int32).tolist() == [10, 19, 0, 0, 14]
    ok(dev.drv.cuMemFree(res.res.linear.devPtr))
    (err,) = dev.run("fetch_int", 5, out, tex, dev.upload(idx), 5)
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "no longer allocated" in dev.drv.last_error_detail()


def test_a_layered_texture_reads_the_layer_each_thread_names(dev: Device) -> None:
    layers = np.array([[[1.0, 2.0]], [[10.0, 20.0]], [[100.0, 200.0]]], dtype=np.float32)
    arr = dev.array(layers, F.CU_AD_FORMAT_FLOAT, flags=real_driver.CUDA_ARRAY3D_LAYERED,
                    shape=(2, 1, 3))
    tex = ok(dev.texture(arr))
    xs = np.array([0.5, 1.5, 1.5, 0.5], dtype=np.float32)
    ls = np.array([0, 1, 2, 2], dtype=np.int32)
    out = ok(dev.drv.cuMemAlloc(16))
    assert dev.run("layered", 4, out, tex, dev.upload(xs), dev.upload(ls), 4) == (OK,)
    assert dev.download(int(out), 4, np.float32).tolist() == [1.0, 20.0, 200.0, 100.0]


CUBE_TABLE = [  # direction, face, (s, t) per the Programming Guide's cubemap table
    ((1.0, 0.2, -0.6), 0, (0.6, -0.2)), ((-1.0, 0.2, -0.6), 1, (-0.6, -0.2)),
    ((0.3, 1.0, -0.4), 2, (0.3, -0.4)), ((0.3, -1.0, -0.4), 3, (0.3, 0.4)),
    ((0.3, 0.7, 1.0), 4, (0.3, -0.7)), ((0.3, 0.7, -1.0), 5, (-0.3, -0.7)),
]


def test_a_cubemap_fetch_reads_the_face_of_the_major_axis(dev: Device) -> None:
    w = 4
    faces = (np.arange(6)[:, None, None] * 100 + np.arange(w * w).reshape(w, w)).astype(
        np.float32)
    arr = dev.array(faces, F.CU_AD_FORMAT_FLOAT, flags=real_driver.CUDA_ARRAY3D_CUBEMAP,
                    shape=(w, w, 6))
    tex = ok(dev.texture(arr, normalized=True))
    dirs = np.array([d for d, _, _ in CUBE_TABLE], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(6 * 4))
    assert dev.run("cube", 6, out, tex, *(dev.upload(np.ascontiguousarray(dirs[:, k]))
                                          for k in range(3)), 6) == (OK,)
    got = dev.download(int(out), 6, np.float32)
    for value, (_, face, (s, t)) in zip(got, CUBE_TABLE, strict=True):
        u, v = (s + 1) / 2, (t + 1) / 2
        assert value == faces[face, int(v * w), int(u * w)]


def test_1d_layered_and_layered_cubemap_textures_pick_layer_then_face(dev: Device) -> None:
    rows = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]], dtype=np.float32)
    arr = dev.array(rows[:, None, :], F.CU_AD_FORMAT_FLOAT,
                    flags=real_driver.CUDA_ARRAY3D_LAYERED, shape=(3, 0, 2))
    tex = ok(dev.texture(arr))
    xs = np.array([2.5, 0.5], dtype=np.float32)
    ls = np.array([1, 0], dtype=np.int32)
    out = ok(dev.drv.cuMemAlloc(8))
    assert dev.run("layered1d", 2, out, tex, dev.upload(xs), dev.upload(ls), 2) == (OK,)
    assert dev.download(int(out), 2, np.float32).tolist() == [30.0, 1.0]

    w = 2
    faces = (np.arange(12)[:, None, None] * 10 + np.zeros((w, w))).astype(np.float32)
    flags = real_driver.CUDA_ARRAY3D_CUBEMAP | real_driver.CUDA_ARRAY3D_LAYERED
    cube = ok(dev.texture(dev.array(faces, F.CU_AD_FORMAT_FLOAT, flags=flags,
                                    shape=(w, w, 12)), normalized=True))
    dirs = np.array([d for d, _, _ in CUBE_TABLE], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(24))
    assert dev.run("cube_layered", 6, out, cube, *(dev.upload(np.ascontiguousarray(dirs[:, k]))
                                                   for k in range(3)), 1, 6) == (OK,)
    assert dev.download(int(out), 6, np.float32).tolist() == [60.0 + 10 * f for f in range(6)]


def test_a_pitched_2d_texture_reads_device_memory_as_it_is(dev: Device) -> None:
    rt = dev.rt
    ptr, pitch = ok(rt.cudaMallocPitch(3 * 4, 2))
    img = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    h2d = RT.cudaMemcpyKind.cudaMemcpyHostToDevice
    assert rt.cudaMemcpy2D(ptr, pitch, img, 12, 12, 2, h2d) == (RT.cudaError_t.cudaSuccess,)
    res = RT.cudaResourceDesc()
    res.resType = RT.cudaResourceType.cudaResourceTypePitch2D
    res.res.pitch2D.devPtr = ptr
    res.res.pitch2D.desc = ok(rt.cudaCreateChannelDesc(
        32, 0, 0, 0, RT.cudaChannelFormatKind.cudaChannelFormatKindFloat))
    res.res.pitch2D.width, res.res.pitch2D.height, res.res.pitch2D.pitchInBytes = 3, 2, pitch
    td = RT.cudaTextureDesc()
    td.addressMode = [RT.cudaTextureAddressMode.cudaAddressModeClamp] * 3
    tex = ok(rt.cudaCreateTextureObject(res, td, None))
    back = ok(rt.cudaGetTextureObjectResourceDesc(tex))
    assert (back.resType, back.res.pitch2D.pitchInBytes) == (res.resType, pitch)
    xs = np.array([2.5, 0.5, 7.0], dtype=np.float32)
    ys = np.array([1.5, 0.5, 0.2], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(48))
    assert dev.run("fetch2d", 3, out, tex, dev.upload(xs), dev.upload(ys), 3) == (OK,)
    assert dev.download(int(out), 12, np.float32).reshape(-1, 4)[:, 0].tolist() == [6, 1, 3]


def test_a_cubemap_direction_on_a_tie_is_refused_by_name(dev: Device) -> None:
    w = 2
    arr = dev.array(np.zeros((6, w, w), dtype=np.float32), F.CU_AD_FORMAT_FLOAT,
                    flags=real_driver.CUDA_ARRAY3D_CUBEMAP, shape=(w, w, 6))
    tex = ok(dev.texture(arr, normalized=True))
    one = dev.upload(np.ones(1, dtype=np.float32))
    (err,) = dev.run("cube", 1, ok(dev.drv.cuMemAlloc(4)), tex, one, one, one, 1)
    assert err == R.CUDA_ERROR_NOT_SUPPORTED
    assert "largest components tie" in dev.drv.last_error_detail()


def test_a_gather_returns_the_four_texels_of_the_bilinear_footprint(dev: Device) -> None:
    img = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=np.float32)
    tex = ok(dev.texture(dev.array(img, F.CU_AD_FORMAT_FLOAT,
                                   flags=real_driver.CUDA_ARRAY3D_TEXTURE_GATHER,
                                   shape=(3, 3, 0))))
    xs = np.array([1.2], dtype=np.float32)
    ys = np.array([1.9], dtype=np.float32)
    out = ok(dev.drv.cuMemAlloc(16))
    assert dev.run("gather", 1, out, tex, dev.upload(xs), dev.upload(ys), 1) == (OK,)
    # i = floor(1.2 - 0.5) = 0, j = floor(1.9 - 0.5) = 1: (i, j+1), (i+1, j+1), (i+1, j), (i, j)
    assert dev.download(int(out), 4, np.float32).tolist() == [7.0, 8.0, 5.0, 4.0]


def test_a_destroyed_texture_is_an_illegal_address_at_the_fetch(dev: Device) -> None:
    tex = ok(dev.texture(dev.array(np.zeros((1, 2), np.float32), F.CU_AD_FORMAT_FLOAT)))
    ok(dev.drv.cuTexObjectDestroy(tex))
    xs = dev.upload(np.zeros(1, dtype=np.float32))
    (err,) = dev.run("fetch2d", 1, ok(dev.drv.cuMemAlloc(16)), tex, xs, xs, 1)
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "no live texture object" in dev.drv.last_error_detail()


def test_a_texture_over_a_destroyed_array_is_an_illegal_address(dev: Device) -> None:
    arr = dev.array(np.zeros((1, 2), np.float32), F.CU_AD_FORMAT_FLOAT)
    tex = ok(dev.texture(arr))
    ok(dev.drv.cuArrayDestroy(arr))
    xs = dev.upload(np.zeros(1, dtype=np.float32))
    (err,) = dev.run("fetch2d", 1, ok(dev.drv.cuMemAlloc(16)), tex, xs, xs, 1)
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS
    assert "CUDA array has been destroyed" in dev.drv.last_error_detail()


# -- surfaces ----------------------------------------------------------------------------------

def _surface(dev: Device, values: np.ndarray):
    arr = dev.array(values[None, :], F.CU_AD_FORMAT_SIGNED_INT32,
                    flags=real_driver.CUDA_ARRAY3D_SURFACE_LDST, shape=(len(values), 0, 0))
    res = real_driver.CUDA_RESOURCE_DESC()
    res.resType = real_driver.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
    res.res.array.hArray = arr
    return arr, ok(dev.drv.cuSurfObjectCreate(res))


def _array_values(dev: Device, arr, n: int) -> list[int]:
    out = np.zeros(n, dtype=np.int32)
    ok(dev.drv.cuMemcpyAtoH(out, arr, 0, out.nbytes))
    return out.tolist()


def test_surface_loads_outside_clamp_or_read_zero(dev: Device) -> None:
    _, surf = _surface(dev, np.array([5, 6, 7, 8], dtype=np.int32))
    xs = np.array([0, 3, 4, -2], dtype=np.int32)
    out = ok(dev.drv.cuMemAlloc(32))
    assert dev.run("surface_read", 4, out, surf, dev.upload(xs), 4) == (OK,)
    got = dev.download(int(out), 8, np.int32).reshape(-1, 2)
    assert got[:, 0].tolist() == [5, 8, 8, 5]  # .clamp: the nearest element
    assert got[:, 1].tolist() == [5, 8, 0, 0]  # .zero


def test_surface_stores_outside_with_zero_are_dropped(dev: Device) -> None:
    arr, surf = _surface(dev, np.zeros(3, dtype=np.int32))
    xs = np.array([2, 3, -1, 0], dtype=np.int32)
    assert dev.run("surface_write", 4, surf, dev.upload(xs), 4, 0) == (OK,)
    assert _array_values(dev, arr, 3) == [103, 0, 100]


def test_a_surface_store_outside_with_trap_faults_the_context(dev: Device) -> None:
    arr, surf = _surface(dev, np.zeros(3, dtype=np.int32))
    xs = np.array([0, 1, 3], dtype=np.int32)
    (err,) = dev.run("surface_write", 3, surf, dev.upload(xs), 3, 1)
    assert err == R.CUDA_ERROR_LAUNCH_FAILED
    detail = dev.drv.last_error_detail()
    assert "kernel surface_write" in detail and "sust outside its surface" in detail
    assert "x=12 bytes" in detail and "thread (2, 0, 0)" in detail
    assert "textures.cu:" in detail  # the kernel's line, behind the header's surf1Dwrite
    out = np.zeros(3, dtype=np.int32)  # a trap is sticky, as on a GPU
    assert dev.drv.cuMemcpyAtoH(out, arr, 0, out.nbytes) == (R.CUDA_ERROR_LAUNCH_FAILED,)


def test_a_cubemap_surface_is_written_face_by_face(dev: Device) -> None:
    flags = real_driver.CUDA_ARRAY3D_CUBEMAP | real_driver.CUDA_ARRAY3D_SURFACE_LDST
    arr = dev.array(np.zeros((6, 2, 2), np.int32), F.CU_AD_FORMAT_SIGNED_INT32, flags=flags,
                    shape=(2, 2, 6))
    res = real_driver.CUDA_RESOURCE_DESC()
    res.resType = real_driver.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
    res.res.array.hArray = arr
    surf = ok(dev.drv.cuSurfObjectCreate(res))
    fn = ok(dev.drv.cuModuleGetFunction(dev.module, b"surface_cube"))
    assert dev.drv.cuLaunchKernel(fn, 6, 1, 1, 2, 1, 1, 0, 0,
                                  ((int(surf),), (ctypes.c_uint64,)), 0) == (OK,)
    got = np.zeros(24, dtype=np.int32)
    ok(dev.drv.cuMemcpyAtoH(got, arr, 0, got.nbytes))
    assert got.reshape(6, 2, 2)[:, 1, :].tolist() == [[f * 10, f * 10 + 1] for f in range(6)]
    assert (got.reshape(6, 2, 2)[:, 0, :] == 0).all()


def test_a_surface_store_off_its_element_size_is_misaligned(dev: Device) -> None:
    _, surf = _surface(dev, np.zeros(3, dtype=np.int32))
    fn = ok(dev.drv.cuModuleGetFunction(dev.module, b"surface_byte"))
    (err,) = dev.drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0,
                                    ((int(surf), 2), (ctypes.c_uint64, ctypes.c_int)), 0)
    assert err == R.CUDA_ERROR_MISALIGNED_ADDRESS


# -- arrays, copies, objects -------------------------------------------------------------------

def test_array_descriptors_round_trip_and_bad_shapes_are_refused(dev: Device) -> None:
    d = real_driver.CUDA_ARRAY3D_DESCRIPTOR()
    d.Width, d.Height, d.Depth, d.Format, d.NumChannels = 8, 8, 6, F.CU_AD_FORMAT_HALF, 2
    d.Flags = real_driver.CUDA_ARRAY3D_CUBEMAP
    arr = ok(dev.drv.cuArray3DCreate(d))
    got = ok(dev.drv.cuArray3DGetDescriptor(arr))
    assert (got.Width, got.Height, got.Depth, got.Format, got.NumChannels, got.Flags) == (
        8, 8, 6, F.CU_AD_FORMAT_HALF, 2, real_driver.CUDA_ARRAY3D_CUBEMAP)
    assert dev.drv.cuArrayGetDescriptor(arr)[0] == R.CUDA_ERROR_INVALID_VALUE
    d.Height = 4  # a cubemap's faces are square
    assert dev.drv.cuArray3DCreate(d)[0] == R.CUDA_ERROR_INVALID_VALUE
    d.Height, d.Format = 8, F.CU_AD_FORMAT_BC1_UNORM
    assert dev.drv.cuArray3DCreate(d)[0] == R.CUDA_ERROR_NOT_SUPPORTED
    assert "BC1_UNORM" in dev.drv.last_error_detail()
    ok(dev.drv.cuArrayDestroy(arr))
    assert dev.drv.cuArray3DGetDescriptor(arr)[0] == R.CUDA_ERROR_INVALID_HANDLE
    assert "cuMipmappedArrayCreate" not in Driver.IMPLEMENTED


def test_2d_copies_move_pitched_rows_between_host_array_and_device(dev: Device) -> None:
    rt = dev.rt
    img = np.arange(6 * 5, dtype=np.float32).reshape(5, 6)
    desc = ok(rt.cudaCreateChannelDesc(32, 0, 0, 0,
                                       RT.cudaChannelFormatKind.cudaChannelFormatKindFloat))
    arr = ok(rt.cudaMallocArray(desc, 6, 5, 0))
    K = RT.cudaMemcpyKind
    done = (RT.cudaError_t.cudaSuccess,)
    assert rt.cudaMemcpy2DToArray(arr, 4, 1, img, 24, 16, 3, K.cudaMemcpyHostToDevice) == done
    dptr, pitch = ok(rt.cudaMallocPitch(24, 5))
    assert rt.cudaMemcpy2DFromArray(dptr, pitch, arr, 0, 0, 24, 5,
                                    K.cudaMemcpyDeviceToDevice) == done
    back = np.zeros((5, 6), dtype=np.float32)
    assert rt.cudaMemcpy2D(back, 24, dptr, pitch, 24, 5, K.cudaMemcpyDeviceToHost) == done
    want = np.zeros((5, 6), dtype=np.float32)
    want[1:4, 1:5] = img[:3, :4]
    assert np.array_equal(back, want)
    err = rt.cudaMemcpy2DToArray(arr, 12, 0, img, 24, 16, 1, K.cudaMemcpyHostToDevice)[0]
    assert err == RT.cudaError_t.cudaErrorInvalidValue  # past the row's 24 bytes
    cd = ok(rt.cudaGetChannelDesc(arr))
    assert (cd.x, cd.y, cd.f) == (32, 0, RT.cudaChannelFormatKind.cudaChannelFormatKindFloat)


def test_1d_array_copies_run_through_the_rows(dev: Device) -> None:
    rt, K = dev.rt, RT.cudaMemcpyKind
    desc = ok(rt.cudaCreateChannelDesc(16, 16, 0, 0,
                                       RT.cudaChannelFormatKind.cudaChannelFormatKindSigned))
    a = ok(rt.cudaMallocArray(desc, 4, 3, 0))  # rows of 16 bytes
    b = ok(rt.cudaMallocArray(desc, 4, 3, 0))
    data = np.arange(12, dtype=np.uint8) + 1
    done = (RT.cudaError_t.cudaSuccess,)
    assert rt.cudaMemcpyToArray(a, 8, 1, data, 12, K.cudaMemcpyHostToDevice) == done
    assert rt.cudaMemcpyArrayToArray(b, 0, 0, a, 0, 0, 48, K.cudaMemcpyDeviceToDevice) == done
    d = ok(rt.cudaMalloc(48))
    assert rt.cudaMemcpyFromArray(d, b, 0, 0, 48, K.cudaMemcpyDefault) == done
    back = np.zeros(48, dtype=np.uint8)
    ok(dev.drv.cuMemcpyDtoH(back, d, 48))
    want = np.zeros(48, dtype=np.uint8)
    want[24:36] = data  # row 1, byte 8, running into row 2
    assert np.array_equal(back, want)
    assert rt.cudaMemcpyToArray(a, 8, 2, data, 12, K.cudaMemcpyHostToDevice)[0] == \
        RT.cudaError_t.cudaErrorInvalidValue  # past the array's 48 bytes
    assert rt.cudaMemcpyToArray(a, 0, 0, data, 4, K.cudaMemcpyDeviceToHost)[0] == \
        RT.cudaError_t.cudaErrorInvalidMemcpyDirection


def test_runtime_objects_and_arrays_describe_themselves(dev: Device) -> None:
    rt = dev.rt
    desc = ok(rt.cudaCreateChannelDesc(8, 8, 8, 8,
                                       RT.cudaChannelFormatKind.cudaChannelFormatKindUnsigned))
    arr = ok(rt.cudaMalloc3DArray(desc, RT.make_cudaExtent(4, 3, 2),
                                  RT.cudaArrayLayered | RT.cudaArraySurfaceLoadStore))
    got, extent, flags = ok(rt.cudaArrayGetInfo(arr))
    assert (got.x, got.w, got.f) == (8, 8, RT.cudaChannelFormatKind.cudaChannelFormatKindUnsigned)
    assert (extent.width, extent.height, extent.depth, flags) == (4, 3, 2, 3)
    res = RT.cudaResourceDesc()
    res.resType = RT.cudaResourceType.cudaResourceTypeArray
    res.res.array.array = arr
    surf = ok(rt.cudaCreateSurfaceObject(res))
    assert int(ok(rt.cudaGetSurfaceObjectResourceDesc(surf)).res.array.array) == int(arr)
    td = RT.cudaTextureDesc()
    td.addressMode = [RT.cudaTextureAddressMode.cudaAddressModeBorder] * 3
    td.filterMode = RT.cudaTextureFilterMode.cudaFilterModeLinear
    td.readMode = RT.cudaTextureReadMode.cudaReadModeNormalizedFloat
    td.normalizedCoords = 1
    td.borderColor = [0.25, 0.5, 0.75, 1.0]
    tex = ok(rt.cudaCreateTextureObject(res, td, None))
    back = ok(rt.cudaGetTextureObjectTextureDesc(tex))
    assert list(back.addressMode) == list(td.addressMode)
    assert (back.filterMode, back.readMode, back.normalizedCoords) == (
        td.filterMode, td.readMode, 1)
    assert list(back.borderColor) == [0.25, 0.5, 0.75, 1.0]
    for done in (rt.cudaDestroyTextureObject(tex), rt.cudaDestroySurfaceObject(surf),
                 rt.cudaFreeArray(arr)):
        assert done == (RT.cudaError_t.cudaSuccess,)


def test_channel_descriptors_must_name_one_format(dev: Device) -> None:
    bad = ok(dev.rt.cudaCreateChannelDesc(8, 16, 0, 0,
                                          RT.cudaChannelFormatKind.cudaChannelFormatKindUnsigned))
    err = dev.rt.cudaMallocArray(bad, 4, 4, 0)[0]
    assert err == RT.cudaError_t.cudaErrorInvalidChannelDescriptor


def test_what_cannot_be_sampled_exactly_is_refused_at_creation(dev: Device) -> None:
    arr = dev.array(np.zeros((6, 2, 2), np.float32), F.CU_AD_FORMAT_FLOAT,
                    flags=real_driver.CUDA_ARRAY3D_CUBEMAP, shape=(2, 2, 6))
    err, _ = dev.texture(arr, flags=real_driver.CU_TRSF_SEAMLESS_CUBEMAP)
    assert err == R.CUDA_ERROR_NOT_SUPPORTED and "seamless" in dev.drv.last_error_detail()
    ints = dev.array(np.zeros((1, 2), np.int32), F.CU_AD_FORMAT_SIGNED_INT32)
    err, _ = dev.texture(ints, linear=True)
    assert err == R.CUDA_ERROR_NOT_SUPPORTED and "linear filtering" in \
        dev.drv.last_error_detail()
    shorts = dev.array(np.zeros((1, 2), np.uint16), F.CU_AD_FORMAT_UNSIGNED_INT16)
    err, _ = dev.texture(shorts, linear=True, as_integer=False)
    assert err == R.CUDA_ERROR_NOT_SUPPORTED and "16-bit" in dev.drv.last_error_detail()


def test_texture_objects_give_back_their_descriptors(dev: Device) -> None:
    arr = dev.array(np.zeros((2, 2), np.float32), F.CU_AD_FORMAT_FLOAT)
    tex = ok(dev.texture(arr, (AM.CU_TR_ADDRESS_MODE_MIRROR,) * 3, linear=True,
                         normalized=True))
    res = ok(dev.drv.cuTexObjectGetResourceDesc(tex))
    assert int(res.res.array.hArray) == int(arr)
    td = ok(dev.drv.cuTexObjectGetTextureDesc(tex))
    assert list(td.addressMode) == [AM.CU_TR_ADDRESS_MODE_MIRROR] * 3
    assert td.filterMode == real_driver.CUfilter_mode.CU_TR_FILTER_MODE_LINEAR
    ok(dev.drv.cuTexObjectDestroy(tex))
    assert dev.drv.cuTexObjectDestroy(tex)[0] == R.CUDA_ERROR_INVALID_VALUE


def test_the_driver_door_judges_both_pointer_sides_of_a_2d_copy() -> None:
    from gpusafe.doors.python_driver import _COPIES

    ranges, synchronous = _COPIES["cuMemcpy2D"]
    p = real_driver.CUDA_MEMCPY2D()
    p.srcMemoryType = real_driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.srcPitch, p.srcXInBytes, p.srcY = 0x1000, 64, 8, 2
    p.dstMemoryType = real_driver.CUmemorytype.CU_MEMORYTYPE_ARRAY
    p.WidthInBytes, p.Height = 16, 3
    assert synchronous and ranges(p) == [(0x1000 + 8 + 2 * 64, 2 * 64 + 16)]
    p.dstMemoryType = real_driver.CUmemorytype.CU_MEMORYTYPE_HOST
    p.dstHost, p.dstPitch = 0x9000, 0
    assert ranges(p)[1] == (0x9000, 2 * 16 + 16)  # pitch 0: rows back to back
    p3 = real_driver.CUDA_MEMCPY3D()
    p3.srcMemoryType = real_driver.CUmemorytype.CU_MEMORYTYPE_UNIFIED
    p3.srcDevice, p3.srcPitch, p3.srcHeight, p3.srcZ = 0x2000, 32, 4, 1
    p3.WidthInBytes, p3.Height, p3.Depth = 32, 4, 2
    assert _COPIES["cuMemcpy3D"][0](p3) == [(0x2000 + 128, 128 + 3 * 32 + 32)]


QUERIES = """.version 8.0
.target sm_75
.address_size 64
.visible .entry queries(.param .u64 out, .param .u64 tex, .param .u64 surf)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [tex];
    ld.param.u64 %rd3, [surf];
    txq.width.b32 %r1, [%rd2];
    txq.height.b32 %r2, [%rd2];
    txq.array_size.b32 %r3, [%rd2];
    txq.normalized_coords.b32 %r4, [%rd2];
    txq.addr_mode_0.b32 %r5, [%rd2];
    suq.width.b32 %r6, [%rd3];
    suq.height.b32 %r7, [%rd3];
    st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
    st.global.v2.u32 [%rd1+16], {%r5, %r6};
    st.global.u32 [%rd1+24], %r7;
    ret;
}
"""


def test_txq_and_suq_answer_the_objects_sizes_and_modes(ptx: str) -> None:
    dev = Device(ptx)
    arr = dev.array(np.zeros((3, 2, 5), np.float32), F.CU_AD_FORMAT_FLOAT,
                    flags=real_driver.CUDA_ARRAY3D_LAYERED | real_driver.CUDA_ARRAY3D_SURFACE_LDST,
                    shape=(5, 2, 3))
    tex = ok(dev.texture(arr, (AM.CU_TR_ADDRESS_MODE_BORDER,) * 3, normalized=True))
    res = real_driver.CUDA_RESOURCE_DESC()
    res.resType = real_driver.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
    res.res.array.hArray = arr
    surf = ok(dev.drv.cuSurfObjectCreate(res))
    module = ok(dev.drv.cuModuleLoadData(QUERIES.encode()))
    fn = ok(dev.drv.cuModuleGetFunction(module, b"queries"))
    out = ok(dev.drv.cuMemAlloc(28))
    args = ((int(out), int(tex), int(surf)), (ctypes.c_uint64,) * 3)
    assert dev.drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, args, 0) == (OK,)
    assert dev.download(int(out), 7, np.uint32).tolist() == [
        5, 2, 3, 1, int(AM.CU_TR_ADDRESS_MODE_BORDER), 5, 2]


REFERENCE = """.version 8.0
.target sm_75
.address_size 64
.global .texref tex_a;
.visible .entry by_reference(.param .u64 out)
{
    .reg .f32 %f<7>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.f32 %f5, 0f00000000;
    tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [tex_a, {%f5, %f5}];
    st.global.f32 [%rd1], %f1;
    ret;
}
"""


def test_a_texture_reference_is_refused_by_name_at_the_launch(dev: Device) -> None:
    module = ok(dev.drv.cuModuleLoadData(REFERENCE.encode()))
    fn = ok(dev.drv.cuModuleGetFunction(module, b"by_reference"))
    out = ok(dev.drv.cuMemAlloc(4))
    err = dev.drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, ((int(out),), (ctypes.c_uint64,)),
                                 0)
    assert err == (R.CUDA_ERROR_NOT_SUPPORTED,)
    assert "texture and surface references (tex_a)" in dev.drv.last_error_detail()
