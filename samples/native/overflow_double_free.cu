// A native CUDA program with two bugs: the bounds test i <= n lets thread n
// write one element past a 64-element buffer, and the buffer is freed twice.
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
