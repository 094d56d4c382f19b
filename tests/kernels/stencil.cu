// Stencils with shared-memory halos.
#define RADIUS 3
#define BLOCK 128

// out[i] = sum_{k=-3..3} w[k+3] * in[i+k] (clamped to the array ends).
// Weights are small integers, inputs integers: the result is exact.
__constant__ float stencil_w[2 * RADIUS + 1] = {1.0f, -2.0f, 3.0f, 4.0f, 3.0f, -2.0f, 1.0f};

extern "C" __global__ void stencil_1d(float* out, const float* in, int n)
{
    __shared__ float tile[BLOCK + 2 * RADIUS];
    int g = blockIdx.x * BLOCK + threadIdx.x;
    int l = threadIdx.x + RADIUS;
    tile[l] = in[min(g, n - 1)];
    if (threadIdx.x < RADIUS) {
        tile[l - RADIUS] = in[max(g - RADIUS, 0)];
        tile[l + BLOCK] = in[min(g + BLOCK, n - 1)];
    }
    __syncthreads();
    if (g < n) {
        float s = 0.0f;
#pragma unroll
        for (int k = -RADIUS; k <= RADIUS; ++k) s += stencil_w[k + RADIUS] * tile[l + k];
        out[g] = s;
    }
}

// 5-point Jacobi step on a W x H grid (boundary copied), 16x16 blocks with a halo.
extern "C" __global__ void stencil_2d_5pt(double* out, const double* in, int W, int H)
{
    __shared__ double t[18][18];
    int x = blockIdx.x * 16 + threadIdx.x;
    int y = blockIdx.y * 16 + threadIdx.y;
    int lx = threadIdx.x + 1, ly = threadIdx.y + 1;
    int cx = min(x, W - 1), cy = min(y, H - 1);
    t[ly][lx] = in[cy * W + cx];
    if (threadIdx.x == 0) t[ly][0] = in[cy * W + max(cx - 1, 0)];
    if (threadIdx.x == 15) t[ly][17] = in[cy * W + min(cx + 1, W - 1)];
    if (threadIdx.y == 0) t[0][lx] = in[max(cy - 1, 0) * W + cx];
    if (threadIdx.y == 15) t[17][lx] = in[min(cy + 1, H - 1) * W + cx];
    __syncthreads();
    if (x >= W || y >= H) return;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) {
        out[y * W + x] = t[ly][lx];
    } else {
        out[y * W + x] = 0.25 * (t[ly][lx - 1] + t[ly][lx + 1] + t[ly - 1][lx] + t[ly + 1][lx]);
    }
}
