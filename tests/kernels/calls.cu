// Real calls: __noinline__ device functions, recursion, pointers passed to callees.

__device__ __noinline__ unsigned long long factorial(unsigned n)
{
    if (n <= 1) return 1ULL;
    return (unsigned long long)n * factorial(n - 1);
}

__device__ __noinline__ int fib(int n)
{
    if (n < 2) return n;
    return fib(n - 1) + fib(n - 2);
}

extern "C" __global__ void recursive_factorial(unsigned long long* out, const unsigned* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = factorial(in[i]);  // in[i] <= 20
}

extern "C" __global__ void recursive_fib(int* out, const int* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fib(in[i]);  // in[i] <= 15
}

struct Pair {
    float lo, hi;
};

// Returns a struct, writes through a pointer into the caller's local frame.
__device__ __noinline__ Pair minmax3(float a, float b, float c, int* argmax)
{
    Pair p;
    p.lo = fminf(a, fminf(b, c));
    p.hi = fmaxf(a, fmaxf(b, c));
    *argmax = (a >= b && a >= c) ? 0 : (b >= c ? 1 : 2);
    return p;
}

// Reads a global array through a pointer parameter of a callee.
__device__ __noinline__ float window_sum(const float* p, int len)
{
    float s = 0.0f;
    for (int k = 0; k < len; ++k) s += p[k];
    return s;
}

extern "C" __global__ void noinline_calls(float* out, int* arg_out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int am;
    Pair p = minmax3(in[3 * i], in[3 * i + 1], in[3 * i + 2], &am);
    out[3 * i + 0] = p.lo;
    out[3 * i + 1] = p.hi;
    out[3 * i + 2] = window_sum(in + 3 * i, 3);
    arg_out[i] = am;
}
