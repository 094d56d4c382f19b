// Records are packed as a 1-byte flag followed by a 4-byte float (5 bytes
// each, no padding). Reading the float through a float* is a 4-byte load
// from an address that is not a multiple of 4.
extern "C" __global__ void record_values(float* out, const unsigned char* records, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float* value = (const float*)(records + 5 * i + 1);
        out[i] = *value;  // BUG: misaligned 4-byte load
    }
}
