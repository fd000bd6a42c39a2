// Exercise 1 of "Profile before you optimise": a bias add and a GELU fused
// into one kernel. y[r, c] = gelu(x[r, c] + bias[c]) for a row-major matrix
// whose rows are a multiple of 4 floats long, so a float4 never crosses a
// row. Unfused, the sum x + bias goes to memory and comes back for the GELU;
// fused, it stays in a register, and each element moves 8 bytes, not 16.
//
// Host program: ex1_bias_gelu.py. The GELU is the tanh form of "Why GPUs".
// x, bias and y must start on 16-byte boundaries (the host wrapper checks it).

// --8<-- [start:kernel]
__device__ __forceinline__ float gelu(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void bias_gelu(const float* __restrict__ x,
                                     const float* __restrict__ bias,
                                     float* __restrict__ y,
                                     int rows, int cols)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t cols4 = cols / 4;                  // cols is a multiple of 4
    const size_t n4 = (size_t)rows * cols4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t i = tid; i < n4; i += stride) {
        const float4 v = x4[i];
        const float4 b = b4[i % cols4];             // the bias is read from the cache, not from memory
        y4[i] = make_float4(gelu(v.x + b.x), gelu(v.y + b.y), gelu(v.z + b.z), gelu(v.w + b.w));
    }
}
// --8<-- [end:kernel]
