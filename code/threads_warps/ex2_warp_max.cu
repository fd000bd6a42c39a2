// Solution to exercise 2: the largest of n floats, with a butterfly shuffle.
//
// __shfl_xor_sync(mask, v, k) gives each lane the value of the lane whose
// number differs in bit k. Taking the max with offsets 16, 8, 4, 2, 1 leaves
// the warp's maximum in every lane, not only in lane 0. Lane 0 of each warp
// writes it to shared memory; after a barrier, warp 0 reduces those values
// with the same shuffle and writes one maximum per block. The host takes the
// maximum of the per-block results (a few thousand numbers).
//
// Host program: ex2_warp_max.py.

#define BLOCK 256
#define WARPS (BLOCK / 32)

// --8<-- [start:solution]
__device__ __forceinline__ float warp_max(float v)
{
    for (int offset = 16; offset > 0; offset /= 2) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));  // every lane ends with the max
    }
    return v;
}

extern "C" __global__ void block_max(const float* __restrict__ x,
                                     float* __restrict__ block_out, int n)
{
    __shared__ float warp_best[WARPS];
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float v = -INFINITY;                                           // the identity of max
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        v = fmaxf(v, x[i]);
    }
    v = warp_max(v);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        warp_best[warp] = v;
    }
    __syncthreads();                                               // all warps have written
    if (warp == 0) {
        v = warp_max(lane < WARPS ? warp_best[lane] : -INFINITY);
        if (lane == 0) {
            block_out[blockIdx.x] = v;
        }
    }
}
// --8<-- [end:solution]
