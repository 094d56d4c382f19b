/* A correct driver-API program: y = 2x + y on 1000 elements, checked. */
#include "common.h"

int main(int argc, char **argv) {
    enum { N = 1000 };
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr dx, dy;
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, read_ptx(argv[1])));
    CHECK(cuModuleGetFunction(&fn, mod, "saxpy"));
    CHECK(cuMemAlloc(&dx, sizeof x));
    CHECK(cuMemAlloc(&dy, sizeof y));
    CHECK(cuMemcpyHtoD(dx, x, sizeof x));
    CHECK(cuMemcpyHtoD(dy, y, sizeof y));
    float a = 2.0f;
    int n = N;
    void *params[] = {&a, &dx, &dy, &n};
    CHECK(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(y, dy, sizeof y));
    CHECK(cuMemFree(dx));
    CHECK(cuMemFree(dy));
    CHECK(cuModuleUnload(mod));
    CHECK(cuCtxDestroy(ctx));
    for (int i = 0; i < N; i++) {
        if (y[i] != 2.0f * i + 1.0f) {
            printf("wrong result at %d: %f\n", i, y[i]);
            return 1;
        }
    }
    printf("saxpy ok\n");
    return 0;
}
