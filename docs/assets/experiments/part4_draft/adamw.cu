// AdamW over every parameter of a model at once, with global-norm gradient
// clipping (draft for Part IV, "A training step, end to end").
//
// All parameters live in one flat buffer, as llm.c keeps them, so one launch
// updates the whole model: that is what "multi-tensor" comes to when the
// tensors are contiguous. Per parameter:
//   bf16 weights w (what the forward pass reads), bf16 gradients g,
//   fp32 master weights p, fp32 first and second moments m and v.
//
// Three kernels:
//   grad_norm_sq  sum of g^2 over the buffer: each thread in float32 over its
//                 few elements, each block's partial in float64, written to
//                 partials[blockIdx.x] (no atomics: the sum does not depend
//                 on the order blocks finish).
//   clip_scale    one block: the partials added in a fixed order, and the
//                 clip scale s = min(1, max_norm / ||g||) (1 if max_norm <= 0).
//   adamw         four parameters a thread:
//                   m = b1 m + (1 - b1) s g
//                   v = b2 v + (1 - b2) (s g)^2
//                   p = p - lr (m / c1 / (sqrt(v / c2) + eps) + wd p)
//                   w = bf16(p)
//                 with c1 = 1 - b1^t, c2 = 1 - b2^t from the host.
// Bytes a parameter: the update reads g 2, p 4, m 4, v 4 and writes p 4, m 4,
// v 4, w 2 (28); the norm reads g once more (2): 30 for the step.

#include <cuda_bf16.h>

#define THREADS 256

// --8<-- [start:norm]
extern "C" __global__ void __launch_bounds__(THREADS)
grad_norm_sq(const __nv_bfloat16* __restrict__ g, long long n, double* __restrict__ partials)
{
    float s = 0.0f;
    for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS) {
        const float x = __bfloat162float(g[i]);
        s = fmaf(x, x, s);
    }
    double v = s;                                   // the block's sum in float64
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __shared__ double warps[THREADS / 32];
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double b = 0.0;
        for (int w = 0; w < THREADS / 32; ++w) b += warps[w];
        partials[blockIdx.x] = b;
    }
}
// --8<-- [end:norm]

struct AdamW {                                      // the step's constants
    float lr, b1, b2, eps, wd, c1, c2;
};

// --8<-- [start:adamw]
__device__ __forceinline__ float step1(float g, float& p, float& m, float& v, const AdamW& h, float s)
{
    const float gs = g * s;
    m = fmaf(h.b1, m, (1.0f - h.b1) * gs);
    v = fmaf(h.b2, v, (1.0f - h.b2) * gs * gs);
    const float update = (m / h.c1) / (sqrtf(v / h.c2) + h.eps);
    p -= h.lr * (update + h.wd * p);
    return p;
}

extern "C" __global__ void __launch_bounds__(THREADS)
clip_scale(const double* __restrict__ partials, int n_partials, float max_norm, float* __restrict__ scale)
{
    double sq = 0.0;
    for (int b = threadIdx.x; b < n_partials; b += THREADS) sq += partials[b];
    __shared__ double sums[THREADS];
    sums[threadIdx.x] = sq;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {   // a fixed tree: the same sum every run
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float norm = (float)sqrt(sums[0]);
        scale[0] = (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
        scale[1] = norm;                            // kept for the training log
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
adamw(const __nv_bfloat16* __restrict__ g, float* __restrict__ p, float* __restrict__ m,
      float* __restrict__ v, __nv_bfloat16* __restrict__ w, long long n,
      const float* __restrict__ scale, float lr, float b1, float b2, float eps, float wd, float c1, float c2)
{
    const AdamW h{lr, b1, b2, eps, wd, c1, c2};
    const float s = scale[0];
    const long long i = 4 * (blockIdx.x * (long long)THREADS + threadIdx.x);
    if (i + 4 <= n) {                               // four parameters, 16-byte fp32 accesses
        const uint2 graw = *reinterpret_cast<const uint2*>(g + i);
        const __nv_bfloat16* gb = reinterpret_cast<const __nv_bfloat16*>(&graw);
        float4 pp = *reinterpret_cast<float4*>(p + i);
        float4 mm = *reinterpret_cast<float4*>(m + i);
        float4 vv = *reinterpret_cast<float4*>(v + i);
        uint2 wraw;
        __nv_bfloat16* wb = reinterpret_cast<__nv_bfloat16*>(&wraw);
        wb[0] = __float2bfloat16_rn(step1(__bfloat162float(gb[0]), pp.x, mm.x, vv.x, h, s));
        wb[1] = __float2bfloat16_rn(step1(__bfloat162float(gb[1]), pp.y, mm.y, vv.y, h, s));
        wb[2] = __float2bfloat16_rn(step1(__bfloat162float(gb[2]), pp.z, mm.z, vv.z, h, s));
        wb[3] = __float2bfloat16_rn(step1(__bfloat162float(gb[3]), pp.w, mm.w, vv.w, h, s));
        *reinterpret_cast<float4*>(p + i) = pp;
        *reinterpret_cast<float4*>(m + i) = mm;
        *reinterpret_cast<float4*>(v + i) = vv;
        *reinterpret_cast<uint2*>(w + i) = wraw;
    } else {                                        // the last n % 4, one at a time
        for (long long j = i; j < n; ++j)
            w[j] = __float2bfloat16_rn(step1(__bfloat162float(g[j]), p[j], m[j], v[j], h, s));
    }
}
// --8<-- [end:adamw]
