// Solution to exercise 2: the variance of each row of a (rows, cols) float32
// matrix, three ways, a thread per row reading its row in order (the order
// a streaming formula sees its values in). All arithmetic is float32; the
// output is the biased variance, the sum of squared deviations over cols.
//   var_naive     one pass: E[x^2] - E[x]^2
//   var_welford   one pass: Welford's running count, mean and M2
//   var_two_pass  two passes: the mean, then the squared deviations from it
// Host program: ex2_variance.py.

// --8<-- [start:kernels]
extern "C" __global__ void var_naive(const float* __restrict__ x, float* __restrict__ var,
                                     int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* r = x + (size_t)row * cols;
    float s = 0.0f, s2 = 0.0f;
    for (int j = 0; j < cols; ++j) {
        s += r[j];
        s2 += r[j] * r[j];
    }
    const float mean = s / cols;
    var[row] = s2 / cols - mean * mean;             // two large numbers, nearly equal
}

extern "C" __global__ void var_welford(const float* __restrict__ x, float* __restrict__ var,
                                       int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* r = x + (size_t)row * cols;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int j = 0; j < cols; ++j) {
        const float v = r[j];
        n += 1.0f;                                  // exact up to 2^24
        const float d = v - mean;                   // deviation from the old mean
        mean += d / n;
        m2 += d * (v - mean);                       // ... times the deviation from the new one
    }
    var[row] = m2 / n;
}

extern "C" __global__ void var_two_pass(const float* __restrict__ x, float* __restrict__ var,
                                        int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* r = x + (size_t)row * cols;
    float s = 0.0f;
    for (int j = 0; j < cols; ++j) s += r[j];
    const float mean = s / cols;
    float m2 = 0.0f;
    for (int j = 0; j < cols; ++j) {
        const float d = r[j] - mean;
        m2 += d * d;
    }
    var[row] = m2 / cols;
}
// --8<-- [end:kernels]
