// The small kernels of a decode step besides the book's big ones (draft for
// Part V, "Serving a model"; not yet run on a GPU). bf16, float arithmetic.
//   bias_tail   y (B, N) += bias, then GELU (mode 1) or + res (mode 2):
//               the tail chapter 17's products fuse, here after a GEMV.
//   split_qkv   the step's q, k, v from c_attn's output (B, 3C): q to
//               (B, H, D), k and v appended to the paged cache at position
//               pos (page table (B, max_pages), pages of 2^page_shift keys,
//               a page holding every head's rows, as decode_attention.cu).

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float gelu_tanh(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void bias_tail(bf16* __restrict__ y, const bf16* __restrict__ bias,
                                     const bf16* __restrict__ res, int B, int N, int mode)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * N) return;
    float v = __bfloat162float(y[i]) + __bfloat162float(bias[i % N]);
    if (mode == 1) v = gelu_tanh(v);
    else if (mode == 2) v += __bfloat162float(res[i]);
    y[i] = __float2bfloat16_rn(v);
}

extern "C" __global__ void split_qkv(const bf16* __restrict__ qkv, bf16* __restrict__ q,
                                     bf16* __restrict__ cache_k, bf16* __restrict__ cache_v,
                                     const int* __restrict__ block_table, int max_pages, int page_shift,
                                     int B, int H, int D, int pos)
{
    const int C = H * D;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;         // (b, h, d) of q, k and v
    if (i >= B * C) return;
    const int b = i / C, hd = i % C, h = hd / D, d = hd % D;
    const bf16* row = qkv + (size_t)b * 3 * C;
    q[i] = row[hd];                                               // (B, H, D) is (B, C)
    const int phys = block_table[(size_t)b * max_pages + (pos >> page_shift)];
    const size_t at = ((((size_t)phys * H + h) << page_shift) | (pos & ((1 << page_shift) - 1))) * D + d;
    cache_k[at] = row[C + hd];
    cache_v[at] = row[2 * C + hd];
}
