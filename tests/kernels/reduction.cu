// Block reductions.

// Classic shared-memory tree reduction of floats (blockDim.x = 256); values are
// multiples of 1/8 so the sum is exact in any order.
extern "C" __global__ void block_reduce_sum(float* block_sums, const float* in, int n)
{
    __shared__ float s[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x * 2 + t;
    float v = 0.0f;
    if (i < n) v += in[i];
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    s[t] = v;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 32; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t < 32) {
        float x = s[t] + s[t + 32];
        for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
        if (t == 0) block_sums[blockIdx.x] = x;
    }
}

// Single-pass reduction: every block writes a partial sum, __threadfence(), and
// the last block to finish (found with atomicInc on a __device__ counter) adds
// the partials in block order. The counter wraps back to 0 for the next launch.
__device__ unsigned int blocks_done = 0;

extern "C" __global__ void threadfence_reduce(int* partials, long long* total, const int* in, int n)
{
    __shared__ int s[128];
    __shared__ bool is_last;
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int w = 64; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) {
        partials[blockIdx.x] = s[0];
        __threadfence();
        unsigned ticket = atomicInc(&blocks_done, gridDim.x - 1);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (is_last && t == 0) {
        long long sum = 0;
        for (unsigned b = 0; b < gridDim.x; ++b) sum += ((volatile int*)partials)[b];
        *total = sum;
    }
}
