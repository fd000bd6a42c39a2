// Shared-memory bank conflicts, measured: every warp reads shared memory
// with its lanes `stride` 4-byte words apart, many times over.
//
// Host program: bank_conflicts.py. Shared memory is split into 32 banks,
// word w in bank w % 32; a bank serves one word per pass. Lane l reads
// word l * stride + o, so the 32 lanes fall into 32 / gcd(stride, 32)
// banks, gcd(stride, 32) distinct words in each: that many passes. The
// offset o (the same for every lane of one read) moves the pattern along
// the banks without changing it.

#define WARP 32
#define WORDS (32 * 33)   // lane 31 at stride 33 plus offset 31: word 1054

// --8<-- [start:kernel]
extern "C" __global__ void strided_shared_reads(unsigned* __restrict__ out, int stride,
                                                int iters, unsigned seed)
{
    __shared__ unsigned words[WORDS];
    // Values the compiler cannot know, that the host can recompute: a hash
    // of the word's index, kept below 2^16 so no sum can wrap.
    for (int w = threadIdx.x; w < WORDS; w += blockDim.x) {
        words[w] = ((unsigned)w * 2654435761u ^ seed) >> 16;
    }
    __syncthreads();

    const int lane = threadIdx.x % WARP;
    // volatile: one shared load instruction per iteration, never merged
    // with its neighbours or hoisted out of the loop.
    const volatile unsigned* mine = words + lane * stride;
    unsigned sum = 0;
#pragma unroll 8
    for (int i = 0; i < iters; ++i) {
        sum += mine[i % WARP];                 // word lane * stride + (i % 32)
    }
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = sum;   // keeps the loads alive
}
// --8<-- [end:kernel]
