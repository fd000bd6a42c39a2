// Exercise 1 of "Why GPUs": the cheapest elementwise work there is, y = x + 1.
//
// Host program: ex1_add_one_crossover.py, which repeats the CPU-vs-GPU size
// sweep of gelu_cpu_vs_gpu.py with this kernel.

// --8<-- [start:kernel]
extern "C" __global__ void add_one(const float* __restrict__ x,
                                   float* __restrict__ y,
                                   int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] + 1.0f;
    }
}
// --8<-- [end:kernel]
