// Softmax over the rows of a (rows, cols) matrix, float32 or bfloat16:
// y[r, j] = exp(x[r, j] - m_r) / sum_k exp(x[r, k] - m_r), m_r = max_k x[r, k].
// Subtracting the row's maximum (the "safe" softmax) keeps exp from
// overflowing and changes nothing else: the factor exp(-m_r) cancels.
//
// Five kernels, each in a float32 (_f32) and a bfloat16 (_bf16) version:
//   softmax_safe    a block per row, three passes over the row in memory:
//                   the maximum, the sum of exponentials, the output.
//   softmax_online  a block per row, two passes: the maximum and the sum
//                   in one (Milakov and Gimelshein's online softmax), then
//                   the output.
//   softmax_online_chunk  the same two passes, the running sum rescaled once
//                   for each 16 bytes a thread loads instead of once for
//                   each element that raises its maximum.
//   softmax_warp    a warp per row, the row held in registers: one read,
//                   one write. Rows of up to 1024 elements.
//   softmax_block   a block per row (256 threads for float32, 128 for bf16),
//                   the row held in registers. Rows of up to 8192 elements.
// Host program: softmax.py, which picks warp, block or online by row length.

#include "_rows.cuh"

#define THREADS 256             // threads of a block-per-row kernel
#define WARP_ROW_MAX 1024       // longest row softmax_warp can hold
#define BLOCK_ROW_MAX 8192      // longest row softmax_block can hold

// --8<-- [start:safe]
template <typename T>
__device__ void softmax_row_safe(const T* __restrict__ x, T* __restrict__ y, int cols, int vec)
{
    constexpr int N = Vec<T>::N;
    float f[N];
    float m = -INFINITY;                            // pass 1: the maximum
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {
        load_vec(x, c, cols, vec, -INFINITY, f);
#pragma unroll
        for (int k = 0; k < N; ++k) m = fmaxf(m, f[k]);
    }
    m = group_reduce<THREADS>(m, Max());
    float s = 0.0f;                                 // pass 2: the sum of exponentials
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {
        load_vec(x, c, cols, vec, -INFINITY, f);    // exp(-inf) = 0 past the row
#pragma unroll
        for (int k = 0; k < N; ++k) s += expf(f[k] - m);
    }
    const float inv = 1.0f / group_reduce<THREADS>(s, Sum());
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {   // pass 3: the output
        load_vec(x, c, cols, vec, -INFINITY, f);
#pragma unroll
        for (int k = 0; k < N; ++k) f[k] = expf(f[k] - m) * inv;
        store_vec(y, c, cols, vec, f);
    }
}
// --8<-- [end:safe]

// --8<-- [start:online]
// Fold one value into a running maximum m and a running sum d of exp(x - m):
// when the maximum grows, the sum so far is rescaled to the new maximum.
__device__ __forceinline__ void online_update(float& m, float& d, float v)
{
    if (v == -INFINITY) return;                     // a masked logit adds exp(-inf) = 0
    if (v > m) {
        d = d * expf(m - v) + 1.0f;                 // m = -inf at the start: d = 0 * 0 + 1
        m = v;
    } else {
        d += expf(v - m);
    }
}

template <typename T>
__device__ void softmax_row_online(const T* __restrict__ x, T* __restrict__ y, int cols, int vec)
{
    constexpr int N = Vec<T>::N;
    float f[N];
    float m = -INFINITY, d = 0.0f;                  // pass 1: maximum and sum together
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {
        load_vec(x, c, cols, vec, -INFINITY, f);
#pragma unroll
        for (int k = 0; k < N; ++k)
            if (c + k < cols) online_update(m, d, f[k]);
    }
    // Merge the threads' (m, d): every sum rescaled to the row's maximum.
    const float row_max = group_reduce<THREADS>(m, Max());
    d = (m == -INFINITY) ? 0.0f : d * expf(m - row_max);   // a thread that saw nothing adds 0
    const float inv = 1.0f / group_reduce<THREADS>(d, Sum());
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {   // pass 2: the output
        load_vec(x, c, cols, vec, -INFINITY, f);
#pragma unroll
        for (int k = 0; k < N; ++k) f[k] = expf(f[k] - row_max) * inv;
        store_vec(y, c, cols, vec, f);
    }
}
// --8<-- [end:online]

// --8<-- [start:online_chunk]
// Fold N values at once: the chunk's maximum first, then one rescaling of
// the running sum and N exponentials against the new maximum. No branch
// depends on the data; columns past the row were loaded as -inf.
template <int N>
__device__ __forceinline__ void online_update_chunk(float& m, float& d, const float (&f)[N])
{
    float c = f[0];
#pragma unroll
    for (int k = 1; k < N; ++k) c = fmaxf(c, f[k]);
    const float m_new = fmaxf(m, c);
    if (m_new == -INFINITY) return;                 // nothing finite yet: -inf - (-inf) would be NaN
    float s = d * expf(m - m_new);                  // m = -inf at the start: 0 * 0
#pragma unroll
    for (int k = 0; k < N; ++k) s += expf(f[k] - m_new);   // a masked logit adds exp(-inf) = 0
    d = s;
    m = m_new;
}

template <typename T>
__device__ void softmax_row_online_chunk(const T* __restrict__ x, T* __restrict__ y, int cols, int vec)
{
    constexpr int N = Vec<T>::N;
    float f[N];
    float m = -INFINITY, d = 0.0f;                  // pass 1: maximum and sum together
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {
        load_vec(x, c, cols, vec, -INFINITY, f);
        online_update_chunk<N>(m, d, f);
    }
    const float row_max = group_reduce<THREADS>(m, Max());
    d = (m == -INFINITY) ? 0.0f : d * expf(m - row_max);
    const float inv = 1.0f / group_reduce<THREADS>(d, Sum());
    for (int c = threadIdx.x * N; c < cols; c += THREADS * N) {   // pass 2: the output
        load_vec(x, c, cols, vec, -INFINITY, f);
#pragma unroll
        for (int k = 0; k < N; ++k) f[k] = expf(f[k] - row_max) * inv;
        store_vec(y, c, cols, vec, f);
    }
}
// --8<-- [end:online_chunk]

// --8<-- [start:registers]
// The row in registers: thread t of the GROUP threads holds CHUNKS pieces of
// N elements, piece i at column (i * GROUP + t) * N, so each load of the
// group is contiguous. One read of the row, one write.
template <typename T, int GROUP, int CHUNKS>
__device__ void softmax_row_registers(const T* __restrict__ x, T* __restrict__ y, int cols, int vec, int t)
{
    constexpr int N = Vec<T>::N;
    float v[CHUNKS][N];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        load_vec(x, (i * GROUP + t) * N, cols, vec, -INFINITY, v[i]);
#pragma unroll
        for (int k = 0; k < N; ++k) m = fmaxf(m, v[i][k]);
    }
    m = group_reduce<GROUP>(m, Max());
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i)
#pragma unroll
        for (int k = 0; k < N; ++k) {
            v[i][k] = expf(v[i][k] - m);            // 0 past the row
            s += v[i][k];
        }
    const float inv = 1.0f / group_reduce<GROUP>(s, Sum());
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
#pragma unroll
        for (int k = 0; k < N; ++k) v[i][k] *= inv;
        store_vec(y, (i * GROUP + t) * N, cols, vec, v[i]);
    }
}
// --8<-- [end:registers]

// Entry points: a block (or a warp) per row; blockDim.x is THREADS, but
// row_threads<T>() for softmax_block (see _rows.cuh). The register kernels come in several sizes, CHUNKS pieces of 16 bytes a
// thread: the host picks the smallest that holds the row, so a short row
// does not hold registers (and so occupancy) it does not use.
#define ROW_KERNELS(T, SUFFIX)                                                                   \
    extern "C" __global__ void softmax_safe_##SUFFIX(const T* x, T* y, int rows, int cols, int vec) \
    {                                                                                            \
        const size_t row = blockIdx.x;                                                           \
        softmax_row_safe<T>(x + row * cols, y + row * cols, cols, vec);                          \
    }                                                                                            \
    extern "C" __global__ void softmax_online_##SUFFIX(const T* x, T* y, int rows, int cols, int vec) \
    {                                                                                            \
        const size_t row = blockIdx.x;                                                           \
        softmax_row_online<T>(x + row * cols, y + row * cols, cols, vec);                        \
    }                                                                                            \
    extern "C" __global__ void softmax_online_chunk_##SUFFIX(const T* x, T* y, int rows, int cols, \
                                                             int vec)                            \
    {                                                                                            \
        const size_t row = blockIdx.x;                                                           \
        softmax_row_online_chunk<T>(x + row * cols, y + row * cols, cols, vec);                  \
    }

#define WARP_KERNEL(T, SUFFIX, CHUNKS)                                                           \
    extern "C" __global__ void softmax_warp##CHUNKS##_##SUFFIX(const T* x, T* y, int rows, int cols, \
                                                               int vec)                          \
    {                                                                                            \
        const size_t row = (size_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;               \
        if (row >= (size_t)rows) return;            /* the whole warp leaves together */         \
        softmax_row_registers<T, 32, CHUNKS>(x + row * cols, y + row * cols, cols, vec,          \
                                             threadIdx.x % 32);                                  \
    }

#define BLOCK_KERNEL(T, SUFFIX, CHUNKS)                                                          \
    extern "C" __global__ void softmax_block##CHUNKS##_##SUFFIX(const T* x, T* y, int rows, int cols, \
                                                                int vec)                         \
    {                                                                                            \
        const size_t row = blockIdx.x;                                                           \
        softmax_row_registers<T, row_threads<T>(), CHUNKS>(x + row * cols, y + row * cols, cols, \
                                                           vec, threadIdx.x);                    \
    }

// A warp holds up to 32 x 8 x 4 = 1024 float32 (32 x 4 x 8 bf16), a block
// up to 8 rounds of 1024 = 8192 elements.
ROW_KERNELS(float, f32)
WARP_KERNEL(float, f32, 1) WARP_KERNEL(float, f32, 2) WARP_KERNEL(float, f32, 4) WARP_KERNEL(float, f32, 8)
BLOCK_KERNEL(float, f32, 1) BLOCK_KERNEL(float, f32, 2) BLOCK_KERNEL(float, f32, 4) BLOCK_KERNEL(float, f32, 8)
ROW_KERNELS(__nv_bfloat16, bf16)
WARP_KERNEL(__nv_bfloat16, bf16, 1) WARP_KERNEL(__nv_bfloat16, bf16, 2) WARP_KERNEL(__nv_bfloat16, bf16, 4)
BLOCK_KERNEL(__nv_bfloat16, bf16, 1) BLOCK_KERNEL(__nv_bfloat16, bf16, 2) BLOCK_KERNEL(__nv_bfloat16, bf16, 4)
BLOCK_KERNEL(__nv_bfloat16, bf16, 8)
