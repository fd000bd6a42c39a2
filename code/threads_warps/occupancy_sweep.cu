// A memory-bound kernel for the occupancy sweep: y = a * x + b, with a
// grid-stride loop. The host launches exactly as many blocks as fit on the
// GPU at once, so every block is resident from start to finish and the
// number of resident warps (the occupancy) is the one thing that changes
// between launches; the number of blocks launched stays small. It asks for
// dynamic shared memory that the kernel never touches: the SM must still set
// that memory aside for each resident block, which limits how many fit.
//
// Host program: occupancy_sweep.py.

// --8<-- [start:kernel]
extern "C" __global__ void axpb(const float* __restrict__ x,
                                float* __restrict__ y,
                                float a, float b, int n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
#pragma unroll 1
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = a * x[i] + b;
    }
}
// --8<-- [end:kernel]
