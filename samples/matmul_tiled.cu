// C = A * B for row-major A (m x k), B (k x n), C (m x n), any sizes:
// TILE x TILE blocks stage tiles of A and B in shared memory; tiles that
// overhang the matrices are padded with zeros.
#define TILE 16

extern "C" __global__ void matmul_tiled(float* c, const float* a, const float* b,
                                        int m, int n, int k)
{
    __shared__ float ta[TILE][TILE];
    __shared__ float tb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        int ka = t + threadIdx.x;
        int kb = t + threadIdx.y;
        ta[threadIdx.y][threadIdx.x] = (row < m && ka < k) ? a[row * k + ka] : 0.0f;
        tb[threadIdx.y][threadIdx.x] = (kb < k && col < n) ? b[kb * n + col] : 0.0f;
        __syncthreads();
        for (int j = 0; j < TILE; ++j)
            acc += ta[threadIdx.y][j] * tb[j][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n)
        c[row * n + col] = acc;
}
