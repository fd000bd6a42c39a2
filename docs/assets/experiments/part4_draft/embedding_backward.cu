// The embedding's backward pass: a scatter-add (draft for Part IV,
// "Backpropagation on the GPU").
//
// Forward, row i of the activations is row tok[i] of the table W (V rows of
// C floats). Backward, each row of W gathers the gradients of every position
// that read it:   dW[v, :] += sum over i with tok[i] == v of dX[i, :].
//
// Two kernels:
//   embed_bwd_atomic  one thread a (position, 4 channels): four atomicAdds
//                     into dW. Simple and fast, but positions with the same
//                     token add in whatever order they run, so with
//                     non-integer gradients the result can differ in its
//                     last bits from run to run.
//   embed_bwd_sorted  the positions grouped by token on the host first
//                     (the tokens come from the host's data loader anyway):
//                     bucket b lists, in increasing order, the positions
//                     of one token, order[starts[b] .. starts[b + 1]). One
//                     block a bucket and 4 channels a thread adds them in
//                     that fixed order and adds the sum to dW once: the
//                     same bits every run, and no two blocks touch one row.

#define THREADS 128

// --8<-- [start:atomic]
extern "C" __global__ void __launch_bounds__(THREADS)
embed_bwd_atomic(const float* __restrict__ dX, const int* __restrict__ tok, float* __restrict__ dW,
                 int n, int C)
{
    const int C4 = C / 4;
    const long long k = blockIdx.x * (long long)THREADS + threadIdx.x;   // (position, group of 4)
    if (k >= (long long)n * C4) return;
    const int i = (int)(k / C4), c = 4 * (int)(k % C4);
    const float4 g = *reinterpret_cast<const float4*>(dX + (size_t)i * C + c);
    float* row = dW + (size_t)tok[i] * C + c;
    atomicAdd(row + 0, g.x);
    atomicAdd(row + 1, g.y);
    atomicAdd(row + 2, g.z);
    atomicAdd(row + 3, g.w);
}
// --8<-- [end:atomic]

// --8<-- [start:sorted]
extern "C" __global__ void __launch_bounds__(THREADS)
embed_bwd_sorted(const float* __restrict__ dX, const int* __restrict__ order, const int* __restrict__ starts,
                 const int* __restrict__ bucket_tok, float* __restrict__ dW, int C)
{
    const int b = blockIdx.y;                       // one bucket: one token
    const int c = 4 * (blockIdx.x * THREADS + threadIdx.x);
    if (c >= C) return;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = starts[b]; j < starts[b + 1]; ++j) {   // its positions, always in this order
        const float4 g = *reinterpret_cast<const float4*>(dX + (size_t)order[j] * C + c);
        s.x += g.x; s.y += g.y; s.z += g.z; s.w += g.w;
    }
    float4* row = reinterpret_cast<float4*>(dW + (size_t)bucket_tok[b] * C + c);
    float4 w = *row;
    w.x += s.x; w.y += s.y; w.z += s.z; w.w += s.w;
    *row = w;
}
// --8<-- [end:sorted]
