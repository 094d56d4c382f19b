/* gpusafe's stand-in libcudart.so: the CUDA runtime of a program built with
 * `nvcc -cudart shared`, served by the CPU device.
 *
 * nvcc's start-up code registers the program's fatbinaries and kernels here
 * (__cudaRegisterFatBinary, __cudaRegisterFunction); a `<<<...>>>` launch
 * pushes its configuration and calls cudaLaunchKernel with the host stub's
 * address.  Registration stays in C; every runtime call goes to
 * gpusafe.native.runtime_calls in Python through the stand-in driver
 * (libcuda.so.1, which starts or joins the interpreter), where the kernel's
 * PTX is taken from its fatbinary, loaded through the door and launched.
 * Runtime functions not defined here are generated stubs that return
 * cudaErrorNotSupported and are named in the findings.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef GS_CUDART_MAJOR
#define GS_CUDART_MAJOR 13
#endif

typedef int cudaError_t;
typedef struct {
    unsigned int x, y, z;
} gs_dim3;
typedef struct {
    char kind;
    union {
        long long i;
        unsigned long long u;
        double d;
    } v;
} gs_arg;

/* defined in the stand-in libcuda.so.1 */
extern long long gpusafe_call_runtime(const char *name, int n, const gs_arg *a);

#define A_U(k, x) (a[k].kind = 'u', a[k].v.u = (unsigned long long)(x))
#define A_P(k, x) (a[k].kind = 'u', a[k].v.u = (unsigned long long)(uintptr_t)(x))
#define A_I(k, x) (a[k].kind = 'i', a[k].v.i = (long long)(x))
#define CALL(name, n) ((cudaError_t)gpusafe_call_runtime(name, n, a))

/* ---- registration ---- */

typedef struct {
    const void *stub;     /* the host stub's address: what cudaLaunchKernel gets */
    const char *name;     /* the kernel's (mangled) name in the PTX */
    const void *fatbin;   /* the __fatBinC_Wrapper_t it came in */
} gs_kernel;

static gs_kernel *gs_kernels;
static int gs_nkernels, gs_capacity;
static pthread_mutex_t gs_lock = PTHREAD_MUTEX_INITIALIZER;

void **__cudaRegisterFatBinary(void *wrapper) {
    void **handle = malloc(sizeof(void *));
    *handle = wrapper;
    return handle;
}

void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

/* Managed variables' initialisation: nothing to do without them (a program
 * that has them is told at __cudaRegisterManagedVar). */
char __cudaInitModule(void **handle) {
    (void)handle;
    return 1;
}

void __cudaRegisterFunction(void **handle, const char *stub, char *device_fun,
                            const char *device_name, int thread_limit, void *tid, void *bid,
                            void *bdim, void *gdim, int *wsize) {
    (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim, (void)gdim,
        (void)wsize;
    pthread_mutex_lock(&gs_lock);
    if (gs_nkernels == gs_capacity) {
        gs_capacity = gs_capacity ? 2 * gs_capacity : 64;
        gs_kernels = realloc(gs_kernels, gs_capacity * sizeof *gs_kernels);
    }
    gs_kernels[gs_nkernels++] = (gs_kernel){stub, device_name, *handle};
    pthread_mutex_unlock(&gs_lock);
}

/* Device variables (__device__, __constant__): found by their host
 * shadow's address in cudaMemcpyToSymbol and its kin. */
typedef struct {
    const void *host;
    const char *name;
    const void *fatbin;
} gs_var;

static gs_var *gs_vars;
static int gs_nvars, gs_var_capacity;

void __cudaRegisterVar(void **handle, char *host_var, char *device_address,
                       const char *device_name, int ext, size_t size, int constant, int global) {
    (void)device_address, (void)ext, (void)size, (void)constant, (void)global;
    pthread_mutex_lock(&gs_lock);
    if (gs_nvars == gs_var_capacity) {
        gs_var_capacity = gs_var_capacity ? 2 * gs_var_capacity : 64;
        gs_vars = realloc(gs_vars, gs_var_capacity * sizeof *gs_vars);
    }
    gs_vars[gs_nvars++] = (gs_var){host_var, device_name, *handle};
    pthread_mutex_unlock(&gs_lock);
}

/* Managed variables are not served: a program that has them is told. */
void __cudaRegisterManagedVar(void **handle, void **host_var, char *device_address,
                              const char *device_name, int ext, size_t size, int constant,
                              int global) {
    (void)handle, (void)host_var, (void)device_address, (void)ext, (void)size, (void)constant,
        (void)global;
    gs_arg a[1];
    A_P(0, device_name);
    gpusafe_call_runtime("__cudaRegisterManagedVar", 1, a);
}

static const gs_var *gs_find_var(const void *host) {
    const gs_var *v = NULL;
    pthread_mutex_lock(&gs_lock);
    for (int i = 0; i < gs_nvars; i++)
        if (gs_vars[i].host == host)
            v = &gs_vars[i];
    pthread_mutex_unlock(&gs_lock);
    return v;
}

#define GS_INVALID_SYMBOL 13 /* cudaErrorInvalidSymbol */
#define GS_VAR(k, symbol)                                                                  \
    const gs_var *v_ = gs_find_var(symbol);                                                \
    if (!v_)                                                                               \
        return GS_INVALID_SYMBOL;                                                          \
    A_P(k, v_->name), A_P(k + 1, v_->fatbin)

cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset,
                               int kind) {
    gs_arg a[6];
    GS_VAR(0, symbol);
    A_P(2, src), A_U(3, n), A_U(4, offset), A_I(5, kind);
    return CALL("cudaMemcpyToSymbol", 6);
}

cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset,
                                    int kind, void *stream) {
    (void)stream;
    return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}

cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset,
                                 int kind) {
    gs_arg a[6];
    GS_VAR(0, symbol);
    A_P(2, dst), A_U(3, n), A_U(4, offset), A_I(5, kind);
    return CALL("cudaMemcpyFromSymbol", 6);
}

cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset,
                                      int kind, void *stream) {
    (void)stream;
    return cudaMemcpyFromSymbol(dst, symbol, n, offset, kind);
}

cudaError_t cudaGetSymbolAddress(void **address, const void *symbol) {
    gs_arg a[4];
    GS_VAR(0, symbol);
    A_P(2, address), A_P(3, NULL);
    return CALL("cudaGetSymbolAddress", 4);
}

cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol) {
    gs_arg a[4];
    GS_VAR(0, symbol);
    A_P(2, NULL), A_P(3, size);
    return CALL("cudaGetSymbolAddress", 4);
}

/* ---- launches ---- */

static __thread gs_dim3 gs_grid, gs_block;
static __thread size_t gs_shared;
static __thread void *gs_stream;

unsigned __cudaPushCallConfiguration(gs_dim3 grid, gs_dim3 block, size_t shared, void *stream) {
    gs_grid = grid, gs_block = block, gs_shared = shared, gs_stream = stream;
    return 0;
}

cudaError_t __cudaPopCallConfiguration(gs_dim3 *grid, gs_dim3 *block, size_t *shared,
                                       void **stream) {
    *grid = gs_grid, *block = gs_block, *shared = gs_shared, *stream = gs_stream;
    return 0;
}

/* A launch of a registered kernel by its host stub's address: `call` is the
 * runtime function, which Python launches through the matching driver call. */
static cudaError_t gs_launch(const char *call, const void *func, gs_dim3 grid, gs_dim3 block,
                             void **args, size_t shared) {
    const gs_kernel *k = NULL;
    pthread_mutex_lock(&gs_lock);
    for (int i = 0; i < gs_nkernels; i++)
        if (gs_kernels[i].stub == func)
            k = &gs_kernels[i];
    pthread_mutex_unlock(&gs_lock);
    gs_arg a[11];
    A_P(0, func), A_P(1, k ? k->name : NULL), A_P(2, k ? k->fatbin : NULL);
    A_U(3, grid.x), A_U(4, grid.y), A_U(5, grid.z);
    A_U(6, block.x), A_U(7, block.y), A_U(8, block.z);
    A_P(9, args), A_U(10, shared);
    return CALL(call, 11);
}

cudaError_t cudaLaunchKernel(const void *func, gs_dim3 grid, gs_dim3 block, void **args,
                             size_t shared, void *stream) {
    (void)stream; /* the CPU device runs every launch to completion */
    return gs_launch("cudaLaunchKernel", func, grid, block, args, shared);
}

/* grid.sync() needs every block resident with a grid workspace: the driver's
 * cuLaunchCooperativeKernel, which the Python door checks like any launch. */
cudaError_t cudaLaunchCooperativeKernel(const void *func, gs_dim3 grid, gs_dim3 block,
                                        void **args, size_t shared, void *stream) {
    (void)stream;
    return gs_launch("cudaLaunchCooperativeKernel", func, grid, block, args, shared);
}

/* CUDA 13's launch path: the stub asks once for its kernel handle, which
 * here is the stub's own address, then launches the handle. */
cudaError_t __cudaGetKernel(const void **kernel, const void *stub) {
    *kernel = stub;
    return 0;
}

cudaError_t __cudaLaunchKernel(const void *kernel, gs_dim3 grid, gs_dim3 block, void **args,
                               size_t shared, void *stream) {
    return cudaLaunchKernel(kernel, grid, block, args, shared, stream);
}

cudaError_t __cudaLaunchKernel_ptsz(const void *kernel, gs_dim3 grid, gs_dim3 block, void **args,
                                    size_t shared, void *stream) {
    return cudaLaunchKernel(kernel, grid, block, args, shared, stream);
}

/* ---- the runtime API served ---- */

cudaError_t cudaMalloc(void **p, size_t size) { gs_arg a[2]; A_P(0, p), A_U(1, size); return CALL("cudaMalloc", 2); }
cudaError_t cudaMallocHost(void **p, size_t size) { gs_arg a[2]; A_P(0, p), A_U(1, size); return CALL("cudaMallocHost", 2); }
cudaError_t cudaMallocManaged(void **p, size_t size, unsigned flags) { gs_arg a[3]; A_P(0, p), A_U(1, size), A_U(2, flags); return CALL("cudaMallocManaged", 3); }
cudaError_t cudaFree(void *p) { gs_arg a[1]; A_P(0, p); return CALL("cudaFree", 1); }
cudaError_t cudaFreeHost(void *p) { gs_arg a[1]; A_P(0, p); return CALL("cudaFreeHost", 1); }
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) { gs_arg a[4]; A_P(0, dst), A_P(1, src), A_U(2, n), A_I(3, kind); return CALL("cudaMemcpy", 4); }
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) { gs_arg a[5]; A_P(0, dst), A_P(1, src), A_U(2, n), A_I(3, kind), A_P(4, s); return CALL("cudaMemcpyAsync", 5); }
cudaError_t cudaMemset(void *p, int value, size_t n) { gs_arg a[3]; A_P(0, p), A_I(1, value), A_U(2, n); return CALL("cudaMemset", 3); }
cudaError_t cudaDeviceSynchronize(void) { gs_arg *a = NULL; return CALL("cudaDeviceSynchronize", 0); }
cudaError_t cudaDeviceReset(void) { gs_arg *a = NULL; return CALL("cudaDeviceReset", 0); }
cudaError_t cudaGetLastError(void) { gs_arg *a = NULL; return CALL("cudaGetLastError", 0); }
cudaError_t cudaPeekAtLastError(void) { gs_arg *a = NULL; return CALL("cudaPeekAtLastError", 0); }
cudaError_t cudaSetDevice(int d) { gs_arg a[1]; A_I(0, d); return CALL("cudaSetDevice", 1); }
cudaError_t cudaGetDevice(int *d) { gs_arg a[1]; A_P(0, d); return CALL("cudaGetDevice", 1); }
cudaError_t cudaGetDeviceCount(int *n) { gs_arg a[1]; A_P(0, n); return CALL("cudaGetDeviceCount", 1); }
/* cudaDeviceProp is laid out as CUDA 13's headers lay it out; a CUDA 12
 * program's (cudaGetDeviceProperties_v2, or the CUDA 11 layout under the
 * old name) differs, so libcudart.so.12 names the call instead. */
#if GS_CUDART_MAJOR >= 13
cudaError_t cudaGetDeviceProperties(void *prop, int d) { gs_arg a[2]; A_P(0, prop), A_I(1, d); return CALL("cudaGetDeviceProperties", 2); }
#endif
cudaError_t cudaDeviceGetAttribute(int *value, int attr, int d) { gs_arg a[3]; A_P(0, value), A_I(1, attr), A_I(2, d); return CALL("cudaDeviceGetAttribute", 3); }
cudaError_t cudaStreamSynchronize(void *s) { gs_arg a[1]; A_P(0, s); return CALL("cudaStreamSynchronize", 1); }
cudaError_t cudaStreamQuery(void *s) { gs_arg a[1]; A_P(0, s); return CALL("cudaStreamQuery", 1); }
cudaError_t cudaStreamCreate(void **s) { gs_arg a[1]; A_P(0, s); return CALL("cudaStreamCreate", 1); }
cudaError_t cudaStreamCreateWithFlags(void **s, unsigned flags) { gs_arg a[2]; A_P(0, s), A_U(1, flags); return CALL("cudaStreamCreateWithFlags", 2); }
cudaError_t cudaStreamDestroy(void *s) { gs_arg a[1]; A_P(0, s); return CALL("cudaStreamDestroy", 1); }
cudaError_t cudaEventCreate(void **e) { gs_arg a[1]; A_P(0, e); return CALL("cudaEventCreate", 1); }
cudaError_t cudaEventCreateWithFlags(void **e, unsigned flags) { gs_arg a[2]; A_P(0, e), A_U(1, flags); return CALL("cudaEventCreateWithFlags", 2); }
cudaError_t cudaEventRecord(void *e, void *s) { gs_arg a[2]; A_P(0, e), A_P(1, s); return CALL("cudaEventRecord", 2); }
cudaError_t cudaEventSynchronize(void *e) { gs_arg a[1]; A_P(0, e); return CALL("cudaEventSynchronize", 1); }
cudaError_t cudaEventQuery(void *e) { gs_arg a[1]; A_P(0, e); return CALL("cudaEventQuery", 1); }
cudaError_t cudaEventElapsedTime(float *ms, void *start, void *end) { gs_arg a[3]; A_P(0, ms), A_P(1, start), A_P(2, end); return CALL("cudaEventElapsedTime", 3); }
cudaError_t cudaEventDestroy(void *e) { gs_arg a[1]; A_P(0, e); return CALL("cudaEventDestroy", 1); }

const char *cudaGetErrorName(cudaError_t e) { gs_arg a[1]; A_I(0, e); return (const char *)(uintptr_t)gpusafe_call_runtime("cudaGetErrorName", 1, a); }
const char *cudaGetErrorString(cudaError_t e) { gs_arg a[1]; A_I(0, e); return (const char *)(uintptr_t)gpusafe_call_runtime("cudaGetErrorString", 1, a); }

/* ---- generated stubs of the runtime functions not served follow ---- */
