// Solution to exercise 3: RMSNorm over the rows of a (rows, cols) matrix,
// y = x / sqrt(mean(x^2) + eps) * gamma, float32 or bfloat16 storage,
// float32 arithmetic. The same shape as layernorm.cu's forward kernel (the
// row read once and held in registers, a warp per row up to 1024 elements,
// a block per row up to 8192), with one statistic instead of two: no mean
// to subtract, so one plain sum (of squares) replaces Welford's merge.
// Host program: ex3_rmsnorm.py.

#include "_rows.cuh"

#define THREADS 256             // threads of a block of warps (row_threads<T>() for a block per row)

// --8<-- [start:kernel]
template <typename T, int GROUP, int CHUNKS>
__device__ void rmsnorm_row(const T* __restrict__ x, const T* __restrict__ gamma, T* __restrict__ y,
                            int cols, float eps, int vec, int t)
{
    constexpr int N = Vec<T>::N;
    float v[CHUNKS][N];                             // the row, in registers
    float ss = 0.0f;                                // this thread's sum of squares
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {              // one read of the row
        load_vec(x, (i * GROUP + t) * N, cols, vec, 0.0f, v[i]);   // 0 past the row: adds nothing
#pragma unroll
        for (int k = 0; k < N; ++k) ss += v[i][k] * v[i][k];
    }
    const float rstd = rsqrtf(group_reduce<GROUP>(ss, Sum()) / cols + eps);
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        const int c = (i * GROUP + t) * N;
        float g[N];
        load_vec(gamma, c, cols, vec, 0.0f, g);     // gamma: cached, shared by every row
#pragma unroll
        for (int k = 0; k < N; ++k) v[i][k] = v[i][k] * rstd * g[k];
        store_vec(y, c, cols, vec, v[i]);
    }
}
// --8<-- [end:kernel]

// Entry points in several sizes, CHUNKS pieces of 16 bytes a thread; the
// host picks the smallest that holds the row, as for layernorm.cu.
#define RMS_WARP(T, SUFFIX, CHUNKS)                                                               \
    extern "C" __global__ void rmsnorm_warp##CHUNKS##_##SUFFIX(const T* x, const T* gamma, T* y,  \
                                                              int rows, int cols, float eps,      \
                                                              int vec)                            \
    {                                                                                             \
        const size_t row = (size_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;                \
        if (row >= (size_t)rows) return;             /* the whole warp leaves together */         \
        rmsnorm_row<T, 32, CHUNKS>(x + row * cols, gamma, y + row * cols, cols, eps, vec,         \
                                   threadIdx.x % 32);                                             \
    }
#define RMS_BLOCK(T, SUFFIX, CHUNKS)                                                              \
    extern "C" __global__ void rmsnorm_block##CHUNKS##_##SUFFIX(const T* x, const T* gamma, T* y, \
                                                               int rows, int cols, float eps,     \
                                                               int vec)                           \
    {                                                                                             \
        const size_t row = blockIdx.x;                                                            \
        rmsnorm_row<T, row_threads<T>(), CHUNKS>(x + row * cols, gamma, y + row * cols, cols, eps,\
                                                 vec, threadIdx.x);                               \
    }

RMS_WARP(float, f32, 1) RMS_WARP(float, f32, 2) RMS_WARP(float, f32, 4) RMS_WARP(float, f32, 8)
RMS_BLOCK(float, f32, 1) RMS_BLOCK(float, f32, 2) RMS_BLOCK(float, f32, 4) RMS_BLOCK(float, f32, 8)
RMS_WARP(__nv_bfloat16, bf16, 1) RMS_WARP(__nv_bfloat16, bf16, 2) RMS_WARP(__nv_bfloat16, bf16, 4)
RMS_BLOCK(__nv_bfloat16, bf16, 1) RMS_BLOCK(__nv_bfloat16, bf16, 2) RMS_BLOCK(__nv_bfloat16, bf16, 4)
RMS_BLOCK(__nv_bfloat16, bf16, 8)
