// Per-thread local arrays indexed at run time (they live in .local memory).

// out[i] = table[idx[i] & 15] + table[(idx[i] >> 4) & 15], where the local
// table is built from in[i].
extern "C" __global__ void local_array_dynamic_index(int* out, const int* in, const int* idx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int table[16];
    int v = in[i];
    for (int k = 0; k < 16; ++k) table[k] = v * k + (k ^ 5);
    int j = idx[i];
    out[i] = table[j & 15] + table[(j >> 4) & 15];
}

// Insertion sort of 8 floats in a local array; out is the sorted row.
extern "C" __global__ void local_sort8(float* out, const float* in, int rows)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float a[8];
    for (int k = 0; k < 8; ++k) a[k] = in[8 * r + k];
    for (int k = 1; k < 8; ++k) {
        float key = a[k];
        int j = k - 1;
        while (j >= 0 && a[j] > key) {
            a[j + 1] = a[j];
            --j;
        }
        a[j + 1] = key;
    }
    for (int k = 0; k < 8; ++k) out[8 * r + k] = a[k];
}

// A local struct array and a local double array with data-dependent writes.
struct Acc {
    int count;
    double sum;
};

extern "C" __global__ void local_buckets(double* out, const int* keys, const double* vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Acc b[4];
    for (int k = 0; k < 4; ++k) {
        b[k].count = 0;
        b[k].sum = 0.0;
    }
    for (int k = 0; k < 6; ++k) {
        int key = keys[6 * i + k] & 3;
        b[key].count += 1;
        b[key].sum += vals[6 * i + k];
    }
    for (int k = 0; k < 4; ++k) out[4 * i + k] = b[k].sum + 1000.0 * b[k].count;
}
