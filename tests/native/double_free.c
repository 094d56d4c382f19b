/* A use after free (a copy from freed memory) and a double free. */
#include "common.h"

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr buf;
    int host[64];
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuMemAlloc(&buf, sizeof host));
    CHECK(cuMemFree(buf));
    CUresult copy = cuMemcpyDtoH(host, buf, sizeof host);
    CUresult second = cuMemFree(buf);
    printf("copy after free: %d, second free: %d\n", (int)copy, (int)second);
    CHECK(cuCtxDestroy(ctx));
    return 0;
}
