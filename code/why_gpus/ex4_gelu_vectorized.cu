// Exercise 4 of "Why GPUs": GELU with 16-byte loads and stores, the way
// add_vectorized.cu does vector add: each thread handles float4s in a
// grid-stride loop, and the first threads handle the last n % 4 elements.
// gelu_four_scalar is the control: four elements a thread too, so the same
// number of blocks, but with 4-byte loads and stores. Against the chapter's
// one-element kernel it changes the block count alone; against
// gelu_vectorized, the load width alone.
//
// Host program: ex4_gelu_vectorized.py.

// --8<-- [start:kernel]
__device__ __forceinline__ float gelu1(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void gelu_vectorized(const float* __restrict__ x,
                                           float* __restrict__ y,
                                           int n)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = n / 4;

    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t i = tid; i < n4; i += stride) {
        const float4 v = x4[i];
        y4[i] = make_float4(gelu1(v.x), gelu1(v.y), gelu1(v.z), gelu1(v.w));
    }

    const size_t tail = n4 * 4;
    if (tid < n - tail) {
        y[tail + tid] = gelu1(x[tail + tid]);
    }
}

extern "C" __global__ void gelu_four_scalar(const float* __restrict__ x,
                                            float* __restrict__ y,
                                            int n)
{
    // A block covers 4 x blockDim.x elements; element j of a thread is
    // blockDim.x after its element j - 1, so each load of a warp is
    // 32 neighbouring floats, as in the one-element kernel.
    const size_t first = (size_t)blockIdx.x * blockDim.x * 4 + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const size_t i = first + (size_t)j * blockDim.x;
        if (i < n) {
            y[i] = gelu1(x[i]);
        }
    }
}
// --8<-- [end:kernel]
