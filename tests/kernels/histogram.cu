// Histogram privatized in shared memory, merged into global with atomics.
#define NBINS 64

extern "C" __global__ void histogram_shared(unsigned* hist, const unsigned char* data, int n)
{
    __shared__ unsigned local[NBINS];
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&local[data[i] % NBINS], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) {
        if (local[b]) atomicAdd(&hist[b], local[b]);
    }
}

// Weighted histogram with float bins in shared memory (weights are multiples of 1/4).
extern "C" __global__ void histogram_weighted(float* hist, const int* keys, const float* w, int n,
                                              int nbins)
{
    extern __shared__ float fbins[];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) fbins[b] = 0.0f;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&fbins[keys[i] % nbins], w[i]);
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) atomicAdd(&hist[b], fbins[b]);
}
