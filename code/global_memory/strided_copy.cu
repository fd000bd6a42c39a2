// A copy whose reads have a stride and an offset: y[i] = x[i * stride + offset].
// The writes stay coalesced (lane i writes y[i]); the reads of one warp spread
// over stride times as many bytes, and an offset that is not a multiple of 8
// floats (32 bytes) makes them straddle one more 32-byte sector.

// --8<-- [start:fill]
// Fills x with values that look random but can be recomputed anywhere from
// the index alone: a multiplicative hash of j and the seed, kept below 2^24
// so that float32 holds it exactly.
extern "C" __global__ void fill_hash(float* __restrict__ x, long long n, unsigned seed)
{
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n;
         j += (long long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)j * 2654435761u ^ seed;
        h ^= h >> 15;
        x[j] = (float)(h & 0xFFFFFFu);
    }
}
// --8<-- [end:fill]

// --8<-- [start:kernel]
extern "C" __global__ void copy_strided(const float* __restrict__ x,
                                        float* __restrict__ y,
                                        int n, int stride, int offset)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[(long long)i * stride + offset];  // 64-bit: i * stride can pass 2^31
    }
}
// --8<-- [end:kernel]
