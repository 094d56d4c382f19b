// A native CUDA program that never frees one of its two buffers.
#include <cstdio>
__global__ void scale(float *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= 2.0f;
}
static float *make(int n) {
    float *p = nullptr;
    cudaMalloc(&p, n * sizeof(float));
    cudaMemset(p, 0, n * sizeof(float));
    return p;
}
int main() {
    float *kept = make(256);
    float *used = make(256);
    scale<<<2, 128>>>(used, 256);
    cudaError_t e = cudaDeviceSynchronize();
    cudaFree(used);
    printf("leak: %s %d\n", cudaGetErrorName(e), kept != nullptr);
    return 0;
}
