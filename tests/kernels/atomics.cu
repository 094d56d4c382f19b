// Atomics on global and shared memory. Every kernel's final memory state is
// independent of the order the atomics execute in (floating-point sums only
// add exactly representable values, so they are exact in any order).

extern "C" __global__ void atomic_add_int(int* counters, unsigned long long* total64,
                                          const int* vals, int n, int nbins)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = vals[i];
        atomicAdd(&counters[v % nbins], 1);
        atomicAdd(total64, (unsigned long long)v);
        atomicSub(&counters[nbins], v);  // counters[nbins] accumulates -sum
    }
}

extern "C" __global__ void atomic_add_float(float* sums, const float* vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&sums[i & 3], vals[i]);  // vals are multiples of 1/4, |v| <= 64
    }
}

extern "C" __global__ void atomic_add_double(double* sums, const double* vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&sums[i % 5], vals[i]);  // double atomicAdd: native from sm_60
    }
}

// mins[0..1] / maxs[0..1]: int and unsigned min and max; also per-bin min/max.
extern "C" __global__ void atomic_minmax(int* imin, int* imax, unsigned* umin, unsigned* umax,
                                         long long* llmin, unsigned long long* ullmax,
                                         const int* vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = vals[i];
        int b = i & 7;
        atomicMin(&imin[b], v);
        atomicMax(&imax[b], v);
        atomicMin(&umin[b], (unsigned)v);
        atomicMax(&umax[b], (unsigned)v);
        atomicMin(llmin, (long long)v * 1000003LL);
        atomicMax(ullmax, (unsigned long long)(unsigned)v * 7ULL);
    }
}

// A float "atomic multiply-add" and an int64 add built from atomicCAS loops.
extern "C" __global__ void atomic_cas_loops(int* acc, unsigned long long* acc64,
                                            const int* vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int v = vals[i];
    int old = *((volatile int*)acc);
    int assumed;
    do {
        assumed = old;
        old = atomicCAS(acc, assumed, assumed + v);
    } while (old != assumed);

    unsigned long long o64 = *((volatile unsigned long long*)acc64), a64;
    do {
        a64 = o64;
        o64 = atomicCAS(acc64, a64, a64 + (unsigned long long)(v & 0xff) * 0x100000001ULL);
    } while (o64 != a64);
}

// Each element is exchanged exactly once: out gets the old value, slots the new one.
// Also a float atomicExch, and atomicExch on shared memory.
extern "C" __global__ void atomic_exch(int* slots, int* old_out, float* fslots, float* fold_out,
                                       int n)
{
    __shared__ int s[128];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = t * 3;
    __syncthreads();
    if (i < n) {
        int prev_shared = atomicExch(&s[(t + 1) & 127], -t);   // each s[] slot hit once
        old_out[i] = atomicExch(&slots[i], i * 2 + 1) + prev_shared;
        fold_out[i] = atomicExch(&fslots[i], (float)i * 0.5f);
    }
}

// atomicInc / atomicDec wrap-around counters: the final value after k
// increments (or decrements) does not depend on their order.
extern "C" __global__ void atomic_inc_dec(unsigned* ctr, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicInc(&ctr[0], 9u);      // counts modulo 10
        atomicInc(&ctr[1], 0xffffffffu);
        atomicDec(&ctr[2], 6u);      // counts down modulo 7
        if (i & 1) atomicDec(&ctr[3], 100u);
    }
}

// Bitwise atomics on global memory and shared memory.
extern "C" __global__ void atomic_bitwise(unsigned* gand, unsigned* gor, unsigned* gxor,
                                          unsigned long long* gor64, const unsigned* vals, int n)
{
    __shared__ unsigned s_and, s_or, s_xor;
    if (threadIdx.x == 0) {
        s_and = 0xffffffffu;
        s_or = 0u;
        s_xor = 0u;
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = vals[i];
        atomicAnd(&s_and, v | 0x0f0f0000u);
        atomicOr(&s_or, v & 0x00ff00ffu);
        atomicXor(&s_xor, v);
        atomicOr(gor64, (unsigned long long)v << (i & 31));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAnd(gand, s_and);
        atomicOr(gor, s_or);
        atomicXor(gxor, s_xor);
    }
}

// Shared-memory atomicAdd on int, float and the shared-memory min/max.
extern "C" __global__ void atomic_shared_mixed(int* block_min, int* block_max, float* block_sum,
                                               const int* vals, int n)
{
    __shared__ int smin, smax;
    __shared__ float ssum;
    if (threadIdx.x == 0) {
        smin = 0x7fffffff;
        smax = -0x7fffffff - 1;
        ssum = 0.0f;
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = vals[i];
        atomicMin(&smin, v);
        atomicMax(&smax, v);
        atomicAdd(&ssum, (float)v);   // |v| < 2^15, <= 256 per block: exact in float
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        block_min[blockIdx.x] = smin;
        block_max[blockIdx.x] = smax;
        block_sum[blockIdx.x] = ssum;
    }
}
