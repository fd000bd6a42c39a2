// Experiment (not a listing): variants of the chapter's kernel to time
// side by side before choosing what the listing keeps.
#include "../code/attention/flash_bf16.cu"

#define XFLASH(NAME, D, MT, BK, WARPS, LAZY, MINB)                                                  \
    extern "C" __global__ __launch_bounds__(32 * WARPS, MINB) void                                  \
    NAME(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,  \
         bf16* __restrict__ O, int S, float scale_log2, int causal)                           \
    {                                                                                         \
        flash_body<D, MT, BK, true, WARPS, LAZY>(Q, K, V, O, S, scale_log2, causal != 0);     \
    }

XFLASH(lazy_d64_m1_n64, 64, 1, 64, 4, true, 1)
XFLASH(lazy_d64_m2_n64, 64, 2, 64, 4, true, 1)
XFLASH(lazy_d128_m1_n64, 128, 1, 64, 4, true, 1)
XFLASH(lazy_d128_m2_n32, 128, 2, 32, 4, true, 1)
XFLASH(lazy_d128_m2_n64, 128, 2, 64, 4, true, 1)
XFLASH(w8_d64_m1_n64, 64, 1, 64, 8, false, 1)
XFLASH(w8_d128_m1_n64, 128, 1, 64, 8, false, 1)
XFLASH(w8lazy_d64_m1_n64, 64, 1, 64, 8, true, 1)
XFLASH(w8lazy_d128_m1_n64, 128, 1, 64, 8, true, 1)
XFLASH(w8lazy_d128_m1_n32, 128, 1, 32, 8, true, 1)
XFLASH(w8lazy_d64_m2_n64, 64, 2, 64, 8, true, 1)
XFLASH(lazy3_d64_m2_n64, 64, 2, 64, 4, true, 3)
XFLASH(w8lazy2_d128_m1_n64, 128, 1, 64, 8, true, 2)
XFLASH(w8lazy2_d128_m1_n32, 128, 1, 32, 8, true, 2)

// ---------------------------------------------------------------------------
// Pipelined: S for key tile j+1 is computed (its mma.sync issued) before the
// softmax of tile j, so the tensor cores have work while the warp does the
// exponentials. Loads: group T_j = {K_{j+1}, V_j} lands before iteration j;
// one barrier a tile.
template <int D, int MT, int BK, int WARPS>
__device__ __forceinline__ void flash_pipe(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                           const bf16* __restrict__ V, bf16* __restrict__ O,
                                           int S, float scale_log2, bool causal)
{
    constexpr int THREADS = 32 * WARPS, BQ = 16 * MT * WARPS, NT = BK / 8, DT = D / 8, ROW = 2 * D;
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t Qs = smem_addr(smem), Ks = Qs + BQ * ROW, Vs = Ks + 2 * BK * ROW;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int q0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BQ;
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; V += head; O += head;
    const int kv_end = causal ? min(S, q0 + BQ) : S;
    const int tiles = (kv_end + BK - 1) / BK;

    const TileCopy<D, BQ, THREADS> copy_q;
    const TileCopy<D, BK, THREADS> copy_kv;
    copy_q(Qs, Q, q0, S);
    copy_kv(Ks, K, 0, S);
    cp_async_commit();                                   // {Q, K_0}
    if (tiles > 1) copy_kv(Ks + BK * ROW, K, BK, S);
    copy_kv(Vs, V, 0, S);
    cp_async_commit();                                   // T_0 = {K_1, V_0}

    const int x = lane % 8;
    const uint32_t q_off = (warp * MT * 16 + lane % 16) * ROW + (((lane / 16) ^ x) * 16);
    const uint32_t k_off = ((lane / 16) * 8 + x) * ROW + ((((lane / 8) % 2) ^ x) * 16);
    const uint32_t v_off = (((lane / 8) % 2) * 8 + x) * ROW + (((lane / 16) ^ x) * 16);

    auto scores = [&](float (&s)[MT][NT][4], uint32_t Kt) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[i][n][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t a[MT][4];
            const uint32_t qa = Qs + (q_off ^ (32 * ks)), ka = Kt + (k_off ^ (32 * ks));
#pragma unroll
            for (int i = 0; i < MT; ++i) ldmatrix_x4(a[i], qa + i * 16 * ROW);
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, ka + n * 8 * ROW);
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma_bf16(s[i][n], a[i], b[0], b[1]);
                    mma_bf16(s[i][n + 1], a[i], b[2], b[3]);
                }
            }
        }
    };

    float o[MT][DT][4] = {};
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) { m[i][h] = -INFINITY; l[i][h] = 0.0f; }

    float s[MT][NT][4];
    cp_async_wait<1>();                                  // {Q, K_0} landed
    __syncthreads();
    scores(s, Ks);

    for (int j = 0; j < tiles; ++j) {
        cp_async_wait<0>();                              // T_j = {K_{j+1}, V_j} landed
        __syncthreads();                                 // ...for every thread; stages of j-1 free
        if (j + 1 < tiles) {                             // T_{j+1} = {K_{j+2}, V_{j+1}}
            if (j + 2 < tiles) copy_kv(Ks + (j & 1) * BK * ROW, K, (j + 2) * BK, S);
            copy_kv(Vs + ((j + 1) & 1) * BK * ROW, V, (j + 1) * BK, S);
        }
        cp_async_commit();
        float sn[MT][NT][4];
        if (j + 1 < tiles) scores(sn, Ks + ((j + 1) & 1) * BK * ROW);

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
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = m[i][h];
#pragma unroll
                for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[i][n][2 * h], s[i][n][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;
                const float r = mx == m[i][h] ? 1.0f : exp2_approx(m[i][h] * scale_log2 - base);
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
                l[i][h] = l[i][h] * r + sum;
                m[i][h] = mx;
#pragma unroll
                for (int d = 0; d < DT; ++d) {
                    o[i][d][2 * h] *= r;
                    o[i][d][2 * h + 1] *= r;
                }
            }
        const uint32_t Vt = Vs + (j & 1) * BK * ROW;
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
            for (int d = 0; d < DT; d += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, va + (v_off ^ (16 * d)));
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma_bf16(o[i][d], a[i], b[0], b[1]);
                    mma_bf16(o[i][d + 1], a[i], b[2], b[3]);
                }
            }
        }
        if (j + 1 < tiles) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[i][n][e] = sn[i][n][e];
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q0 + (warp * MT + i) * 16 + g + 8 * h;
            if (row >= S) continue;
            const float inv = 1.0f / l[i][h];
            uint32_t* out = reinterpret_cast<uint32_t*>(O + (size_t)row * D + 2 * t);
#pragma unroll
            for (int d = 0; d < DT; ++d) out[d * 4] = pack_bf16(o[i][d][2 * h] * inv, o[i][d][2 * h + 1] * inv);
        }
}

#define XPIPE(NAME, D, MT, BK, WARPS, MINB)                                                   \
    extern "C" __global__ __launch_bounds__(32 * WARPS, MINB) void                            \
    NAME(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,  \
         bf16* __restrict__ O, int S, float scale_log2, int causal)                           \
    {                                                                                         \
        flash_pipe<D, MT, BK, WARPS>(Q, K, V, O, S, scale_log2, causal != 0);                 \
    }

XPIPE(pipe_d64_m1_n64, 64, 1, 64, 4, 1)
XPIPE(pipe_d64_m2_n64, 64, 2, 64, 4, 1)
XPIPE(pipe_d64_m2_n32, 64, 2, 32, 4, 1)
XPIPE(pipe_d128_m1_n64, 128, 1, 64, 4, 1)
XPIPE(pipe_d128_m2_n32, 128, 2, 32, 4, 1)
XPIPE(w8pipe_d64_m1_n64, 64, 1, 64, 8, 1)
XPIPE(w8pipe_d128_m1_n32, 128, 1, 32, 8, 1)
