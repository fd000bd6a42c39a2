// Solution to exercise 1: the padded transpose (rung 3 of transpose.cu)
// with blocks of 32 x R threads, R = 4, 8, 16 or 32, so each thread moves
// 32 / R elements of its 32 x 32 tile: 8, 4, 2 or 1.
//
// Host program: ex1_block_rows.py. R is a template parameter, not read
// from blockDim.y, so the compiler knows the trip count of both loops and
// unrolls them: all of a thread's loads are issued before its first store
// to the tile, as in transpose.cu, where R is BLOCK_ROWS = 8. R = 8 is
// therefore the chapter's padded rung, instruction for instruction.

#define TILE 32

// --8<-- [start:kernel]
template <int R>              // blockDim.y: the block is 32 x R threads
__device__ void transpose_padded_rows(const float* __restrict__ x,
                                      float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
#pragma unroll
    for (int j = 0; j < TILE; j += R) {           // TILE / R loads per thread
        const int r = r0 + ty + j, c = c0 + tx;
        if (r < rows && c < cols) {
            tile[ty + j][tx] = x[(size_t)r * cols + c];
        }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < TILE; j += R) {
        const int c = c0 + ty + j, r = r0 + tx;
        if (c < cols && r < rows) {
            out[(size_t)c * rows + r] = tile[tx][ty + j];
        }
    }
}

extern "C" __global__ void transpose_padded_r4(const float* __restrict__ x, float* __restrict__ out,
                                               int rows, int cols)
{ transpose_padded_rows<4>(x, out, rows, cols); }
extern "C" __global__ void transpose_padded_r8(const float* __restrict__ x, float* __restrict__ out,
                                               int rows, int cols)
{ transpose_padded_rows<8>(x, out, rows, cols); }
extern "C" __global__ void transpose_padded_r16(const float* __restrict__ x, float* __restrict__ out,
                                                int rows, int cols)
{ transpose_padded_rows<16>(x, out, rows, cols); }
extern "C" __global__ void transpose_padded_r32(const float* __restrict__ x, float* __restrict__ out,
                                                int rows, int cols)
{ transpose_padded_rows<32>(x, out, rows, cols); }
// --8<-- [end:kernel]
