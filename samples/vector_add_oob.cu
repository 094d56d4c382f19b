// A vector add whose bounds test is off by one: the thread with i == n
// reads one element past the end of `a` and `b` and writes one past `out`.
extern "C" __global__ void vector_add(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {  // BUG: should be i < n
        out[i] = a[i] + b[i];
    }
}
