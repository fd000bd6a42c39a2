// Vector add with a grid-stride loop.
//
// Host program: add_grid_stride.py. Changed since add_one_per_thread.cu: the
// grid no longer has to match the data. A fixed number of blocks (enough to
// fill every SM) walks over the array; each thread starts at its global index
// and steps by the total number of threads in the grid.

// --8<-- [start:kernel]
extern "C" __global__ void add_grid_stride(const float* __restrict__ a,
                                           const float* __restrict__ b,
                                           float* __restrict__ c,
                                           int n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;  // (1)!
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        c[i] = a[i] + b[i];
    }
}
// --8<-- [end:kernel]
