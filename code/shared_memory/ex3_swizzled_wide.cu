// Solution to exercise 3: the wide rung of transpose.cu with its 64 x 64
// tile swizzled instead of padded.
//
// Host program: ex3_swizzled_wide.py. Element (i, k) of the tile is kept
// in column k ^ i of row i. For i and k below 64 that is still a
// permutation of each row's 64 columns, and the bank of column k ^ i is
// its low five bits, (k % 32) ^ (i % 32): exclusive or works bit by bit,
// so bit 5 of i or k never reaches the bank. Everything else is the wide
// rung unchanged: blocks of 32 x 8 threads, 16 elements per thread, float4
// global accesses when both dimensions are multiples of 4 and both arrays
// start on 16 bytes, scalars otherwise. The tile is exactly 16 KB.
//
// The exclusive ors cost registers: nvcc gave this kernel 40 a thread
// (the padded rung needs 32), and 40 x 256 threads would fit only 6 blocks
// on an SM instead of 8. __launch_bounds__(256, 8) asks for 8 blocks of
// 256 threads per SM, so the compiler keeps it to 32, without spilling,
// and the two versions differ in their tile alone.

#define WT 64            // tile edge, as in transpose_wide

// --8<-- [start:kernel]
// Element (i, k) of the tile, swizzled: bank (k % 32) ^ (i % 32).
#define AT(i, k) tile[(i)][(k) ^ (i)]

extern "C" __global__ void __launch_bounds__(256, 8)
transpose_wide_swizzled(const float* __restrict__ x, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[WT][WT];                              // no padding
    const int lane = threadIdx.x, warp = threadIdx.y;          // 32 x 8
    const int r0 = blockIdx.y * WT, c0 = blockIdx.x * WT;
    const bool vec = ((rows | cols) & 3) == 0 &&
                     (((size_t)x | (size_t)out) & 15) == 0;
    if (vec) {
        // As in transpose_wide. Storing word j of float4 number q of tile
        // row `row`: bank (4q + j) ^ row, mod 32. Over a warp, q % 8 takes
        // 8 values and row % 4 takes 4 (row % 32 = lane / 8 + 4 * warp):
        // bits 2-4 of the bank differ with q, bits 0-1 with row, so the
        // warp covers 32 banks.
        const int q_lo = lane & 7, row_lo = (lane >> 3) + 4 * warp;
        float4 v[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int q = q_lo + 8 * (p & 1), row = row_lo + 32 * (p >> 1);
            const int r = r0 + row, c = c0 + 4 * q;
            v[p] = (r < rows && c < cols)
                 ? *reinterpret_cast<const float4*>(x + (size_t)r * cols + c)
                 : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int q = q_lo + 8 * (p & 1), row = row_lo + 32 * (p >> 1);
            AT(row, 4 * q) = v[p].x;     AT(row, 4 * q + 1) = v[p].y;
            AT(row, 4 * q + 2) = v[p].z; AT(row, 4 * q + 3) = v[p].w;
        }
        __syncthreads();
        // Gathering element (4q + j, cc): bank cc ^ (4q + j), mod 32,
        // the same 32 banks by the same argument.
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int q = q_lo + 8 * (p & 1), cc = row_lo + 32 * (p >> 1);
            const int c = c0 + cc, r = r0 + 4 * q;
            if (c < cols && r < rows) {
                const float4 w = make_float4(AT(4 * q, cc), AT(4 * q + 1, cc),
                                             AT(4 * q + 2, cc), AT(4 * q + 3, cc));
                *reinterpret_cast<float4*>(out + (size_t)c * rows + r) = w;
            }
        }
    } else {
        float v[16];
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            const int r = r0 + warp + 8 * (p >> 1), c = c0 + lane + 32 * (p & 1);
            v[p] = (r < rows && c < cols) ? x[(size_t)r * cols + c] : 0.f;
        }
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            const int i = warp + 8 * (p >> 1);
            AT(i, lane + 32 * (p & 1)) = v[p];                  // bank lane ^ (i % 32)
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 16; ++p) {
            const int i = lane + 32 * (p & 1), k = warp + 8 * (p >> 1);
            const int c = c0 + k, r = r0 + i;
            if (c < cols && r < rows) {
                out[(size_t)c * rows + r] = AT(i, k);           // bank (k % 32) ^ lane
            }
        }
    }
}
// --8<-- [end:kernel]
