// Fill a buffer and check each value as it is written, stopping the kernel
// (__trap) when one does not read back: the device-side check that careful
// kernels carry. The bound is off by one, so thread n writes out[n], one past
// the end, and reads it back.
extern "C" __global__ void fill_checked(volatile int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > n) return;           // BUG: should be i >= n
    out[i] = 2 * i;
    if (out[i] != 2 * i)
        __trap();
}
