// Solution to exercise 2: bank conflicts of 8-byte reads, measured.
// bank_conflicts.cu with 64-bit words: lane l reads element l * stride + o
// of an array of 8-byte elements, many times over.
//
// Host program: ex2_eight_byte_banks.py. Element e occupies the 4-byte
// words 2e and 2e + 1, in banks 2e % 32 and 2e % 32 + 1. A warp asks for
// 32 x 8 = 256 bytes, and the 32 banks deliver at most 128 bytes a pass,
// so even the best 8-byte read takes 2 passes. At a stride of s elements
// the lanes fall on 16 / gcd(s, 16) pairs of banks, 2 gcd(s, 16) different
// words in each bank: 2 gcd(s, 16) passes.

#define WARP 32
#define ELEMENTS (32 * 18)   // lane 31 at stride 17 plus offset 31: element 558

// --8<-- [start:kernel]
extern "C" __global__ void strided_shared_reads64(unsigned long long* __restrict__ out,
                                                  int stride, int iters, unsigned seed)
{
    __shared__ unsigned long long elements[ELEMENTS];
    // Both halves of each element carry a value the host can recompute
    // (a hash of its two word indices, below 2^16), so a read that lost
    // either half would change the sum; no sum can reach 2^53.
    for (int e = threadIdx.x; e < ELEMENTS; e += blockDim.x) {
        const unsigned lo = ((unsigned)(2 * e) * 2654435761u ^ seed) >> 16;
        const unsigned hi = ((unsigned)(2 * e + 1) * 2654435761u ^ seed) >> 16;
        elements[e] = ((unsigned long long)hi << 20) | lo;
    }
    __syncthreads();

    const int lane = threadIdx.x % WARP;
    // volatile: one 8-byte shared load instruction per iteration.
    const volatile unsigned long long* mine = elements + lane * stride;
    unsigned long long sum = 0;
#pragma unroll 8
    for (int i = 0; i < iters; ++i) {
        sum += mine[i % WARP];                 // element lane * stride + (i % 32)
    }
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
// --8<-- [end:kernel]
