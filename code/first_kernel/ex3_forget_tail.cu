// Exercise 3 of "Your first kernel": the vectorised add WITHOUT its scalar
// tail. It is add_vectorized.cu with the last four lines of the kernel
// removed, so the last n % 4 elements are never written.
//
// Host program: ex3_forget_tail.py, which shows which sizes this gets wrong.

// --8<-- [start:kernel]
extern "C" __global__ void add_no_tail(const float* __restrict__ a,
                                       const float* __restrict__ b,
                                       float* __restrict__ c,
                                       int n)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = n / 4;

    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    for (size_t i = tid; i < n4; i += stride) {
        float4 x = a4[i];
        float4 y = b4[i];
        c4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    // (the tail is missing: elements n4 * 4 ... n - 1 are never written)
}
// --8<-- [end:kernel]
