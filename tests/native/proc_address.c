/* Driver entry points resolved the way the CUDA runtime resolves them: the
 * library opened with dlopen, every function through cuGetProcAddress_v2.
 * argv[1]: the driver to dlopen (default libcuda.so.1); argv[2] "real": also
 * resolve functions gpusafe does not check (cuDeviceGetLuid,
 * cuGetExportTable), which the LD_PRELOAD door passes to the real driver;
 * argv[3]: how cuGetProcAddress_v2 is looked up: "dlsym" (in the driver's
 * handle, the default), "dlvsym" (the same, by version), "default"
 * (dlsym(RTLD_DEFAULT) after a global dlopen, cuMemAlloc_v2 looked up so too). */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*get_proc_t)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

static get_proc_t get_proc;

static void *resolve(const char *name) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult found;
    CUresult rc = get_proc(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (rc != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
        fprintf(stderr, "cuGetProcAddress(%s) failed: %d/%d\n", name, (int)rc, (int)found);
        exit(5);
    }
    return fn;
}

int main(int argc, char **argv) {
    const char *lookup = argc > 3 ? argv[3] : "dlsym";
    void *lib = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 6;
    }
    void *alloc_symbol = NULL;
    if (strcmp(lookup, "dlvsym") == 0) {
        get_proc = (get_proc_t)dlvsym(lib, "cuGetProcAddress_v2", "libcuda.so.1");
    } else if (strcmp(lookup, "default") == 0) {
        get_proc = (get_proc_t)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
        alloc_symbol = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    } else {
        get_proc = (get_proc_t)dlsym(lib, "cuGetProcAddress_v2");
    }
    if (!get_proc)
        return 7;
    /* an unknown name and a version older than the function are refused */
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult found;
    if (get_proc("cuNoSuchFunction", &fn, CUDA_VERSION, 0, &found) != CUDA_ERROR_NOT_FOUND ||
        found != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND || fn != NULL)
        return 8;
    if (get_proc("cuCtxCreate", &fn, 3000, 0, &found) != CUDA_ERROR_NOT_FOUND ||
        found != CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
        return 9;
    CUresult (*init)(unsigned int) = resolve("cuInit");
    CUresult (*device_get)(CUdevice *, int) = resolve("cuDeviceGet");
    CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice) =
        resolve("cuCtxCreate");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) =
        alloc_symbol ? (CUresult(*)(CUdeviceptr *, size_t))alloc_symbol : resolve("cuMemAlloc");
    CUresult (*memset_d32)(CUdeviceptr, unsigned int, size_t) = resolve("cuMemsetD32");
    CUresult (*copy_dtoh)(void *, CUdeviceptr, size_t) = resolve("cuMemcpyDtoH");
    CUresult (*mem_free)(CUdeviceptr) = resolve("cuMemFree");
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr buf;
    unsigned int host[16] = {0};
    if (init(0) || device_get(&dev, 0) || ctx_create(&ctx, NULL, 0, dev) ||
        mem_alloc(&buf, sizeof host) || memset_d32(buf, 7u, 16) ||
        copy_dtoh(host, buf, sizeof host))
        return 10;
    for (int i = 0; i < 16; i++)
        if (host[i] != 7u)
            return 11;
    /* one element too many: the engine refuses the copy as out of bounds */
    CUresult over = copy_dtoh(host, buf, sizeof host + 4);
    mem_free(buf);
    printf("resolved through cuGetProcAddress; overlong copy: %d\n", (int)over);
    if (argc > 2 && strcmp(argv[2], "real") == 0) {
        CUresult (*luid)(char *, unsigned int *, CUdevice) = resolve("cuDeviceGetLuid");
        CUresult (*export_table)(const void **, const CUuuid *) = resolve("cuGetExportTable");
        char id[9] = {0};
        unsigned int mask = 0;
        const void *table = NULL;
        CUuuid uuid = {{0}};
        CUresult a = luid(id, &mask, dev), b = export_table(&table, &uuid);
        printf("real driver: luid %d %s %u, export table %d %s\n", (int)a, id, mask, (int)b,
               table ? (const char *)table : "-");
    }
    return 0;
}
