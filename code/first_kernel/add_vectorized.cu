// Vector add with 16-byte loads and stores, and a scalar tail.
//
// Host program: add_vectorized.py. Changed since add_grid_stride.cu: each
// thread moves four floats at a time as one float4, so one instruction loads
// 16 bytes instead of 4. The last n % 4 elements do not fill a float4; the
// first few threads of the grid handle them one by one.
// Needs a, b and c aligned to 16 bytes (cudaMalloc gives 256); the host
// wrapper checks it.

// --8<-- [start:kernel]
extern "C" __global__ void add_vectorized(const float* __restrict__ a,
                                          const float* __restrict__ b,
                                          float* __restrict__ c,
                                          int n)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = n / 4;                                  // whole float4s

    const float4* a4 = reinterpret_cast<const float4*>(a);  // (1)!
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    for (size_t i = tid; i < n4; i += stride) {
        float4 x = a4[i];
        float4 y = b4[i];
        c4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }

    const size_t tail = n4 * 4;                               // (2)!
    if (tid < n - tail) {
        c[tail + tid] = a[tail + tid] + b[tail + tid];
    }
}
// --8<-- [end:kernel]
