// Solution to exercise 1: read_staircase's read_sum and pointer_chase's
// chase without their __restrict__ promises (read_plain, chase_plain), and
// read_sum with __ldg (read_ldg). The loops are the chapter's, line for line;
// only how x (or chain) is declared and loaded changes. read_rolled keeps
// read_sum's promise but forbids unrolling its loop, as read_ldg's asm load
// turns out to do (see the exercise).

// --8<-- [start:kernel]
__device__ __forceinline__ void warp_total(unsigned acc, unsigned* total)
{
    for (int offset = 16; offset > 0; offset >>= 1)     // add up the warp's 32 sums
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, acc);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_plain(const uint4* x, long long n4, int passes, unsigned* total)   // no promise
{
    unsigned acc = 0;
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = first; i < n4; i += step) {
            uint4 v = x[i];                              // total might alias x: a plain load
            acc += v.x + v.y + v.z + v.w;
        }
    warp_total(acc, total);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_ldg(const uint4* x, long long n4, int passes, unsigned* total)     // no promise, but __ldg
{
    unsigned acc = 0;
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = first; i < n4; i += step) {
            uint4 v = __ldg(&x[i]);                      // the read-only path, asked for by name
            acc += v.x + v.y + v.z + v.w;
        }
    warp_total(acc, total);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_rolled(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ total)
{
    unsigned acc = 0;                                    // read_sum, one load per loop trip
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {
#pragma unroll 1
        for (long long i = first; i < n4; i += step) {
            uint4 v = x[i];
            acc += v.x + v.y + v.z + v.w;
        }
    }
    warp_total(acc, total);
}

extern "C" __global__ void chase_plain(const unsigned* chain, unsigned start, int warm, int steps,
                                       unsigned* last, long long* cycles, long long* nanoseconds)
{
    unsigned j = start;                                  // pointer_chase's chase, minus __restrict__
    for (int k = 0; k < warm; ++k) j = chain[j];
    long long c0 = clock64(), t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int k = 0; k < steps; ++k) j = chain[j];
    long long c1 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    *last = j;
    *cycles = c1 - c0;
    *nanoseconds = t1 - t0;
}
// --8<-- [end:kernel]
