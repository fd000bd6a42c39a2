// Solution to exercise 2: float32 sums added one element at a time, to
// measure how their rounding error grows with the number of terms.
//
// Host program: ex2_sum_error.py. Each of the launch's threads sums its own
// column of an m-by-T array (element k of thread t is x[k*T + t], so a warp's
// loads are contiguous), in order, in a float32 accumulator: m additions,
// each rounded. Deliberately the worst order there is, to make the error
// large enough to see.

// --8<-- [start:kernel]
extern "C" __global__ void column_sums(const float* __restrict__ x,
                                       float* __restrict__ sums,
                                       int m, int T)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < T) {
        float acc = 0.0f;
        for (int k = 0; k < m; ++k) {
            acc += x[(long long)k * T + t];
        }
        sums[t] = acc;
    }
}
// --8<-- [end:kernel]
