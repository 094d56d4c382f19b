/* A stand-in for NVIDIA's driver in the LD_PRELOAD door's tests: it knows
 * two functions gpusafe does not check, so a test can see that the door
 * passes them to the real driver (and the checked ones to gpusafe's). */
#include <string.h>

typedef int CUresult;

static CUresult fake_luid(char *luid, unsigned int *mask, int dev) {
    (void)dev;
    memcpy(luid, "FAKELUID", 8);
    *mask = 42;
    return 0;
}

static CUresult fake_export_table(const void **table, const void *id) {
    (void)id;
    *table = "fake-table";
    return 0;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, int *status) {
    (void)version;
    (void)flags;
    *pfn = strcmp(symbol, "cuDeviceGetLuid") == 0    ? (void *)fake_luid
           : strcmp(symbol, "cuGetExportTable") == 0 ? (void *)fake_export_table
                                                      : NULL;
    if (status)
        *status = *pfn ? 0 : 1;
    return *pfn ? 0 : 500;
}
