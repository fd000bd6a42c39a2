// The memory staircase as bandwidth: the whole GPU reads a buffer over and
// over. While the buffer fits in the caches, the passes after the first are
// served by them; once it does not, every pass comes from HBM.
//
// Each thread reads the same 16-byte pieces on every pass, so a buffer
// small enough for the L1 caches of all the SMs together is served by
// them. read_sum_l2 loads with __ldcg ("cache global": through the L2
// only), so the same sweep shows the L2's own step.

// --8<-- [start:kernel]
template <bool L2_ONLY>
__device__ __forceinline__ void read_sum_body(const uint4* __restrict__ x, long long n4, int passes,
                                              unsigned* __restrict__ total)
{
    unsigned acc = 0;                                   // sums wrap modulo 2^32: exact in any order
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {
        for (long long i = first; i < n4; i += step) {  // the same thread reads the same
            uint4 v = L2_ONLY ? __ldcg(&x[i]) : x[i];   // 16 bytes on every pass
            acc += v.x + v.y + v.z + v.w;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1)     // add up the warp's 32 sums
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, acc);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_sum(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ total)
{
    read_sum_body<false>(x, n4, passes, total);         // through the L1 and the L2
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_sum_l2(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ total)
{
    read_sum_body<true>(x, n4, passes, total);          // through the L2 only
}
// --8<-- [end:kernel]
