// BROKEN ON PURPOSE: a three-point moving average that reads past both ends
// of its input. The fix is fixed_oob.cu.
//
// Host program: broken_oob.py. The guard `if (i < n)` keeps every thread's
// own element in bounds, but not its neighbours: thread 0 reads x[-1] and
// thread n-1 reads x[n]. Run it under compute-sanitizer --tool memcheck to
// see the two invalid reads named, with the line they come from.

// --8<-- [start:kernel]
extern "C" __global__ void average3(const float* __restrict__ x,
                                    float* __restrict__ y,
                                    int n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0f;  // BUG: x[-1] at i = 0, x[n] at i = n-1
    }
}
// --8<-- [end:kernel]
