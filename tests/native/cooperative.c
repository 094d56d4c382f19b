/* Cooperative launches through the driver API: cuLaunchCooperativeKernel and
 * cuLaunchKernelEx with the cooperative attribute, a grid.sync() kernel (PTX
 * file in argv[1]) giving the sum of 0..999 each time. */
#include "common.h"
#include <string.h>

int main(int argc, char **argv) {
    enum { N = 1000, BLOCKS = 4 };
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr x, partial, out;
    int host[N], n = N, sums[2] = {0, 0};
    (void)argc;
    for (int i = 0; i < N; i++)
        host[i] = i;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, read_ptx(argv[1])));
    CHECK(cuModuleGetFunction(&fn, mod, "grid_sum"));
    CHECK(cuMemAlloc(&x, sizeof host));
    CHECK(cuMemAlloc(&partial, BLOCKS * sizeof(int)));
    CHECK(cuMemAlloc(&out, sizeof(int)));
    CHECK(cuMemcpyHtoD(x, host, sizeof host));
    void *params[] = {&x, &partial, &out, &n};
    CHECK(cuLaunchCooperativeKernel(fn, BLOCKS, 1, 1, 64, 1, 1, 0, NULL, params));
    CHECK(cuMemcpyDtoH(&sums[0], out, sizeof(int)));
    CUlaunchAttribute attribute;
    memset(&attribute, 0, sizeof attribute);
    attribute.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attribute.value.cooperative = 1;
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = BLOCKS, config.gridDimY = 1, config.gridDimZ = 1;
    config.blockDimX = 64, config.blockDimY = 1, config.blockDimZ = 1;
    config.attrs = &attribute, config.numAttrs = 1;
    CHECK(cuMemsetD32(out, 0, 1));
    CHECK(cuLaunchKernelEx(&config, fn, params, NULL));
    CHECK(cuMemcpyDtoH(&sums[1], out, sizeof(int)));
    CHECK(cuMemFree(x));
    CHECK(cuMemFree(partial));
    CHECK(cuMemFree(out));
    CHECK(cuCtxDestroy(ctx));
    printf("cooperative sums %d %d\n", sums[0], sums[1]);
    return sums[0] != 499500 || sums[1] != 499500;
}
