// Layer normalisation over the rows of a (rows, cols) matrix:
// y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps), with
// the mean and the (biased) variance of each row, float32 or bfloat16
// storage, float32 arithmetic. The forward pass keeps each row's mean and
// rstd (float32) for the backward pass.
//
//   layernorm_<stats>_warp*   a warp per row, the row in registers (<= 1024)
//   layernorm_<stats>_block*  a block per row (256 threads for float32, 128
//                             for bf16), the row in registers (<= 8192)
//   (stats: twopass, the row's mean then its squared deviations; or
//   welford, each thread's statistics merged by Chan's rule)
//   layernorm_bwd_f32    dx, and each block's partial dgamma and dbeta
//   column_sum_f32       adds the blocks' partials: dgamma, dbeta
// Host program: layernorm.py.

#include "_rows.cuh"

#define THREADS 256             // threads of a forward block of warps (row_threads<T>() for a block per row)
#define BWD_THREADS 512         // threads of a backward block
#define WARP_ROW_MAX 1024
#define BLOCK_ROW_MAX 8192

// --8<-- [start:welford]
// A set of values summed up as Welford's algorithm keeps it: the count, the
// mean, and M2 = the sum of squared deviations from the mean (variance =
// M2 / count). Never the sum of squares, which cancels catastrophically
// when the mean is large against the spread.
struct Welford {
    float n, mean, m2;
};

// The statistics of two sets together (Chan, Golub and LeVeque).
__device__ __forceinline__ Welford welford_merge(Welford a, Welford b)
{
    const float n = a.n + b.n;
    if (n == 0.0f) return a;
    const float d = b.mean - a.mean, fb = b.n / n;
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

// A warp's statistics, merged by a butterfly. Chan's merge is not symmetric
// in floating point (merge(a, b) and merge(b, a) may differ in the last
// bit), so the lanes can end a rounding apart: every lane takes lane 0's.
__device__ __forceinline__ Welford warp_welford(Welford w)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const Welford o = {__shfl_xor_sync(0xffffffffu, w.n, offset),
                           __shfl_xor_sync(0xffffffffu, w.mean, offset),
                           __shfl_xor_sync(0xffffffffu, w.m2, offset)};
        w = welford_merge(w, o);
    }
    return {__shfl_sync(0xffffffffu, w.n, 0), __shfl_sync(0xffffffffu, w.mean, 0),
            __shfl_sync(0xffffffffu, w.m2, 0)};
}

// Every thread of the GROUP (a warp or the block) gets the group's statistics.
template <int GROUP>
__device__ __forceinline__ Welford group_welford(Welford w)
{
    w = warp_welford(w);
    if (GROUP == 32) return w;
    __shared__ Welford partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = w;
    __syncthreads();
    w = warp_welford(lane < GROUP / 32 ? partial[lane] : Welford{0.0f, 0.0f, 0.0f});
    __syncthreads();                                // partial may be written again
    return w;
}
// --8<-- [end:welford]

// --8<-- [start:forward]
// WELFORD: each thread's (count, mean, M2) from its registers, merged by
// Chan's rule. Otherwise two plain sums: the row's mean first, then the
// squared deviations from it, each thread's from its registers (the
// two-pass form, with no second read of memory).
template <typename T, int GROUP, int CHUNKS, bool WELFORD>
__device__ void layernorm_row(const T* __restrict__ x, const T* __restrict__ gamma,
                              const T* __restrict__ beta, T* __restrict__ y,
                              float* __restrict__ mean_out, float* __restrict__ rstd_out,
                              int cols, float eps, int vec, int t)
{
    constexpr int N = Vec<T>::N;
    float v[CHUNKS][N];
    float sum = 0.0f, count = 0.0f;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {              // one read of the row
        const int c = (i * GROUP + t) * N;
        load_vec(x, c, cols, vec, 0.0f, v[i]);      // 0 past the row: adds nothing
#pragma unroll
        for (int k = 0; k < N; ++k) sum += v[i][k];
        count += (float)max(0, min(N, cols - c));
    }
    // The mean to take deviations from: this thread's own, or the row's.
    const float centre = WELFORD ? (count > 0.0f ? sum / count : 0.0f)
                                 : group_reduce<GROUP>(sum, Sum()) / cols;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {              // a second pass, over registers
        const int c = (i * GROUP + t) * N;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const float d = (c + k < cols) ? v[i][k] - centre : 0.0f;
            m2 += d * d;
        }
    }
    float mean, var;
    if (WELFORD) {
        const Welford w = group_welford<GROUP>(Welford{count, centre, m2});
        mean = w.mean;
        var = w.m2 / cols;
    } else {
        mean = centre;
        var = group_reduce<GROUP>(m2, Sum()) / cols;
    }
    const float rstd = rsqrtf(var + eps);           // biased variance, as torch's layer_norm
    if (t == 0) {
        *mean_out = mean;
        *rstd_out = rstd;
    }
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        const int c = (i * GROUP + t) * N;
        float g[N], b[N];
        load_vec(gamma, c, cols, vec, 0.0f, g);     // gamma and beta: cached, shared by every row
        load_vec(beta, c, cols, vec, 0.0f, b);
#pragma unroll
        for (int k = 0; k < N; ++k) v[i][k] = (v[i][k] - mean) * rstd * g[k] + b[k];
        store_vec(y, c, cols, vec, v[i]);
    }
}
// --8<-- [end:forward]

// Entry points, in several sizes: CHUNKS pieces of 16 bytes a thread, the
// host picking the smallest that holds the row (as softmax.cu does).
#define FWD_WARP(T, SUFFIX, CHUNKS, STATS, WELFORD)                                               \
    extern "C" __global__ void layernorm_##STATS##_warp##CHUNKS##_##SUFFIX(                       \
        const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,                \
        int rows, int cols, float eps, int vec)                                                   \
    {                                                                                             \
        const size_t row = (size_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;                \
        if (row >= (size_t)rows) return;             /* the whole warp leaves together */         \
        layernorm_row<T, 32, CHUNKS, WELFORD>(x + row * cols, gamma, beta, y + row * cols,        \
                                              mean + row, rstd + row, cols, eps, vec,             \
                                              threadIdx.x % 32);                                  \
    }
#define FWD_BLOCK(T, SUFFIX, CHUNKS, STATS, WELFORD)                                              \
    extern "C" __global__ void layernorm_##STATS##_block##CHUNKS##_##SUFFIX(                      \
        const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,                \
        int rows, int cols, float eps, int vec)                                                   \
    {                                                                                             \
        const size_t row = blockIdx.x;                                                            \
        layernorm_row<T, row_threads<T>(), CHUNKS, WELFORD>(x + row * cols, gamma, beta,          \
                                                            y + row * cols, mean + row,           \
                                                            rstd + row, cols, eps, vec,           \
                                                            threadIdx.x);                         \
    }
#define FWD_ALL(STATS, WELFORD)                                                                   \
    FWD_WARP(float, f32, 1, STATS, WELFORD) FWD_WARP(float, f32, 2, STATS, WELFORD)               \
    FWD_WARP(float, f32, 4, STATS, WELFORD) FWD_WARP(float, f32, 8, STATS, WELFORD)               \
    FWD_BLOCK(float, f32, 1, STATS, WELFORD) FWD_BLOCK(float, f32, 2, STATS, WELFORD)             \
    FWD_BLOCK(float, f32, 4, STATS, WELFORD) FWD_BLOCK(float, f32, 8, STATS, WELFORD)             \
    FWD_WARP(__nv_bfloat16, bf16, 1, STATS, WELFORD) FWD_WARP(__nv_bfloat16, bf16, 2, STATS, WELFORD) \
    FWD_WARP(__nv_bfloat16, bf16, 4, STATS, WELFORD)                                              \
    FWD_BLOCK(__nv_bfloat16, bf16, 1, STATS, WELFORD) FWD_BLOCK(__nv_bfloat16, bf16, 2, STATS, WELFORD) \
    FWD_BLOCK(__nv_bfloat16, bf16, 4, STATS, WELFORD) FWD_BLOCK(__nv_bfloat16, bf16, 8, STATS, WELFORD)

// Entry points, in several sizes (CHUNKS pieces of 16 bytes a thread, the
// host picking the smallest that holds the row, as softmax.cu does), with
// each way of gathering the statistics: layernorm_twopass_* and
// layernorm_welford_*.
FWD_ALL(twopass, false)
FWD_ALL(welford, true)

// --8<-- [start:backward]
// With xhat = (x - mean) * rstd and g = dy * gamma, for each row:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// and over all rows dgamma = sum dy * xhat, dbeta = sum dy. Each block takes
// rows blockIdx.x, blockIdx.x + gridDim.x, ..., keeps its share of dgamma and
// dbeta in registers, and writes it to row blockIdx.x of the partials.
extern "C" __global__ void __launch_bounds__(BWD_THREADS)
layernorm_bwd_f32(const float* __restrict__ dy, const float* __restrict__ x,
                  const float* __restrict__ gamma, const float* __restrict__ mean,
                  const float* __restrict__ rstd, float* __restrict__ dx,
                  float* __restrict__ dgamma_part, float* __restrict__ dbeta_part,
                  int rows, int cols, int vec)
{
    constexpr int N = 4, CHUNKS = BLOCK_ROW_MAX / BWD_THREADS / N;
    float xhat[CHUNKS][N], g[CHUNKS][N], dgamma[CHUNKS][N] = {}, dbeta[CHUNKS][N] = {};
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t off = (size_t)row * cols;
        const float mu = mean[row], rs = rstd[row];
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int c = (i * BWD_THREADS + threadIdx.x) * N;
            float d[N], gm[N];
            load_vec(x + off, c, cols, vec, 0.0f, xhat[i]);
            load_vec(dy + off, c, cols, vec, 0.0f, d);      // 0 past the row: adds nothing
            load_vec(gamma, c, cols, vec, 0.0f, gm);
#pragma unroll
            for (int k = 0; k < N; ++k) {
                xhat[i][k] = (xhat[i][k] - mu) * rs;
                g[i][k] = d[k] * gm[k];
                sum_g += g[i][k];
                sum_gx += g[i][k] * xhat[i][k];
                dgamma[i][k] += d[k] * xhat[i][k];
                dbeta[i][k] += d[k];
            }
        }
        const float mean_g = group_reduce<BWD_THREADS>(sum_g, Sum()) / cols;
        const float mean_gx = group_reduce<BWD_THREADS>(sum_gx, Sum()) / cols;
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            float out[N];
#pragma unroll
            for (int k = 0; k < N; ++k) out[k] = rs * (g[i][k] - mean_g - xhat[i][k] * mean_gx);
            store_vec(dx + off, (i * BWD_THREADS + threadIdx.x) * N, cols, vec, out);
        }
    }
    const size_t part = (size_t)blockIdx.x * cols;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        const int c = (i * BWD_THREADS + threadIdx.x) * N;
        store_vec(dgamma_part + part, c, cols, vec, dgamma[i]);
        store_vec(dbeta_part + part, c, cols, vec, dbeta[i]);
    }
}

// out[j] = sum over p < parts of part[p, j], one thread per column, in order.
extern "C" __global__ void column_sum_f32(const float* __restrict__ part, float* __restrict__ out,
                                          int parts, int cols)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.0f;
    for (int p = 0; p < parts; ++p) s += part[(size_t)p * cols + j];
    out[j] = s;
}
// --8<-- [end:backward]
