// Decoding's matrix products: a batch of 1 to 8 tokens times a weight
// matrix, bound by reading the weights (draft for Part V, "Serving a
// model"; not yet run on a GPU).
//
// y[b, n] = sum_k x[b, k] W[n, k] for b < B (B = 1 .. 8), W stored N x K
// row-major (PyTorch's nn.Linear layout: a row a output). Each weight is
// used B times, so at B = 1 every weight byte buys one multiply-add: the
// product is bound by how fast W streams from memory, and the target is a
// copy's bandwidth.
//
// One warp an output row (ROWS rows a block): lane l reads 16 bytes of the
// row at a time, 4 loads in flight, and keeps B sums; the warp adds its
// lanes' sums with shuffles and lane 0 writes the B outputs. x (B K
// values) is read through the L1, where every warp of the SM finds it.
//
// Three weight formats, one kernel each (templated on B):
//   gemv_bf16   W in bf16                       2 bytes a weight
//   gemv_int8   W in int8, a float32 scale a row (per output channel):
//               y = scale[n] * sum_k x q          1 byte a weight
//   gemv_fp8    W in FP8 E4M3, a float32 scale a row, the same way
//   gemv_int8g  W in int8, a float32 scale a group of 128 weights of a
//               row (per group): each piece's dot product times its
//               group's scale                    1 byte a weight

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#define ROWS 4                  // warps, so rows, a block: 192 blocks at N = 768
#define UNROLL 8                // loads in flight a lane: all of a row at K = 2048 in bf16

typedef __nv_bfloat16 bf16;

// Eight weights from 16 bytes of bf16, or from 8 bytes of int8 / FP8.
struct Bf16W { static constexpr int BYTES = 2; };
struct Int8W { static constexpr int BYTES = 1; };
struct Fp8W { static constexpr int BYTES = 1; };

__device__ __forceinline__ void unpack8(const uint4& raw, float (&w)[8], Bf16W)
{
    const bf16* e = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = __bfloat162float(e[k]);
}

// int8 to float without the integer-to-float unit (one a weight is too slow
// for a stream at memory speed): put the byte, offset to unsigned, under
// the exponent of 2^23, then subtract 2^23 + 128.
__device__ __forceinline__ void unpack8(const uint2& raw, float (&w)[8], Int8W)
{
    const uint32_t lo = raw.x ^ 0x80808080u, hi = raw.y ^ 0x80808080u;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        w[k] = __uint_as_float(0x4B000000u | __byte_perm(lo, 0, 0x4440 + k)) - 8388736.0f;
        w[4 + k] = __uint_as_float(0x4B000000u | __byte_perm(hi, 0, 0x4440 + k)) - 8388736.0f;
    }
}

// FP8 two at a time: the hardware converts a pair of E4M3 to a pair of halves.
__device__ __forceinline__ void unpack8(const uint2& raw, float (&w)[8], Fp8W)
{
    const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pairs[k], __NV_E4M3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        w[2 * k] = f.x;
        w[2 * k + 1] = f.y;
    }
}

template <class Fmt> struct Raw { typedef uint2 type; };     // 8 bytes: 8 one-byte weights
template <> struct Raw<Bf16W> { typedef uint4 type; };       // 16 bytes: 8 bf16 weights

// --8<-- [start:kernel]
// K a multiple of 8 (the host checks): a lane takes weights 8 (l + 32 i).
// GROUPED: scale holds one float a GROUP weights of a row (N x K / GROUP,
// K a multiple of GROUP), applied to each piece's dot product; else one a
// row, applied once at the end.
#define GROUP 128
template <int B, class Fmt, bool GROUPED = false>
__device__ __forceinline__ void gemv_row(const bf16* __restrict__ x, const void* __restrict__ W,
                                         const float* __restrict__ scale, bf16* __restrict__ y, int N, int K)
{
    typedef typename Raw<Fmt>::type R;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = blockIdx.x * ROWS + warp;
    if (n >= N) return;
    const R* row = reinterpret_cast<const R*>(reinterpret_cast<const uint8_t*>(W) + (size_t)n * K * Fmt::BYTES);
    const int pieces = K / 8;
    float acc[B];
#pragma unroll
    for (int b = 0; b < B; ++b) acc[b] = 0.0f;
    for (int i0 = lane; i0 < pieces; i0 += 32 * UNROLL) {
        R raw[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)                  // the loads first, so UNROLL are in flight
            if (i0 + 32 * u < pieces) raw[u] = __ldcs(row + i0 + 32 * u);   // streamed: read once
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + 32 * u;
            if (i >= pieces) break;
            float w[8];
            unpack8(raw[u], w, Fmt());
            const float sg = GROUPED ? scale[(size_t)n * (K / GROUP) + i / (GROUP / 8)] : 1.0f;
#pragma unroll
            for (int b = 0; b < B; ++b) {
                const uint4 xr = __ldg(reinterpret_cast<const uint4*>(x + (size_t)b * K) + i);
                float xs[8];
                unpack8(xr, xs, Bf16W());
                float d = 0.0f;
#pragma unroll
                for (int k = 0; k < 8; ++k) d = fmaf(xs[k], w[k], d);
                acc[b] = GROUPED ? fmaf(sg, d, acc[b]) : acc[b] + d;
            }
        }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[b] += __shfl_xor_sync(0xffffffffu, acc[b], o);
    }
    if (lane == 0) {
        const float s = (scale != nullptr && !GROUPED) ? scale[n] : 1.0f;
#pragma unroll
        for (int b = 0; b < B; ++b) y[(size_t)b * N + n] = __float2bfloat16_rn(acc[b] * s);
    }
}
// --8<-- [end:kernel]

#define GEMV(B)                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * ROWS)                                             \
    gemv_bf16_b##B(const bf16* x, const bf16* W, bf16* y, int N, int K)                                  \
    { gemv_row<B, Bf16W>(x, W, nullptr, y, N, K); }                                                     \
    extern "C" __global__ void __launch_bounds__(32 * ROWS)                                             \
    gemv_int8_b##B(const bf16* x, const int8_t* W, const float* scale, bf16* y, int N, int K)           \
    { gemv_row<B, Int8W>(x, W, scale, y, N, K); }                                                       \
    extern "C" __global__ void __launch_bounds__(32 * ROWS)                                             \
    gemv_fp8_b##B(const bf16* x, const uint8_t* W, const float* scale, bf16* y, int N, int K)           \
    { gemv_row<B, Fp8W>(x, W, scale, y, N, K); }                                                        \
    extern "C" __global__ void __launch_bounds__(32 * ROWS)                                             \
    gemv_int8g_b##B(const bf16* x, const int8_t* W, const float* scale, bf16* y, int N, int K)          \
    { gemv_row<B, Int8W, true>(x, W, scale, y, N, K); }
GEMV(1)
GEMV(2)
GEMV(4)
GEMV(8)
