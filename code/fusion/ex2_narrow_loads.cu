// Exercise 2 of "Elementwise fusion": the fused kernel with one element per
// thread.
//
// bias_gelu_residual_narrow computes what bias_gelu_residual computes, with
// the same GELU (tanhf), but each thread handles one bf16 element: three
// 2-byte loads (x, its column's bias, the residual) and one 2-byte store,
// where the chapter's kernel makes 16-byte loads and stores of 8 elements.
// What a thread does besides the arithmetic (its index, the bounds test, the
// column i % cols) it now does for every element, not for every 8.
//
// Host program: ex2_narrow_loads.py. This file includes bias_gelu_residual.cu
// for its gelu().

#include "bias_gelu_residual.cu"   // gelu, and the chapter's kernels

// --8<-- [start:kernel]
extern "C" __global__ void bias_gelu_residual_narrow(const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ bias,
                                                     const __nv_bfloat16* __restrict__ residual,
                                                     __nv_bfloat16* __restrict__ y,
                                                     int rows, int cols)
{
    const size_t n = (size_t)rows * cols;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;   // one element a thread
    if (i >= n) return;
    const float v = __bfloat162float(x[i]) + __bfloat162float(bias[i % cols]);
    y[i] = __float2bfloat16_rn(__bfloat162float(residual[i]) + gelu(v));
}
// --8<-- [end:kernel]
