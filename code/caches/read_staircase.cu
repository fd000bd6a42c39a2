// The memory staircase as bandwidth: the whole GPU reads a buffer over and
// over. While the buffer fits in the caches, the passes after the first are
// served by them; once it does not, every pass comes from HBM.

// --8<-- [start:kernel]
extern "C" __global__ void read_sum(const uint4* __restrict__ x, long long n4, int passes,
                                    unsigned* __restrict__ total)
{
    unsigned acc = 0;                                   // sums wrap modulo 2^32: exact in any order
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p) {
        for (long long i = first; i < n4; i += step) {  // the same thread reads the same
            uint4 v = x[i];                             // 16 bytes on every pass
            acc += v.x + v.y + v.z + v.w;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1)     // add up the warp's 32 sums
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, acc);
}
// --8<-- [end:kernel]
