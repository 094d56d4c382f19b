/* Two threads share one context; each fills its own buffer with the fill
 * kernel, and the second thread's launch is one element too long. */
#include "common.h"
#include <pthread.h>

static CUcontext ctx;
static CUfunction fn;

static void *worker(void *arg) {
    int n = (int)(long)arg;
    CUdeviceptr buf;
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&buf, 256 * sizeof(int)));
    void *params[] = {&buf, &n};
    CHECK(cuLaunchKernel(fn, 2, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    int host[256];
    CHECK(cuMemcpyDtoH(host, buf, sizeof host));
    CHECK(cuMemFree(buf));
    return (void *)(long)(host[255] == 255);
}

int main(int argc, char **argv) {
    CUdevice dev;
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuModuleLoadData(&mod, read_ptx(argv[1])));
    CHECK(cuModuleGetFunction(&fn, mod, "fill"));
    pthread_t t[2];
    void *ok[2];
    pthread_create(&t[0], NULL, worker, (void *)256L);
    pthread_create(&t[1], NULL, worker, (void *)257L);
    pthread_join(t[0], &ok[0]);
    pthread_join(t[1], &ok[1]);
    printf("threads done: %ld %ld\n", (long)ok[0], (long)ok[1]);
    return 0;
}
