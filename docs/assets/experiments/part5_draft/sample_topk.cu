// Sampling the next token: temperature, top-k, and a draw by the inverse
// of the cumulative distribution (draft for Part V, "Serving a model";
// not yet run on a GPU).
//
// For each row of bf16 logits x (V of them, V <= MAX_V) with its uniform
// number u in [0, 1): keep the tokens whose logit is at least the k-th
// largest (ties at the threshold all kept, so possibly more than k), give
// each the weight exp((x_j - m) / T) (m the row's maximum, T the
// temperature), and return the first token j, in index order, whose
// running sum of weights reaches u times the total. One block a row:
//   1. the row into shared memory, each logit as a 16-bit key that sorts
//      as the number does (bf16 bits, negatives flipped);
//   2. the k-th largest key by two 256-bin histograms (its high byte,
//      then its low byte among those with that high byte): a radix select
//      over 65,536 possible values, no sort;
//   3. the weights of the kept tokens and a block-wide running sum in
//      index order (chapter 9's scan: each thread a run of the row, its
//      sum, a scan of the threads' sums, whose last value is the total);
//   4. the one thread whose run holds the crossing finds the token.

#include <cuda_bf16.h>
#include <stdint.h>

#define THREADS 256
#define MAX_V 65536                     // the keys fit 128 KiB of shared memory at most

__device__ __forceinline__ uint32_t key_of(uint16_t bits)    // order-preserving: larger number, larger key
{
    if (bits == 0x8000u) bits = 0;                     // -0 is +0: ties at zero stay together
    return (bits & 0x8000u) ? (~bits & 0xFFFFu) : (bits | 0x8000u);
}

__device__ __forceinline__ float value_of(uint32_t key)
{
    const uint16_t bits = (key & 0x8000u) ? (uint16_t)(key & 0x7FFFu) : (uint16_t)(~key & 0xFFFFu);
    return __bfloat162float(__ushort_as_bfloat16(bits));
}

// --8<-- [start:select]
// The largest key t such that at least k keys are >= t: the k-th largest.
__device__ uint32_t kth_largest(const uint16_t* keys, int V, int k, unsigned int* hist)
{
    uint32_t prefix = 0;                                   // the high byte, once found
    int need = k;                                          // how many more from the top we need
    for (int pass = 0; pass < 2; ++pass) {
        for (int b = threadIdx.x; b < 256; b += THREADS) hist[b] = 0;
        __syncthreads();
        for (int j = threadIdx.x; j < V; j += THREADS) {
            const uint32_t key = keys[j];
            if (pass == 0) atomicAdd(&hist[key >> 8], 1u);                 // shared-memory atomics:
            else if ((key >> 8) == prefix) atomicAdd(&hist[key & 0xFF], 1u);   // privatised, chapter 9
        }
        __syncthreads();
        __shared__ uint32_t found, left;
        if (threadIdx.x == 0) {                            // walk the bins from the top
            int b = 255, acc = 0;
            while (b > 0 && acc + (int)hist[b] < need) acc += hist[b--];
            found = b;
            left = need - acc;
        }
        __syncthreads();
        if (pass == 0) { prefix = found; need = left; }
        else prefix = (prefix << 8) | found;
        __syncthreads();
    }
    return prefix;
}
// --8<-- [end:select]

// --8<-- [start:top_p]
// Top-p (the nucleus) inside the top k: the kept tokens, at most MAX_KEPT,
// sorted by logit (ties by index) with a bitonic sort in shared memory;
// the fewest from the top whose weights reach top_p of the kept total;
// the draw among them in that order. More than MAX_KEPT kept (ties at the
// k-th past the cap; the host allows k <= 512) writes -2: an error, said.
#define MAX_KEPT 1024
__device__ void sample_top_p(const uint16_t* keys, int V, uint32_t threshold, float m, float inv_temperature,
                             float top_p, float u, int* out)
{
    __shared__ uint32_t list[MAX_KEPT];                  // key << 16 | (65535 - index)
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < V; j += THREADS)
        if (keys[j] >= threshold) {
            const int at = atomicAdd(&count, 1);         // any order: sorted next
            if (at < MAX_KEPT) list[at] = ((uint32_t)keys[j] << 16) | (0xFFFFu - (uint32_t)j);
        }
    __syncthreads();
    const int n = count;
    if (n > MAX_KEPT) {
        if (threadIdx.x == 0) *out = -2;
        return;
    }
    for (int i = n + threadIdx.x; i < MAX_KEPT; i += THREADS) list[i] = 0;   // padding sorts first
    __syncthreads();
    for (int size = 2; size <= MAX_KEPT; size <<= 1)      // bitonic sort, ascending
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < MAX_KEPT; i += THREADS) {
                const int l = i ^ stride;
                if (l > i) {
                    const uint32_t a = list[i], b = list[l];
                    if (((i & size) == 0) ? (a > b) : (a < b)) { list[i] = b; list[l] = a; }
                }
            }
            __syncthreads();
        }
    if (threadIdx.x != 0) return;
    // Largest first: list[MAX_KEPT - 1 - i] is the i-th.
    auto weight = [&](int i) {
        return expf((value_of(list[MAX_KEPT - 1 - i] >> 16) - m) * inv_temperature);
    };
    auto index = [&](int i) { return (int)(0xFFFFu - (list[MAX_KEPT - 1 - i] & 0xFFFFu)); };
    float total = 0.0f;
    for (int i = 0; i < n; ++i) total += weight(i);
    float cum = 0.0f;
    int c = n - 1;
    for (int i = 0; i < n; ++i) {
        cum += weight(i);
        if (cum >= top_p * total) { c = i; break; }
    }
    const float goal = u * cum;                          // cum: the nucleus's mass
    float s = 0.0f;
    int pick = index(0);
    for (int i = 0; i <= c; ++i) {
        const float w = weight(i);
        if (w == 0.0f) continue;
        pick = index(i);
        s += w;
        if (s > goal) break;
    }
    *out = pick;
}
// --8<-- [end:top_p]

// --8<-- [start:sample]
__device__ __forceinline__ void sample_row(const __nv_bfloat16* __restrict__ logits, float u_row,
                                           int* __restrict__ out, int V, int k, float inv_temperature,
                                           float top_p)
{
    extern __shared__ uint16_t keys[];                     // V of them
    __shared__ unsigned int hist[256];
    __shared__ float run_start[THREADS];
    const size_t r = blockIdx.x;
    const uint16_t* x = reinterpret_cast<const uint16_t*>(logits + r * V);
    uint32_t top = 0;
    for (int j = threadIdx.x; j < V; j += THREADS) {
        const uint32_t key = key_of(x[j]);
        keys[j] = (uint16_t)key;
        top = max(top, key);
    }
    for (int o = 16; o > 0; o >>= 1) top = max(top, __shfl_xor_sync(0xffffffffu, top, o));
    __shared__ uint32_t warp_top[THREADS / 32];
    if (threadIdx.x % 32 == 0) warp_top[threadIdx.x / 32] = top;
    __syncthreads();
    for (int w = 0; w < THREADS / 32; ++w) top = max(top, warp_top[w]);
    const float m = value_of(top);
    const uint32_t threshold = kth_largest(keys, V, k, hist);
    if (top_p < 1.0f) {                                  // the same for the whole block
        sample_top_p(keys, V, threshold, m, inv_temperature, top_p, u_row, out + r);
        return;
    }

    // Each thread a contiguous run of the row, so that a running sum in
    // index order is the threads' sums scanned, then the run's own.
    const int per = (V + THREADS - 1) / THREADS;
    const int j0 = threadIdx.x * per, j1 = min(V, j0 + per);
    float mine = 0.0f;
    for (int j = j0; j < j1; ++j)
        if (keys[j] >= threshold) mine += expf((value_of(keys[j]) - m) * inv_temperature);
    run_start[threadIdx.x] = mine;
    __shared__ float scan_total;
    __syncthreads();
    if (threadIdx.x == 0) {                                // the threads' sums, scanned in order
        float s = 0.0f;
        for (int t = 0; t < THREADS; ++t) { const float v = run_start[t]; run_start[t] = s; s += v; }
        scan_total = s;                                    // the total in the scan's own order
    }
    __syncthreads();
    // u < 1, so goal < scan_total, and exactly one thread t has
    // run_start[t] <= goal < run_start[t + 1] (scan_total past the last):
    // the run that holds the crossing, which has weight, so pick >= 0.
    const float goal = u_row * scan_total;
    float s = run_start[threadIdx.x];
    const float next = threadIdx.x + 1 < THREADS ? run_start[threadIdx.x + 1] : scan_total;
    if (s <= goal && goal < next) {
        int pick = -1;
        for (int j = j0; j < j1; ++j) {
            if (keys[j] < threshold) continue;
            const float w = expf((value_of(keys[j]) - m) * inv_temperature);
            if (w == 0.0f) continue;                       // an underflowed weight is never drawn
            pick = j;                                      // the last token with weight so far
            s += w;
            if (s > goal) break;
        }
        if (pick >= 0) out[r] = pick;
    }
}

// u from an array the host filled.
extern "C" __global__ void __launch_bounds__(THREADS)
sample_topk(const __nv_bfloat16* __restrict__ logits, const float* __restrict__ u, int* __restrict__ out,
            int V, int k, float inv_temperature, float top_p)
{
    sample_row(logits, u[blockIdx.x], out, V, k, inv_temperature, top_p);
}
// --8<-- [end:sample]

// --8<-- [start:philox]
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011): ten rounds of two 32 x 32 -> 64-bit products on a 128-bit
// counter under a 64-bit key. The same (key, counter) gives the same four
// words on any machine, so a draw can be replayed: key = the seed,
// counter = (row, step, 0, 0).
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k)
{
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return c;
}

// u in [0, 1): the first word's top 24 bits, exact in float32.
__device__ __forceinline__ float philox_uniform(uint32_t seed_lo, uint32_t seed_hi, uint32_t row, uint32_t step)
{
    const uint4 w = philox4x32_10(make_uint4(row, step, 0u, 0u), make_uint2(seed_lo, seed_hi));
    return (float)(w.x >> 8) * (1.0f / 16777216.0f);
}

extern "C" __global__ void __launch_bounds__(THREADS)
sample_topk_philox(const __nv_bfloat16* __restrict__ logits, uint32_t seed_lo, uint32_t seed_hi, uint32_t step,
                   int* __restrict__ out, int V, int k, float inv_temperature, float top_p)
{
    sample_row(logits, philox_uniform(seed_lo, seed_hi, blockIdx.x, step), out, V, k, inv_temperature, top_p);
}

// The known-answer test of Random123: counters and keys in, four words out each.
extern "C" __global__ void philox_kat(const uint4* __restrict__ ctr, const uint2* __restrict__ key,
                                      uint4* __restrict__ out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = philox4x32_10(ctr[i], key[i]);
}
// --8<-- [end:philox]
