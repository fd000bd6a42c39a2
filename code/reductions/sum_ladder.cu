// Summing n floats: a ladder of five kernels, from one atomic per element to
// a single pass that reads the input at full speed and gives the same bits
// on every run.
//
// Host program: sum_ladder.py. Changed since threads_warps/warp_sum.cu: the
// sum is built up rung by rung. sum_atomic and sum_tree show the two naive
// ends (all atomics; all shared memory and barriers), and sum_tree_store is
// sum_tree with a store in place of its atomic, a control that tells what
// the atomics cost; sum_shuffle moves the tree into registers;
// sum_vectorized adds 16-byte loads, independent accumulators and a grid
// of one wave; sum_one_pass drops the atomics for a fixed order of
// additions. Every kernel takes any n >= 1 and is launched
// with BLOCK threads per block (the host program checks that it agrees).

#define BLOCK 256               // threads per block: a power of two, a multiple of 32
#define WARPS (BLOCK / 32)
#define UNROLL 4                // float4 loads in flight per thread per trip (sum_vectorized)
#define FULL 0xffffffffu        // every lane of the warp takes part (BLOCK is a multiple of 32)

// --8<-- [start:atomic]
extern "C" __global__ void sum_atomic(const float* __restrict__ x, float* __restrict__ total, int n)
{
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) {
        atomicAdd(total, x[i]);   // n additions to one address, one at a time
    }
}
// --8<-- [end:atomic]

// --8<-- [start:tree]
// STORE = false: sum_tree, one atomicAdd per block into *out. STORE = true:
// sum_tree_store, the control, which stores each block's sum in
// out[blockIdx.x] instead and changes nothing else.
template <bool STORE>
__device__ __forceinline__ void tree(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float s[BLOCK];
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * BLOCK + t;
    s[t] = i < n ? x[i] : 0.0f;              // past the end: 0, which changes no sum
    __syncthreads();
    // Each step halves the threads at work: thread t adds the value `half`
    // places above it. Neighbouring threads read neighbouring words, so no
    // two lanes of a warp hit one bank.
#pragma unroll
    for (int half = BLOCK / 2; half > 0; half /= 2) {
        if (t < half) {
            s[t] += s[t + half];
        }
        if (half > 1) {                      // (the last step's s[0] is read by its own writer)
            __syncthreads();                 // this step's writes land before the next step reads
        }
    }
    if (t == 0) {
        if (STORE) {
            out[blockIdx.x] = s[0];          // the control: a plain store, no chain
        } else {
            atomicAdd(out, s[0]);            // one atomic per block, not per element
        }
    }
}

extern "C" __global__ void sum_tree(const float* __restrict__ x, float* __restrict__ total, int n)
{
    tree<false>(x, total, n);
}

extern "C" __global__ void sum_tree_store(const float* __restrict__ x, float* __restrict__ partials, int n)
{
    tree<true>(x, partials, n);
}
// --8<-- [end:tree]

// --8<-- [start:block_sum]
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        v += __shfl_down_sync(FULL, v, offset);
    }
    return v;                                // the warp's sum, in lane 0
}

// The sum of one value per thread of the block, in thread 0 (the other
// threads get partial sums). Every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float warp_totals[WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);                         // 5 shuffles, no shared memory, no barrier
    if (lane == 0) {
        warp_totals[warp] = v;
    }
    __syncthreads();                         // the one barrier: all warp totals written
    if (warp == 0) {
        v = warp_sum(lane < WARPS ? warp_totals[lane] : 0.0f);   // one warp finishes
    }
    return v;
}
// --8<-- [end:block_sum]

// --8<-- [start:shuffle]
extern "C" __global__ void sum_shuffle(const float* __restrict__ x,
                                       float* __restrict__ total,
                                       int n)
{
    const long long i = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const float v = block_sum(i < n ? x[i] : 0.0f);
    if (threadIdx.x == 0) {
        atomicAdd(total, v);
    }
}
// --8<-- [end:shuffle]

// --8<-- [start:vectorized]
// This thread's share of x. Each trip, a block reads UNROLL * BLOCK
// consecutive float4s (16 KB), thread t the ones at t, t + BLOCK, ...; the
// next trip moves on by the whole grid's share. The first threads of the
// grid also take the n % 4 elements past the last whole float4.
__device__ __forceinline__ float thread_partial(const float* __restrict__ x, int n)
{
    const long long n4 = n / 4;                          // whole float4s
    const long long step = (long long)gridDim.x * UNROLL * BLOCK;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float acc[UNROLL] = {};          // independent sums: one trip's adds need not wait for each other
    long long i = (long long)blockIdx.x * UNROLL * BLOCK + threadIdx.x;
    for (; i + (UNROLL - 1) * BLOCK < n4; i += step) {
        float4 q[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            q[u] = x4[i + u * BLOCK];                    // UNROLL loads in flight before the first add
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            acc[u] += (q[u].x + q[u].y) + (q[u].z + q[u].w);
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {                   // the one trip that runs past the end
        if (i + u * BLOCK < n4) {
            const float4 q = x4[i + u * BLOCK];
            acc[u] += (q.x + q.y) + (q.z + q.w);
        }
    }
    const long long tid = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const long long tail = 4 * n4;
    if (tid < n - tail) {
        acc[0] += x[tail + tid];
    }
    static_assert(UNROLL == 4, "the line below adds four accumulators");
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

extern "C" __global__ void sum_vectorized(const float* __restrict__ x,
                                          float* __restrict__ total,
                                          int n)
{
    const float v = block_sum(thread_partial(x, n));
    if (threadIdx.x == 0) {
        atomicAdd(total, v);          // one atomic per block, and at most one wave of blocks
    }
}
// --8<-- [end:vectorized]

// --8<-- [start:one_pass]
// Each block writes its partial sum; the last block to finish adds them all,
// in block order, so the result does not depend on which block ran when.
// `count` must be 0 at launch (the host zeroes it before every launch).
extern "C" __global__ void sum_one_pass(const float* __restrict__ x,
                                        float* partials,
                                        unsigned int* count,
                                        float* __restrict__ total,
                                        int n)
{
    __shared__ bool last;
    const float v = block_sum(thread_partial(x, n));
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = v;
        // Release: the fence makes the partial visible to the whole GPU before
        // the count that announces it. Whoever sees the count sees the partial.
        __threadfence();
        const unsigned int before = atomicAdd(count, 1u);
        last = (before == gridDim.x - 1);
        if (last) {
            // Acquire: this block saw every other block's increment, so after
            // this fence it also sees the partials each wrote before its own.
            __threadfence();
        }
    }
    __syncthreads();                 // shares `last`, extends thread 0's acquire to every thread,
                                     // and parts the two uses of block_sum's shared memory
    if (last) {                      // the same for the whole block, so block_sum's barrier is safe
        float s = 0.0f;
        for (int b = threadIdx.x; b < gridDim.x; b += BLOCK) {
            s += __ldcg(partials + b);    // from L2, never a stale line in this SM's L1
        }
        s = block_sum(s);                 // a fixed tree over a fixed order: the same bits every run
        if (threadIdx.x == 0) {
            *total = s;
        }
    }
}
// --8<-- [end:one_pass]
