// A memory-bound kernel for the occupancy sweep: y = a * x + b, one element
// per thread. It moves 8 bytes per element and does one multiply-add, so its
// speed depends on how many loads the SMs keep in flight, and so on how many
// warps each SM holds. The host launches it with many block sizes and asks
// for dynamic shared memory that the kernel never touches: the SM must still
// set that memory aside for each resident block, which limits how many
// blocks fit.
//
// Host program: occupancy_sweep.py.

// --8<-- [start:kernel]
extern "C" __global__ void axpb(const float* __restrict__ x,
                                float* __restrict__ y,
                                float a, float b, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + b;
    }
}
// --8<-- [end:kernel]
