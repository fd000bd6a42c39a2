// Elementwise fusion: y = residual + gelu(x + bias), the tail of a
// transformer's MLP, on bfloat16 tensors with float32 arithmetic.
//
// Four kernels. bias_add, gelu and residual_add do one step each and write
// their result to memory in bf16, as three library calls would; the next
// kernel reads it back. bias_gelu_residual does all three steps on each
// element while it sits in registers, and writes only y. Every kernel reads
// and writes 8 bf16 values (16 bytes) per thread: one 16-byte load per
// operand when `vec` is 1 (rows a multiple of 8 elements and every array on
// a 16-byte boundary; the host checks), one element at a time otherwise.
//
// Host program: bias_gelu_residual.py. The GELU is the tanh form of
// "Why GPUs"; x, bias, residual have shapes (rows, cols), (cols,), (rows, cols).

#include <cuda_bf16.h>

#define GROUP 8   // elements per thread: 8 bf16 = 16 bytes

// --8<-- [start:helpers]
__device__ __forceinline__ float gelu(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

// GROUP elements of p, from element i on, widened to float. n elements exist.
__device__ __forceinline__ void load_group(const __nv_bfloat16* __restrict__ p, size_t i, size_t n,
                                           int vec, float (&f)[GROUP])
{
    if (vec) {                                     // one 16-byte load
        const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int k = 0; k < GROUP / 2; ++k) {
            const float2 t = __bfloat1622float2(h[k]);
            f[2 * k] = t.x;
            f[2 * k + 1] = t.y;
        }
    } else {                                       // one element at a time, none past n
#pragma unroll
        for (int k = 0; k < GROUP; ++k)
            f[k] = (i + k < n) ? __bfloat162float(p[i + k]) : 0.0f;
    }
}

// The bias of elements i .. i + GROUP - 1 of a (rows, cols) matrix.
__device__ __forceinline__ void load_bias(const __nv_bfloat16* __restrict__ bias, size_t i, size_t n,
                                          int cols, int vec, float (&f)[GROUP])
{
    if (vec) {                                     // cols % GROUP == 0: one row, aligned
        load_group(bias, i % cols, cols, 1, f);
    } else {
#pragma unroll
        for (int k = 0; k < GROUP; ++k)
            f[k] = (i + k < n) ? __bfloat162float(bias[(i + k) % cols]) : 0.0f;
    }
}

// Round GROUP floats to bf16 (to nearest) and store those that exist.
__device__ __forceinline__ void store_group(__nv_bfloat16* __restrict__ p, size_t i, size_t n,
                                            int vec, const float (&f)[GROUP])
{
    if (vec) {
        uint4 raw;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
        for (int k = 0; k < GROUP / 2; ++k)
            h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
        *reinterpret_cast<uint4*>(p + i) = raw;
    } else {
#pragma unroll
        for (int k = 0; k < GROUP; ++k)
            if (i + k < n)
                p[i + k] = __float2bfloat16_rn(f[k]);
    }
}

// This thread's first element.
__device__ __forceinline__ size_t group_start()
{
    return ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * GROUP;
}
// --8<-- [end:helpers]

// --8<-- [start:unfused]
extern "C" __global__ void bias_add(const __nv_bfloat16* __restrict__ x,
                                    const __nv_bfloat16* __restrict__ bias,
                                    __nv_bfloat16* __restrict__ t, int rows, int cols, int vec)
{
    const size_t n = (size_t)rows * cols, i = group_start();
    if (i >= n) return;
    float a[GROUP], b[GROUP];
    load_group(x, i, n, vec, a);
    load_bias(bias, i, n, cols, vec, b);
#pragma unroll
    for (int k = 0; k < GROUP; ++k) a[k] += b[k];
    store_group(t, i, n, vec, a);                  // t goes to memory ...
}

extern "C" __global__ void gelu_bf16(const __nv_bfloat16* __restrict__ t,
                                     __nv_bfloat16* __restrict__ g, long long n, int vec)
{
    const size_t i = group_start();
    if (i >= (size_t)n) return;
    float a[GROUP];
    load_group(t, i, n, vec, a);                   // ... and comes back
#pragma unroll
    for (int k = 0; k < GROUP; ++k) a[k] = gelu(a[k]);
    store_group(g, i, n, vec, a);                  // g goes to memory ...
}

extern "C" __global__ void residual_add(const __nv_bfloat16* __restrict__ g,
                                        const __nv_bfloat16* __restrict__ residual,
                                        __nv_bfloat16* __restrict__ y, long long n, int vec)
{
    const size_t i = group_start();
    if (i >= (size_t)n) return;
    float a[GROUP], r[GROUP];
    load_group(g, i, n, vec, a);                   // ... and comes back
    load_group(residual, i, n, vec, r);
#pragma unroll
    for (int k = 0; k < GROUP; ++k) a[k] += r[k];
    store_group(y, i, n, vec, a);
}
// --8<-- [end:unfused]

// --8<-- [start:fused]
extern "C" __global__ void bias_gelu_residual(const __nv_bfloat16* __restrict__ x,
                                              const __nv_bfloat16* __restrict__ bias,
                                              const __nv_bfloat16* __restrict__ residual,
                                              __nv_bfloat16* __restrict__ y,
                                              int rows, int cols, int vec)
{
    const size_t n = (size_t)rows * cols, i = group_start();
    if (i >= n) return;
    float a[GROUP], b[GROUP], r[GROUP];
    load_group(x, i, n, vec, a);
    load_bias(bias, i, n, cols, vec, b);
    load_group(residual, i, n, vec, r);
#pragma unroll
    for (int k = 0; k < GROUP; ++k)
        a[k] = r[k] + gelu(a[k] + b[k]);           // x + bias and its GELU never leave registers
    store_group(y, i, n, vec, a);
}
// --8<-- [end:fused]
