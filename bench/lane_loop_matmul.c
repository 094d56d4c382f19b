/* What a lane-loop lowering of bench/cpu_device.py's 16x16 tiled matmul could
   reach (docs/decisions.md, "Speed, fifth slice"): a block's 256 threads run as
   lane loops over structure-of-arrays registers, one loop per barrier-free
   region, with the checks the JIT makes (segment hint per global access, the
   shared window per access, counts).  Timing only, not gpusafe code.

     gcc -O3 -march=native -ffp-contract=off -o /tmp/mm bench/lane_loop_matmul.c -lm
     gcc -O3 -march=native -ffp-contract=off -DCONSECUTIVE -o /tmp/mm bench/lane_loop_matmul.c -lm

   Without CONSECUTIVE every lane has its own addresses (a generic lowering);
   with it, the lowering is assumed to know that a value is the same in 16
   consecutive lanes (As[ty][k]: one broadcast) or consecutive across them
   (Bs[k][tx], the global rows: one vector access, checked at its ends). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { uint64_t start, last; char *ptr; } Hint;
#define T 256
#define SH 2048

__attribute__((noinline))
int kernel(uint64_t a_addr, uint64_t b_addr, uint64_t c_addr, int n, Hint *ha, Hint *hb, Hint *hc,
           uint64_t *count) {
    _Alignas(64) char shared[SH];
    uint64_t cnt = 0;
    int gx = n / 16;
    for (int by = 0; by < gx; by++) for (int bx = 0; bx < gx; bx++) {
        memset(shared, 0, SH);
        uint32_t r28[T], r27[T]; uint64_t rd1[T], rd2[T], rd3[T], rd4[T]; float f56[T];
        for (int l = 0; l < T; l++) {     /* region 0: set-up */
            uint32_t tx = l & 15, ty = l >> 4;
            rd3[l] = 64 * ty; rd1[l] = rd3[l] + 4 * tx;
            rd2[l] = 1024 + 64 * ty + 4 * tx; rd4[l] = 1024 + 4 * tx;
            uint32_t r4 = (by * 16 + ty) * n;
            r28[l] = tx + r4; r27[l] = ty * n + tx + bx * 16; f56[l] = 0.0f;
        }
        cnt += T * 30;
        for (int t = 0; t < n / 16; t++) {
            int bad = 0;
            for (int l = 0; l < T; l++) {  /* region 1: global -> shared */
                uint64_t a = a_addr + 4ull * r28[l], b = b_addr + 4ull * r27[l];
                bad |= ((a & 3) != 0) | (a < ha->start) | (a > ha->last);
                bad |= ((b & 3) != 0) | (b < hb->start) | (b > hb->last);
                bad |= (rd1[l] > SH - 4) | (rd2[l] > SH - 4);
            }
            if (bad) return 1;
#ifdef CONSECUTIVE
            for (int ty = 0; ty < 16; ty++) {  /* consecutive lanes: contiguous loads and stores */
                const float *pa = (const float *)(ha->ptr + (a_addr + 4ull * r28[16 * ty] - ha->start));
                const float *pb = (const float *)(hb->ptr + (b_addr + 4ull * r27[16 * ty] - hb->start));
                float *sa = (float *)(shared + rd1[16 * ty]), *sb = (float *)(shared + rd2[16 * ty]);
                for (int tx = 0; tx < 16; tx++) { sa[tx] = pa[tx]; sb[tx] = pb[tx]; }
#else
            for (int l = 0; l < T; l++) {
                float x = *(float *)(ha->ptr + (a_addr + 4ull * r28[l] - ha->start));
                float y = *(float *)(hb->ptr + (b_addr + 4ull * r27[l] - hb->start));
                *(float *)(shared + rd1[l]) = x;
                *(float *)(shared + rd2[l]) = y;
#endif
            }
            cnt += T * 9;
            for (int l = 0; l < T; l++)    /* region 2: the tile (shared checked once per run) */
                bad |= (rd3[l] > SH - 64) | (rd4[l] > SH - 964);
            if (bad) return 1;
#ifdef CONSECUTIVE
            for (int k = 0; k < 16; k++)   /* lanes as vectors: rd3 uniform per 16 lanes, rd4 consecutive */
                for (int ty = 0; ty < 16; ty++) {
                    float a = *(const float *)(shared + rd3[16 * ty] + 4 * k);
                    const float *pb = (const float *)(shared + rd4[0] + 64 * k);
                    for (int tx = 0; tx < 16; tx++)
                        f56[16 * ty + tx] = fmaf(a, pb[tx], f56[16 * ty + tx]);
                }
#else
            for (int l = 0; l < T; l++) {
                float acc = f56[l];
                const float *pa = (const float *)(shared + rd3[l]);
                const float *pb = (const float *)(shared + rd4[l]);
                for (int k = 0; k < 16; k++) acc = fmaf(pa[k], pb[16 * k], acc);
                f56[l] = acc;
            }
#endif
            cnt += T * 49;
            for (int l = 0; l < T; l++) { r28[l] += 16; r27[l] += 16 * n; }
            cnt += T * 6;
        }
        for (int l = 0; l < T; l++) {
            uint32_t tx = l & 15, ty = l >> 4;
            uint64_t c = c_addr + 4ull * ((by * 16 + ty) * n + bx * 16 + tx);
            if ((c & 3) | (c < hc->start) | (c > hc->last)) return 1;
            *(float *)(hc->ptr + (c - hc->start)) = f56[l];
        }
        cnt += T * 6;
    }
    *count += cnt;
    return 0;
}

int main(void) {
    int n = 512;
    float *A = malloc(4 * n * n), *B = malloc(4 * n * n), *C = malloc(4 * n * n);
    for (int i = 0; i < n * n; i++) { A[i] = (float)rand() / RAND_MAX; B[i] = (float)rand() / RAND_MAX; }
    uint64_t a0 = 0x100000, b0 = 0x200000, c0 = 0x300000;
    Hint ha = {a0, a0 + 4ull * n * n - 4, (char *)A}, hb = {b0, b0 + 4ull * n * n - 4, (char *)B},
         hc = {c0, c0 + 4ull * n * n - 4, (char *)C};
    uint64_t count = 0;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
        if (kernel(a0, b0, c0, n, &ha, &hb, &hc, &count)) { puts("fault"); return 1; }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
        double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        if (s < best) best = s;
    }
    double err = 0;
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) {
        double r = 0; for (int k = 0; k < n; k++) r += (double)A[i * n + k] * B[k * n + j];
        err = fmax(err, fabs(r - C[i * n + j]));
    }
    printf("matmul lane loop: %.1f ms (max err %.2g)\n", best * 1e3, err);
    return 0;
}
