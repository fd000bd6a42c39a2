// BROKEN ON PURPOSE (with its host program): accumulate into a buffer that
// nobody zeroed. The fix is fixed_uninit.py, which zeroes acc first.
//
// Host program: broken_uninit.py. The kernel itself is correct: acc[i] +=
// w * x[i] reads acc[i], adds, and writes it back. The bug is that the host
// allocates acc and starts accumulating at once, so the first round reads
// memory that was never written: whatever the last user of those bytes left
// there. compute-sanitizer --tool initcheck reports each such read.

// --8<-- [start:kernel]
extern "C" __global__ void accumulate(float* __restrict__ acc,
                                      const float* __restrict__ x,
                                      float w,
                                      int n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        acc[i] += w * x[i];  // first round: reads acc[i], which was never written
    }
}
// --8<-- [end:kernel]
