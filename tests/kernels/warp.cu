// Warp-level primitives: shuffles, votes, match and reduce.
// Launched with whole warps except where noted.
#define FULL 0xffffffffu

// out[5*i + k]: broadcast from lane 3, shuffle up by 1, down by 2, xor 5, and a
// butterfly (xor) warp sum.
extern "C" __global__ void warp_shuffles(int* out, const int* in)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    out[5 * i + 0] = __shfl_sync(FULL, v, 3);
    out[5 * i + 1] = __shfl_up_sync(FULL, v, 1);     // lane 0 keeps its own value
    out[5 * i + 2] = __shfl_down_sync(FULL, v, 2);   // lanes 30, 31 keep theirs
    out[5 * i + 3] = __shfl_xor_sync(FULL, v, 5);
    int s = v;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(FULL, s, off);
    out[5 * i + 4] = s;
}

// Shuffles on float and double, with a width argument (sub-warp segments of 8).
extern "C" __global__ void warp_shuffles_fp(float* outf, double* outd, const float* inf,
                                            const double* ind)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float f = inf[i];
    double d = ind[i];
    outf[2 * i + 0] = __shfl_sync(FULL, f, 1, 8);      // lane 1 of each 8-lane segment
    outf[2 * i + 1] = __shfl_down_sync(FULL, f, 3, 8);
    outd[2 * i + 0] = __shfl_up_sync(FULL, d, 4);
    outd[2 * i + 1] = __shfl_xor_sync(FULL, d, 31);
}

// Votes. blockDim = 48: the second warp of each block is partial (16 lanes),
// so __activemask() and ballots there only see 16 lanes.
extern "C" __global__ void warp_votes(unsigned* out, const int* in)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned active = __activemask();
    int v = in[i];
    unsigned b = __ballot_sync(active, v > 0);
    int any = __any_sync(active, v > 100);
    int all = __all_sync(active, v > -1000);
    unsigned lt = 0;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
    out[5 * i + 0] = active;
    out[5 * i + 1] = b;
    out[5 * i + 2] = (unsigned)any;
    out[5 * i + 3] = (unsigned)all;
    out[5 * i + 4] = __popc(b & lt);  // rank of this lane among the lanes voting yes
}

// __match_any_sync / __match_all_sync: lanes with equal keys.
extern "C" __global__ void warp_match(unsigned* out, const int* keys)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int k = keys[i];
    unsigned m = __match_any_sync(FULL, k);
    int pred = 0;
    unsigned a = __match_all_sync(FULL, k >> 3, &pred);  // FULL if all equal, else 0
    out[3 * i + 0] = m;
    out[3 * i + 1] = a;
    out[3 * i + 2] = (unsigned)pred;
}

// Warp reductions: redux.sync (__reduce_*_sync) on sm_80+, a shuffle tree
// elsewhere; both give the same results.
extern "C" __global__ void warp_reduce(unsigned* out, const unsigned* in)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = in[i];
#if __CUDA_ARCH__ >= 800
    unsigned s = __reduce_add_sync(FULL, v);
    unsigned mn = __reduce_min_sync(FULL, v);
    unsigned mx = __reduce_max_sync(FULL, v);
    unsigned x = __reduce_xor_sync(FULL, v);
#else
    unsigned s = v, mn = v, mx = v, x = v;
    for (int off = 16; off > 0; off >>= 1) {
        unsigned o;
        o = __shfl_xor_sync(FULL, s, off); s += o;
        o = __shfl_xor_sync(FULL, mn, off); mn = o < mn ? o : mn;
        o = __shfl_xor_sync(FULL, mx, off); mx = o > mx ? o : mx;
        o = __shfl_xor_sync(FULL, x, off); x ^= o;
    }
#endif
    out[4 * i + 0] = s;
    out[4 * i + 1] = mn;
    out[4 * i + 2] = mx;
    out[4 * i + 3] = x;
}
