// Attention forward in float32, two ways: three kernels, and one fused.
//
// Host program: attention_fp32.py. Q, K, V and O are B x H x S x D float32,
// contiguous, D = 64 or 128; one (batch, head) pair, blockIdx.z or .y, is
// an S x D matrix of each:
//   O = softmax(Q K^T / sqrt(D)) V,   row by row,
// with, if causal, the scores of keys after the query set to -infinity.
//
// Three kernels: scores writes the S x S matrix Sc = Q K^T / sqrt(D) of
// every head to memory; chapter 14's softmax turns each row into weights
// P (in place); pv multiplies P by V. The fused kernel, flash_fp32, does
// all three a tile at a time and keeps the running maximum and sum of
// each row (chapter 14's online softmax), so nothing of size S x S is
// ever written.

#define T 64            // tile: 64 x 64 outputs a block, 4 x 4 a thread (16 x 16 threads)
#define TD 32           // depth of a slice of the product's sum held in shared memory

// Thread (ty, tx) of a 16 x 16 block owns the 4 x 4 outputs at rows
// ty + 16 a and columns tx + 16 b (a, b < 4) of the block's 64 x 64 tile.
// Tiles sit in shared memory as in global memory, row by row, each row
// padded by one float: the 16 lanes of a half-warp then read 16
// consecutive rows at one column from 16 different banks, and a warp's
// stores of one row's consecutive columns miss each other too.

// --8<-- [start:scores]
// Sc[i][j] = Q[i] . K[j] / sqrt(D) for a 64 x 64 tile of one head; with
// causal, -inf where j > i (a tile wholly above the diagonal skips the
// product). Slices of 32 of D at a time.
extern "C" __global__ void __launch_bounds__(256)
scores(const float* __restrict__ Q, const float* __restrict__ K, float* __restrict__ Sc,
       int S, int D, float scale, int causal)
{
    __shared__ float Qs[T][TD + 1];
    __shared__ float Ks[T][TD + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int i0 = blockIdx.y * T, j0 = blockIdx.x * T;
    const size_t head = (size_t)blockIdx.z * S * D;
    Q += head; K += head;
    Sc += (size_t)blockIdx.z * S * S;
    float acc[4][4] = {};
    if (!(causal && j0 > i0 + T - 1)) {
        for (int d0 = 0; d0 < D; d0 += TD) {
            for (int e = threadIdx.x; e < T * TD; e += 256) {   // coalesced along d
                const int r = e / TD, c = e % TD;
                Qs[r][c] = i0 + r < S ? Q[(size_t)(i0 + r) * D + d0 + c] : 0.0f;
                Ks[r][c] = j0 + r < S ? K[(size_t)(j0 + r) * D + d0 + c] : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int c = 0; c < TD; ++c) {
                float q[4], k[4];
#pragma unroll
                for (int a = 0; a < 4; ++a) { q[a] = Qs[ty + 16 * a][c]; k[a] = Ks[tx + 16 * a][c]; }
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int b = 0; b < 4; ++b) acc[a][b] += q[a] * k[b];
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int i = i0 + ty + 16 * a;
        if (i >= S) continue;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int j = j0 + tx + 16 * b;
            if (j < S) Sc[(size_t)i * S + j] = causal && j > i ? -INFINITY : acc[a][b] * scale;
        }
    }
}
// --8<-- [end:scores]

// --8<-- [start:pv]
// O[i][d] = sum_j P[i][j] V[j][d] for 64 rows and 64 columns of one head,
// 32 keys at a time. With causal, P[i][j] = 0 for j > i, so the keys stop
// at the tile's last row.
extern "C" __global__ void __launch_bounds__(256)
pv(const float* __restrict__ P, const float* __restrict__ V, float* __restrict__ O,
   int S, int D, int causal)
{
    __shared__ float Ps[T][TD + 1];                 // 64 rows x 32 keys
    __shared__ float Vs[TD][T + 1];                 // 32 keys x 64 columns
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int i0 = blockIdx.y * T, c0 = blockIdx.x * T;
    P += (size_t)blockIdx.z * S * S;
    const size_t head = (size_t)blockIdx.z * S * D;
    V += head; O += head;
    const int keys = causal ? min(S, i0 + T) : S;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < keys; k0 += TD) {
        for (int e = threadIdx.x; e < T * TD; e += 256) {
            const int r = e / TD, c = e % TD;                    // P: row r, key c
            Ps[r][c] = i0 + r < S && k0 + c < keys ? P[(size_t)(i0 + r) * S + k0 + c] : 0.0f;
            const int kr = e / T, dc = e % T;                    // V: key kr, column dc
            Vs[kr][dc] = k0 + kr < keys ? V[(size_t)(k0 + kr) * D + c0 + dc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < TD; ++c) {
            float p[4], v[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) { p[a] = Ps[ty + 16 * a][c]; v[a] = Vs[c][tx + 16 * a]; }
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) acc[a][b] += p[a] * v[b];
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int i = i0 + ty + 16 * a;
        if (i >= S) continue;
#pragma unroll
        for (int b = 0; b < 4; ++b) O[(size_t)i * D + c0 + tx + 16 * b] = acc[a][b];
    }
}
// --8<-- [end:pv]

// --8<-- [start:flash]
// The fused kernel: a block per 64 query rows of one head, walking over
// the keys 64 at a time. Per key tile: the 64 x 64 scores (thread (ty, tx):
// rows ty + 16 a, keys tx + 16 b), each row's maximum and sum across the
// 16 threads that hold it (4 shuffles each), the rescaling of the row's
// running sum l and of its outputs, the weights p into shared memory, and
// O += P V (thread (ty, tx): rows ty + 16 a, columns tx + 16 c). Shared
// memory holds Q, the K and V tiles and P, rows padded by one float.
template <int D>
__device__ __forceinline__ void flash_fp32_body(const float* __restrict__ Q,
                                                const float* __restrict__ K,
                                                const float* __restrict__ V,
                                                float* __restrict__ O, int S, float scale,
                                                bool causal)
{
    extern __shared__ float sm[];
    float (*Qs)[D + 1] = reinterpret_cast<float (*)[D + 1]>(sm);                  // [T][D + 1]
    float (*Ks)[D + 1] = reinterpret_cast<float (*)[D + 1]>(sm + T * (D + 1));    // [T][D + 1]
    float (*Vs)[D + 1] = reinterpret_cast<float (*)[D + 1]>(sm + 2 * T * (D + 1));
    float (*Ps)[T + 1] = reinterpret_cast<float (*)[T + 1]>(sm + 3 * T * (D + 1)); // [T][T + 1]
    constexpr int DC = D / 16;                    // output columns a thread
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int i0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * T;   // long rows first
    const size_t head = (size_t)blockIdx.y * S * D;
    Q += head; K += head; V += head; O += head;
    for (int e = threadIdx.x; e < T * D; e += 256) {
        const int r = e / D, c = e % D;
        Qs[r][c] = i0 + r < S ? Q[(size_t)(i0 + r) * D + c] : 0.0f;
    }
    float o[4][DC] = {}, m[4], l[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) { m[a] = -INFINITY; l[a] = 0.0f; }
    const int keys = causal ? min(S, i0 + T) : S;
    for (int j0 = 0; j0 < keys; j0 += T) {
        __syncthreads();                          // the last tile's K, V and P are used up
        for (int e = threadIdx.x; e < T * D; e += 256) {
            const int r = e / D, c = e % D;
            const bool in = j0 + r < S;
            Ks[r][c] = in ? K[(size_t)(j0 + r) * D + c] : 0.0f;
            Vs[r][c] = in ? V[(size_t)(j0 + r) * D + c] : 0.0f;
        }
        __syncthreads();
        float s[4][4] = {};
#pragma unroll 8
        for (int c = 0; c < D; ++c) {
            float q[4], k[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) { q[a] = Qs[ty + 16 * a][c]; k[a] = Ks[tx + 16 * a][c]; }
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) s[a][b] += q[a] * k[b];
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int i = i0 + ty + 16 * a;
            float mx = m[a];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int j = j0 + tx + 16 * b;
                s[a][b] = j >= S || (causal && j > i) ? -INFINITY : s[a][b] * scale;
                mx = fmaxf(mx, s[a][b]);
            }
#pragma unroll
            for (int w = 1; w < 16; w *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
            const float base = mx == -INFINITY ? 0.0f : mx;    // a row with every key masked
            const float rescale = expf(m[a] - base);
            float sum = 0.0f;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const float p = expf(s[a][b] - base);
                Ps[ty + 16 * a][tx + 16 * b] = p;
                sum += p;
            }
#pragma unroll
            for (int w = 1; w < 16; w *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, w);
            l[a] = l[a] * rescale + sum;
            m[a] = mx;
#pragma unroll
            for (int c = 0; c < DC; ++c) o[a][c] *= rescale;
        }
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < T; ++j) {
            float v[DC];
#pragma unroll
            for (int c = 0; c < DC; ++c) v[c] = Vs[j][tx + 16 * c];
#pragma unroll
            for (int a = 0; a < 4; ++a) {
                const float p = Ps[ty + 16 * a][j];
#pragma unroll
                for (int c = 0; c < DC; ++c) o[a][c] += p * v[c];
            }
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int i = i0 + ty + 16 * a;
        if (i >= S) continue;
#pragma unroll
        for (int c = 0; c < DC; ++c) O[(size_t)i * D + tx + 16 * c] = o[a][c] / l[a];
    }
}

extern "C" __global__ void __launch_bounds__(256, 2)
flash_fp32_d64(const float* __restrict__ Q, const float* __restrict__ K,
               const float* __restrict__ V, float* __restrict__ O, int S, float scale, int causal)
{
    flash_fp32_body<64>(Q, K, V, O, S, scale, causal != 0);
}

extern "C" __global__ void __launch_bounds__(256, 2)
flash_fp32_d128(const float* __restrict__ Q, const float* __restrict__ K,
                const float* __restrict__ V, float* __restrict__ O, int S, float scale, int causal)
{
    flash_fp32_body<128>(Q, K, V, O, S, scale, causal != 0);
}
// --8<-- [end:flash]
