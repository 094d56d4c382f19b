// Indirect accesses: index arrays, pointer chasing, pointer tables.

// out[i] = src[idx[i]]  (idx values are in range)
extern "C" __global__ void gather_index(float* out, const float* src, const int* idx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = src[idx[i]];
}

// scatter: dst[perm[i]] = src[i] (perm is a permutation)
extern "C" __global__ void scatter_perm(int* dst, const int* src, const int* perm, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[perm[i]] = src[i];
}

// Follow next[] `hops` times from node i; out[i] = sum of the visited values.
extern "C" __global__ void pointer_chase(long long* out, const int* next, const int* value, int n,
                                         int hops)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int cur = i;
    long long s = 0;
    for (int h = 0; h < hops; ++h) {
        s += value[cur];
        cur = next[cur];
    }
    out[i] = s + cur;
}

// A table of device pointers in device memory: rows[r] points to a row of
// `cols` floats. out[r * cols + c] = rows[r][c] * scale[r].
extern "C" __global__ void pointer_table(float* out, const float* const* rows, const float* scale,
                                         int nrows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (r >= nrows || c >= cols) return;
    const float* row = rows[r];
    out[r * cols + c] = row[c] * scale[r];
}

// A linked list stored as structs with real device pointers (nodes point at
// nodes inside the same allocation). out[i] = sum of keys along the list from
// the i-th head, up to `maxlen` nodes.
struct Node {
    int key;
    int pad;
    const Node* next;
};

extern "C" __global__ void linked_list_walk(int* out, const Node* const* heads, int nheads, int maxlen)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nheads) return;
    int s = 0;
    const Node* p = heads[i];
    for (int k = 0; k < maxlen && p != nullptr; ++k) {
        s += p->key;
        p = p->next;
    }
    out[i] = s;
}
