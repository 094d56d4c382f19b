// An 8-tap FIR filter. The taps are copied into a per-thread array, then the
// accumulation loop runs to j <= taps instead of j < taps, so every thread
// reads coeff[8], one float past the end of its local array.
#define TAPS 8

extern "C" __global__ void fir(float* out, const float* in, const float* weights,
                               int n, int taps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float coeff[TAPS];
    for (int j = 0; j < TAPS; ++j)
        coeff[j] = weights[j];
    float acc = 0.0f;
    for (int j = 0; j <= taps; ++j)  // BUG: should be j < taps
        acc += coeff[j] * in[(i + j) % n];
    out[i] = acc;
}
