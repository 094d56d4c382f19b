// cudaDeviceReset between two uses of the device: the kernel's module is
// loaded again after it, and the second buffer is the new context's.
#include <cstdio>

__global__ void fill(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i;
}

int main() {
    int *d = nullptr, host[64] = {0};
    cudaMalloc(&d, sizeof host);
    fill<<<1, 64>>>(d, 64);
    cudaError_t reset = cudaDeviceReset();
    cudaMalloc(&d, sizeof host);
    fill<<<1, 64>>>(d, 64);
    cudaError_t copy = cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
    printf("reset: %s %s host[63] = %d\n", cudaGetErrorName(reset), cudaGetErrorName(copy),
           host[63]);
    cudaFree(d);
    return reset != cudaSuccess || copy != cudaSuccess || host[63] != 63;
}
