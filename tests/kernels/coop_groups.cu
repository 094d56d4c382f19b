// Cooperative groups (no grid-wide sync): thread_block, tiled_partition, cg::reduce.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// Block sum: each 32-thread tile reduces with cg::reduce, tile leaders combine
// through shared memory, one int result per block. blockDim.x = 256.
extern "C" __global__ void cg_block_reduce(int* block_sums, const int* in, int n)
{
    __shared__ int partial[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    int i = block.group_index().x * block.size() + block.thread_rank();
    int v = i < n ? in[i] : 0;
    int tsum = cg::reduce(tile, v, cg::plus<int>());
    if (tile.thread_rank() == 0) partial[tile.meta_group_rank()] = tsum;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        int w = tile.thread_rank() < tile.meta_group_size() ? partial[tile.thread_rank()] : 0;
        w = cg::reduce(tile, w, cg::plus<int>());
        if (tile.thread_rank() == 0) block_sums[block.group_index().x] = w;
    }
}

// Sub-warp tiles of 8: shfl_down reduction, tile-wide max, any/all votes.
extern "C" __global__ void cg_tiles8(int* out, const int* in)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<8> t8 = cg::tiled_partition<8>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    int s = v;
    for (int off = t8.size() / 2; off > 0; off /= 2) s += t8.shfl_down(s, off);
    s = t8.shfl(s, 0);
    int mx = cg::reduce(t8, v, cg::greater<int>());
    int any_neg = t8.any(v < 0);
    int all_small = t8.all(v < 50);
    out[4 * i + 0] = s;
    out[4 * i + 1] = mx;
    out[4 * i + 2] = any_neg;
    out[4 * i + 3] = all_small + (int)t8.thread_rank() * 10 + (int)t8.meta_group_rank() * 100;
}
