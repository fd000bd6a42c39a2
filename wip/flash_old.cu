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

// Rows row0 .. row0 + ROWS - 1 of an S x D matrix into a tile, by cp.async;
// rows past S are filled with zeros (0 bytes copied from a valid address).
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* __restrict__ X, int row0, int S)
{
    constexpr int CHUNKS = D / 8;
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += THREADS) {
        const int r = i / CHUNKS, c = i % CHUNKS;
        const bool inside = row0 + r < S;
        cp_async16(smem_addr(tile + swz<D>(r, c)),
                   inside ? X + (size_t)(row0 + r) * D + c * 8 : X, inside ? 16 : 0);
    }
}
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
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* Qs = reinterpret_cast<bf16*>(smem);           // BQ x D
    bf16* Ks = Qs + BQ * D;                             // 2 stages of BK x D
    bf16* Vs = Ks + 2 * BK * D;                         // 2 stages of BK x D

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // Causal rows have as many keys as their index: block 0 takes the last
    // query tile, the longest, so that the short ones fill in at the end.
    const int q0 = (causal && LONG_FIRST ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BQ;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; V += head; O += head;
    // Key tiles this block needs: all, or (causal) up to its last query row.
    const int kv_end = causal ? min(S, q0 + BQ) : S;
    const int tiles = (kv_end + BK - 1) / BK;

    load_tile<D, BQ, THREADS>(Qs, Q, q0, S);
    load_tile<D, BK, THREADS>(Ks, K, 0, S);
    load_tile<D, BK, THREADS>(Vs, V, 0, S);
    cp_async_commit();

    float o[MT][DT][4] = {};              // O: rows g, g+8 of each m16 tile, columns 2t, 2t+1
    float m[MT][2], l[MT][2];             // running max (raw score) and sum of each of those rows
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) { m[i][h] = -INFINITY; l[i][h] = 0.0f; }

    for (int j = 0; j < tiles; ++j) {
        const int st = j & 1;
        if (j + 1 < tiles) {                            // the next tile into the other stage
            load_tile<D, BK, THREADS>(Ks + (st ^ 1) * BK * D, K, (j + 1) * BK, S);
            load_tile<D, BK, THREADS>(Vs + (st ^ 1) * BK * D, V, (j + 1) * BK, S);
            cp_async_commit();
            cp_async_wait<1>();                         // this tile (and Q) have landed
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16* Kt = Ks + st * BK * D;
        const bf16* Vt = Vs + st * BK * D;

        // S = Q K^T for this warp's 16 MT rows and the tile's BK keys.
        float s[MT][NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldmatrix_x4(a[i], smem_addr(Qs + swz<D>((warp * MT + i) * 16 + lane % 16,
                                                        2 * ks + lane / 16)));
#pragma unroll
            for (int n = 0; n < NT; n += 2) {           // K rows are S's columns: no .trans
                uint32_t b[4];
                ldmatrix_x4(b, smem_addr(Kt + swz<D>(n * 8 + (lane / 16) * 8 + lane % 8,
                                                     2 * ks + (lane / 8) % 2)));
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma_bf16(s[i][n], a[i], b[0], b[1]);
                    mma_bf16(s[i][n + 1], a[i], b[2], b[3]);
                }
            }
        }

        // The online softmax, on the accumulators. Each row is spread over
        // the 4 lanes of a quad (t = 0..3): max and sum need 2 shuffles.
        // The maximum is taken of the raw scores (the scale is positive),
        // and each weight costs one FMA and one ex2: 2^(s c - m c).
        const int k0 = j * BK;
        const bool edge = k0 + BK > S || (causal && k0 + BK > q0);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {               // rows g (h = 0) and g + 8 (h = 1)
                const int row = q0 + (warp * MT + i) * 16 + g + 8 * h;
                float mx = m[i][h];
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int key = k0 + n * 8 + 2 * t + e;
                        if (edge && (key >= S || (causal && key > row))) s[i][n][2 * h + e] = -INFINITY;
                        mx = fmaxf(mx, s[i][n][2 * h + e]);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row with every key so far masked keeps mx = -inf: use 0
                // so that 2^(-inf - 0) = 0 instead of 2^(-inf + inf) = NaN.
                const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;
                const float rescale = exp2_approx(m[i][h] * scale_log2 - base);
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
                l[i][h] = l[i][h] * rescale + sum;
                m[i][h] = mx;
#pragma unroll
                for (int d = 0; d < DT; ++d) {
                    o[i][d][2 * h] *= rescale;
                    o[i][d][2 * h + 1] *= rescale;
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
#pragma unroll
            for (int d = 0; d < DT; d += 2) {           // V is k-major: .trans
                uint32_t b[4];
                ldmatrix_x4_trans(b, smem_addr(Vt + swz<D>(kk * 16 + (lane / 8) % 2 * 8 + lane % 8,
                                                           d + lane / 16)));
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma_bf16(o[i][d], a[i], b[0], b[1]);
                    mma_bf16(o[i][d + 1], a[i], b[2], b[3]);
                }
            }
        }
        __syncthreads();                                // before the next load overwrites st
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
    extern "C" __global__ void __launch_bounds__(128)                                         \
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
