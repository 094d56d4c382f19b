// Conversions with explicit rounding modes. Inputs are in range for every
// target type (out-of-range conversions saturate in PTX; numpy has no such rule).

extern "C" __global__ void float_to_int_rounding(int* out_i, unsigned* out_u, long long* out_ll,
                                                 const float* f, const double* d, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = f[i];
    double y = d[i];
    out_i[6 * i + 0] = __float2int_rn(x);
    out_i[6 * i + 1] = __float2int_rz(x);
    out_i[6 * i + 2] = __float2int_ru(x);
    out_i[6 * i + 3] = __float2int_rd(x);
    out_i[6 * i + 4] = (int)x;               // C cast: round toward zero
    out_i[6 * i + 5] = __double2int_rn(y);
    out_u[2 * i + 0] = __float2uint_rn(fabsf(x));
    out_u[2 * i + 1] = __float2uint_rz(fabsf(x));
    out_ll[3 * i + 0] = __float2ll_rn(x * 1024.0f);
    out_ll[3 * i + 1] = __double2ll_rd(y * 1e6);
    out_ll[3 * i + 2] = (long long)__double2ull_ru(fabs(y) * 1e9);
}

extern "C" __global__ void int_to_float_rounding(float* out_f, double* out_d, const int* a,
                                                 const long long* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i];
    long long y = b[i];
    out_f[5 * i + 0] = __int2float_rn(x);
    out_f[5 * i + 1] = __int2float_rz(x);
    out_f[5 * i + 2] = __ll2float_rn(y);
    out_f[5 * i + 3] = (float)(unsigned)x;    // cvt.rn.f32.u32
    out_f[5 * i + 4] = __double2float_rn((double)y * 0.5);
    out_d[2 * i + 0] = __ll2double_rn(y);
    out_d[2 * i + 1] = (double)x / 3.0;
}

// Narrowing and widening integer conversions, sign and zero extension.
extern "C" __global__ void int_width_casts(long long* out, const long long* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long v = in[i];
    long long* o = out + 6 * i;
    o[0] = (long long)(signed char)v;
    o[1] = (long long)(unsigned char)v;
    o[2] = (long long)(short)v;
    o[3] = (long long)(unsigned short)v;
    o[4] = (long long)(int)v;
    o[5] = (long long)(unsigned)v;
}
