// Exercise 3 of "Profile before you optimise": a polynomial by Horner's rule,
// y[i] = c0 + c1 x + ... + cD x^D, evaluated as (((cD x + cD-1) x + ...) x + c0:
// D fused multiply-adds per element, for 8 bytes moved. Two degrees, one on
// each side of the ridge point. The coefficients sit in constant memory; the
// loop is unrolled, so each FMA reads its coefficient straight from there.
//
// Host program: ex3_horner.py. x and y must start on 16-byte boundaries (the
// host wrapper checks it).

// --8<-- [start:kernel]
#define MAX_DEGREE 256
__constant__ float coef[MAX_DEGREE + 1];

template <int D>
__device__ __forceinline__ float horner(float x)
{
    float p = coef[D];
#pragma unroll
    for (int j = D - 1; j >= 0; --j) p = fmaf(p, x, coef[j]);
    return p;
}

template <int D>
__device__ __forceinline__ void polynomial(const float* __restrict__ x, float* __restrict__ y, int n)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t i = tid; i < n4; i += stride) {
        const float4 v = x4[i];
        y4[i] = make_float4(horner<D>(v.x), horner<D>(v.y), horner<D>(v.z), horner<D>(v.w));
    }
    const size_t tail = n4 * 4;
    if (tid < n - tail) {
        y[tail + tid] = horner<D>(x[tail + tid]);
    }
}

extern "C" __global__ void horner_16(const float* __restrict__ x, float* __restrict__ y, int n)
{
    polynomial<16>(x, y, n);
}

extern "C" __global__ void horner_256(const float* __restrict__ x, float* __restrict__ y, int n)
{
    polynomial<MAX_DEGREE>(x, y, n);
}
// --8<-- [end:kernel]
