// Solution to exercise 1: argmax, the position of the largest of n floats,
// in one pass, with atomics, and the same answer on every run.
//
// Host program: ex1_argmax.py. Built like sum_vectorized in sum_ladder.cu
// (one wave of blocks, a grid-stride loop over float4s, a scalar tail, a
// shuffle tree per warp, one warp for the warp results, one atomic per
// block), with one change: what is combined is not a sum but a 64-bit key
// that holds the value in its high half and the index, inverted, in its low
// half. The larger key is the larger value, or for equal values the smaller
// index, so "the larger of two keys" is exact, associative and commutative,
// and atomicMax on the keys gives the same answer whatever order the blocks
// arrive in: the first position of the maximum, as np.argmax returns.

#define BLOCK 256               // threads per block, a multiple of 32 (the host program checks)
#define WARPS (BLOCK / 32)
#define FULL 0xffffffffu        // every lane of the warp takes part

// --8<-- [start:kernel]
// A float's bits as an unsigned int that orders as the float does: set the
// sign bit of a positive float, flip every bit of a negative one. (-0.0 then
// comes just below +0.0; NumPy counts them equal.)
__device__ __forceinline__ unsigned int ordered_bits(float v)
{
    const unsigned int b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Value in the high half; ~i in the low half, so that of two equal values
// the smaller index makes the larger key. Every key is above 0.
__device__ __forceinline__ unsigned long long key(float v, unsigned int i)
{
    return ((unsigned long long)ordered_bits(v) << 32) | (unsigned long long)(~i);
}

__device__ __forceinline__ unsigned long long larger(unsigned long long a, unsigned long long b)
{
    return a > b ? a : b;
}

__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long k)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        k = larger(k, __shfl_xor_sync(FULL, k, offset));     // every lane ends with the warp's largest
    }
    return k;
}

// *best must be 0 at launch (the host zeroes it): 0 is below every key.
extern "C" __global__ void argmax_keys(const float* __restrict__ x,
                                       unsigned long long* best,
                                       int n)
{
    __shared__ unsigned long long warp_best[WARPS];
    const long long n4 = n / 4;                              // whole float4s
    const long long stride = (long long)gridDim.x * BLOCK;
    const long long tid = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    unsigned long long k = 0;
#pragma unroll 4
    for (long long j = tid; j < n4; j += stride) {
        const float4 q = x4[j];
        const unsigned int i = 4u * (unsigned int)j;
        k = larger(k, larger(larger(key(q.x, i), key(q.y, i + 1)),
                             larger(key(q.z, i + 2), key(q.w, i + 3))));
    }
    if (tid < n - 4 * n4) {                                  // the n % 4 elements past the last float4
        const long long i = 4 * n4 + tid;
        k = larger(k, key(x[i], (unsigned int)i));
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    k = warp_max_key(k);
    if (lane == 0) {
        warp_best[warp] = k;
    }
    __syncthreads();                                         // every warp's key is written
    if (warp == 0) {
        k = warp_max_key(lane < WARPS ? warp_best[lane] : 0ull);
        if (lane == 0) {
            atomicMax(best, k);                              // one atomic per block; max needs no order
        }
    }
}
// --8<-- [end:kernel]
