// The roofline, walked: y[i] = x[i] after F fused multiply-adds, for F from
// 1 to 512. Every element still moves 8 bytes (a 4-byte read and a 4-byte
// write), so F sets the arithmetic intensity, 2F FLOPs per 8 bytes, and
// nothing else changes from one kernel to the next.
//
// Host program: intensity_sweep.py. New since peak_flops.cu: the FMA chains
// now start from data read from memory and end in data written back, so the
// same kernel is memory-bound for small F and compute-bound for large F.
// Loads and stores are float4s with a scalar tail, as in add_vectorized.cu;
// x and y must start on 16-byte boundaries (the host wrapper checks it).

// --8<-- [start:kernel]
template <int FMAS>
__device__ __forceinline__ float4 chains(float4 v, float a, float b)
{
#pragma unroll 8
    for (int k = 0; k < FMAS; ++k) {                        // (1)!
        v.x = fmaf(v.x, a, b);                              // 2 FLOPs each, in registers
        v.y = fmaf(v.y, a, b);
        v.z = fmaf(v.z, a, b);
        v.w = fmaf(v.w, a, b);
    }
    return v;
}

template <int FMAS>
__device__ __forceinline__ void fma_sweep(const float* __restrict__ x, float* __restrict__ y,
                                          int n, float a, float b)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (size_t i = tid; i < n4; i += stride) {
        const float4 v = x4[i];                             // 16 bytes in
        y4[i] = chains<FMAS>(v, a, b);                      // 16 bytes out
    }
    const size_t tail = n4 * 4;
    if (tid < n - tail) {
        const float v = x[tail + tid];
        y[tail + tid] = chains<FMAS>(make_float4(v, v, v, v), a, b).x;   // (2)!
    }
}

// One kernel per F, so every loop above has a trip count known to the compiler.
#define ARGS const float* __restrict__ x, float* __restrict__ y, int n, float a, float b
extern "C" __global__ void fma_1(ARGS) { fma_sweep<1>(x, y, n, a, b); }
extern "C" __global__ void fma_2(ARGS) { fma_sweep<2>(x, y, n, a, b); }
extern "C" __global__ void fma_4(ARGS) { fma_sweep<4>(x, y, n, a, b); }
extern "C" __global__ void fma_8(ARGS) { fma_sweep<8>(x, y, n, a, b); }
extern "C" __global__ void fma_16(ARGS) { fma_sweep<16>(x, y, n, a, b); }
extern "C" __global__ void fma_32(ARGS) { fma_sweep<32>(x, y, n, a, b); }
extern "C" __global__ void fma_48(ARGS) { fma_sweep<48>(x, y, n, a, b); }
extern "C" __global__ void fma_64(ARGS) { fma_sweep<64>(x, y, n, a, b); }
extern "C" __global__ void fma_96(ARGS) { fma_sweep<96>(x, y, n, a, b); }
extern "C" __global__ void fma_128(ARGS) { fma_sweep<128>(x, y, n, a, b); }
extern "C" __global__ void fma_256(ARGS) { fma_sweep<256>(x, y, n, a, b); }
extern "C" __global__ void fma_512(ARGS) { fma_sweep<512>(x, y, n, a, b); }
// --8<-- [end:kernel]
