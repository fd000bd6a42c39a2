// The memory staircase, measured as latency: one thread follows a chain of
// dependent loads (each address comes from the previous load), so no two
// loads overlap and each costs the full trip to wherever the data is: L1,
// L2 or HBM, depending on how big the chain's working set is.

// --8<-- [start:kernel]
extern "C" __global__ void chase(const unsigned* __restrict__ chain, unsigned start, int warm, int steps,
                                 unsigned* __restrict__ last, long long* __restrict__ cycles,
                                 long long* __restrict__ nanoseconds)
{
    unsigned j = start;
    for (int k = 0; k < warm; ++k) j = chain[j];       // warm-up: a pass over the chain fills the caches
    long long c0 = clock64(), t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int k = 0; k < steps; ++k) j = chain[j];      // timed: every load waits for the last
    long long c1 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    *last = j;                                         // the answer, so the loads cannot be skipped
    *cycles = c1 - c0;
    *nanoseconds = t1 - t0;
}
// --8<-- [end:kernel]
