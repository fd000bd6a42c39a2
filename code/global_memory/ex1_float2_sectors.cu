// Solution to exercise 1: the strided copy with 8-byte elements (float2).
// y[i] = x[i * stride + offset], counted in float2s.

// --8<-- [start:kernel]
extern "C" __global__ void copy_strided2(const float2* __restrict__ x,
                                         float2* __restrict__ y,
                                         int n, int stride, int offset)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[(long long)i * stride + offset];
    }
}
// --8<-- [end:kernel]
