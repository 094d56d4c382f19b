// Shift a signal right by one sample: out[i + 1] = in[i].
// The last thread writes out[n], one float past the end of `out`. Without a
// red zone that address is the first float of the NEXT allocation, so the
// write silently lands in another live buffer.
extern "C" __global__ void shift_right(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i + 1] = in[i];  // BUG: i + 1 == n for the last thread
    }
}
