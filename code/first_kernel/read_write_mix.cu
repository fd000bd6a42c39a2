// Does memory serve reads faster than an even mix of reads and writes?
// Three kernels with version 3's launch (one float4 per thread) and three
// read/write mixes: copy4 reads a byte for each it writes (the copy's mix),
// add4 is add_vectorized's loop (two reads for each write), and read4 only
// reads (it stores one partial sum a warp, 1/128 of what it reads, so the
// compiler cannot drop the loads).
//
// Host program: read_write_mix.py. n is a multiple of 4 (the host checks);
// there is no scalar tail here.

// --8<-- [start:kernels]
extern "C" __global__ void copy4(const float4* __restrict__ a, float4* __restrict__ c, long long n4)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) c[i] = a[i];                                   // 16 bytes read, 16 written
}

extern "C" __global__ void add4(const float4* __restrict__ a, const float4* __restrict__ b,
                                float4* __restrict__ c, long long n4)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {                                               // 32 bytes read, 16 written
        const float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

extern "C" __global__ void read4(const float4* __restrict__ a, float* __restrict__ partials, long long n4)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    if (i < n4) {                                               // 16 bytes read, nothing written
        const float4 x = a[i];
        s = (x.x + x.y) + (x.z + x.w);
    }
    for (int offset = 16; offset > 0; offset >>= 1)             // the warp's 32 sums, added
        s += __shfl_down_sync(0xffffffffu, s, offset);
    if ((threadIdx.x & 31) == 0) partials[i >> 5] = s;          // 4 bytes a warp: 1/128 of its reads
}
// --8<-- [end:kernels]
