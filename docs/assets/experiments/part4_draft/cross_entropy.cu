// Softmax and cross-entropy, forward and backward, in one pass over the
// logits (draft for Part IV, "Backpropagation on the GPU").
//
// For row r of the logits x (N rows of V classes, stored bf16 with a row
// stride of Vp >= V, Vp a multiple of 8, as llm.c pads GPT-2's 50,257 to
// 50,304), with target class t_r:
//   loss[r]      = log(sum_j exp(x[r,j])) - x[r,t_r]
//   dlogits[r,j] = (softmax(x[r])_j - [j == t_r]) * scale     (scale = 1/N
//                                                             for a mean loss)
// and dlogits[r,j] = 0 in the padding, V <= j < Vp.
//
// One block of THREADS threads per row. The row is read from memory once:
// each 16-byte piece goes to shared memory as it is folded into the thread's
// running maximum and sum (the online softmax, one rescaling a piece). The
// block merges the threads' (m, d), and the gradient is written from the
// copy in shared memory, never from a second read of the row. Vp bf16 values
// of shared memory a block: 100,608 bytes for GPT-2's padded vocabulary, so
// two blocks fit on an SM.

#include <cuda_bf16.h>

#define THREADS 1024

// --8<-- [start:fold]
// Fold 8 values into a running maximum m and a running sum d of exp(x - m);
// -inf marks a column past the row (it adds nothing).
__device__ __forceinline__ void fold8(float& m, float& d, const float (&f)[8])
{
    float c = f[0];
#pragma unroll
    for (int k = 1; k < 8; ++k) c = fmaxf(c, f[k]);
    const float m_new = fmaxf(m, c);
    if (m_new == -INFINITY) return;                 // nothing finite yet
    float s = d * expf(m - m_new);
#pragma unroll
    for (int k = 0; k < 8; ++k) s += expf(f[k] - m_new);
    d = s;
    m = m_new;
}
// --8<-- [end:fold]

template <typename Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float* scratch)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();                                // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[lane];                              // THREADS / 32 == 32 warps: one value a lane
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };

// --8<-- [start:kernel]
extern "C" __global__ void __launch_bounds__(THREADS)
cross_entropy_fwd_bwd(const __nv_bfloat16* __restrict__ logits, const int* __restrict__ targets,
                      float* __restrict__ losses, __nv_bfloat16* __restrict__ dlogits,
                      int V, int Vp, float scale)
{
    extern __shared__ uint4 row[];                  // the row, Vp / 8 pieces of 16 bytes
    __shared__ float scratch[32];
    const size_t r = blockIdx.x;
    const uint4* x = reinterpret_cast<const uint4*>(logits + r * Vp);
    const int pieces = Vp / 8;

    float m = -INFINITY, d = 0.0f;                  // one read of the row
    for (int i = threadIdx.x; i < pieces; i += THREADS) {
        const uint4 raw = x[i];
        row[i] = raw;
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
        float f[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = (8 * i + k < V) ? __bfloat162float(e[k]) : -INFINITY;
        fold8(m, d, f);
    }
    const float row_max = block_reduce(m, MaxOp(), scratch);
    d = (m == -INFINITY) ? 0.0f : d * expf(m - row_max);
    const float sum = block_reduce(d, SumOp(), scratch);   // after its barriers, row[] is complete

    const int t = targets[r];
    const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(row);
    if (threadIdx.x == 0) losses[r] = logf(sum) + row_max - __bfloat162float(xs[t]);

    const float inv = 1.0f / sum;
    uint4* g = reinterpret_cast<uint4*>(dlogits + r * Vp);
    for (int i = threadIdx.x; i < pieces; i += THREADS) {   // the gradient, from shared memory
        const uint4 raw = row[i];
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
        uint4 out;
        __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int j = 8 * i + k;
            const float p = expf(__bfloat162float(e[k]) - row_max) * inv;
            o[k] = __float2bfloat16_rn(j < V ? (p - (j == t ? 1.0f : 0.0f)) * scale : 0.0f);
        }
        g[i] = out;
    }
}
// --8<-- [end:kernel]
