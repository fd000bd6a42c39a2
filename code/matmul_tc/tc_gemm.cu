// BF16 matrix product on tensor cores, C = A @ B, as a ladder of kernels.
//
// Host program: tc_gemm.py. A is M x K bf16, B is K x N bf16, both
// row-major; C is M x N float32, row-major. Products of bf16 values are
// exact in fp32 and the tensor cores accumulate in fp32. Every kernel takes
// (A, B, C, M, N, K) and is correct for any M, N, K >= 1:
//   - a piece of A or B that hangs over an edge is filled with zeros before
//     the tensor cores see it (a zero adds nothing to a dot product), and
//     only the elements of C inside the matrix are written;
//   - 16-byte loads (and wmma loads straight from global memory) need every
//     row of A to start on a 16-byte boundary, i.e. K a multiple of 8, and
//     likewise N for B. Where that fails, the kernel falls back to loading
//     that operand one element at a time: correct, slower.
// Row offsets are 64-bit (M * K, K * N and M * N may pass 2^31); indices
// inside a row fit in int (the host keeps each dimension below 2^31 - 256).
//
// Each rung changes one thing, said in the comment above it:
//   wmma              nvcuda::wmma 16x16x16 fragments, a warp per 32 x 32
//                     piece of C, operands loaded straight from global memory
//   wmma_smem         128 x 128 x 32 block tile staged in shared memory,
//                     8 warps, each a 64 x 32 piece, wmma from shared memory
//   mma               inline PTX mma.sync m16n8k16 fed by ldmatrix from an
//                     XOR-swizzled shared layout; 4 warps, each 64 x 64
//   mma_pipelined     cp.async into 3 shared stages: the loads of slice
//                     k+2 fly while slice k is computed; the host launches
//                     a version without the fallback loads where it can
// (wgmma and TMA, Hopper's own path, are a later listing.)

#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

using bf16 = __nv_bfloat16;
using namespace nvcuda;

// --8<-- [start:wmma_helpers]
// A 16 x 16 tile at (r0, c0) of a row-major R x Cols bf16 matrix, into a
// wmma fragment. Straight from global memory when the tile is inside the
// matrix and rows start on 16-byte boundaries (`aligned`: Cols % 8 == 0;
// wmma wants ldm a multiple of 8 elements and a 32-byte aligned pointer,
// which r0 and c0 multiples of 16 then give). Otherwise the warp copies the
// tile into its own 16 x 16 staging buffer in shared memory, zeros outside
// the matrix, and loads the fragment from there. Every branch is the same
// for the whole warp (r0, c0 are per warp), as wmma requires.
template <typename Frag>
__device__ __forceinline__ void wmma_load_tile(Frag& f, const bf16* __restrict__ X, int r0,
                                               int c0, int R, int Cols, bool aligned,
                                               bf16* stage, int lane)
{
    if (aligned && r0 + 16 <= R && c0 + 16 <= Cols) {
        wmma::load_matrix_sync(f, X + (size_t)r0 * Cols + c0, Cols);
    } else {
        for (int i = lane; i < 256; i += 32) {
            const int r = r0 + i / 16, c = c0 + i % 16;
            stage[i] = (r < R && c < Cols) ? X[(size_t)r * Cols + c] : __float2bfloat16(0.0f);
        }
        __syncwarp();
        wmma::load_matrix_sync(f, stage, 16);
        __syncwarp();                         // the buffer is reused by the next tile
    }
}

// A 16 x 16 accumulator fragment to C at (r0, c0): straight to global memory
// when it is inside C and N % 4 == 0 (float rows 16-byte aligned), else
// through the warp's float staging buffer, writing only elements inside C.
__device__ __forceinline__ void wmma_store_tile(
    const wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc, float* __restrict__ C,
    int r0, int c0, int M, int N, float* stage, int lane)
{
    if ((N % 4) == 0 && r0 + 16 <= M && c0 + 16 <= N) {
        wmma::store_matrix_sync(C + (size_t)r0 * N + c0, acc, N, wmma::mem_row_major);
    } else {
        wmma::store_matrix_sync(stage, acc, 16, wmma::mem_row_major);
        __syncwarp();
        for (int i = lane; i < 256; i += 32) {
            const int r = r0 + i / 16, c = c0 + i % 16;
            if (r < M && c < N) C[(size_t)r * N + c] = stage[i];
        }
        __syncwarp();
    }
}
// --8<-- [end:wmma_helpers]

// --8<-- [start:wmma]
// Rung 1: the tensor cores through the C++ wmma API. A block of 4 warps
// covers 64 x 64 of C; each warp owns a 32 x 32 piece, 2 x 2 accumulator
// fragments of 16 x 16, and walks K 16 at a time: load two 16 x 16 tiles of
// A and two of B straight from global memory, four mma_sync. No data is
// shared between warps, so each A tile is read by N / 32 warps from L2.
extern "C" __global__ void __launch_bounds__(128)
tc_wmma(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
        int M, int N, int K)
{
    __shared__ __align__(32) bf16 stage_ab[4][256];     // per-warp staging, edges only
    __shared__ __align__(32) float stage_c[4][256];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m0 = blockIdx.y * 64 + (warp / 2) * 32;
    const int n0 = blockIdx.x * 64 + (warp % 2) * 32;
    if (m0 >= M || n0 >= N) return;                    // whole warp; no block barrier below
    const bool a_aligned = (K % 8) == 0, b_aligned = (N % 8) == 0;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k = 0; k < K; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[2];
        for (int i = 0; i < 2; ++i)
            wmma_load_tile(a[i], A, m0 + 16 * i, k, M, K, a_aligned, stage_ab[warp], lane);
        for (int j = 0; j < 2; ++j)
            wmma_load_tile(b[j], B, k, n0 + 16 * j, K, N, b_aligned, stage_ab[warp], lane);
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            wmma_store_tile(acc[i][j], C, m0 + 16 * i, n0 + 16 * j, M, N, stage_c[warp], lane);
}
// --8<-- [end:wmma]

// --8<-- [start:chunk]
// Eight bf16 (16 bytes) of row r of a row-major R x Cols matrix, from column
// c (a multiple of 8). One 16-byte load when `aligned` (Cols % 8 == 0, so
// the row starts on a 16-byte boundary and c < Cols means all 8 are inside);
// else element by element. Zeros outside the matrix.
__device__ __forceinline__ uint4 load_chunk(const bf16* __restrict__ X, int r, int c, int R,
                                            int Cols, bool aligned)
{
    if (aligned) {
        if (r < R && c < Cols) return *reinterpret_cast<const uint4*>(X + (size_t)r * Cols + c);
        return make_uint4(0, 0, 0, 0);
    }
    union { uint4 v; unsigned short h[8]; } u;
    const unsigned short* x = reinterpret_cast<const unsigned short*>(X);
    for (int i = 0; i < 8; ++i)
        u.h[i] = (r < R && c + i < Cols) ? x[(size_t)r * Cols + c + i] : (unsigned short)0;
    return u.v;
}
// --8<-- [end:chunk]

// --8<-- [start:wmma_smem]
// Rung 2: a block of 8 warps computes a 128 x 128 tile of C, 32 of K at a
// time: the block copies a 128 x 32 tile of A and a 32 x 128 tile of B into
// shared memory (16-byte loads, two of each per thread), then each warp runs
// wmma on its 64 x 32 piece (4 x 2 fragments) from shared memory. Each
// element loaded from global memory now feeds 128 / 16 = 8 fragment loads
// instead of one. Rows are padded by 8 bf16 (16 bytes) so the fragment loads,
// which read 16 rows at once, do not all fall in the same banks.
constexpr int W2_BM = 128;
constexpr int W2_BN = 128;
constexpr int W2_BK = 32;
constexpr int W2_LDA = W2_BK + 8;   // 40 bf16 = 80 bytes a row
constexpr int W2_LDB = W2_BN + 8;   // 136 bf16 = 272 bytes a row

extern "C" __global__ void __launch_bounds__(256)
tc_wmma_smem(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
             int M, int N, int K)
{
    __shared__ __align__(32) bf16 As[W2_BM * W2_LDA];
    __shared__ __align__(32) bf16 Bs[W2_BK * W2_LDB];
    __shared__ __align__(32) float stage_c[8][256];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int bm = blockIdx.y * W2_BM, bn = blockIdx.x * W2_BN;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;        // the warp's piece
    const bool a_aligned = (K % 8) == 0, b_aligned = (N % 8) == 0;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += W2_BK) {
        for (int p = 0; p < 2; ++p) {                  // 512 chunks of 8 bf16 each for A and B
            const int idx = tid + 256 * p;
            const int ar = idx / 4, ac = (idx % 4) * 8;           // A: 128 rows x 4 chunks
            *reinterpret_cast<uint4*>(&As[ar * W2_LDA + ac]) =
                load_chunk(A, bm + ar, k0 + ac, M, K, a_aligned);
            const int br = idx / 16, bc = (idx % 16) * 8;         // B: 32 rows x 16 chunks
            *reinterpret_cast<uint4*>(&Bs[br * W2_LDB + bc]) =
                load_chunk(B, k0 + br, bn + bc, K, N, b_aligned);
        }
        __syncthreads();
        for (int kk = 0; kk < W2_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[2];
            for (int i = 0; i < 4; ++i)
                wmma::load_matrix_sync(a[i], &As[(wm + 16 * i) * W2_LDA + kk], W2_LDA);
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(b[j], &Bs[kk * W2_LDB + wn + 16 * j], W2_LDB);
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();                               // before the next tiles overwrite these
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j)
            wmma_store_tile(acc[i][j], C, bm + wm + 16 * i, bn + wn + 16 * j, M, N,
                            stage_c[warp], lane);
}
// --8<-- [end:wmma_smem]

// --8<-- [start:mma_helpers]
// The PTX rungs: a block of 4 warps (2 x 2) computes 128 x 128 of C, 32 of
// K at a time; each warp owns 64 x 64 = 4 x 8 tiles of m16n8, 128 fp32
// accumulators a thread.
constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 32;
constexpr int STAGES = 3;

// Shared layouts, unpadded, in 16-byte chunks of 8 bf16, XOR-swizzled so
// that ldmatrix (8 lanes give 8 row addresses of one 8 x 8 matrix, a
// chunk each, read together) hits 8 different 16-byte slots of a 128-byte
// bank line, and so do the 16-byte stores that fill the tile.
// A tile: 128 rows (m) x 4 chunks (k), 64 bytes a row; two rows share a
// 128-byte line. Rows r..r+7 of one chunk: slot = 4 (r & 1) + (chunk ^ ((r >> 1) & 3)).
__device__ __forceinline__ int a_off(int row, int chunk)
{
    return row * BK + ((chunk ^ ((row >> 1) & 3)) * 8);
}
// B tile: 32 rows (k) x 16 chunks (n), 256 bytes a row; every row starts a
// line, so chunk c of rows r..r+7 would be one bank group: slot = (c ^ r) & 7.
__device__ __forceinline__ int b_off(int row, int chunk)
{
    return row * BN + ((chunk ^ (row & 7)) * 8);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i,
// and r[i] gets matrix i, each lane holding row lane / 4, columns 2 (lane % 4) + {0, 1}.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// The same, transposed: each lane holds column lane / 4, rows 2 (lane % 4) + {0, 1}.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d = a (16 x 16, row) * b (16 x 8, col) + d, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One BK = 32 slice from shared memory: two k16 steps, each 4 ldmatrix.x4 for
// the warp's 64 rows of A, 4 ldmatrix.x4.trans for its 64 columns of B, and
// 4 x 8 mma. Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, t = lane % 4):
//   a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 8+2t..)  a3 (g+8, 8+2t..)
//   b0 (k 2t..2t+1, n g)  b1 (k 8+2t.., n g)
//   c0, c1 (g, 2t, 2t+1)  c2, c3 (g+8, 2t, 2t+1)
// So for A, lane l points at row l % 16, k-chunk l / 16: matrices 0..3 are
// (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a0..a3.
// For B (stored k-major), lane l points at k row l % 16, n-chunk l / 16:
// matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15),
// which .trans turns into b0, b1 of one n8 tile, then b0, b1 of the next.
__device__ __forceinline__ void mma_slice(float acc[4][8][4], const bf16* As, const bf16* Bs,
                                          int wm, int wn, int lane)
{
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
        uint32_t a[4][4], b[8][2];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            ldmatrix_x4(a[i], smem_addr(As + a_off(wm + 16 * i + lane % 16, 2 * ks + lane / 16)));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            uint32_t r[4];
            ldmatrix_x4_trans(r, smem_addr(Bs + b_off(16 * ks + lane % 16,
                                                      (wn + 16 * j) / 8 + lane / 16)));
            b[2 * j][0] = r[0];
            b[2 * j][1] = r[1];
            b[2 * j + 1][0] = r[2];
            b[2 * j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
    }
}

// The accumulators to C: each lane holds two neighbouring columns of rows g
// and g + 8 of every m16n8 tile; a float2 store where N is even (8-byte
// aligned) and both columns are inside, else one float at a time.
__device__ __forceinline__ void mma_store(const float acc[4][8][4], float* __restrict__ C,
                                          int row0, int col0, int M, int N, int lane)
{
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + 16 * i + lane / 4 + 8 * h;
                const int c = col0 + 8 * j + 2 * (lane % 4);
                if (r >= M) continue;
                float* p = C + (size_t)r * N + c;
                if ((N % 2) == 0 && c + 1 < N) {
                    *reinterpret_cast<float2*>(p) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    if (c < N) p[0] = acc[i][j][2 * h];
                    if (c + 1 < N) p[1] = acc[i][j][2 * h + 1];
                }
            }
}
// --8<-- [end:mma_helpers]

// --8<-- [start:mma]
// Rung 3: the same tensor cores without wmma. mma.sync m16n8k16 works on
// fragments whose layout PTX documents, so ldmatrix can load them from shared
// memory 4 matrices per instruction (B with .trans, since B is stored k-major
// and the mma wants each register to hold two consecutive k). With an
// unpadded, swizzled layout neither ldmatrix nor the stores that fill the
// tiles conflict. A block of 4 warps, each 64 x 64 of C: 8 ldmatrix feed 32
// mma per k16 step. Loads go global -> registers -> shared, one stage.
extern "C" __global__ void __launch_bounds__(128)
tc_mma(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
       int M, int N, int K)
{
    __shared__ __align__(128) bf16 As[BM * BK];
    __shared__ __align__(128) bf16 Bs[BK * BN];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wm = (warp / 2) * 64, wn = (warp % 2) * 64;
    const bool a_aligned = (K % 8) == 0, b_aligned = (N % 8) == 0;

    float acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int p = 0; p < 4; ++p) {                  // 512 chunks each of A and B, 4 a thread
            const int idx = tid + 128 * p;
            const int ar = idx / 4, ac = idx % 4;               // A: 128 rows x 4 chunks
            *reinterpret_cast<uint4*>(&As[a_off(ar, ac)]) =
                load_chunk(A, bm + ar, k0 + 8 * ac, M, K, a_aligned);
            const int br = idx / 16, bc = idx % 16;             // B: 32 rows x 16 chunks
            *reinterpret_cast<uint4*>(&Bs[b_off(br, bc)]) =
                load_chunk(B, k0 + br, bn + 8 * bc, K, N, b_aligned);
        }
        __syncthreads();
        mma_slice(acc, As, Bs, wm, wn, lane);
        __syncthreads();
    }
    mma_store(acc, C, bm + wm, bn + wn, M, N, lane);
}
// --8<-- [end:mma]

// --8<-- [start:cp_async]
// cp.async copies 16 bytes from global to shared memory without passing
// through registers, and the thread carries on. src_bytes < 16 fills the
// rest of the 16 bytes with zeros (0: all zeros, nothing read). .cg caches
// in L2 only. commit_group closes a group of copies; wait_group n waits until
// at most n groups of this thread are still in flight.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// Chunk (r, c) of X into shared memory at dst: cp.async when the rows are
// 16-byte aligned (a chunk outside the matrix copies 0 bytes from a valid
// address and gets zeros), else through registers element by element (those
// stores are seen by the other threads after the next __syncthreads, as the
// copies are after wait_group + __syncthreads).
__device__ __forceinline__ void copy_chunk(bf16* dst, const bf16* __restrict__ X, int r, int c,
                                           int R, int Cols, bool aligned)
{
    if (aligned) {
        const bool inside = r < R && c < Cols;
        cp_async16(smem_addr(dst), inside ? X + (size_t)r * Cols + c : X, inside ? 16 : 0);
    } else {
        *reinterpret_cast<uint4*>(dst) = load_chunk(X, r, c, R, Cols, false);
    }
}
// --8<-- [end:cp_async]

// --8<-- [start:mma_pipelined]
// Rung 4: rung 3 with a 3-stage cp.async pipeline. The prologue starts the
// copies of slices 0 and 1; at slice t the block waits for slice t only
// (wait_group 1: the group of slice t+1 may still fly), then starts slice
// t+2 into the stage slice t-1 used, then computes slice t. Loads no longer
// wait in registers, and two slices of loads overlap each slice of mma.
// Shared memory: 3 x (8 KB of A + 8 KB of B) = 48 KB, the static maximum.
// ALIGNED is decided once, on the host (K and N multiples of 8): the main
// loop of the aligned version holds only cp.async, with no fallback path
// to keep registers and instructions for.
template <bool ALIGNED>
__device__ __forceinline__ void mma_pipelined(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                              float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(128) bf16 As[STAGES][BM * BK];
    __shared__ __align__(128) bf16 Bs[STAGES][BK * BN];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wm = (warp / 2) * 64, wn = (warp % 2) * 64;
    const int slices = (K + BK - 1) / BK;

    auto load_chunks = [&](int stage, int k0, int p) {
        const int idx = tid + 128 * p;
        const int ar = idx / 4, ac = idx % 4;
        copy_chunk(&As[stage][a_off(ar, ac)], A, bm + ar, k0 + 8 * ac, M, K, ALIGNED);
        const int br = idx / 16, bc = idx % 16;
        copy_chunk(&Bs[stage][b_off(br, bc)], B, k0 + br, bn + 8 * bc, K, N, ALIGNED);
    };
    auto load_slice = [&](int stage, int t) {
        if constexpr (ALIGNED) {
#pragma unroll
            for (int p = 0; p < 4; ++p) load_chunks(stage, t * BK, p);
        } else {                                       // one chunk at a time: fewer registers
#pragma unroll 1
            for (int p = 0; p < 4; ++p) load_chunks(stage, t * BK, p);
        }
    };

    float acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {             // prologue: slices 0 .. STAGES-2
        if (s < slices) load_slice(s, s);
        cp_async_commit();                             // one group per slice, even if empty
    }
    for (int t = 0; t < slices; ++t) {
        cp_async_wait<STAGES - 2>();                   // this thread's copies of slice t landed
        __syncthreads();                               // everyone's did; stage (t-1) is free
        const int next = t + STAGES - 1;
        if (next < slices) load_slice(next % STAGES, next);
        cp_async_commit();
        mma_slice(acc, As[t % STAGES], Bs[t % STAGES], wm, wn, lane);
    }
    cp_async_wait<0>();                                // no copy may outlive the block
    mma_store(acc, C, bm + wm, bn + wn, M, N, lane);
}

// Rows of A and B start on 16-byte boundaries (K % 8 == 0, N % 8 == 0).
extern "C" __global__ void __launch_bounds__(128)
tc_mma_pipelined(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K)
{
    mma_pipelined<true>(A, B, C, M, N, K);
}

// Any K and N: loads through registers, element by element.
extern "C" __global__ void __launch_bounds__(128)
tc_mma_pipelined_unaligned(const bf16* __restrict__ A, const bf16* __restrict__ B,
                           float* __restrict__ C, int M, int N, int K)
{
    mma_pipelined<false>(A, B, C, M, N, K);
}
// --8<-- [end:mma_pipelined]
