// The device as a CUDA program asks about it: count, properties, an attribute.
#include <cstdio>
int main() {
    cudaDeviceProp p;
    int n = 0, sms = 0;
    cudaGetDeviceCount(&n);
    cudaError_t e = cudaGetDeviceProperties(&p, 0);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    printf("%s: %d device(s), %s, cc %d.%d, warp %d, %d SMs (%d), %zu MB\n", cudaGetErrorString(e), n, p.name,
           p.major, p.minor, p.warpSize, p.multiProcessorCount, sms, p.totalGlobalMem >> 20);
    return e != cudaSuccess || p.warpSize != 32 || sms != p.multiProcessorCount;
}
