// 16-bit floating point: __half, __half2 and __nv_bfloat16.
// Inputs are small multiples of 1/64 (half) or 1/16 (bf16), so each result
// below is computed exactly in float32 and rounded once: the reference is
// "compute in float, round to nearest even".
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void half_ops(__half* out, float* out_f, const __half* a, const __half* b,
                                    const __half* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half x = a[i], y = b[i], z = c[i];
    out[4 * i + 0] = __hadd(x, y);
    out[4 * i + 1] = __hmul(x, y);
    out[4 * i + 2] = __hfma(x, y, z);
    out[4 * i + 3] = __hlt(x, y) ? __hneg(z) : __hsub(x, y);
    out_f[i] = __half2float(x) + 2.0f * __half2float(y);
}

extern "C" __global__ void half2_ops(__half2* out, const __half2* a, const __half2* b, int n2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2) return;
    __half2 x = a[i], y = b[i];
    out[3 * i + 0] = __hadd2(x, y);
    out[3 * i + 1] = __hmul2(x, y);
    out[3 * i + 2] = __lowhigh2highlow(__hsub2(x, y));   // swapped halves
}

extern "C" __global__ void bf16_ops(__nv_bfloat16* out, const __nv_bfloat16* a,
                                    const __nv_bfloat16* b, const __nv_bfloat16* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 x = a[i], y = b[i], z = c[i];
    out[4 * i + 0] = __hadd(x, y);
    out[4 * i + 1] = __hmul(x, y);
#if __CUDA_ARCH__ >= 800
    out[4 * i + 2] = __hfma(x, y, z);            // fma.rn.bf16 exists from sm_80
#else
    out[4 * i + 2] = __float2bfloat16_rn(fmaf(__bfloat162float(x), __bfloat162float(y),
                                              __bfloat162float(z)));
#endif
    // float -> bf16 conversion with round-to-nearest-even
    out[4 * i + 3] = __float2bfloat16_rn(__bfloat162float(x) * 0.3f);
}

// Conversions between all the 16-bit formats and float.
extern "C" __global__ void half_convert(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = in[i];
    out[3 * i + 0] = __half2float(__float2half_rn(v));
    out[3 * i + 1] = __bfloat162float(__float2bfloat16_rn(v));
    out[3 * i + 2] = __half2float(__float2half_rz(v));
}
