// One sum per block, by a tree reduction in shared memory: the fix for
// broken_race.cu.
//
// Host program: fixed_race.py. Each block loads BLOCK elements into shared
// memory, then halves the number of active threads at every step: thread t
// adds element t + stride to element t. Changed since broken_race.cu: a
// barrier (__syncthreads) ends every step, so no thread reads a partial sum
// before the thread that owns it has written it.

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
            s[t] += s[t + stride];
        }
        __syncthreads();  // (1)!
    }
    if (t == 0) {
        sums[blockIdx.x] = s[0];
    }
}
// --8<-- [end:kernel]
