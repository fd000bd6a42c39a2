// Attention backward, FlashAttention-2's way, on mma.sync in bf16 (draft for
// Part IV, "Attention backward"). Not yet run on a GPU.
//
// Forward (chapter 16): O = softmax(Q K^T / sqrt(D)) V per (batch, head),
// Q, K, V, O, dO all B x H x S x D bf16. With c = log2(e) / sqrt(D) and the
// forward's row statistics kept as lse2[i] = c m_i + log2(l_i) (so that
// P_ij = 2^(c S_ij - lse2[i])), the gradients are
//   delta_i = sum_d dO_id O_id                         (attn_bwd_delta)
//   dV = P^T dO,  dP = dO V^T,  dS = P o (dP - delta),
//   dQ = dS K / sqrt(D),  dK = dS^T Q / sqrt(D).
// attn_bwd_kv: one block of 4 warps owns BK = 64 keys (16 a warp, as the
// rows of its mma tiles) and walks the query tiles, BQ = 64 queries at a
// time (causal: only those at or after its first key). For each it
// recomputes S^T = K Q^T and P^T, then accumulates dV and dK in registers,
// and hands dS to dQ. Two ways to get dQ:
//   ATOMIC  the block adds its dS K to a float32 dQ buffer with atomicAdd
//           (every key block adds to every query row it sees);
//   PASS    attn_bwd_kv_nodq leaves dQ alone, and attn_bwd_dq walks the
//           keys for each query tile, recomputing S and dP, and keeps dQ
//           in registers: no atomics, the same bits every run.
// attn_bwd_dq_cast: dQ from the float32 buffer, times 1 / sqrt(D), to bf16.
// attn_lse: the forward's row statistics, recomputed (Q K^T and the online
// maximum and sum, no P V): the book's forward kernel does not store them.

#include "../../../../code/attention/flash_bf16.cu"

// --8<-- [start:delta]
// delta[row] = sum_d dO[row, d] O[row, d], one warp a row, float32.
template <int D>
__device__ __forceinline__ void delta_body(const bf16* __restrict__ dO, const bf16* __restrict__ O,
                                           float* __restrict__ delta, long long rows)
{
    const long long row = blockIdx.x * 4LL + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (int d = 2 * lane; d < D; d += 64) {
        const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(dO + row * D + d);
        const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(O + row * D + d);
        s = fmaf(__low2float(a), __low2float(b), s);
        s = fmaf(__high2float(a), __high2float(b), s);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) delta[row] = s;
}
// --8<-- [end:delta]

// The forward's row statistics: lse2[row] = c m + log2(l), by the forward's
// own loop (S = Q K^T and the online max and sum), without P V.
template <int D>
__device__ __forceinline__ void lse_body(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                         float* __restrict__ lse2, int S, float c, bool causal)
{
    constexpr int BK = 64, THREADS = 128, BQ = 64, NT = BK / 8, ROW = 2 * D;
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t Qs = smem_addr(smem), Ks = Qs + BQ * ROW;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, x = lane % 8;
    const int q0 = blockIdx.x * BQ;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; lse2 += (size_t)blockIdx.y * S;
    const int kv_end = causal ? min(S, q0 + BQ) : S;
    const TileCopy<D, BQ, THREADS> copy_q;
    const TileCopy<D, BK, THREADS> copy_k;
    copy_q(Qs, Q, q0, S);
    cp_async_commit();
    const uint32_t q_off = (warp * 16 + lane % 16) * ROW + (((lane / 16) ^ x) * 16);
    const uint32_t k_off = ((lane / 16) * 8 + x) * ROW + ((((lane / 8) % 2) ^ x) * 16);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int k0 = 0; k0 < kv_end; k0 += BK) {
        copy_k(Ks, K, k0, S);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        float s[NT][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t a[4];
            ldmatrix_x4(a, Qs + (q_off ^ (32 * ks)));
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, Ks + (k_off ^ (32 * ks)) + n * 8 * ROW);
                mma_bf16(s[n], a, b[0], b[1]);
                mma_bf16(s[n + 1], a, b[2], b[3]);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q0 + warp * 16 + g + 8 * h;
            float mx = m[h];
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int key = k0 + n * 8 + 2 * t + e;
                    if (key >= S || (causal && key > row)) s[n][2 * h + e] = -INFINITY;
                    mx = fmaxf(mx, s[n][2 * h + e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float base = mx == -INFINITY ? 0.0f : mx * c;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) sum += exp2f(fmaf(s[n][2 * h + e], c, -base));
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l[h] = l[h] * (mx == m[h] ? 1.0f : exp2f(m[h] * c - base)) + sum;
            m[h] = mx;
        }
        __syncthreads();
    }
    if (t == 0)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q0 + warp * 16 + g + 8 * h;
            if (row < S) lse2[row] = m[h] * c + log2f(l[h]);
        }
}

// --8<-- [start:kv]
template <int D, bool ATOMIC_DQ>
__device__ __forceinline__ void bwd_kv_body(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                            const bf16* __restrict__ V, const bf16* __restrict__ dO,
                                            const float* __restrict__ lse2, const float* __restrict__ delta,
                                            float* __restrict__ dQacc, bf16* __restrict__ dK,
                                            bf16* __restrict__ dV, int S, float c, float scale, bool causal)
{
    constexpr int THREADS = 128, BK = 64, BQ = 64, NQ = BQ / 8, DT = D / 8, ROW = 2 * D;
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t Ks = smem_addr(smem);        // BK x D, the block's keys, loaded once
    const uint32_t Vs = Ks + BK * ROW;          // BK x D, their values
    const uint32_t Qs = Vs + BK * ROW;          // BQ x D, this query tile
    const uint32_t dOs = Qs + BQ * ROW;         // BQ x D, its output gradients
    const uint32_t dSs = dOs + BQ * ROW;        // BK x BQ bf16: dS^T, for dQ
    float* stats = reinterpret_cast<float*>(smem + (2 * BK + 2 * BQ) * ROW + BK * BQ * 2);   // lse2, delta

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, x = lane % 8;
    const int k0 = blockIdx.x * BK;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; V += head; dO += head; dK += head; dV += head;
    if constexpr (ATOMIC_DQ) dQacc += head;     // the other way passes no buffer
    lse2 += (size_t)blockIdx.y * S; delta += (size_t)blockIdx.y * S;

    const TileCopy<D, BK, THREADS> copy_kv;
    const TileCopy<D, BQ, THREADS> copy_q;
    copy_kv(Ks, K, k0, S);
    copy_kv(Vs, V, k0, S);
    cp_async_commit();

    // ldmatrix addresses (see flash_body): as A operands, the warp's 16 key
    // rows of K and V; as non-.trans B operands (rows = n), Q and dO rows;
    // as .trans B operands (rows = k), Q and dO rows again, and K rows.
    const uint32_t a_off = (warp * 16 + lane % 16) * ROW + (((lane / 16) ^ x) * 16);
    const uint32_t bn_off = ((lane / 16) * 8 + x) * ROW + ((((lane / 8) % 2) ^ x) * 16);
    const uint32_t bk_off = (((lane / 8) % 2) * 8 + x) * ROW + (((lane / 16) ^ x) * 16);

    float dv[DT][4] = {}, dk[DT][4] = {};       // the warp's 16 keys x D, accumulators
    const int q_first = causal ? (k0 / BQ) * BQ : 0;   // query tiles before the keys see none of them
    for (int q0 = q_first; q0 < S; q0 += BQ) {
        copy_q(Qs, Q, q0, S);
        copy_q(dOs, dO, q0, S);
        cp_async_commit();
        for (int i = threadIdx.x; i < BQ; i += THREADS) {
            stats[i] = q0 + i < S ? lse2[q0 + i] : 0.0f;
            stats[BQ + i] = q0 + i < S ? delta[q0 + i] : 0.0f;
        }
        cp_async_wait<0>();
        __syncthreads();

        // S^T (16 keys x BQ queries) = K Q^T; dP^T = V dO^T, the same shape.
        float s[NQ][4] = {}, dp[NQ][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t ak[4], av[4];
            ldmatrix_x4(ak, Ks + (a_off ^ (32 * ks)));
            ldmatrix_x4(av, Vs + (a_off ^ (32 * ks)));
#pragma unroll
            for (int n = 0; n < NQ; n += 2) {
                uint32_t bq[4], bo[4];
                ldmatrix_x4(bq, Qs + (bn_off ^ (32 * ks)) + n * 8 * ROW);
                ldmatrix_x4(bo, dOs + (bn_off ^ (32 * ks)) + n * 8 * ROW);
                mma_bf16(s[n], ak, bq[0], bq[1]);
                mma_bf16(s[n + 1], ak, bq[2], bq[3]);
                mma_bf16(dp[n], av, bo[0], bo[1]);
                mma_bf16(dp[n + 1], av, bo[2], bo[3]);
            }
        }
        // P^T and dS^T in place: row = key (g, g + 8), column = query (2t, 2t + 1).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int key = k0 + warp * 16 + g + 8 * h;
#pragma unroll
            for (int n = 0; n < NQ; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int qi = n * 8 + 2 * t + e, query = q0 + qi;
                    const bool masked = key >= S || query >= S || (causal && key > query);
                    const float p = masked ? 0.0f : exp2f(fmaf(s[n][2 * h + e], c, -stats[qi]));
                    s[n][2 * h + e] = p;                                         // P^T
                    dp[n][2 * h + e] = p * (dp[n][2 * h + e] - stats[BQ + qi]);  // dS^T
                }
        }
        // dV += P^T dO and dK += dS^T Q: A from the accumulators (as the
        // forward's P V), B the dO and Q tiles, k-major (.trans).
#pragma unroll
        for (int kk = 0; kk < BQ / 16; ++kk) {
            uint32_t ap[4], as[4];
            ap[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            ap[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            ap[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            ap[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            as[0] = pack_bf16(dp[2 * kk][0], dp[2 * kk][1]);
            as[1] = pack_bf16(dp[2 * kk][2], dp[2 * kk][3]);
            as[2] = pack_bf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            as[3] = pack_bf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
            for (int d = 0; d < DT; d += 2) {
                uint32_t bo[4], bq[4];
                ldmatrix_x4_trans(bo, dOs + kk * 16 * ROW + (bk_off ^ (16 * d)));
                ldmatrix_x4_trans(bq, Qs + kk * 16 * ROW + (bk_off ^ (16 * d)));
                mma_bf16(dv[d], ap, bo[0], bo[1]);
                mma_bf16(dv[d + 1], ap, bo[2], bo[3]);
                mma_bf16(dk[d], as, bq[0], bq[1]);
                mma_bf16(dk[d + 1], as, bq[2], bq[3]);
            }
            // dS^T to shared memory for dQ: this warp's 16 key rows, the
            // k16 step's 16 query columns, swizzled as a BK x BQ tile.
            if constexpr (ATOMIC_DQ)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * 16 + g + 8 * h;
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int col = kk * 16 + half * 8 + 2 * t;
                    const uint32_t addr = dSs + 2 * swz<BQ>(r, col / 8) + 2 * (col % 8);
                    const uint32_t v = h == 0 ? as[2 * half] : as[2 * half + 1];
                    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
                }
            }
        }
        __syncthreads();
        if constexpr (ATOMIC_DQ)
        // dQ (BQ x D) += dS (BQ x BK) K (BK x D): warp w takes queries
        // 16 w .. 16 w + 15. A = dS, read from dS^T with .trans; B = K,
        // k-major (.trans). Added to the float32 buffer with atomics.
        {
            float dq[DT][4] = {};
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                // A fragment of dS rows 16 w .. (queries), columns 16 kk .. (keys):
                // dS^T's rows 16 kk .. and columns 16 w .., transposed on load.
                uint32_t a[4];
                const int r = kk * 16 + (lane / 16) * 8 + x, chunk = warp * 2 + (lane / 8) % 2;
                ldmatrix_x4_trans(a, dSs + 2 * swz<BQ>(r, chunk));
#pragma unroll
                for (int d = 0; d < DT; d += 2) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, Ks + kk * 16 * ROW + (bk_off ^ (16 * d)));
                    mma_bf16(dq[d], a, b[0], b[1]);
                    mma_bf16(dq[d + 1], a, b[2], b[3]);
                }
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int query = q0 + warp * 16 + g + 8 * h;
                if (query >= S) continue;
                float* row = dQacc + (size_t)query * D + 2 * t;
#pragma unroll
                for (int d = 0; d < DT; ++d) {
                    atomicAdd(row + 8 * d, dq[d][2 * h]);
                    atomicAdd(row + 8 * d + 1, dq[d][2 * h + 1]);
                }
            }
        }
        __syncthreads();                        // before the next tile overwrites Q, dO, dS^T
    }
    // dK (times 1 / sqrt(D)) and dV, rounded to bf16.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = k0 + warp * 16 + g + 8 * h;
        if (key >= S) continue;
        uint32_t* outk = reinterpret_cast<uint32_t*>(dK + (size_t)key * D + 2 * t);
        uint32_t* outv = reinterpret_cast<uint32_t*>(dV + (size_t)key * D + 2 * t);
#pragma unroll
        for (int d = 0; d < DT; ++d) {
            outk[d * 4] = pack_bf16(dk[d][2 * h] * scale, dk[d][2 * h + 1] * scale);
            outv[d * 4] = pack_bf16(dv[d][2 * h], dv[d][2 * h + 1]);
        }
    }
}
// --8<-- [end:kv]

// --8<-- [start:dq]
// dQ without atomics: a block per 64 queries walks the key tiles, as the
// forward does, recomputes S = Q K^T, P and dP = dO V^T, and keeps
// dQ += dS K in registers. It repeats two of the five products of
// attn_bwd_kv, in return for a dQ with the same bits every run.
template <int D>
__device__ __forceinline__ void bwd_dq_body(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                            const bf16* __restrict__ V, const bf16* __restrict__ dO,
                                            const float* __restrict__ lse2, const float* __restrict__ delta,
                                            bf16* __restrict__ dQ, int S, float c, float scale, bool causal)
{
    constexpr int THREADS = 128, BK = 64, BQ = 64, NT = BK / 8, DT = D / 8, ROW = 2 * D;
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t Qs = smem_addr(smem);        // BQ x D, the block's queries, loaded once
    const uint32_t dOs = Qs + BQ * ROW;         // BQ x D, their output gradients
    const uint32_t Ks = dOs + BQ * ROW;         // BK x D, this key tile
    const uint32_t Vs = Ks + BK * ROW;          // BK x D, its values
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, x = lane % 8;
    const int q0 = blockIdx.x * BQ;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; V += head; dO += head; dQ += head;
    lse2 += (size_t)blockIdx.y * S; delta += (size_t)blockIdx.y * S;
    const TileCopy<D, BQ, THREADS> copy_q;
    const TileCopy<D, BK, THREADS> copy_kv;
    copy_q(Qs, Q, q0, S);
    copy_q(dOs, dO, q0, S);
    cp_async_commit();
    const uint32_t a_off = (warp * 16 + lane % 16) * ROW + (((lane / 16) ^ x) * 16);
    const uint32_t bn_off = ((lane / 16) * 8 + x) * ROW + ((((lane / 8) % 2) ^ x) * 16);
    const uint32_t bk_off = (((lane / 8) % 2) * 8 + x) * ROW + (((lane / 16) ^ x) * 16);
    float lse[2], dl[2];                        // the statistics of this lane's two rows
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = q0 + warp * 16 + g + 8 * h;
        lse[h] = row < S ? lse2[row] : 0.0f;
        dl[h] = row < S ? delta[row] : 0.0f;
    }
    float dq[DT][4] = {};
    const int kv_end = causal ? min(S, q0 + BQ) : S;
    for (int k0 = 0; k0 < kv_end; k0 += BK) {
        copy_kv(Ks, K, k0, S);
        copy_kv(Vs, V, k0, S);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        float s[NT][4] = {}, dp[NT][4] = {};    // S = Q K^T and dP = dO V^T, rows = queries
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t aq[4], ao[4];
            ldmatrix_x4(aq, Qs + (a_off ^ (32 * ks)));
            ldmatrix_x4(ao, dOs + (a_off ^ (32 * ks)));
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                uint32_t bk[4], bv[4];
                ldmatrix_x4(bk, Ks + (bn_off ^ (32 * ks)) + n * 8 * ROW);
                ldmatrix_x4(bv, Vs + (bn_off ^ (32 * ks)) + n * 8 * ROW);
                mma_bf16(s[n], aq, bk[0], bk[1]);
                mma_bf16(s[n + 1], aq, bk[2], bk[3]);
                mma_bf16(dp[n], ao, bv[0], bv[1]);
                mma_bf16(dp[n + 1], ao, bv[2], bv[3]);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int query = q0 + warp * 16 + g + 8 * h;
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int key = k0 + n * 8 + 2 * t + e;
                    const bool masked = key >= S || query >= S || (causal && key > query);
                    const float p = masked ? 0.0f : exp2f(fmaf(s[n][2 * h + e], c, -lse[h]));
                    dp[n][2 * h + e] = p * (dp[n][2 * h + e] - dl[h]);            // dS
                }
        }
        // dQ += dS K: A = dS from the accumulators, B = K, k-major (.trans).
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t a[4];
            a[0] = pack_bf16(dp[2 * kk][0], dp[2 * kk][1]);
            a[1] = pack_bf16(dp[2 * kk][2], dp[2 * kk][3]);
            a[2] = pack_bf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            a[3] = pack_bf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
            for (int d = 0; d < DT; d += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, Ks + kk * 16 * ROW + (bk_off ^ (16 * d)));
                mma_bf16(dq[d], a, b[0], b[1]);
                mma_bf16(dq[d + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();                        // before the next tile overwrites K and V
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int query = q0 + warp * 16 + g + 8 * h;
        if (query >= S) continue;
        uint32_t* out = reinterpret_cast<uint32_t*>(dQ + (size_t)query * D + 2 * t);
#pragma unroll
        for (int d = 0; d < DT; ++d) out[d * 4] = pack_bf16(dq[d][2 * h] * scale, dq[d][2 * h + 1] * scale);
    }
}
// --8<-- [end:dq]

#define BWD(D)                                                                                      \
    extern "C" __global__ __launch_bounds__(128) void attn_bwd_delta_d##D(                          \
        const bf16* dO, const bf16* O, float* delta, long long rows)                                \
    {                                                                                               \
        delta_body<D>(dO, O, delta, rows);                                                          \
    }                                                                                               \
    extern "C" __global__ __launch_bounds__(128) void attn_lse_d##D(                                \
        const bf16* Q, const bf16* K, float* lse2, int S, float c, int causal)                      \
    {                                                                                               \
        lse_body<D>(Q, K, lse2, S, c, causal != 0);                                                 \
    }                                                                                               \
    extern "C" __global__ __launch_bounds__(128) void attn_bwd_kv_d##D(                             \
        const bf16* Q, const bf16* K, const bf16* V, const bf16* dO, const float* lse2,             \
        const float* delta, float* dQacc, bf16* dK, bf16* dV, int S, float c, float scale,          \
        int causal)                                                                                 \
    {                                                                                               \
        bwd_kv_body<D, true>(Q, K, V, dO, lse2, delta, dQacc, dK, dV, S, c, scale, causal != 0);    \
    }                                                                                               \
    extern "C" __global__ __launch_bounds__(128) void attn_bwd_kv_nodq_d##D(                        \
        const bf16* Q, const bf16* K, const bf16* V, const bf16* dO, const float* lse2,             \
        const float* delta, bf16* dK, bf16* dV, int S, float c, float scale, int causal)            \
    {                                                                                               \
        bwd_kv_body<D, false>(Q, K, V, dO, lse2, delta, nullptr, dK, dV, S, c, scale, causal != 0); \
    }                                                                                               \
    extern "C" __global__ __launch_bounds__(128) void attn_bwd_dq_d##D(                             \
        const bf16* Q, const bf16* K, const bf16* V, const bf16* dO, const float* lse2,             \
        const float* delta, bf16* dQ, int S, float c, float scale, int causal)                      \
    {                                                                                               \
        bwd_dq_body<D>(Q, K, V, dO, lse2, delta, dQ, S, c, scale, causal != 0);                     \
    }

BWD(64)
BWD(128)

// dQ = dQacc / sqrt(D), to bf16, two values a thread.
extern "C" __global__ void attn_bwd_dq_cast(const float* __restrict__ dQacc, bf16* __restrict__ dQ,
                                            long long n, float scale)
{
    const long long i = 2 * (blockIdx.x * (long long)blockDim.x + threadIdx.x);
    if (i + 1 < n) {
        *reinterpret_cast<uint32_t*>(dQ + i) = pack_bf16(dQacc[i] * scale, dQacc[i + 1] * scale);
    } else if (i < n) {
        dQ[i] = __float2bfloat16_rn(dQacc[i] * scale);
    }
}
