// Templated kernels, instantiated explicitly: their .entry names stay mangled.

template <typename T>
__global__ void scale_add(T* out, const T* x, const T* y, T alpha, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}

template __global__ void scale_add<float>(float*, const float*, const float*, float, int);
template __global__ void scale_add<double>(double*, const double*, const double*, double, int);
template __global__ void scale_add<int>(int*, const int*, const int*, int, int);

// A non-type template parameter fixes the block size and the shared array size.
template <int BLOCK>
__global__ void block_sum(long long* out, const int* in, int n)
{
    __shared__ long long s[BLOCK];
    int t = threadIdx.x;
    int i = blockIdx.x * BLOCK + t;
    s[t] = i < n ? (long long)in[i] : 0;
    __syncthreads();
#pragma unroll
    for (int w = BLOCK / 2; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

template __global__ void block_sum<64>(long long*, const int*, int);
template __global__ void block_sum<128>(long long*, const int*, int);

// A functor-templated map, instantiated with two functors.
struct Square {
    __device__ float operator()(float v) const { return v * v; }
};
struct Clamp01 {
    __device__ float operator()(float v) const { return fminf(fmaxf(v, 0.0f), 1.0f); }
};

template <typename F>
__global__ void map_kernel(float* out, const float* in, int n, F f)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f(in[i]);
}

template __global__ void map_kernel<Square>(float*, const float*, int, Square);
template __global__ void map_kernel<Clamp01>(float*, const float*, int, Clamp01);
