/* What a lane-loop lowering of bench/cpu_device.py's shuffle block sum could
   reach (docs/decisions.md, "Speed, fifth slice"): a warp's 32 lanes run as
   lane loops over structure-of-arrays registers, a shuffle a permutation of
   them (no suspension), with the checks the JIT makes (segment hint per global
   access, counts).  Timing only, not gpusafe code.

     gcc -O3 -march=native -o /tmp/bs bench/lane_loop_block_sum.c

   The shuffle offsets are constants here (SHFL(16) ... SHFL(1)): a lowering
   that keeps values the same in every lane (immediates, parameters) scalar.
   With the offset a run-time value (the five SHFLs as a loop over off) it took
   9.3 ms instead of 3.0 here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { uint64_t start, last; char *ptr; } Hint;

static int fault;
#define SHFL(off) { for (int l = 0; l < 32; l++) t[l] = (l + off < 32) ? v[l + off] : v[l]; \
                    for (int l = 0; l < 32; l++) v[l] += t[l]; }

static inline float *gptr(Hint *h, uint64_t addr) {
    /* the JIT's @resolve fast path: aligned, inside the hinted segment */
    if ((addr & 3) | (addr < h->start) | (addr > h->last)) { fault = 1; return 0; }
    return (float *)(h->ptr + (addr - h->start));
}

__attribute__((noinline))
int kernel(uint64_t in_addr, uint64_t total_addr, int n, int blocks, Hint *hin, Hint *htot,
           uint64_t *count) {
    float shared[32];
    uint64_t cnt = 0;
    for (int b = 0; b < blocks; b++) {
        memset(shared, 0, sizeof shared);
        /* region 1, warp by warp: load, 5 shuffles, lane 0 stores */
        for (int w = 0; w < 8; w++) {
            float v[32], t[32];
            int bad = 0;
            for (int l = 0; l < 32; l++) {
                int i = b * 256 + w * 32 + l;
                uint64_t a = in_addr + 4ull * (uint64_t)i;
                int inb = i < n;
                bad |= inb & (((a & 3) != 0) | (a < hin->start) | (a > hin->last));
                v[l] = 0.0f;
            }
            if (bad) return 1;
            for (int l = 0; l < 32; l++) {
                int i = b * 256 + w * 32 + l;
                v[l] = i < n ? ((float *)(hin->ptr + (in_addr - hin->start)))[i] : 0.0f;
            }
            SHFL(16) SHFL(8) SHFL(4) SHFL(2) SHFL(1)
            shared[w] = v[0];
            cnt += 32 * 40;
        }
        /* region 2: warp 0 only */
        {
            float v[32], t[32];
            for (int l = 0; l < 32; l++) v[l] = l < 8 ? shared[l] : 0.0f;
            SHFL(16) SHFL(8) SHFL(4) SHFL(2) SHFL(1)
            float *p = gptr(htot, total_addr);
            if (!p) return 1;
            *p += v[0];
            cnt += 32 * 30 + 224 * 3;
        }
    }
    *count += cnt;
    return 0;
}

int main(void) {
    int n = 1 << 20;
    float *in = malloc(4 * n), total = 0;
    for (int i = 0; i < n; i++) in[i] = (float)rand() / RAND_MAX;
    Hint hin = {0x10000, 0x10000 + 4ull * n - 4, (char *)in};
    Hint htot = {0x900000000ull, 0x900000000ull, (char *)&total};
    uint64_t count = 0;
    double best = 1e9;
    for (int r = 0; r < 20; r++) {
        total = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
        kernel(0x10000, 0x900000000ull, n, n / 256, &hin, &htot, &count);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
        double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        if (s < best) best = s;
    }
    double ref = 0;
    for (int i = 0; i < n; i++) ref += in[i];
    printf("block sum lane loop: %.3f ms (total %.1f ref %.1f)\n", best * 1e3, total, ref);
    return 0;
}
