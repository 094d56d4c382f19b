// Bit-manipulation intrinsics.

extern "C" __global__ void bit_ops32(unsigned* out, const unsigned* a, const unsigned* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = a[i], y = b[i];
    unsigned* o = out + 10 * i;
    o[0] = (unsigned)__clz((int)x);
    o[1] = (unsigned)__popc(x);
    o[2] = __brev(x);
    o[3] = (unsigned)__ffs((int)x);
    o[4] = __byte_perm(x, y, 0x5140);
    o[5] = __byte_perm(x, y, (y & 0x7777u));       // selector bits from data
    o[6] = __funnelshift_l(x, y, y & 63u);          // shift taken mod 32
    o[7] = __funnelshift_r(x, y, y & 63u);
    o[8] = __funnelshift_lc(x, y, y & 63u);         // shift clamped to 32
    o[9] = __funnelshift_rc(x, y, y & 63u) ^ __umulhi(x, y) ^ (unsigned)__mulhi((int)x, (int)y);
}

extern "C" __global__ void bit_ops64(unsigned long long* out, const unsigned long long* a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long x = a[i];
    unsigned long long* o = out + 6 * i;
    o[0] = (unsigned long long)__clzll((long long)x);
    o[1] = (unsigned long long)__popcll(x);
    o[2] = __brevll(x);
    o[3] = (unsigned long long)__ffsll((long long)x);
    o[4] = __umul64hi(x, x ^ 0x9e3779b97f4a7c15ULL);
    o[5] = (x << (x & 63)) | (x >> (64 - (x & 63)) % 64);  // rotate-left (compiler may emit shf)
}

// Sign/absolute/saturating helpers: __sad, __usad, __hadd (int), __rhadd, abs, min/max.
extern "C" __global__ void bit_misc(int* out, const int* a, const int* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    int* o = out + 6 * i;
    o[0] = (int)__sad(x, y, 7u);
    o[1] = __hadd(x, y);            // (x + y) >> 1 without overflow
    o[2] = __rhadd(x, y);           // (x + y + 1) >> 1 without overflow
    o[3] = abs(x) + max(x, y) - min(x, y);
    o[4] = (int)__usad((unsigned)x, (unsigned)y, 1u);
    o[5] = __mul24(x & 0x7fffff, y & 0xfff);
}
