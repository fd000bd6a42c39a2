// One tiny kernel to show where CUDA errors surface.
//
// Host program: async_errors.py. `poke` writes one value at the index it is
// given. Given a good index it is a correct kernel; given a wild one
// (1 << 40, four terabytes past the buffer) the GPU stops it with an illegal
// memory access, which the host learns about only later. The host program
// also launches it with 2048 threads per block, which no GPU can start.
//
// At the end, for readers whose host program is CUDA C++ rather than Python:
// the same discipline with the CUDA runtime API. PyCUDA does not use that
// part; it is compiled with the kernel, so nvcc checks it.

#include <cstdio>
#include <cstdlib>

// --8<-- [start:kernel]
extern "C" __global__ void poke(float* p, long long i, float v)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {  // one write, whatever the launch shape
        p[i] = v;
    }
}
// --8<-- [end:kernel]

// --8<-- [start:cpp]
#define CUDA_CHECK(call)                                                       \
    do {                                                                       \
        cudaError_t err_ = (call);                                             \
        if (err_ != cudaSuccess) {                                             \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, \
                         #call, cudaGetErrorString(err_));                     \
            std::exit(EXIT_FAILURE);                                           \
        }                                                                      \
    } while (0)

void poke_checked(float* p, long long i, float v)
{
    poke<<<1, 1>>>(p, i, v);
    CUDA_CHECK(cudaGetLastError());       // did it start? (launch configuration errors)
#ifdef DEBUG_SYNC
    CUDA_CHECK(cudaDeviceSynchronize());  // did it finish? (errors inside the kernel)
#endif
}
// --8<-- [end:cpp]
