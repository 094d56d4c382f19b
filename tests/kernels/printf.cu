// Device printf.

extern "C" __global__ void printf_basic(const int* vals, float f, double d)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        printf("hello from the device\n");
        printf("int %d unsigned %u hex %x\n", vals[0], (unsigned)vals[1], vals[2]);
        printf("long %lld char %c string %s\n", (long long)vals[0] * 1000000000LL, 'Z', "ok");
        printf("float %.3f double %.5f sci %e\n", f, d, d * 1e10);
        printf("padded [%5d] [%-4d] [%05.1f]\n", vals[1], vals[2], (double)f);
    }
}

// One line from each of 4 threads; lines may arrive in any order.
extern "C" __global__ void printf_threads(const int* vals)
{
    int t = threadIdx.x;
    if (t < 4) {
        printf("thread %d value %d\n", t, vals[t] * 2);
    }
}
