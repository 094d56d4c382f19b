// grid.sync() for the driver-API program cooperative.c: block partial sums,
// a grid barrier, then block 0 adds them (correct).
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void grid_sum(const int *x, int *partial, int *out, int n) {
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
        for (int b = 0; b < (int)gridDim.x; b++)
            t += partial[b];
        *out = t;
    }
}
