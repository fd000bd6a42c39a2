// Solution to exercise 2: stream compaction, keeping the positive elements
// of x, in order, with the chapter's scan.
//
// Host program: ex2_compact.py. Three launches: flag_kept writes a 1 for
// each element to keep and a 0 for the others; scan.cu's scan_lookback
// scans the flags (inclusive); scatter_kept writes each kept element to
// its place, the number of kept elements before it. That number is the
// exclusive scan, which is the inclusive scan minus the element's own flag.
// The flags are floats, so their sums are exact only up to 2^24: the host
// program refuses longer inputs.

#define BLOCK 256

// --8<-- [start:kernel]
__device__ __forceinline__ bool kept(float v)
{
    return v > 0.0f;                             // the test: keep the positive elements
}

extern "C" __global__ void flag_kept(const float* __restrict__ x, float* __restrict__ flags, int n)
{
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        flags[i] = kept(x[i]) ? 1.0f : 0.0f;
    }
}

// inclusive[i] = flags[0] + ... + flags[i], from the scan.
extern "C" __global__ void scatter_kept(const float* __restrict__ x,
                                        const float* __restrict__ inclusive,
                                        float* __restrict__ out,
                                        int n)
{
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n && kept(x[i])) {
        const int before = (int)inclusive[i] - 1;   // exclusive = inclusive - own flag (1 here)
        out[before] = x[i];
    }
}
// --8<-- [end:kernel]
