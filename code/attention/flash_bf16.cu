// Attention forward on tensor cores, FlashAttention-style, in bf16.
//
// Host program: flash_bf16.py. Q, K, V and O are B x H x S x D, bf16,
// contiguous; one (batch, head) pair is an S x D matrix of each, and
//   O = softmax(Q K^T / sqrt(D)) V,   row by row,
// with, if causal, the scores of keys after the query set to -infinity.
// A block takes BQ = 64 MT query rows of one head (4 warps, 16 MT rows
// each) and walks over the keys BK at a time: S = Q K^T for the tile on
// tensor cores (fp32 accumulators), the online softmax on those
// accumulators in registers, P rounded to bf16, and O += P V on tensor
// cores. The S x S matrix never leaves the SM. K and V tiles come in by
// cp.async, two stages, the next tile on its way while this one is used.
// The weights are computed in base 2: exp((s - m) / sqrt(D)) is
// 2^(s c - m c) with c = log2(e) / sqrt(D), one FMA and one ex2.

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// --8<-- [start:ptx]
// The PTX wrappers of chapter 12 (tc_gemm.cu): ldmatrix, mma.sync m16n8k16
// bf16 with fp32 accumulators, cp.async. Fragment layouts (PTX ISA,
// g = lane / 4, t = lane % 4):
//   a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 8+2t..)  a3 (g+8, 8+2t..)
//   b0 (k 2t..2t+1, n g)  b1 (k 8+2t.., n g)
//   c0, c1 (g, 2t, 2t+1)  c2, c3 (g+8, 2t, 2t+1)
__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
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
// 2^x in one instruction (relative error about 2^-22, far below bf16's 2^-8).
__device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// Two floats to a bf16 pair, the first in the low half (round to nearest).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
// --8<-- [end:ptx]

// --8<-- [start:tiles]
// A tile of rows x D bf16 in shared memory, in 16-byte chunks of 8 values,
// chunk c of row r stored at chunk c ^ (r & 7): the 8 rows that one
// ldmatrix reads at one logical chunk land in 8 different 16-byte slots of
// the 128-byte bank line, so the read is one pass, not eight.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk)
{
    return row * D + ((chunk ^ (row & 7)) * 8);
}

// How THREADS threads copy a ROWS x D tile by cp.async: thread i takes
// chunk i % CHUNKS of rows i / CHUNKS, i / CHUNKS + RSTEP, ... The rows it
// takes differ by a multiple of 8, so they share one swizzle: the offsets
// are worked out once, and a copy is STEPS cp.async at fixed distances.
template <int D, int ROWS, int THREADS>
struct TileCopy {
    static constexpr int CHUNKS = D / 8, RSTEP = THREADS / CHUNKS, STEPS = ROWS / RSTEP;
    static_assert(THREADS % CHUNKS == 0 && ROWS % RSTEP == 0 && RSTEP % 8 == 0, "tile shape");
    int row;            // this thread's first row of the tile
    uint32_t soff;      // its byte offset in shared memory, swizzled
    int goff;           // its element offset in the matrix, from the tile's first row

    __device__ __forceinline__ TileCopy()
        : row(threadIdx.x / CHUNKS),
          soff(2 * swz<D>(threadIdx.x / CHUNKS, threadIdx.x % CHUNKS)),
          goff(threadIdx.x / CHUNKS * D + threadIdx.x % CHUNKS * 8) {}

    // Rows row0 .. row0 + ROWS - 1 of an S x D matrix into the tile at
    // shared address tile; rows past S are filled with zeros (0 bytes
    // copied from a valid address).
    __device__ __forceinline__ void operator()(uint32_t tile, const bf16* __restrict__ X,
                                               int row0, int S) const
    {
        const bf16* src = X + (size_t)row0 * D + goff;
        const uint32_t dst = tile + soff;
        if (row0 + ROWS <= S) {
#pragma unroll
            for (int k = 0; k < STEPS; ++k)
                cp_async16(dst + k * RSTEP * D * 2, src + k * RSTEP * D, 16);
        } else {
#pragma unroll
            for (int k = 0; k < STEPS; ++k) {
                const bool inside = row0 + row + k * RSTEP < S;
                cp_async16(dst + k * RSTEP * D * 2, inside ? src + k * RSTEP * D : X, inside ? 16 : 0);
            }
        }
    }
};
// --8<-- [end:tiles]

// --8<-- [start:flash]
template <int D, int MT, int BK, bool LONG_FIRST = true>
__device__ __forceinline__ void flash_body(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                           const bf16* __restrict__ V, bf16* __restrict__ O,
                                           int S, float scale_log2, bool causal)
{
    constexpr int WARPS = 4, THREADS = 32 * WARPS, BQ = 16 * MT * WARPS;
    constexpr int NT = BK / 8;            // n8 tiles of scores across a key tile
    constexpr int DT = D / 8;             // n8 tiles of O across the head dimension
    constexpr int ROW = 2 * D;            // bytes in a row of a tile
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t Qs = smem_addr(smem);                // BQ x D
    const uint32_t Ks = Qs + BQ * ROW;                  // 2 stages of BK x D
    const uint32_t Vs = Ks + 2 * BK * ROW;              // 2 stages of BK x D

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // Causal rows have as many keys as their index: block 0 takes the last
    // query tile, the longest, so that the short ones fill in at the end.
    const int q0 = (causal && LONG_FIRST ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BQ;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; V += head; O += head;
    // Key tiles this block needs: all, or (causal) up to its last query row.
    const int kv_end = causal ? min(S, q0 + BQ) : S;
    const int tiles = (kv_end + BK - 1) / BK;

    const TileCopy<D, BQ, THREADS> copy_q;
    const TileCopy<D, BK, THREADS> copy_kv;
    copy_q(Qs, Q, q0, S);
    copy_kv(Ks, K, 0, S);
    copy_kv(Vs, V, 0, S);
    cp_async_commit();

    // Where each lane points ldmatrix. Every row a lane names is 8 rows
    // (or a multiple) from row lane % 8, so its swizzle is ^ (lane % 8),
    // and the chunk's step k16 (two chunks, 32 bytes) along a row is an
    // exclusive or with 32 k of the offset below: no multiply in the loop.
    const int x = lane % 8;
    // Q (A operand): rows 16 (warp MT + i) + lane % 16, chunk 2 ks + lane / 16
    const uint32_t q_off = (warp * MT * 16 + lane % 16) * ROW + (((lane / 16) ^ x) * 16);
    // K (B operand, its rows are S's columns): rows 8 n + 8 (lane / 16) + x, chunk 2 ks + (lane / 8) % 2
    const uint32_t k_off = ((lane / 16) * 8 + x) * ROW + ((((lane / 8) % 2) ^ x) * 16);
    // V (B operand, .trans): rows 16 kk + 8 ((lane / 8) % 2) + x, chunk d + lane / 16
    const uint32_t v_off = (((lane / 8) % 2) * 8 + x) * ROW + (((lane / 16) ^ x) * 16);

    float o[MT][DT][4] = {};              // O: rows g, g+8 of each m16 tile, columns 2t, 2t+1
    float m[MT][2], l[MT][2];             // running max (raw score) and sum of each of those rows
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) { m[i][h] = -INFINITY; l[i][h] = 0.0f; }

    for (int j = 0; j < tiles; ++j) {
        const int st = j & 1;
        if (j + 1 < tiles) {                            // the next tile into the other stage
            copy_kv(Ks + (st ^ 1) * BK * ROW, K, (j + 1) * BK, S);
            copy_kv(Vs + (st ^ 1) * BK * ROW, V, (j + 1) * BK, S);
            cp_async_commit();
            cp_async_wait<1>();                         // this tile (and Q) have landed
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint32_t Kt = Ks + st * BK * ROW, Vt = Vs + st * BK * ROW;

        // S = Q K^T for this warp's 16 MT rows and the tile's BK keys.
        float s[MT][NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t a[MT][4];
            const uint32_t qa = Qs + (q_off ^ (32 * ks)), ka = Kt + (k_off ^ (32 * ks));
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldmatrix_x4(a[i], qa + i * 16 * ROW);
#pragma unroll
            for (int n = 0; n < NT; n += 2) {           // K rows are S's columns: no .trans
                uint32_t b[4];
                ldmatrix_x4(b, ka + n * 8 * ROW);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma_bf16(s[i][n], a[i], b[0], b[1]);
                    mma_bf16(s[i][n + 1], a[i], b[2], b[3]);
                }
            }
        }

        // Keys past S, and (causal) keys after the query, score -infinity.
        // Only the last tile and the tiles the diagonal crosses have any:
        // the others skip this loop whole.
        const int k0 = j * BK;
        if (k0 + BK > S || (causal && k0 + BK - 1 > q0)) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = q0 + (warp * MT + i) * 16 + g + 8 * h;
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int key = k0 + n * 8 + 2 * t + e;
                            if (key >= S || (causal && key > row)) s[i][n][2 * h + e] = -INFINITY;
                        }
                }
        }

        // The online softmax, on the accumulators. Each row is spread over
        // the 4 lanes of a quad (t = 0..3): max and sum need 2 shuffles.
        // The maximum is taken of the raw scores (the scale is positive),
        // and each weight costs one FMA and one ex2: 2^(s c - m c).
        float rescale[MT][2];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {               // rows g (h = 0) and g + 8 (h = 1)
                float mx = m[i][h];
#pragma unroll
                for (int n = 0; n < NT; ++n)
                    mx = fmaxf(mx, fmaxf(s[i][n][2 * h], s[i][n][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row with every key so far masked keeps mx = -inf: use 0
                // so that 2^(-inf - 0) = 0 instead of 2^(-inf + inf) = NaN.
                const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;
                rescale[i][h] = mx == m[i][h] ? 1.0f : exp2_approx(m[i][h] * scale_log2 - base);
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = exp2_approx(fmaf(s[i][n][2 * h + e], scale_log2, -base));
                        s[i][n][2 * h + e] = p;
                        sum += p;
                    }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                l[i][h] = l[i][h] * rescale[i][h] + sum;
                m[i][h] = mx;
#pragma unroll
                for (int d = 0; d < DT; ++d) {
                    o[i][d][2 * h] *= rescale[i][h];
                    o[i][d][2 * h + 1] *= rescale[i][h];
                }
            }
        }

        // O += P V. Two neighbouring n8 tiles of P's accumulators are, as
        // they stand, the A fragment of one k16 step: rounded to bf16 pairs,
        // they go straight back into the tensor cores.
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                a[i][0] = pack_bf16(s[i][2 * kk][0], s[i][2 * kk][1]);
                a[i][1] = pack_bf16(s[i][2 * kk][2], s[i][2 * kk][3]);
                a[i][2] = pack_bf16(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
                a[i][3] = pack_bf16(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
            }
            const uint32_t va = Vt + kk * 16 * ROW;
#pragma unroll
            for (int d = 0; d < DT; d += 2) {           // V is k-major: .trans
                uint32_t b[4];
                ldmatrix_x4_trans(b, va + (v_off ^ (16 * d)));
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma_bf16(o[i][d], a[i], b[0], b[1]);
                    mma_bf16(o[i][d + 1], a[i], b[2], b[3]);
                }
            }
        }
        __syncthreads();                                // before the next copy overwrites st
    }

    // O / l, rounded to bf16, two neighbouring columns a store.
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q0 + (warp * MT + i) * 16 + g + 8 * h;
            if (row >= S) continue;
            const float inv = 1.0f / l[i][h];
            uint32_t* out = reinterpret_cast<uint32_t*>(O + (size_t)row * D + 2 * t);
#pragma unroll
            for (int d = 0; d < DT; ++d)
                out[d * 4] = pack_bf16(o[i][d][2 * h] * inv, o[i][d][2 * h + 1] * inv);
        }
}
// --8<-- [end:flash]

#define FLASH(D, MT, BK)                                                                      \
    extern "C" __global__ __launch_bounds__(128) void                                         \
    flash_d##D##_m##MT##_n##BK(const bf16* __restrict__ Q, const bf16* __restrict__ K,        \
                               const bf16* __restrict__ V, bf16* __restrict__ O, int S,       \
                               float scale_log2, int causal)                                  \
    {                                                                                         \
        flash_body<D, MT, BK>(Q, K, V, O, S, scale_log2, causal != 0);                        \
    }

FLASH(64, 1, 64)
FLASH(64, 2, 64)
FLASH(128, 1, 64)
FLASH(128, 2, 32)
FLASH(128, 2, 64)
