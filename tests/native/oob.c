/* An out-of-bounds write: the kernel is launched with n one past the end of
 * a 256-element allocation. */
#include "common.h"

int main(int argc, char **argv) {
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr buf;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, read_ptx(argv[1])));
    CHECK(cuModuleGetFunction(&fn, mod, "fill"));
    CHECK(cuMemAlloc(&buf, 256 * sizeof(int)));
    int n = 257;
    void *params[] = {&buf, &n};
    CHECK(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree(buf));
    CHECK(cuCtxDestroy(ctx));
    printf("oob done\n");
    return 0;
}
