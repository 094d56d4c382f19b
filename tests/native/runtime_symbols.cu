// __constant__ and __device__ variables through cudaMemcpyToSymbol/FromSymbol; the last copy runs 4 bytes past the end of coeff.
#include <cstdio>
__constant__ float coeff[4];
__device__ int counter;
__global__ void scale(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = coeff[i % 4] * i;
        atomicAdd(&counter, 1);
    }
}
int main() {
    float c[4] = {1, 2, 3, 4}, h[64];
    int zero = 0, count = -1;
    float *d;
    cudaMemcpyToSymbol(coeff, c, sizeof c);
    cudaMemcpyToSymbol(counter, &zero, sizeof zero);
    cudaMalloc(&d, sizeof h);
    scale<<<1, 64>>>(d, 64);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaMemcpyFromSymbol(&count, counter, sizeof count);
    cudaError_t over = cudaMemcpyToSymbol(coeff, c, sizeof c, 4);  // 4 bytes past the end
    cudaFree(d);
    printf("symbols: %d %g %g over=%d\n", count, h[5], h[63], (int)over);
    return !(count == 64 && h[5] == 10 && h[63] == 252);
}
