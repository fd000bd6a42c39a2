// The bias's gradient: a sum down the columns of dY (draft for Part IV,
// "Backpropagation on the GPU").
//
// For y = x W^T + b over M rows, dL/db[j] = sum_i dY[i, j]: one sum per
// column, over all M rows (B x T tokens). dY is bf16, (M, N) row-major; the
// sums are float32.
//
// Two kernels, no atomics, so the same bits every run:
//   col_partials  block (g, s) sums the 64 columns 64 g .. 64 g + 63 over
//                 its share s of the rows: 8 threads across the 64 columns
//                 (8 bf16, 16 bytes, each), 32 rows at a time down the
//                 block; then the 32 row lanes are added in shared memory,
//                 in a fixed tree, into partials[s, 64 g ..].
//   col_finish    each column's S partials added in order, into db.

#include <cuda_bf16.h>

#define THREADS 256
#define COLS 64                 // columns a block
#define LANES (THREADS / 8)     // rows a block reads at a time

// --8<-- [start:partials]
extern "C" __global__ void __launch_bounds__(THREADS)
col_partials(const __nv_bfloat16* __restrict__ dY, float* __restrict__ partials, int M, int N)
{
    const int c0 = blockIdx.x * COLS + 8 * (threadIdx.x % 8);   // this thread's 8 columns
    const int lane = threadIdx.x / 8;                           // its row lane, 0 .. 31
    const int S = gridDim.y;
    const int rows_per = (M + S - 1) / S;
    const int r0 = blockIdx.y * rows_per, r1 = min(M, r0 + rows_per);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (c0 < N) {
        for (int r = r0 + lane; r < r1; r += LANES) {
            const uint4 raw = *reinterpret_cast<const uint4*>(dY + (size_t)r * N + c0);
            const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
            for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(e[k]);
        }
    }
    __shared__ float sums[LANES][COLS + 1];                      // +1: no bank conflicts down a column
#pragma unroll
    for (int k = 0; k < 8; ++k) sums[lane][8 * (threadIdx.x % 8) + k] = acc[k];
    __syncthreads();
    for (int half = LANES / 2; half > 0; half /= 2) {           // the 32 lanes, a fixed tree
        for (int i = threadIdx.x; i < half * COLS; i += THREADS) {
            const int l = i / COLS, c = i % COLS;
            sums[l][c] += sums[l + half][c];
        }
        __syncthreads();
    }
    const int c = blockIdx.x * COLS + threadIdx.x;
    if (threadIdx.x < COLS && c < N) partials[(size_t)blockIdx.y * N + c] = sums[0][threadIdx.x];
}
// --8<-- [end:partials]

extern "C" __global__ void __launch_bounds__(THREADS)
col_finish(const float* __restrict__ partials, float* __restrict__ db, int N, int S)
{
    const int c = blockIdx.x * THREADS + threadIdx.x;
    if (c >= N) return;
    float s = 0.0f;
    for (int k = 0; k < S; ++k) s += partials[(size_t)k * N + c];
    db[c] = s;
}
