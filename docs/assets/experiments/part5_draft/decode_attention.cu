// Decoding's attention: one new query a sequence against its KV cache,
// split along the cache so that a batch of one fills the GPU (draft for
// Part V, "Serving a model"; not yet run on a GPU).
//
// q (B, H, D) bf16: the step's query for each sequence and head; K, V
// (B, HKV, L, D) bf16: the cache, HKV heads of keys and values, L of them
// valid (the same L for every sequence here). Grouped-query attention:
// query head h reads KV head h / G, G = H / HKV (G = 1 is multi-head
// attention). The output o (B, H, D) bf16 = softmax(q K^T / sqrt(D)) V.
//
// The cache may be paged (vLLM's layout): pages of a fixed number of keys,
// anywhere in one pool, a sequence's pages listed in its row of a block
// table.
// decode_split: one block per (chunk of `span` keys, KV head, sequence);
// the host picks span so the grid fills the GPU (span = L: no split).
// It loads the G queries that share its KV head, so each key and value is
// read once for G queries (GQA's saving). Each warp takes 32 keys at a
// time, a key a lane: the lane's scores for the G queries, then the
// warp's online softmax (a running maximum and sum a query), then the
// values: each lane owns D / 32 of the output's dimensions and adds the 32
// keys' values weighted by their probabilities (broadcast by shuffles).
// The block's 4 warps merge in shared memory; the block writes, for each
// of its G queries, the chunk's maximum m, sum l and normalised output.
// decode_combine: one block per (sequence, query head) merges the chunks:
// m = max m_c, l = sum l_c 2^(m_c - m), o = sum o_c l_c 2^(m_c - m) / l
// (base 2: the scores are scaled by log2(e) / sqrt(D) once).

#include <cuda_bf16.h>
#include <stdint.h>

#define THREADS 128
#define WARPS (THREADS / 32)

typedef __nv_bfloat16 bf16;

// --8<-- [start:split]
// Where key `key`'s row of the cache starts, in elements: contiguous,
// K[b, hkv, key, :]; or paged (block_table not null), pages of 2^page_shift
// keys, K[block_table[b, key >> page_shift], hkv, key & (page - 1), :], a
// page holding every KV head's rows for its keys. K and V share the
// layout, so one offset serves both.
struct Cache {
    const int* block_table;
    int L, page_shift, max_pages, HKV;
    __device__ __forceinline__ size_t offset(int b, int hkv, int key, int D) const
    {
        if (block_table == nullptr) return (((size_t)b * HKV + hkv) * L + key) * D;
        const int phys = block_table[(size_t)b * max_pages + (key >> page_shift)];
        return (((size_t)phys * HKV + hkv) << page_shift | (key & ((1 << page_shift) - 1))) * D;
    }
};

// DL bf16 values (4 or 8 bytes, aligned: a lane's DL start at DL lane) as floats.
template <int DL>
__device__ __forceinline__ void load_dl(const bf16* p, float (&v)[DL])
{
    if constexpr (DL == 2) {
        const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(p);
        v[0] = __low2float(a); v[1] = __high2float(a);
    } else {
        static_assert(DL == 4, "D is 64 or 128");
        const uint2 raw = *reinterpret_cast<const uint2*>(p);
        const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&raw);
        v[0] = __low2float(a[0]); v[1] = __high2float(a[0]); v[2] = __low2float(a[1]); v[3] = __high2float(a[1]);
    }
}

template <int D, int G>
__device__ __forceinline__ void split_body(const bf16* __restrict__ q, const bf16* __restrict__ K,
                                           const bf16* __restrict__ V, const Cache cache,
                                           float* __restrict__ part_ml, float* __restrict__ part_o,
                                           bf16* __restrict__ o, int L, int span, float c)
{
    constexpr int DL = D / 32;                          // output dimensions a lane
    const int chunk = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
    const int HKV = gridDim.y, chunks = gridDim.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __shared__ float qs[G][D];                          // the G queries, float, times c
    __shared__ float wm[WARPS][G], wl[WARPS][G], wo[WARPS][G][D];
    for (int i = threadIdx.x; i < G * D; i += THREADS) {
        const int g = i / D, d = i % D;
        qs[g][d] = c * __bfloat162float(q[((size_t)b * HKV * G + hkv * G + g) * D + d]);
    }
    __syncthreads();

    float m[G], l[G], acc[G][DL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY; l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < DL; ++i) acc[g][i] = 0.0f;
    }
    const int k0 = chunk * span, k1 = min(L, k0 + span);
    for (int base = k0 + warp * 32; base < k1; base += THREADS) {
        const int key = base + lane;
        const bool valid = key < k1;
        const size_t off = valid ? cache.offset(b, hkv, key, D) : 0;   // this lane's key's row
        float s[G];                                     // this lane's key: its G scores (base 2)
#pragma unroll
        for (int g = 0; g < G; ++g) s[g] = 0.0f;
        if (valid) {
#pragma unroll
            for (int d0 = 0; d0 < D; d0 += 8) {
                const uint4 raw = *reinterpret_cast<const uint4*>(K + off + d0);
                const bf16* e = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float kv = __bfloat162float(e[j]);
#pragma unroll
                    for (int g = 0; g < G; ++g) s[g] = fmaf(qs[g][d0 + j], kv, s[g]);
                }
            }
        }
        float p[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {                   // the warp's online softmax step
            float mx = valid ? s[g] : -INFINITY;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float m_new = fmaxf(m[g], mx);        // finite: key base is valid
            const float r = exp2f(m[g] - m_new);        // 0 on the first step (m = -inf)
            p[g] = valid ? exp2f(s[g] - m_new) : 0.0f;
            float ps = p[g];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
            l[g] = l[g] * r + ps;
            m[g] = m_new;
#pragma unroll
            for (int i = 0; i < DL; ++i) acc[g][i] *= r;
        }
        const int n = min(32, k1 - base);               // the warp's valid keys
        for (int j = 0; j < n; ++j) {                   // the values, weighted: lane owns dims DL lane ..
            const size_t offj = __shfl_sync(0xffffffffu, off, j);   // key j's row, from lane j
            float vv[DL];
            load_dl<DL>(V + offj + DL * lane, vv);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float pj = __shfl_sync(0xffffffffu, p[g], j);
#pragma unroll
                for (int i = 0; i < DL; ++i) acc[g][i] = fmaf(pj, vv[i], acc[g][i]);
            }
        }
    }
    // The block's warps, merged in a fixed order.
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (lane == 0) { wm[warp][g] = m[g]; wl[warp][g] = l[g]; }
#pragma unroll
        for (int i = 0; i < DL; ++i) wo[warp][g][DL * lane + i] = acc[g][i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += THREADS) {
        const int g = i / D, d = i % D;
        float mm = -INFINITY;
        for (int w = 0; w < WARPS; ++w) mm = fmaxf(mm, wm[w][g]);
        float ll = 0.0f, oo = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            if (wm[w][g] == -INFINITY) continue;        // a warp with no keys in this chunk
            const float r = exp2f(wm[w][g] - mm);
            ll += wl[w][g] * r;
            oo += wo[w][g][d] * r;
        }
        const size_t bh = (size_t)b * HKV * G + hkv * G + g;
        if (chunks == 1) {                              // no split: the output itself, no combine
            o[bh * D + d] = __float2bfloat16_rn(oo / ll);
            continue;
        }
        const size_t row = bh * chunks + chunk;         // (b, h, chunk)
        part_o[row * D + d] = oo / ll;
        if (d == 0) { part_ml[2 * row] = mm; part_ml[2 * row + 1] = ll; }
    }
}
// --8<-- [end:split]

// --8<-- [start:combine]
// One block of D threads per (sequence, query head): the chunks merged in order.
extern "C" __global__ void decode_combine(const float* __restrict__ part_ml, const float* __restrict__ part_o,
                                          bf16* __restrict__ o, int chunks, int D)
{
    const size_t bh = blockIdx.x;
    const int d = threadIdx.x;
    float m = -INFINITY;
    for (int c = 0; c < chunks; ++c) m = fmaxf(m, part_ml[2 * (bh * chunks + c)]);
    float l = 0.0f, acc = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        const size_t row = bh * chunks + c;
        const float w = part_ml[2 * row + 1] * exp2f(part_ml[2 * row] - m);
        l += w;
        acc += w * part_o[row * D + d];
    }
    o[bh * D + d] = __float2bfloat16_rn(acc / l);
}
// --8<-- [end:combine]

#define SPLIT(D, G)                                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, 1)                                            \
    decode_split_d##D##_g##G(const bf16* q, const bf16* K, const bf16* V, const int* block_table,        \
                             int page_shift, int max_pages, float* part_ml, float* part_o, bf16* o,     \
                             int L, int span, float c)                                                  \
    {                                                                                                   \
        const Cache cache{block_table, L, page_shift, max_pages, (int)gridDim.y};                       \
        split_body<D, G>(q, K, V, cache, part_ml, part_o, o, L, span, c);                               \
    }
SPLIT(64, 1)
SPLIT(64, 4)
SPLIT(64, 8)
SPLIT(128, 1)
SPLIT(128, 4)
SPLIT(128, 8)
