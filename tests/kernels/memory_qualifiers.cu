// Memory spaces and qualifiers: __ldg, volatile, __constant__ and __device__
// variables with initializers, __threadfence.

__constant__ int c_lut[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
__constant__ float c_coef[4] = {0.5f, -1.25f, 2.0f, 0.125f};
__constant__ double c_scale = 2.5;

__device__ int g_bias = 17;
__device__ float g_table[8] = {1.0f, 2.0f, 4.0f, 8.0f, 16.0f, 32.0f, 64.0f, 128.0f};
__device__ int g_scratch[256];

extern "C" __global__ void ldg_readonly(float* out, const float* __restrict__ in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = __ldg(&in[i]);
    float b = __ldg(&in[(i + 1) % n]);
    float4 dummy;  // vector __ldg from a 16-byte aligned address
    dummy = __ldg(reinterpret_cast<const float4*>(in) + (i / 4) % (n / 4));
    out[i] = a + b + dummy.x - dummy.w;
}

extern "C" __global__ void volatile_rw(int* out, int* buf, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    volatile int* v = buf;
    v[i] = v[i] * 3;       // volatile read-modify-write of this thread's own slot
    int again = v[i];      // re-read: must see the value just written
    __threadfence();
    out[i] = again + 1;
}

extern "C" __global__ void constant_lookup(double* out, const int* idx, const float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int j = idx[i];                        // any int: masked into range
    int l = c_lut[j & 15];
    float p = c_coef[0] + x[i] * (c_coef[1] + x[i] * (c_coef[2] + x[i] * c_coef[3]));
    out[i] = c_scale * (double)l + (double)p;
}

// Reads and writes of __device__ globals: g_scratch is per-thread scratch,
// g_bias and g_table are read-only here.
extern "C" __global__ void device_globals(float* out, const int* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || i >= 256) return;
    g_scratch[i] = in[i] + g_bias;
    __threadfence_block();
    out[i] = (float)g_scratch[i] * g_table[in[i] & 7];
}

// Takes the address of a __device__ array and indexes it through a pointer
// held in a register (the provenance is a global symbol, not a parameter).
__device__ __noinline__ float table_sum(const float* t, int k)
{
    float s = 0.0f;
    for (int j = 0; j <= k; ++j) s += t[j];
    return s;
}

extern "C" __global__ void device_global_ptr(float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table_sum(g_table, i & 7);
}
