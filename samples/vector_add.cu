// out[i] = a[i] + b[i] for i < n: the correct version of vector_add_oob.cu.
extern "C" __global__ void vector_add(float* out, const float* a, const float* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a[i] + b[i];
}
