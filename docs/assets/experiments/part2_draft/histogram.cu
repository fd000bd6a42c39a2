// A histogram of bytes: 256 counters that every thread may want at once
// (draft for issue #38, "privatisation", in Reductions and scans). Not yet
// run on a GPU.
//
// Three kernels, each reading the bytes 16 at a time (uint4) in a
// grid-stride loop over one wave of blocks:
//   hist_global   one atomicAdd into the 256 global counters per byte: every
//                 thread of the GPU contends for the same 256 addresses in
//                 the L2, and a skewed input (text: spaces and 'e') piles
//                 its atomics onto a few of them.
//   hist_shared   privatisation: each block counts into its own 256
//                 counters in shared memory (atomics there are the SM's,
//                 not the L2's), then adds them to the global counters,
//                 256 atomics a block instead of one a byte.
//   hist_warps    more privatisation: WARPS_PER_COPY warps share one copy of
//                 the counters, so fewer threads contend for each shared
//                 counter when the input is skewed; the copies are added at
//                 the end of the block.

#include <stdint.h>

#define THREADS 256
#define BINS 256

__device__ __forceinline__ void bytes_of(const uint4& v, uint32_t (&w)[4])
{
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}

// --8<-- [start:global]
extern "C" __global__ void __launch_bounds__(THREADS)
hist_global(const uint4* __restrict__ data, long long n16, unsigned int* __restrict__ counts)
{
    for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n16; i += (long long)gridDim.x * THREADS) {
        uint32_t w[4];
        bytes_of(data[i], w);
#pragma unroll
        for (int k = 0; k < 16; ++k) atomicAdd(&counts[(w[k / 4] >> (8 * (k % 4))) & 0xFF], 1u);
    }
}
// --8<-- [end:global]

// --8<-- [start:shared]
template <int COPIES>
__device__ __forceinline__ void hist_private(const uint4* __restrict__ data, long long n16,
                                             unsigned int* __restrict__ counts)
{
    __shared__ unsigned int local[COPIES][BINS];
    for (int b = threadIdx.x; b < COPIES * BINS; b += THREADS) (&local[0][0])[b] = 0;
    __syncthreads();
    unsigned int* mine = local[(threadIdx.x / 32) % COPIES];   // this warp's copy
    for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n16; i += (long long)gridDim.x * THREADS) {
        uint32_t w[4];
        bytes_of(data[i], w);
#pragma unroll
        for (int k = 0; k < 16; ++k) atomicAdd(&mine[(w[k / 4] >> (8 * (k % 4))) & 0xFF], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += THREADS) {        // the block's copies, then one global add
        unsigned int s = 0;
#pragma unroll
        for (int c = 0; c < COPIES; ++c) s += local[c][b];
        if (s) atomicAdd(&counts[b], s);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
hist_shared(const uint4* __restrict__ data, long long n16, unsigned int* __restrict__ counts)
{
    hist_private<1>(data, n16, counts);
}

extern "C" __global__ void __launch_bounds__(THREADS)
hist_warps(const uint4* __restrict__ data, long long n16, unsigned int* __restrict__ counts)
{
    hist_private<THREADS / 32>(data, n16, counts);      // one copy a warp: 8 KiB a block
}
// --8<-- [end:shared]

// The bytes past the last whole 16 (n % 16 of them), one thread each.
extern "C" __global__ void hist_tail(const uint8_t* __restrict__ data, long long start, long long n,
                                     unsigned int* __restrict__ counts)
{
    const long long i = start + threadIdx.x;
    if (i < n) atomicAdd(&counts[data[i]], 1u);
}
