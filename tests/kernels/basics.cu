// Basic element-wise kernels: the shapes almost every CUDA program has.

extern "C" __global__ void vector_add(float* __restrict__ c, const float* __restrict__ a,
                                      const float* __restrict__ b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

// y = a*x + y with a grid-stride loop (the grid is smaller than n).
extern "C" __global__ void saxpy_grid_stride(int n, float a, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
