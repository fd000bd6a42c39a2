// bf16 <-> fp32 for Part VI chapter 2's operator (DRAFT, issue #42).
//
// The operator's contract is chapter 12's wgmma_gemm's: A, B and C bf16,
// products accumulated in fp32 and C rounded to bf16 once. Two of its three
// paths compute in fp32 with kernels the book already has, so they need
// these two small kernels around them:
//   bf16_to_f32   widens A and B for the portable path (chapter 11's SGEMM):
//                 exact, a bf16 is the top half of a float32;
//   f32_to_bf16   rounds C once, to nearest, ties to even (what the tensor
//                 cores' bf16 output and cudabook.bf16.to_bf16 do), for the
//                 portable and mma.sync paths.
// Integer arithmetic only, so the file compiles for every architecture the
// toolkit knows (no cuda_bf16.h intrinsics needed). A thread an element; n
// is 64-bit, so no size limit but the grid's.

#include <stdint.h>

extern "C" __global__ void bf16_to_f32(const uint16_t* __restrict__ in, float* __restrict__ out, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __uint_as_float((uint32_t)in[i] << 16);
}

extern "C" __global__ void f32_to_bf16(const float* __restrict__ in, uint16_t* __restrict__ out, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint32_t bits = __float_as_uint(in[i]);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {            // NaN: keep it a (quiet) NaN
        out[i] = (uint16_t)((bits >> 16) | 0x0040u);
        return;
    }
    out[i] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
