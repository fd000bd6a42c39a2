// The small kernels a training step needs between the book's big ones
// (draft for Part IV, "A training step, end to end"; not yet run on a GPU).
//
// training_step.py names every launch of the step. Most are kernels the
// book has: the products (chapters 12, 17, 18), LayerNorm (14), attention
// and its backward (16, 19), the loss, the bias's and the embedding's
// gradients (18), AdamW. These are the rest, in bf16 with float32
// arithmetic, as the step keeps its activations:
//   split_heads        dY of attention's output, rows (B T, H D) to heads
//                      (B, H, T, D): the inverse of chapter 17's merge_heads.
//   merge_qkv_grad     dQ, dK, dV (each B, H, T, D) into one (B T, 3 H D)
//                      matrix, the gradient c_attn's backward products read.
//   gelu_forward       hid = gelu(pre): c_fc writes pre with its bias tail
//                      and this makes the GELU's output, so that pre is
//                      kept for the backward pass (a fused tail that
//                      writes both would save this pass).
//   layernorm_bwd_add  LayerNorm's backward for bf16 rows, dx added in
//                      place into the residual stream's gradient, and each
//                      block's share of dgamma and dbeta (float32), which
//                      chapter 14's column_sum_f32 adds in order.
//   add_bf16_to_f32    dst += src, the tied embedding's two halves.
//   bf16_to_f32        the residual gradient for the embedding's backward,
//                      which reads float32; f32_to_bf16 the other way, for
//                      the float32 gradients into AdamW's bf16 buffer.
//   embed_forward      x = wte[tok] + wpe[t], the first layer.

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// --8<-- [start:heads]
// y (B T, H D) -> o (B, H, T, D), 8 elements (16 bytes) a thread.
extern "C" __global__ void split_heads(const bf16* __restrict__ y, bf16* __restrict__ o,
                                       int B, int H, int T, int D)
{
    const int n8 = B * H * T * D / 8;                   // the host keeps B H T D below 2^31
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
        const int e = 8 * i;                            // element of y: (b T + t) H D + h D + d
        const int d = e % D, hd = e / D;
        const int h = hd % H, bt = hd / H;
        const int t = bt % T, b = bt / T;
        *reinterpret_cast<uint4*>(o + ((size_t)(b * H + h) * T + t) * D + d) =
            *reinterpret_cast<const uint4*>(y + e);
    }
}

// dq, dk, dv (B, H, T, D) -> dqkv (B T, 3 H D): columns [0, C) from dq,
// [C, 2C) from dk, [2C, 3C) from dv, C = H D (c_attn's column order).
extern "C" __global__ void merge_qkv_grad(const bf16* __restrict__ dq, const bf16* __restrict__ dk,
                                          const bf16* __restrict__ dv, bf16* __restrict__ dqkv,
                                          int B, int H, int T, int D)
{
    const int C = H * D, n8 = B * T * 3 * C / 8;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
        const int e = 8 * i;                            // element of dqkv: bt 3C + which C + h D + d
        const int col = e % (3 * C), bt = e / (3 * C);
        const int which = col / C, hd = col % C;
        const int h = hd / D, d = hd % D, t = bt % T, b = bt / T;
        const bf16* src = which == 0 ? dq : which == 1 ? dk : dv;
        *reinterpret_cast<uint4*>(dqkv + e) =
            *reinterpret_cast<const uint4*>(src + ((size_t)(b * H + h) * T + t) * D + d);
    }
}
// --8<-- [end:heads]

__device__ __forceinline__ float gelu_tanh(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void gelu_forward(const bf16* __restrict__ pre, bf16* __restrict__ hid, long long n8)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8;
         i += (long long)gridDim.x * blockDim.x) {
        uint4 p = reinterpret_cast<const uint4*>(pre)[i];
        __nv_bfloat162* v = reinterpret_cast<__nv_bfloat162*>(&p);
#pragma unroll
        for (int k = 0; k < 4; ++k)
            v[k] = __floats2bfloat162_rn(gelu_tanh(__low2float(v[k])), gelu_tanh(__high2float(v[k])));
        reinterpret_cast<uint4*>(hid)[i] = p;
    }
}

// --8<-- [start:ln_bwd]
// One warp a row; lane l holds columns 8 l + 256 j (j < C / 256), 8 at a
// time, so C must be a multiple of 256 and at most 1024. With xhat =
// (x - mean) rstd and g = dy gamma, dx = rstd (g - mean(g) - xhat
// mean(g xhat)), added into dres. Each warp keeps its rows' dgamma = sum dy
// xhat and dbeta = sum dy in registers; the block adds its warps' shares in
// shared memory, in a fixed order, and writes them to its row of partials.
#define LN_WARPS 8

// J = C / 256 pieces of 8 a lane, a template parameter so that the arrays
// below stay in registers (layernorm_bwd_add_j1 .. _j4: C up to 1024).
template <int J>
__device__ __forceinline__ void ln_bwd_add(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                                           const bf16* __restrict__ gamma, const float* __restrict__ mean,
                                           const float* __restrict__ rstd, bf16* __restrict__ dres,
                                           float* __restrict__ dgamma_part, float* __restrict__ dbeta_part,
                                           int rows)
{
    constexpr int MAXJ = J, C = 256 * J;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float dg[MAXJ][8] = {}, db[MAXJ][8] = {};
    for (int row = blockIdx.x * LN_WARPS + warp; row < rows; row += gridDim.x * LN_WARPS) {
        const size_t off = (size_t)row * C;
        const float mu = mean[row], rs = rstd[row];
        float xh[MAXJ][8], g[MAXJ][8], sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int j = 0; j < MAXJ; ++j) {
            if (j >= J) break;
            const int c = 8 * lane + 256 * j;
            const uint4 rx = *reinterpret_cast<const uint4*>(x + off + c);
            const uint4 rd = *reinterpret_cast<const uint4*>(dy + off + c);
            const uint4 rg = *reinterpret_cast<const uint4*>(gamma + c);
            const bf16* ex = reinterpret_cast<const bf16*>(&rx);
            const bf16* ed = reinterpret_cast<const bf16*>(&rd);
            const bf16* eg = reinterpret_cast<const bf16*>(&rg);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const float d = __bfloat162float(ed[k]);
                xh[j][k] = (__bfloat162float(ex[k]) - mu) * rs;
                g[j][k] = d * __bfloat162float(eg[k]);
                sum_g += g[j][k];
                sum_gx += g[j][k] * xh[j][k];
                dg[j][k] += d * xh[j][k];
                db[j][k] += d;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            sum_g += __shfl_xor_sync(0xffffffffu, sum_g, o);
            sum_gx += __shfl_xor_sync(0xffffffffu, sum_gx, o);
        }
        const float mean_g = sum_g / C, mean_gx = sum_gx / C;
#pragma unroll
        for (int j = 0; j < MAXJ; ++j) {
            if (j >= J) break;
            const int c = 8 * lane + 256 * j;
            uint4 r = *reinterpret_cast<const uint4*>(dres + off + c);
            bf16* er = reinterpret_cast<bf16*>(&r);
#pragma unroll
            for (int k = 0; k < 8; ++k)
                er[k] = __float2bfloat16_rn(__bfloat162float(er[k]) + rs * (g[j][k] - mean_g - xh[j][k] * mean_gx));
            *reinterpret_cast<uint4*>(dres + off + c) = r;
        }
    }
    __shared__ float share[LN_WARPS][256];              // one j at a time: 8 KiB
#pragma unroll
    for (int j = 0; j < MAXJ; ++j) {
        if (j >= J) break;                              // J is the same in every thread
#pragma unroll
        for (int which = 0; which < 2; ++which) {
#pragma unroll
            for (int k = 0; k < 8; ++k) share[warp][8 * lane + k] = which ? db[j][k] : dg[j][k];
            __syncthreads();
            if (threadIdx.x < 256) {                    // the warps' shares, in order
                float s = 0.0f;
                for (int w = 0; w < LN_WARPS; ++w) s += share[w][threadIdx.x];
                (which ? dbeta_part : dgamma_part)[(size_t)blockIdx.x * C + 256 * j + threadIdx.x] = s;
            }
            __syncthreads();
        }
    }
}

#define LN_BWD(J)                                                                                        \
    extern "C" __global__ void __launch_bounds__(32 * LN_WARPS)                                         \
    layernorm_bwd_add_j##J(const bf16* __restrict__ dy, const bf16* __restrict__ x,                     \
                           const bf16* __restrict__ gamma, const float* __restrict__ mean,              \
                           const float* __restrict__ rstd, bf16* __restrict__ dres,                     \
                           float* __restrict__ dgamma_part, float* __restrict__ dbeta_part, int rows)   \
    {                                                                                                   \
        ln_bwd_add<J>(dy, x, gamma, mean, rstd, dres, dgamma_part, dbeta_part, rows);                   \
    }
LN_BWD(1)
LN_BWD(2)
LN_BWD(3)
LN_BWD(4)
// --8<-- [end:ln_bwd]

// x[b T + t] = wte[tok[b T + t]] + wpe[t], 8 channels a thread.
extern "C" __global__ void embed_forward(const int* __restrict__ tok, const bf16* __restrict__ wte,
                                         const bf16* __restrict__ wpe, bf16* __restrict__ x, int M, int T, int C)
{
    const int n8 = M * C / 8;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
        const int e = 8 * i, row = e / C, c = e % C;
        uint4 a = *reinterpret_cast<const uint4*>(wte + (size_t)tok[row] * C + c);
        const uint4 b = *reinterpret_cast<const uint4*>(wpe + (size_t)(row % T) * C + c);
        __nv_bfloat162* av = reinterpret_cast<__nv_bfloat162*>(&a);
        const __nv_bfloat162* bv = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
        for (int k = 0; k < 4; ++k) av[k] = __hadd2(av[k], bv[k]);
        *reinterpret_cast<uint4*>(x + e) = a;
    }
}

extern "C" __global__ void f32_to_bf16(const float* __restrict__ src, bf16* __restrict__ dst, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

extern "C" __global__ void add_bf16_to_f32(float* __restrict__ dst, const bf16* __restrict__ src, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] += __bfloat162float(src[i]);
}

extern "C" __global__ void bf16_to_f32(const bf16* __restrict__ src, float* __restrict__ dst, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}
