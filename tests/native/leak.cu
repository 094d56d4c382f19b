// A leak through a helper function, and a launch one past the end: the
// report names the native frames (helper, then main) at their lines.
#include <cstdio>
__global__ void fill(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n)
        p[i] = i;
}
static int *make(int n) {
    int *p = nullptr;
    cudaMalloc(&p, n * sizeof(int));
    return p;
}
static void run(int *p, int n) {
    fill<<<1, 64>>>(p, n);
}
int main() {
    int *kept = make(16);
    int *used = make(32);
    run(used, 32);
    cudaDeviceSynchronize();
    cudaFree(used);
    printf("leak done %d\n", kept != nullptr);
    return 0;
}
