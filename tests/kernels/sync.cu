// Barriers with a reduction: __syncthreads_count/_and/_or, __syncwarp.

extern "C" __global__ void syncthreads_votes(int* out, const int* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    int cnt = __syncthreads_count(v > 0);
    int all = __syncthreads_and(v > -50);
    int any = __syncthreads_or(v > 90);
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x + 0] = cnt;
        out[3 * blockIdx.x + 1] = all;
        out[3 * blockIdx.x + 2] = any;
    }
}

// Warp-synchronous neighbour exchange through shared memory with __syncwarp.
extern "C" __global__ void syncwarp_exchange(int* out, const int* in)
{
    __shared__ int s[64];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    __syncwarp();
    int lane = t & 31;
    int neighbour = s[(t & ~31) | ((lane + 1) & 31)];
    __syncwarp();
    s[t] = neighbour * 2;
    __syncwarp();
    out[i] = s[(t & ~31) | ((lane + 3) & 31)];  // = 2 * in[lane + 4 (mod 32)]
}
