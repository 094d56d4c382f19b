// Dynamic shared memory (extern __shared__, size given at launch).

// Reverses each block-sized chunk of the array through dynamic shared memory.
extern "C" __global__ void reverse_dynamic(int* out, const int* in, int n)
{
    extern __shared__ int s[];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : -1;
    __syncthreads();
    int src = blockDim.x - 1 - t;
    int j = blockIdx.x * blockDim.x + src;
    if (i < n && j < n) {
        out[i] = s[src];
    } else if (i < n) {
        out[i] = -1;  // the partner slot of the last, partial block is past n
    }
}

// One dynamic allocation carved into a double part and an int part:
// dynamic bytes = blockDim.x * (sizeof(double) + sizeof(int)).
// out[i] = (sum of the doubles of the block) + ints of the neighbour to the right.
extern "C" __global__ void dynamic_shared_split(double* out, const double* vals, const int* ids, int n)
{
    extern __shared__ double dsm[];
    double* dpart = dsm;
    int* ipart = reinterpret_cast<int*>(dsm + blockDim.x);
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    dpart[t] = i < n ? vals[i] : 0.0;
    ipart[t] = i < n ? ids[i] : 0;
    __syncthreads();
    if (t == 0) {
        double s = 0.0;
        for (int k = 0; k < (int)blockDim.x; ++k) s += dpart[k];
        dpart[0] = s;
    }
    __syncthreads();
    if (i < n) {
        out[i] = dpart[0] + (double)ipart[(t + 1) % blockDim.x];
    }
}
