// The block scheduler's rate. `nothing` is a kernel whose blocks do no work
// at all: a launch of G blocks of it takes as long as the GPU needs to start
// and retire G blocks, and no longer. `axpb_per_thread` is the one-element-
// per-thread kernel of "Your first kernel" (y = a * x + b): G blocks of B
// threads for G * B elements.
//
// Host program: block_rate.py.

// --8<-- [start:kernels]
extern "C" __global__ void nothing() {}

extern "C" __global__ void axpb_per_thread(const float* __restrict__ x,
                                           float* __restrict__ y,
                                           float a, float b, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + b;
    }
}
// --8<-- [end:kernels]
