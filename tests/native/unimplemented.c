/* Calls the stand-in driver does not serve: a graph, and a prefetch (a
 * struct passed by value).  Each must return CUDA_ERROR_NOT_SUPPORTED and be
 * named by gpusafe, never pass silently. */
#include "common.h"

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CUgraph graph;
    CUdeviceptr buf;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuMemAlloc(&buf, 1024));
    CUmemLocation where = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUresult graph_rc = cuGraphCreate(&graph, 0);
    CUresult prefetch_rc = cuMemPrefetchAsync(buf, 1024, where, 0, NULL);
    printf("cuGraphCreate: %d, cuMemPrefetchAsync: %d\n", (int)graph_rc, (int)prefetch_rc);
    CHECK(cuMemFree(buf));
    return 0;
}
