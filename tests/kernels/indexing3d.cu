// Multi-dimensional grids and blocks: blockIdx.y/z, threadIdx.y/z, gridDim, blockDim.

// A 3D volume of size X x Y x Z, with 3D blocks and a 3D grid.
// out[(z*Y + y)*X + x] = x + 100*y + 10000*z + in[...] * 2; also records the block
// coordinates and flat thread id.
extern "C" __global__ void index_3d(int* out, int* who, const int* in, int X, int Y, int Z)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= X || y >= Y || z >= Z) return;
    int idx = (z * Y + y) * X + x;
    out[idx] = x + 100 * y + 10000 * z + in[idx] * 2;
    int flat_block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int flat_thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    who[idx] = flat_block * (blockDim.x * blockDim.y * blockDim.z) + flat_thread;
}

// 2D matrix add with a 2D grid of 2D blocks, using pitch (row stride) in elements.
extern "C" __global__ void matrix_add_2d(float* c, const float* a, const float* b, int rows,
                                         int cols, int pitch)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        c[row * pitch + col] = a[row * pitch + col] + b[row * pitch + col];
    }
}
