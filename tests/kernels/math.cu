// CUDA math library calls. Results are compared with a tolerance: libdevice
// functions are accurate to a few ulp, not correctly rounded.

extern "C" __global__ void math_f32(float* out, const float* x, const float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i];          // in [-3, 3]
    float b = y[i];          // in [0.1, 4]
    float* o = out + 12 * i;
    o[0] = sinf(a);
    o[1] = cosf(a);
    o[2] = expf(a);
    o[3] = logf(b);
    o[4] = erff(a);
    o[5] = powf(b, a);
    o[6] = tanhf(a);
    o[7] = sqrtf(b);
    o[8] = atan2f(a, b);
    o[9] = floorf(a * 3.0f) + ceilf(b) + truncf(a) + roundf(b * 2.0f);
    o[10] = fmodf(a * 10.0f, b);
    o[11] = rsqrtf(b) + exp2f(a) + log2f(b) + cbrtf(a);
}

extern "C" __global__ void math_f64(double* out, const double* x, const double* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double a = x[i];
    double b = y[i];
    double* o = out + 8 * i;
    o[0] = sqrt(b);          // correctly rounded: exact comparison is fine
    o[1] = sin(a);
    o[2] = exp(a);
    o[3] = log(b);
    o[4] = pow(b, a);
    o[5] = tanh(a);
    o[6] = fma(a, b, -1.0);  // correctly rounded
    o[7] = fabs(a) / b;      // correctly rounded
}

// Fast intrinsics (approximate hardware instructions): __sinf, __expf, __fdividef,
// rcp/sqrt approximations, fused fma intrinsics with explicit rounding.
extern "C" __global__ void math_intrinsics(float* out, const float* x, const float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i];
    float b = y[i];
    float* o = out + 8 * i;
    o[0] = __sinf(a);
    o[1] = __cosf(a);
    o[2] = __expf(a);
    o[3] = __logf(b);
    o[4] = __fdividef(a, b);
    o[5] = __fmaf_rn(a, b, 1.0f);  // correctly rounded
    o[6] = __fadd_rz(a, b);        // round toward zero
    o[7] = __fsqrt_rn(b) + __frcp_rn(b);
}
