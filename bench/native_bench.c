/* The driver calls bench/native_overhead.py times, as a native program
 * makes them: a trivial query, an allocation and its free, a launch of an
 * empty-bodied kernel with its synchronisation. Prints microseconds per call. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x) do { if ((x) != CUDA_SUCCESS) { fprintf(stderr, "%s failed\n", #x); exit(3); } } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int calls = atoi(argv[2]), allocs = atoi(argv[3]), launches = atoi(argv[4]);
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr buf;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    FILE *f = fopen(argv[1], "rb");
    static char ptx[1 << 20];
    ptx[fread(ptx, 1, sizeof ptx - 1, f)] = 0;
    fclose(f);
    CHECK(cuModuleLoadData(&mod, ptx));
    CHECK(cuModuleGetFunction(&fn, mod, "touch"));
    double t0 = now();
    for (int i = 0; i < calls; i++)
        CHECK(cuDeviceGet(&dev, 0));
    double t1 = now();
    for (int i = 0; i < allocs; i++) {
        CHECK(cuMemAlloc(&buf, 4096));
        CHECK(cuMemFree(buf));
    }
    double t2 = now();
    CHECK(cuMemAlloc(&buf, 32 * sizeof(int)));
    void *params[] = {&buf};
    for (int i = 0; i < launches; i++) {
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
    }
    double t3 = now();
    printf("%f %f %f\n", (t1 - t0) / calls * 1e6, (t2 - t1) / allocs * 1e6,
           (t3 - t2) / launches * 1e6);
    return 0;
}
