// A kernel with enough arithmetic per element that computing a chunk takes
// about as long as copying it: ROUNDS rounds of v = (sin(v) + x) / 2, a
// contraction (its slope is at most 1/2), so float32 rounding errors shrink
// from round to round instead of growing.
//
// Host program: overlap_streams.py, which runs it over the data in chunks,
// first one chunk after another, then with copies and kernels of different
// chunks overlapping on several CUDA streams.

#define ROUNDS 128

// --8<-- [start:kernel]
extern "C" __global__ void churn(const float* __restrict__ x,
                                 float* __restrict__ y,
                                 int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float x_i = x[i];
        float v = x_i;
        for (int r = 0; r < ROUNDS; ++r) {
            v = 0.5f * (sinf(v) + x_i);
        }
        y[i] = v;
    }
}
// --8<-- [end:kernel]

// The same map in double precision, one element per thread, neither chunked
// nor on streams: the reference that every element of the pipeline's answer
// is checked against (the host checks this one against NumPy on a sample).
extern "C" __global__ void churn64(const float* __restrict__ x,
                                   double* __restrict__ y,
                                   int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const double x_i = x[i];
        double v = x_i;
        for (int r = 0; r < ROUNDS; ++r) {
            v = 0.5 * (sin(v) + x_i);
        }
        y[i] = v;
    }
}
