// grid.sync() in a CUDA C++ program, launched with cudaLaunchCooperativeKernel:
// each block writes its partial sum, the grid waits, block 0 adds the partials
// and reads one past the end of them (the planted bug).
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void grid_sum(const int *x, int *partial, int *out, int n) {
    __shared__ int s;
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&s, x[i]);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
    cg::this_grid().sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        int t = 0;
        for (int b = 0; b <= (int)gridDim.x; b++)
            t += partial[b];
        *out = t;
    }
}
int main() {
    enum { N = 1000, BLOCKS = 4 };
    int host[N], *x, *partial, *out, sum = 0;
    for (int i = 0; i < N; i++) host[i] = i;
    cudaMalloc(&x, sizeof host);
    cudaMalloc(&partial, BLOCKS * sizeof(int));
    cudaMalloc(&out, sizeof(int));
    cudaMemcpy(x, host, sizeof host, cudaMemcpyHostToDevice);
    int n = N;
    void *args[] = {&x, &partial, &out, &n};
    cudaError_t e = cudaLaunchCooperativeKernel((void *)grid_sum, BLOCKS, 64, args, 0, 0);
    cudaDeviceSynchronize();
    cudaMemcpy(&sum, out, sizeof sum, cudaMemcpyDeviceToHost);
    printf("cooperative: %s, sum %d\n", cudaGetErrorName(e), sum);
    cudaFree(x);
    cudaFree(partial);
    cudaFree(out);
    return e != cudaSuccess;
}
