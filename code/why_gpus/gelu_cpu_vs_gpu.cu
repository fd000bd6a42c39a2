// GELU, the activation function of most transformers, one element per thread:
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// Host program: gelu_cpu_vs_gpu.py, which times this kernel against NumPy on
// the CPU, with and without the copies between host and device memory.

// --8<-- [start:kernel]
extern "C" __global__ void gelu(const float* __restrict__ x,
                                float* __restrict__ y,
                                int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float k = 0.7978845608f;  // sqrt(2 / pi)
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}
// --8<-- [end:kernel]
