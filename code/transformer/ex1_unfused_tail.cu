// Exercise 1: the MLP's first product with its tail in a second kernel.
//
// Chapter 12's tc_mma_pipelined (included with gpt2_block.cu) writes the
// fp32 product C; bias_gelu_f32 then reads C back, adds the bias, applies
// GELU and writes bf16: what gemm_gelu does in its store, as two launches.

#include "gpt2_block.cu"

// --8<-- [start:tail]
// out = gelu(c + bias), c (M, N) float32, out (M, N) bf16, N even: a thread
// takes two neighbouring columns (an 8-byte read, a 4-byte write).
extern "C" __global__ void bias_gelu_f32(const float* __restrict__ c, const bf16* __restrict__ bias,
                                         bf16* __restrict__ out, int M, int N)
{
    const size_t pairs = (size_t)M * N / 2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < pairs;
         i += (size_t)gridDim.x * blockDim.x) {
        const int col = (2 * i) % N;
        const float2 v = reinterpret_cast<const float2*>(c)[i];
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + col));
        reinterpret_cast<__nv_bfloat162*>(out)[i] =
            __floats2bfloat162_rn(gelu_tanh(v.x + b.x), gelu_tanh(v.y + b.y));
    }
}
// --8<-- [end:tail]
