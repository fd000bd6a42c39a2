// Matrix transpose, out = x^T, for a rows x cols row-major float matrix,
// as a ladder of kernels: each rung fixes what slowed the one before.
//
// Host program: transpose.py. Every kernel handles any shape: a tile that
// hangs over the matrix's edge loads and stores only the elements inside.
// Indices into the matrix are 64-bit (rows * cols may pass 2^31); a tile's
// own indices fit in int (the host keeps each dimension below 2^31 - 64).
//
// The 32 x 32 rungs run blocks of 32 x 8 threads: a warp is one value of
// threadIdx.y, its lanes the 32 values of threadIdx.x, and each thread
// handles 4 rows of its tile (j = 0, 8, 16, 24), so a block has 4 loads in
// flight per thread before it waits.

#define TILE 32          // tile edge of the 32 x 32 rungs
#define BLOCK_ROWS 8     // blockDim.y: each thread moves TILE / BLOCK_ROWS rows

// --8<-- [start:naive]
// Rung 1: no shared memory. Lane tx reads x[r][c0 + tx]: 32 neighbouring
// floats, one 128-byte line. It writes out[c0 + tx][r]: 32 floats a whole
// output row (rows * 4 bytes) apart, one 32-byte sector each, of which
// the store uses 4 bytes.
extern "C" __global__ void transpose_naive(const float* __restrict__ x,
                                           float* __restrict__ out, int rows, int cols)
{
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    const int c = c0 + threadIdx.x;
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int r = r0 + threadIdx.y + j;
        if (r < rows && c < cols) {
            out[(size_t)c * rows + r] = x[(size_t)r * cols + c];
        }
    }
}
// --8<-- [end:naive]

// --8<-- [start:tiled]
// Rung 2: stage a 32 x 32 tile in shared memory. The block reads the tile
// row by row (coalesced), waits until all of it is there, then writes the
// transposed tile row by row (coalesced too): the transposition happens
// in shared memory, where a scattered access costs no extra sectors.
// But reading tile[tx][k] for tx = 0..31 touches one word every 32: all
// 32 lanes hit the same bank, and the read is served in 32 passes.
extern "C" __global__ void transpose_tiled(const float* __restrict__ x,
                                           float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int r = r0 + ty + j, c = c0 + tx;
        if (r < rows && c < cols) {
            tile[ty + j][tx] = x[(size_t)r * cols + c];       // a row: 32 banks
        }
    }
    __syncthreads();                          // every element of the tile is in
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int c = c0 + ty + j, r = r0 + tx;               // out[c][r] = x[r][c]
        if (c < cols && r < rows) {
            out[(size_t)c * rows + r] = tile[tx][ty + j];     // a column: 1 bank
        }
    }
}
// --8<-- [end:tiled]

// --8<-- [start:padded]
// Rung 3: the same, with one unused float at the end of each tile row.
// Row i then starts at word 33 * i, in bank (33 * i) % 32 = i % 32, so a
// column's 32 words lie in 32 different banks. The cost: 32 words of
// shared memory per block.
extern "C" __global__ void transpose_padded(const float* __restrict__ x,
                                            float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int r = r0 + ty + j, c = c0 + tx;
        if (r < rows && c < cols) {
            tile[ty + j][tx] = x[(size_t)r * cols + c];
        }
    }
    __syncthreads();
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int c = c0 + ty + j, r = r0 + tx;
        if (c < cols && r < rows) {
            out[(size_t)c * rows + r] = tile[tx][ty + j];     // banks (tx + k) % 32
        }
    }
}
// --8<-- [end:padded]

// --8<-- [start:swizzled]
// Rung 4: no padding; instead element (i, k) of the tile is kept in column
// k ^ i of row i. Within a row, XOR with i only permutes the 32 columns,
// so a row still fills 32 banks; down a column (fixed k, i = 0..31) the
// words land in columns k ^ i, 32 different ones, so 32 different banks.
// Same speed-up as padding, in exactly 4 KB (the layout tensor-core
// kernels use, where padding would break 16-byte alignment).
extern "C" __global__ void transpose_swizzled(const float* __restrict__ x,
                                              float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int i = ty + j, r = r0 + i, c = c0 + tx;
        if (r < rows && c < cols) {
            tile[i][tx ^ i] = x[(size_t)r * cols + c];         // element (i, tx)
        }
    }
    __syncthreads();
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int k = ty + j, c = c0 + k, r = r0 + tx;
        if (c < cols && r < rows) {
            out[(size_t)c * rows + r] = tile[tx][k ^ tx];      // element (tx, k)
        }
    }
}
// --8<-- [end:swizzled]

// --8<-- [start:wide]
// Rung 5: a 64 x 64 padded tile per block of 256 threads, 16 elements per
// thread, so each thread has 4x as many bytes in flight before the block
// waits at the barrier. When both dimensions are multiples of 4 and both
// arrays start on 16 bytes, every global access is a float4: a warp moves
// 512 bytes per instruction, as 4 rows of 8 lanes x 16 bytes (each group
// of 8 lanes covers one 128-byte line). Otherwise (3001 columns: not a
// multiple of 4, so only every fourth row starts on 16 bytes) the same
// tile moves scalars.
#define WT 64            // tile edge of the wide rung
#define WS (WT + 1)      // padded row length: row i starts in bank i % 32

extern "C" __global__ void transpose_wide(const float* __restrict__ x,
                                          float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[WT][WS];
    const int lane = threadIdx.x, warp = threadIdx.y;          // 32 x 8
    const int r0 = blockIdx.y * WT, c0 = blockIdx.x * WT;
    // The same answer for every thread of the grid, so no warp diverges.
    const bool vec = ((rows | cols) & 3) == 0 &&
                     (((size_t)x | (size_t)out) & 15) == 0;
    if (vec) {
        // Item p of a thread: float4 number q (of 16) in tile row `row`.
        // Lanes 8g..8g+7 take 8 neighbouring float4s of one row, so a
        // scalar shared store of word k hits bank (row + 4q + k) % 32:
        // 4q over 8 lanes and row over 4 groups give 32 different banks.
        const int q_lo = lane & 7, row_lo = (lane >> 3) + 4 * warp;   // 0..7, 0..31
        float4 v[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {                   // all 4 loads first, then stores
            const int q = q_lo + 8 * (p & 1), row = row_lo + 32 * (p >> 1);
            const int r = r0 + row, c = c0 + 4 * q;     // cols % 4 == 0: all 4 in, or none
            v[p] = (r < rows && c < cols)
                 ? *reinterpret_cast<const float4*>(x + (size_t)r * cols + c)
                 : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int q = q_lo + 8 * (p & 1), row = row_lo + 32 * (p >> 1);
            float* t = &tile[row][4 * q];
            t[0] = v[p].x; t[1] = v[p].y; t[2] = v[p].z; t[3] = v[p].w;
        }
        __syncthreads();
        // Item p: float4 number q of output row cc (input column c0 + cc),
        // gathered from tile rows 4q..4q+3: word k is in bank
        // (4q + k + cc) % 32, again 32 different banks over a warp.
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int q = q_lo + 8 * (p & 1), cc = row_lo + 32 * (p >> 1);
            const int c = c0 + cc, r = r0 + 4 * q;      // rows % 4 == 0: all 4 in, or none
            if (c < cols && r < rows) {
                const float4 w = make_float4(tile[4 * q][cc], tile[4 * q + 1][cc],
                                             tile[4 * q + 2][cc], tile[4 * q + 3][cc]);
                *reinterpret_cast<float4*>(out + (size_t)c * rows + r) = w;
            }
        }
    } else {
        // Scalars: item p is column lane + 32 * (p & 1) of tile row
        // warp + 8 * (p >> 1); a warp reads 128 bytes of one row.
        float v[16];
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            const int r = r0 + warp + 8 * (p >> 1), c = c0 + lane + 32 * (p & 1);
            v[p] = (r < rows && c < cols) ? x[(size_t)r * cols + c] : 0.f;
        }
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            tile[warp + 8 * (p >> 1)][lane + 32 * (p & 1)] = v[p];   // bank (row + lane) % 32
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            const int i = lane + 32 * (p & 1), k = warp + 8 * (p >> 1);
            const int c = c0 + k, r = r0 + i;
            if (c < cols && r < rows) {
                out[(size_t)c * rows + r] = tile[i][k];               // bank (i + k) % 32
            }
        }
    }
}
// --8<-- [end:wide]
