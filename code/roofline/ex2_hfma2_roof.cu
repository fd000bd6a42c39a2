// Exercise 2 of "Profile before you optimise": the half-precision roof.
// peak_flops.cu's FMA chains in __half2: each __hfma2 does two fused
// multiply-adds, one on each half of a pair of 16-bit floats, in one
// instruction. Eight independent chains per thread, as in peak_flops.cu.
//
// Host program: ex2_hfma2_roof.py.

// --8<-- [start:kernel]
#include <cuda_fp16.h>

#define CHAINS 8

extern "C" __global__ void hfma2_chains(__half* __restrict__ out, int iterations, float a, float b)
{
    const __half2 a2 = __float2half2_rn(a), b2 = __float2half2_rn(b);
    __half2 v[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
        v[c] = __floats2half2_rn((float)(threadIdx.x + c) * 1e-3f, (float)(threadIdx.x + c + CHAINS) * 1e-3f);
#pragma unroll 16   // 128 HFMA2s between two tests of k: loop control takes 3 issue slots in 131
    for (int k = 0; k < iterations; ++k) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) v[c] = __hfma2(v[c], a2, b2);   // 2 FMAs, 4 FLOPs
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += __low2float(v[c]) + __high2float(v[c]);
    out[blockIdx.x * (long long)blockDim.x + threadIdx.x] = __float2half_rn(s);
}
// --8<-- [end:kernel]
