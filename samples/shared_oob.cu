// Average each element with its right neighbour, staged in shared memory.
// Each block loads BLOCK elements into `tile` and the one element after its
// range into `halo` (dynamic shared memory, sized at launch). The last thread
// of a block should read halo[0] but reads tile[BLOCK], one past the end.
#define BLOCK 128

extern "C" __global__ void pair_average(float* out, const float* in, int n)
{
    __shared__ float tile[BLOCK];
    extern __shared__ float halo[];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    if (threadIdx.x == 0)
        halo[0] = i + BLOCK < n ? in[i + BLOCK] : 0.0f;
    __syncthreads();
    float right = tile[threadIdx.x + 1];  // BUG: thread BLOCK-1 reads tile[BLOCK]
    if (i < n)
        out[i] = 0.5f * (tile[threadIdx.x] + right);
}
