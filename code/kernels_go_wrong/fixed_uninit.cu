// Accumulate weighted rounds of x into acc: acc[i] += w * x[i]. The kernel
// is the same as in broken_uninit.cu; the fix is on the host, which now
// zeroes acc before the first round.
//
// Host program: fixed_uninit.py.

// --8<-- [start:kernel]
extern "C" __global__ void accumulate(float* __restrict__ acc,
                                      const float* __restrict__ x,
                                      float w,
                                      int n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        acc[i] += w * x[i];  // reads acc[i]: it must hold a value already
    }
}
// --8<-- [end:kernel]
