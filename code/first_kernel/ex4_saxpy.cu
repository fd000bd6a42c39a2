// Exercise 4 of "Your first kernel": SAXPY, y = alpha * x + y, in the style of
// version 3 (add_vectorized.cu): float4 loads and stores, a grid-stride loop,
// and a scalar tail for the last n % 4 elements.
//
// Host program: ex4_saxpy.py. Per element it reads x and y and writes y:
// 12 bytes, one fused multiply-add.

// --8<-- [start:kernel]
extern "C" __global__ void saxpy(float alpha,
                                 const float* __restrict__ x,
                                 float* __restrict__ y,
                                 int n)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = n / 4;

    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t i = tid; i < n4; i += stride) {
        const float4 a = x4[i];
        float4 b = y4[i];
        b.x = fmaf(alpha, a.x, b.x);
        b.y = fmaf(alpha, a.y, b.y);
        b.z = fmaf(alpha, a.z, b.z);
        b.w = fmaf(alpha, a.w, b.w);
        y4[i] = b;
    }

    const size_t tail = n4 * 4;
    if (tid < n - tail) {
        y[tail + tid] = fmaf(alpha, x[tail + tid], y[tail + tid]);
    }
}
// --8<-- [end:kernel]
