// A correct CUDA C++ program on a stream of its own, timed with events.
#include <cstdio>
__global__ void inc(int *p) { p[threadIdx.x] += 1; }
int main() {
    int *d, h[32] = {0};
    cudaStream_t s;
    cudaEvent_t a, b;
    cudaStreamCreate(&s);
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaMalloc(&d, sizeof h);
    cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, s);
    cudaEventRecord(a, s);
    inc<<<1, 32, 0, s>>>(d);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = -1;
    cudaError_t e = cudaEventElapsedTime(&ms, a, b);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaStreamDestroy(s);
    cudaFree(d);
    printf("events: %s %d %d\n", cudaGetErrorString(e), ms >= 0, h[31]);
    return h[31] != 1;
}
