// Warp divergence: the same work, split two ways.
//
// Each element takes one of two paths: ROUNDS rounds of a sine map or of a
// cosine map. Both maps are contractions (slope at most 1/2), so float32
// rounding errors shrink from round to round. branch_by_thread picks the
// path by thread parity, so every warp needs both paths; branch_by_warp
// picks it by warp parity, so every warp needs only one.
//
// Host program: divergence.py.

#define ROUNDS 32

__device__ float sine_path(float x)
{
    float v = x;
    for (int r = 0; r < ROUNDS; ++r) {
        v = 0.5f * (sinf(v) + x);
    }
    return v;
}

__device__ float cosine_path(float x)
{
    float v = x;
    for (int r = 0; r < ROUNDS; ++r) {
        v = 0.5f * (cosf(v) + x);
    }
    return v;
}

// --8<-- [start:kernels]
extern "C" __global__ void branch_by_thread(const float* __restrict__ x,
                                            float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (threadIdx.x & 1) {              // odd lanes one way, even lanes the other:
            y[i] = sine_path(x[i]);         // every warp runs both paths, one after
        } else {                            // the other, with half its lanes idle
            y[i] = cosine_path(x[i]);
        }
    }
}

extern "C" __global__ void branch_by_warp(const float* __restrict__ x,
                                          float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if ((threadIdx.x / 32) & 1) {       // all 32 lanes of a warp agree:
            y[i] = sine_path(x[i]);         // each warp runs one path only
        } else {
            y[i] = cosine_path(x[i]);
        }
    }
}
// --8<-- [end:kernels]

// Both maps of every element in double precision, one element per thread and
// no branch: the reference the two kernels are checked against (the host
// checks this one against NumPy on a sample).
extern "C" __global__ void both_paths64(const float* __restrict__ x, double* __restrict__ sine,
                                        double* __restrict__ cosine, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const double x_i = x[i];
        double s = x_i, c = x_i;
        for (int r = 0; r < ROUNDS; ++r) {
            s = 0.5 * (sin(s) + x_i);
            c = 0.5 * (cos(c) + x_i);
        }
        sine[i] = s;
        cosine[i] = c;
    }
}
