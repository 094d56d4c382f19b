// A CUDA C++ program built with nvcc: a bound one past the end, then a double free.
#include <cstdio>
__global__ void fill(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n)
        p[i] = i;
}
int main() {
    int *d;
    int host[64];
    cudaMalloc(&d, 64 * sizeof(int));
    fill<<<1, 128>>>(d, 64);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(d);
    cudaFree(d);
    printf("sync: %s, host[63] = %d\n", cudaGetErrorName(e), host[63]);
    return 0;
}
