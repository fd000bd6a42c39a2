// Shared by softmax.cu and layernorm.cu: rows of float32 or bfloat16 read
// and written 16 bytes at a time, and reductions across a warp or a block.
// Arithmetic is float32 whatever the storage type.
#pragma once
#include <cuda_bf16.h>

// Elements in 16 bytes: 4 floats, 8 bf16.
template <typename T> struct Vec;
template <> struct Vec<float> { static constexpr int N = 4; };
template <> struct Vec<__nv_bfloat16> { static constexpr int N = 8; };

// Threads of a block that holds one row in registers: 16 bytes each, 1024
// elements a round (256 threads for float32, 128 for bf16), so a thread
// holds as many bytes of its row whatever the type.
#define ROUND 1024
template <typename T> __host__ __device__ constexpr int row_threads() { return ROUND / Vec<T>::N; }

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);                  // round to nearest, ties to even
}

// --8<-- [start:load]
// The Vec<T>::N elements of row p from column c on (c a multiple of N), as
// floats; columns at or past `cols` read as `fill`. vec = 1: the row may be
// read 16 bytes at a time (cols a multiple of N, p on a 16-byte boundary).
template <typename T>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, int c, int cols, int vec, float fill,
                                         float (&f)[Vec<T>::N])
{
    constexpr int N = Vec<T>::N;
    if (vec && c + N <= cols) {                     // one 16-byte load
        const uint4 raw = *reinterpret_cast<const uint4*>(p + c);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int k = 0; k < N; ++k) f[k] = to_float(e[k]);
    } else {                                        // one element at a time, none past the row
#pragma unroll
        for (int k = 0; k < N; ++k) f[k] = (c + k < cols) ? to_float(p[c + k]) : fill;
    }
}
// --8<-- [end:load]

template <typename T>
__device__ __forceinline__ void store_vec(T* __restrict__ p, int c, int cols, int vec,
                                          const float (&f)[Vec<T>::N])
{
    constexpr int N = Vec<T>::N;
    if (vec && c + N <= cols) {
        uint4 raw;
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int k = 0; k < N; ++k) e[k] = from_float<T>(f[k]);
        *reinterpret_cast<uint4*>(p + c) = raw;
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k)
            if (c + k < cols) p[c + k] = from_float<T>(f[k]);
    }
}

// --8<-- [start:reduce]
struct Max {
    static constexpr float identity = -INFINITY;
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
    static constexpr float identity = 0.0f;
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Every lane of the warp gets op over the warp's 32 values (a butterfly).
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Every thread of the group of THREADS (one warp, or the whole block) gets
// op over the group's values. Warps reduce in registers, then the warps'
// results meet in shared memory. Ends with a barrier, so it can be called
// again straight away.
template <int THREADS, typename Op>
__device__ __forceinline__ float group_reduce(float v, Op op)
{
    v = warp_reduce(v, op);
    if (THREADS == 32) return v;
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = warp_reduce(lane < THREADS / 32 ? partial[lane] : Op::identity, op);
    __syncthreads();                                // partial may be written again
    return v;
}
// --8<-- [end:reduce]
