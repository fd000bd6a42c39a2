// The memory staircase as bandwidth: the whole GPU reads a buffer over and
// over. While the buffer fits in the caches, the passes after the first are
// served by them; once it does not, every pass comes from HBM.
//
// Each thread reads the same 16-byte pieces on every pass, so a buffer
// small enough for the L1 caches of all the SMs together is served by
// them. read_sum_l2 loads with __ldcg ("cache global": through the L2
// only), so the same sweep shows the L2's own step. The two kernels differ
// in the load's cache operator and nothing else: both keep four loads in
// flight per thread, unrolled by hand (the compiler unrolls a plain load
// on its own, but not the inline assembly behind __ldcg), and each warp
// stores its own partial sum, so no chain of atomics on one address adds a
// tail after the last load.

// --8<-- [start:kernel]
template <bool L2_ONLY>
__device__ __forceinline__ uint4 load(const uint4* p)
{
    return L2_ONLY ? __ldcg(p) : *p;                    // the only difference between the kernels
}

template <bool L2_ONLY>
__device__ __forceinline__ void read_sum_body(const uint4* __restrict__ x, long long n4, int passes,
                                              unsigned* __restrict__ partials)
{
    unsigned acc = 0;                                   // sums wrap modulo 2^32: exact in any order
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {                  // the same thread reads the same
        long long i = first;                            // 16 bytes on every pass
#pragma unroll 1
        for (; i + 3 * step < n4; i += 4 * step) {      // four loads in flight, then four adds
            const uint4 a = load<L2_ONLY>(&x[i]);
            const uint4 b = load<L2_ONLY>(&x[i + step]);
            const uint4 c = load<L2_ONLY>(&x[i + 2 * step]);
            const uint4 d = load<L2_ONLY>(&x[i + 3 * step]);
            acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w)
                 + (c.x + c.y + c.z + c.w) + (d.x + d.y + d.z + d.w);
        }
#pragma unroll 1
        for (; i < n4; i += step) {                     // the last few, one at a time
            const uint4 a = load<L2_ONLY>(&x[i]);
            acc += a.x + a.y + a.z + a.w;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1)     // add up the warp's 32 sums
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0) partials[first >> 5] = acc;   // one plain store per warp
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_sum(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ partials)
{
    read_sum_body<false>(x, n4, passes, partials);      // through the L1 and the L2
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_sum_l2(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ partials)
{
    read_sum_body<true>(x, n4, passes, partials);       // through the L2 only
}
// --8<-- [end:kernel]
