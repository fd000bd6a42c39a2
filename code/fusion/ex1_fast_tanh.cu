// Exercise 1 of "Elementwise fusion": the fused kernel with a faster tanh.
//
// bias_gelu_residual_fast is bias_gelu_residual with one change: the GELU's
// tanhf, a software routine of many instructions accurate to 2 ulp, becomes
// the single PTX instruction tanh.approx.f32 (compute capability 7.5 and
// later), whose maximum relative error is 2^-11 (PTX ISA, "Floating Point
// Instructions: tanh"). Loads, stores and everything else are the chapter
// kernel's own: this file includes bias_gelu_residual.cu for its helpers.
//
// Host program: ex1_fast_tanh.py.

#include "bias_gelu_residual.cu"   // gelu, load_group, load_bias, store_group, group_start

// --8<-- [start:kernel]
__device__ __forceinline__ float tanh_approx(float z)
{
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(z));   // one instruction (sm_75+)
    return t;
}

__device__ __forceinline__ float gelu_fast(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanh_approx(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void bias_gelu_residual_fast(const __nv_bfloat16* __restrict__ x,
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
        a[k] = r[k] + gelu_fast(a[k] + b[k]);      // the only line that differs
    store_group(y, i, n, vec, a);
}
// --8<-- [end:kernel]
