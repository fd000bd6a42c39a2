// Solution to exercise 1: a read with and without the __restrict__ promise.
// read_promise is read_staircase's read_sum with its plain loop, before the
// chapter unrolled it by hand: one load a trip, the unrolling left to the
// compiler. read_plain drops the promise, read_ldg drops it too but loads
// with __ldg, and read_rolled keeps the promise but forbids unrolling, as
// read_ldg's asm load turns out to do (see the exercise). chase_plain is
// pointer_chase's chase without its promise. Only how x (or chain) is
// declared and loaded changes from one kernel to the next; each warp stores
// its partial sum, as read_sum does.

// --8<-- [start:kernel]
__device__ __forceinline__ void warp_total(unsigned acc, unsigned* partials)
{
    for (int offset = 16; offset > 0; offset >>= 1)     // add up the warp's 32 sums
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if ((threadIdx.x & 31) == 0) partials[first >> 5] = acc;   // one store per warp
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_promise(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ partials)
{
    unsigned acc = 0;                                    // the promise: nothing written overlaps x
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = first; i < n4; i += step) {
            uint4 v = x[i];
            acc += v.x + v.y + v.z + v.w;
        }
    warp_total(acc, partials);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_plain(const uint4* x, long long n4, int passes, unsigned* partials)   // no promise
{
    unsigned acc = 0;
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = first; i < n4; i += step) {
            uint4 v = x[i];                              // partials might alias x: a plain load
            acc += v.x + v.y + v.z + v.w;
        }
    warp_total(acc, partials);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_ldg(const uint4* x, long long n4, int passes, unsigned* partials)  // no promise, but __ldg
{
    unsigned acc = 0;
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = first; i < n4; i += step) {
            uint4 v = __ldg(&x[i]);                      // the read-only path, asked for by name
            acc += v.x + v.y + v.z + v.w;
        }
    warp_total(acc, partials);
}

extern "C" __global__ void __launch_bounds__(256, 8)
read_rolled(const uint4* __restrict__ x, long long n4, int passes, unsigned* __restrict__ partials)
{
    unsigned acc = 0;                                    // read_promise, one load per loop trip
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {
#pragma unroll 1
        for (long long i = first; i < n4; i += step) {
            uint4 v = x[i];
            acc += v.x + v.y + v.z + v.w;
        }
    }
    warp_total(acc, partials);
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
