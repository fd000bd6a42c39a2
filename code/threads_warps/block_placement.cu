// Where and when does each block run? Thread 0 of every block records the
// SM it landed on (%smid) and the global nanosecond timer (%globaltimer) when
// the block starts and when it ends, while all threads of the block spin for
// the same number of clock cycles. Every block does the same work, so the
// record shows only what the block scheduler did.
//
// Host program: block_placement.py (also used by ex1_tail_effect.py and
// ex3_smem_limit.py, which launch it with other grids and shared memory).

// --8<-- [start:timers]
__device__ __forceinline__ unsigned int sm_id()
{
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));     // which SM runs this thread
    return id;
}

__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); // one clock for the whole GPU
    return t;
}
// --8<-- [end:timers]

// --8<-- [start:kernel]
extern "C" __global__ void place_blocks(unsigned int* __restrict__ smid,
                                        unsigned long long* __restrict__ start,
                                        unsigned long long* __restrict__ end,
                                        long long spin_cycles)
{
    unsigned long long t0 = 0;
    if (threadIdx.x == 0) {
        t0 = global_ns();                                  // (1)!
    }

    const long long c0 = clock64();                        // (2)!
    while (clock64() - c0 < spin_cycles) {
    }
    __syncthreads();                                       // (3)!

    if (threadIdx.x == 0) {
        smid[blockIdx.x] = sm_id();
        start[blockIdx.x] = t0;
        end[blockIdx.x] = global_ns();
    }
}
// --8<-- [end:kernel]
