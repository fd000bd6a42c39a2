// Convolution of a CNN layer, three ways: direct, im2col, implicit GEMM.
//
// Host program: conv2d.py. Every array is float32 in "channels last" order:
//   X  input    N x H x W x C     (NHWC: a pixel's C channels are contiguous)
//   Wt weights  R x S x C x K     (for each filter tap (r, s): a C x K matrix)
//   Y  output   N x P x Q x K     (NPQK: a pixel's K channels are contiguous)
// with P = (H + 2 pad - R) / stride + 1 and Q = (W + 2 pad - S) / stride + 1.
//
//   Y[n][p][q][k] = sum over r < R, s < S, c < C of
//                   X[n][p*stride - pad + r][q*stride - pad + s][c] * Wt[r][s][c][k]
//
// where a pixel outside the image reads as zero (the padding). Seen as a
// matrix product: row m = (n, p, q) of an M x Kg matrix A, with
// M = N P Q and Kg = R S C, holds the R x S x C input values under the
// filter at output pixel m; column k of the Kg x K matrix B is filter k,
// which is Wt viewed as a 2-D array; and Y viewed as M x K is A @ B.
// Column kk of A is the tap (r, s) = divmod(kk / C, S) and channel kk % C.
// Every kernel sums each output's Kg terms in the order kk = 0, 1, ...,
// one fused multiply-add each.
//
// Offsets into X and Y are 64-bit; indices inside a dimension fit in int
// (the host keeps M, Kg and each dimension below 2^31 - 256).

struct ConvShape {
    int N, H, W, C, K, R, S, P, Q, stride, pad;
};

// --8<-- [start:direct]
// Rung 1: one thread per output element, the whole sum from global memory.
// threadIdx.x runs along K, so a warp's 32 threads share one output pixel:
// each input value X[n][h][w][c] is one address for the warp (a broadcast),
// and the weights Wt[r][s][c][k .. k+31] are 128 contiguous bytes.
// blockIdx.x runs along the pixels, whose count may pass 65,535 blocks.
extern "C" __global__ void conv_direct(const float* __restrict__ X,
                                       const float* __restrict__ Wt,
                                       float* __restrict__ Y, ConvShape d)
{
    const int k = blockIdx.y * blockDim.x + threadIdx.x;
    const int m = blockIdx.x * blockDim.y + threadIdx.y;   // output pixel (n, p, q)
    if (k >= d.K || m >= d.N * d.P * d.Q) return;
    const int q = m % d.Q, p = (m / d.Q) % d.P, n = m / (d.Q * d.P);
    const float* x = X + (size_t)n * d.H * d.W * d.C;
    float acc = 0.0f;
    for (int r = 0; r < d.R; ++r) {
        const int h = p * d.stride - d.pad + r;
        for (int s = 0; s < d.S; ++s) {
            const int w = q * d.stride - d.pad + s;
            const bool inside = h >= 0 && h < d.H && w >= 0 && w < d.W;
            const float* xp = x + ((size_t)(inside ? h : 0) * d.W + (inside ? w : 0)) * d.C;
            const float* wp = Wt + (size_t)(r * d.S + s) * d.C * d.K + k;
            for (int c = 0; c < d.C; ++c) {
                acc += (inside ? xp[c] : 0.0f) * wp[(size_t)c * d.K];
            }
        }
    }
    Y[(size_t)m * d.K + k] = acc;
}
// --8<-- [end:direct]

// --8<-- [start:im2col]
// Rung 2, first kernel: write the matrix A of the product, Col (M x Kg).
// A warp per row m, output pixel (n, p, q) (the host launches one per row:
// the grid holds 2^31 - 1 blocks of 8 rows). For one filter row r the row
// of Col holds S x C values that are contiguous in X too: the S input
// pixels (h, w0) .. (h, w0 + S - 1) are neighbours in NHWC. So column
// kk = r S C + j copies X's value at pixel (h, w0) plus j, when h is
// inside the image and j falls in [lo, hi), the part of the S pixels
// inside it; elsewhere it writes the padding's zero. The lanes take
// consecutive columns: contiguous reads and writes. With VEC (C a
// multiple of 4) a lane moves 4 columns at once, one float4: SC, lo, hi
// and the offsets are then multiples of 4, so every float4 is aligned.
template <bool VEC>
__device__ __forceinline__ void im2col_row(const float* __restrict__ X, float* __restrict__ Col,
                                           const ConvShape& d, int m, int lane)
{
    const int SC = d.S * d.C, Kg = d.R * SC, step = VEC ? 4 : 1;
    const int q = m % d.Q, p = (m / d.Q) % d.P, n = m / (d.Q * d.P);
    const int h0 = p * d.stride - d.pad, w0 = q * d.stride - d.pad;
    const int lo = min(max(0, -w0), d.S) * d.C, hi = max(0, min(d.S, d.W - w0)) * d.C;
    const float* x = X + (size_t)n * d.H * d.W * d.C;          // image n
    float* row = Col + (size_t)m * Kg;
    for (int kk = lane * step; kk < Kg; kk += 32 * step) {
        const int r = kk / SC, j = kk - r * SC, h = h0 + r;
        const bool inside = h >= 0 && h < d.H && j >= lo && j < hi;
        // offset of pixel (h, w0) plus j: formed as a number, used only inside
        const long long at = ((long long)h * d.W + w0) * d.C + j;
        if constexpr (VEC) {
            *reinterpret_cast<float4*>(row + kk) =
                inside ? *reinterpret_cast<const float4*>(x + at) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            row[kk] = inside ? x[at] : 0.0f;
        }
    }
}

extern "C" __global__ void im2col(const float* __restrict__ X, float* __restrict__ Col,
                                  ConvShape d)
{
    const int M = d.N * d.P * d.Q, lane = threadIdx.x % 32;
    const int m = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // this warp's row
    if (m >= M) return;
    if ((d.C & 3) == 0) {
        im2col_row<true>(X, Col, d, m, lane);
    } else {
        im2col_row<false>(X, Col, d, m, lane);
    }
}
// --8<-- [end:im2col]

// Rung 3 is chapter 11's best rung (sgemm_double_buffer) with its A tile
// read straight from X: the same 128 x 128 block tile, BK = 8 slices, two
// shared stages, 8 warps of 64 x 32, each thread an 8 x 8 tile of Y.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define NT 256
#define WM 64
#define WN 32
#define PAD 4

// --8<-- [start:gather]
// A thread's piece of the A tile: 4 neighbouring columns kk .. kk+3 of
// row m, the input under the filter at output pixel m. The thread keeps
// its pixel's corner (h0, w0) and image, and the tap (r, s) and channel c
// of kk, which it moves on by BK each slice. With VEC (C a multiple of 4)
// the four columns are four channels of one input pixel, 16 contiguous
// bytes: one float4, or zeros in the padding. Without, each of the four
// is found on its own.
struct Gather {
    const float* x;      // this pixel's image, X + n H W C
    int h0, w0;          // input row and column under filter tap (0, 0);
                         // h0 is far below 0 when row m does not exist
    int r, s, c;         // tap and channel of column kk (VEC only)
};

// Is (h, w) inside the image? One unsigned compare per coordinate: a
// negative int becomes a huge unsigned one.
__device__ __forceinline__ bool inside(int h, int w, const ConvShape& d)
{
    return (unsigned)h < (unsigned)d.H && (unsigned)w < (unsigned)d.W;
}

template <bool VEC>
__device__ __forceinline__ float4 gather4(const Gather& g, int kk, const ConvShape& d, int Kg)
{
    if constexpr (VEC) {
        const int h = g.h0 + g.r, w = g.w0 + g.s;
        return kk < Kg && inside(h, w, d)
                   ? *reinterpret_cast<const float4*>(g.x + ((size_t)h * d.W + w) * d.C + g.c)
                   : make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
        float e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = kk + j;
            const int c = col % d.C, s = (col / d.C) % d.S, r = col / (d.C * d.S);
            const int h = g.h0 + r, w = g.w0 + s;
            e[j] = col < Kg && inside(h, w, d) ? g.x[((size_t)h * d.W + w) * d.C + c] : 0.0f;
        }
        return make_float4(e[0], e[1], e[2], e[3]);
    }
}

// Move (r, s, c) on by BK columns (VEC: c stays a multiple of 4).
__device__ __forceinline__ void advance(Gather& g, const ConvShape& d)
{
    g.c += BK;
    while (g.c >= d.C) {
        g.c -= d.C;
        if (++g.s == d.S) { g.s = 0; ++g.r; }
    }
}
// --8<-- [end:gather]

template <bool VEC>
__device__ __forceinline__ float4 load4_left(const float* __restrict__ p, int left)
{
    if constexpr (VEC) {
        return left > 0 ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
        float4 v;
        v.x = left > 0 ? p[0] : 0.0f;
        v.y = left > 1 ? p[1] : 0.0f;
        v.z = left > 2 ? p[2] : 0.0f;
        v.w = left > 3 ? p[3] : 0.0f;
        return v;
    }
}

__device__ __forceinline__ void store4(float* __restrict__ Y, int M, int K, int m, int k,
                                       float4 v, bool vec)
{
    if (m >= M) return;
    float* row = Y + (size_t)m * K;
    if (vec && k + 3 < K) {
        *reinterpret_cast<float4*>(row + k) = v;
        return;
    }
    if (k < K) row[k] = v.x;
    if (k + 1 < K) row[k + 1] = v.y;
    if (k + 2 < K) row[k + 2] = v.z;
    if (k + 3 < K) row[k + 3] = v.w;
}

// --8<-- [start:implicit]
// Rung 3: implicit GEMM. The loop is sgemm_double_buffer's; only the
// source of A's tile differs: gather4 from X in place of a row of Col.
// blockIdx.x runs along M (the pixels, which may pass 65,535 tiles) and
// blockIdx.y along K; consecutive blocks share one 128-column slab of
// the weights, which stays in L2.
template <bool VEC>
__device__ __forceinline__ void implicit_body(
    const float* __restrict__ X, const float* __restrict__ Wt, float* __restrict__ Y,
    const ConvShape& d, float (*As)[BK][BM + PAD], float (*Bs)[BK][BN])
{
    const int M = d.N * d.P * d.Q, K = d.K, Kg = d.R * d.S * d.C;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int a_r = tid / (BK / 4), a_c = (tid % (BK / 4)) * 4;
    const int b_r = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4;
    const int b_left = K - (n0 + b_c);
    const float* b_src = Wt + (size_t)b_r * K + n0 + b_c;      // moves BK rows a slice
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
    const int lm = (lane / 4) * 4, ln = (lane % 4) * 4;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);

    Gather g;                                    // this thread's row of A: pixel m
    const int m = m0 + a_r;
    const int mm = m < M ? m : 0;
    const int q = mm % d.Q, p = (mm / d.Q) % d.P, n = mm / (d.Q * d.P);
    g.x = X + (size_t)n * d.H * d.W * d.C;
    g.h0 = m < M ? p * d.stride - d.pad : -(1 << 30);   // every h below 0
    g.w0 = q * d.stride - d.pad;
    g.c = a_c % d.C;                             // column a_c (VEC: C >= 4, so c = a_c or 0)
    g.s = (a_c / d.C) % d.S;
    g.r = a_c / (d.C * d.S);

    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    float4 a = gather4<VEC>(g, a_c, d, Kg);      // slice 0 into stage 0
    float4 b = b_r < Kg ? load4_left<VEC>(b_src, b_left) : zero;
    As[0][a_c + 0][a_r] = a.x;
    As[0][a_c + 1][a_r] = a.y;
    As[0][a_c + 2][a_r] = a.z;
    As[0][a_c + 3][a_r] = a.w;
    *reinterpret_cast<float4*>(&Bs[0][b_r][b_c]) = b;
    __syncthreads();

    int s = 0;
    for (int k0 = 0; k0 < Kg; k0 += BK, s ^= 1) {
        const int k1 = k0 + BK;
        if constexpr (VEC) advance(g, d);
        b_src += (size_t)BK * K;
        a = gather4<VEC>(g, k1 + a_c, d, Kg);
        b = k1 + b_r < Kg ? load4_left<VEC>(b_src, b_left) : zero;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < 2; ++i)
                *reinterpret_cast<float4*>(&ra[4 * i]) =
                    *reinterpret_cast<const float4*>(&As[s][k][wm + 32 * i + lm]);
#pragma unroll
            for (int j = 0; j < 2; ++j)
                *reinterpret_cast<float4*>(&rb[4 * j]) =
                    *reinterpret_cast<const float4*>(&Bs[s][k][wn + 16 * j + ln]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        As[s ^ 1][a_c + 0][a_r] = a.x;
        As[s ^ 1][a_c + 1][a_r] = a.y;
        As[s ^ 1][a_c + 2][a_r] = a.z;
        As[s ^ 1][a_c + 3][a_r] = a.w;
        *reinterpret_cast<float4*>(&Bs[s ^ 1][b_r][b_c]) = b;
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4(Y, M, K, m0 + wm + 32 * (i / 4) + lm + i % 4, n0 + wn + 16 * (j / 4) + ln,
                   make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), VEC);
}

extern "C" __global__ void __launch_bounds__(NT, 2)
conv_implicit(const float* __restrict__ X, const float* __restrict__ Wt,
              float* __restrict__ Y, ConvShape d)
{
    __shared__ __align__(16) float As[2][BK][BM + PAD];
    __shared__ __align__(16) float Bs[2][BK][BN];
    if ((d.C & 3) == 0 && (d.K & 3) == 0) {      // the same for the whole grid
        implicit_body<true>(X, Wt, Y, d, As, Bs);
    } else {
        implicit_body<false>(X, Wt, Y, d, As, Bs);
    }
}
// --8<-- [end:implicit]
