// A first warp shuffle: summing n floats.
//
// Each thread adds up its share of the input in a grid-stride loop. Then the
// 32 threads of each warp combine their 32 partial sums with five shuffles,
// without touching memory, and lane 0 of each warp adds the warp's total to
// the result with one atomicAdd. The host sets the result to 0 first.
//
// Host program: warp_sum.py.

// --8<-- [start:warp]
__device__ __forceinline__ float warp_sum(float v)
{
    // After the step with offset 16, lane i holds v[i] + v[i + 16] (lanes 0-15
    // matter); after 8, lane i holds four values; ... after 1, lane 0 holds all 32.
    for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffffu, v, offset);  // (1)!
    }
    return v;                                           // (2)!
}
// --8<-- [end:warp]

// --8<-- [start:kernel]
extern "C" __global__ void sum_kernel(const float* __restrict__ x,
                                      float* __restrict__ total, int n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float v = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        v += x[i];                                      // (1)!
    }
    v = warp_sum(v);                                    // every lane takes part
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(total, v);                            // (2)!
    }
}
// --8<-- [end:kernel]
