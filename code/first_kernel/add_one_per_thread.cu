// Vector add, one element per thread: c[i] = a[i] + b[i].
//
// The first kernel of the book. Host program: add_one_per_thread.py.
// Every thread computes its own global index from its block's index and its
// place inside the block, and handles exactly that one element.

// --8<-- [start:kernel]
extern "C" __global__ void add_one_per_thread(const float* __restrict__ a,
                                              const float* __restrict__ b,
                                              float* __restrict__ c,
                                              int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // (1)!
    if (i < n) {                                     // (2)!
        c[i] = a[i] + b[i];
    }
}
// --8<-- [end:kernel]
