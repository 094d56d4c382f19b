// Scale a vector: out[i] = factor * in[i].
// The program frees `in` before this kernel runs (use_after_free.py), so
// every read of in[i] touches freed memory.
extern "C" __global__ void scale(float* out, const float* in, float factor, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = factor * in[i];  // BUG: `in` was freed by the host
}
