// Add an optional bias: the host passes bias == NULL for "no bias", but the
// kernel never tests for it.
extern "C" __global__ void add_bias(float* x, const float* bias, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += bias[i];  // BUG: bias is NULL
}
