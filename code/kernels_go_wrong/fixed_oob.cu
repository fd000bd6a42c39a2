// A three-point moving average, with its edges handled: the fix for
// broken_oob.cu.
//
// Host program: fixed_oob.py. y[i] = (x[i-1] + x[i] + x[i+1]) / 3, where a
// neighbour past either end of x counts as 0. Changed since broken_oob.cu:
// the two neighbour reads are guarded, so the first thread never reads x[-1]
// and the last never reads x[n].

// --8<-- [start:kernel]
extern "C" __global__ void average3(const float* __restrict__ x,
                                    float* __restrict__ y,
                                    int n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float left  = (i > 0)     ? x[i - 1] : 0.0f;  // (1)!
        const float right = (i + 1 < n) ? x[i + 1] : 0.0f;
        y[i] = (left + x[i] + right) / 3.0f;
    }
}
// --8<-- [end:kernel]
