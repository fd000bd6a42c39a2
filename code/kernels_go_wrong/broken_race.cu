// BROKEN ON PURPOSE: a tree reduction in shared memory with the barrier
// between its steps missing. The fix is fixed_race.cu.
//
// Host program: broken_race.py. At every step, thread t reads s[t + stride],
// a partial sum that another thread (often in another warp) wrote in the
// previous step. Without __syncthreads() nothing makes that thread finish
// its write first: a read-after-write race on shared memory, which
// compute-sanitizer --tool racecheck reports as a hazard.

#define BLOCK 256  // threads per block; must match BLOCK in the host program

// --8<-- [start:kernel]
extern "C" __global__ void block_sum(const float* __restrict__ x,
                                     float* __restrict__ sums,
                                     int n)
{
    __shared__ float s[BLOCK];
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * BLOCK + t;
    s[t] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            s[t] += s[t + stride];  // BUG: s[t + stride] may not be written yet
        }
        // BUG: no __syncthreads() here
    }
    if (t == 0) {
        sums[blockIdx.x] = s[0];
    }
}
// --8<-- [end:kernel]
