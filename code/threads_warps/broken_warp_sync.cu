// BROKEN ON PURPOSE: warp_sync.cu's rotate without its __syncwarp().
//
// Each lane writes its slot of shared memory and then reads its neighbour's.
// Nothing says the neighbour has written yet: the lanes of a warp have their
// own program counters (independent thread scheduling, since Volta), and
// without __syncwarp() the compiler and the hardware are free to let a read
// overtake another lane's write. It usually works, which is the trap.
//
// Host program: broken_warp_sync.py.

#define BLOCK 256

// --8<-- [start:rotate]
extern "C" __global__ void rotate(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float s[BLOCK];
    const int t = threadIdx.x;
    const int i = blockIdx.x * BLOCK + t;
    const int lane = t % 32;
    s[t] = (i < n) ? x[i] : 0.0f;
    const int next = t - lane + (lane + 1) % 32;   // no __syncwarp(): a race
    if (i < n) {
        y[i] = s[next];
    }
}
// --8<-- [end:rotate]
