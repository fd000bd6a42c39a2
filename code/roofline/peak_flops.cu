// The arithmetic ceiling, measured: every thread runs long chains of fused
// multiply-adds (FMA, 2 floating-point operations each) on values held in
// registers, touching memory only to write its result at the end. Eight
// independent chains per thread keep the FMA pipelines busy: one chain
// alone would wait for each FMA's result before the next could start.

// --8<-- [start:kernel]
#define CHAINS 8

extern "C" __global__ void fma_chains(float* __restrict__ out, int iterations, float a, float b)
{
    float v[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) v[c] = (float)(threadIdx.x + c) * 1e-3f;
#pragma unroll 16   // 128 FMAs between two tests of k: loop control takes 3 issue slots in 131
    for (int k = 0; k < iterations; ++k) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) v[c] = fmaf(v[c], a, b);   // 2 flops, no memory
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += v[c];
    out[blockIdx.x * (long long)blockDim.x + threadIdx.x] = s;     // so the work cannot be dropped
}
// --8<-- [end:kernel]
