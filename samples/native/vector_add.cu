// A correct native CUDA program: out = a + b on 1000 elements.
#include <cstdio>
__global__ void vector_add(const float *a, const float *b, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a[i] + b[i];
}
int main() {
    const int n = 1000;
    static float a[n], b[n], out[n];
    for (int i = 0; i < n; i++) {
        a[i] = i;
        b[i] = 2 * i;
    }
    float *da, *db, *dout;
    cudaMalloc(&da, sizeof a);
    cudaMalloc(&db, sizeof b);
    cudaMalloc(&dout, sizeof out);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    vector_add<<<(n + 255) / 256, 256>>>(da, db, dout, n);
    cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += out[i] != 3.0f * i;
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
    printf("vector_add: %s\n", bad ? "WRONG" : "ok");
    return bad != 0;
}
