// A GPT-2 block's matrix products, each with its elementwise tail fused
// into the store, and the one layout change the block needs.
//
// Host program: gpt2_block.py. The products are x W^T + b of nn.Linear,
// with W^T stored K x N row-major (so B = W^T is chapter 12's B), all bf16
// with fp32 accumulation. The main loop is chapter 12's rung 4
// (tc_mma_pipelined, included below): 128 x 128 tiles of C, 32 of K at a
// time, three cp.async stages, 4 warps of mma.sync. Only the end differs.
// Rung 4 wrote its fp32 accumulators to C; here each lane adds the bias to
// its two neighbouring columns, applies the layer's tail, rounds to bf16
// once and writes 4 bytes:
//   EPI_BIAS      y = acc + b
//   EPI_GELU      y = gelu(acc + b)                (the MLP's first product)
//   EPI_RESIDUAL  y = r + (acc + b)                (a product into the residual stream)
//   EPI_QKV       acc + b, written to q, k or v in heads layout: column c
//                 of the 3C outputs is matrix c / C, head (c % C) / D,
//                 element c % D; row r is token r % T of sequence r / T;
//                 each of q, k, v is B x H x T x D, as attention reads it.
// K and N must be multiples of 8 (the host checks): rung 4's aligned loads,
// and two neighbouring columns in one 4-byte store. Any M.
// cudabook: arch sm_80 sm_90 sm_90a
// (On sm_90a, a compute capability 9.0 GPU, the file also has the same
// tails after chapter 12's wgmma_gemm main loop: see the end.)

#include "../matmul_tc/tc_gemm.cu"

#define EPI_BIAS 0
#define EPI_GELU 1
#define EPI_RESIDUAL 2
#define EPI_QKV 3

// --8<-- [start:epilogue]
// GELU, tanh form, as chapter 13's (and GPT-2's).
__device__ __forceinline__ float gelu_tanh(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

// Accumulators through the tail, to bf16. acc[i][j][2h + c] holds row
// row0 + 16 i + lane / 4 + 8 h and column col0 + 8 j + 2 (lane % 4) + c:
// the layout of rung 4's mma.sync tiles (I = 4 tiles of 16 rows, J = 8 of
// 8 columns for a warp's 64 x 64) and of a wgmma accumulator (I = 1, J =
// 32: a warp's 16 rows of a warpgroup's 64 x 256).
template <int EPI, int I, int J>
__device__ __forceinline__ void epilogue_store(const float (&acc)[I][J][4], const bf16* __restrict__ bias,
                                               const bf16* __restrict__ res, bf16* __restrict__ out,
                                               int row0, int col0, int M, int N, int T, int D)
{
    const int lane = threadIdx.x % 32;
    // Where element (r, c) goes: rpart (from its row) + cpart (from its
    // column), each worked out once for the lane's rows and each column
    // pair, so the divisions of the heads layout stay out of the stores.
    size_t rpart[I][2];
#pragma unroll
    for (int i = 0; i < I; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row0 + 16 * i + lane / 4 + 8 * h;
            if constexpr (EPI == EPI_QKV) {               // token t of sequence r / T
                const int H = N / 3 / D;
                rpart[i][h] = ((size_t)(r / T) * H * T + r % T) * D;
            } else {
                rpart[i][h] = (size_t)r * N;
            }
        }
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int c = col0 + 8 * j + 2 * (lane % 4);
        if (c >= N) continue;                       // N % 8 == 0: c < N means c + 1 < N
        size_t cpart = c;
        if constexpr (EPI == EPI_QKV) {                   // matrix w, head, element c % D
            const int C = N / 3, w = c / C, cc = c - w * C, head = cc / D;
            cpart = (size_t)w * M * C + (size_t)head * T * D + (cc - head * D);
        }
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + c));
#pragma unroll
        for (int i = 0; i < I; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + 16 * i + lane / 4 + 8 * h;
                if (r >= M) continue;
                float v0 = acc[i][j][2 * h] + b.x, v1 = acc[i][j][2 * h + 1] + b.y;
                const size_t dst = rpart[i][h] + cpart;
                if constexpr (EPI == EPI_GELU) {
                    v0 = gelu_tanh(v0);
                    v1 = gelu_tanh(v1);
                } else if constexpr (EPI == EPI_RESIDUAL) {
                    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(res + dst));
                    v0 += x.x;
                    v1 += x.y;
                }
                *reinterpret_cast<__nv_bfloat162*>(out + dst) = __floats2bfloat162_rn(v0, v1);
            }
    }
}
// --8<-- [end:epilogue]

// --8<-- [start:gemm]
// Rung 4's main loop (mma_pipelined<true> in tc_gemm.cu, line for line),
// then the tail instead of the fp32 store.
template <int EPI>
__device__ __forceinline__ void gemm_tail(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                          const bf16* __restrict__ bias, const bf16* __restrict__ res,
                                          bf16* __restrict__ out, int M, int N, int K, int T, int D)
{
    __shared__ __align__(128) bf16 As[STAGES][BM * BK];
    __shared__ __align__(128) bf16 Bs[STAGES][BK * BN];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wm = (warp / 2) * 64, wn = (warp % 2) * 64;
    const int slices = (K + BK - 1) / BK;

    auto load_slice = [&](int stage, int t) {
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int idx = tid + 128 * p;
            const int ar = idx / 4, ac = idx % 4;
            copy_chunk(&As[stage][a_off(ar, ac)], A, bm + ar, t * BK + 8 * ac, M, K, true);
            const int br = idx / 16, bc = idx % 16;
            copy_chunk(&Bs[stage][b_off(br, bc)], B, t * BK + br, bn + 8 * bc, K, N, true);
        }
    };

    float acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) load_slice(s, s);
        cp_async_commit();
    }
    for (int t = 0; t < slices; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = t + STAGES - 1;
        if (next < slices) load_slice(next % STAGES, next);
        cp_async_commit();
        mma_slice(acc, As[t % STAGES], Bs[t % STAGES], wm, wn, lane);
    }
    cp_async_wait<0>();
    epilogue_store<EPI, 4, 8>(acc, bias, res, out, bm + wm, bn + wn, M, N, T, D);
}
// --8<-- [end:gemm]

#define GEMM_TAIL(NAME, EPI)                                                                  \
    extern "C" __global__ __launch_bounds__(128) void NAME(                                   \
        const bf16* __restrict__ A, const bf16* __restrict__ B, const bf16* __restrict__ bias, \
        const bf16* __restrict__ res, bf16* __restrict__ out, int M, int N, int K, int T, int D) \
    {                                                                                         \
        gemm_tail<EPI>(A, B, bias, res, out, M, N, K, T, D);                                  \
    }

GEMM_TAIL(gemm_bias, EPI_BIAS)
GEMM_TAIL(gemm_gelu, EPI_GELU)
GEMM_TAIL(gemm_residual, EPI_RESIDUAL)
GEMM_TAIL(gemm_qkv, EPI_QKV)

// --8<-- [start:hopper]
// On Hopper (compiled for sm_90a), the same tails after chapter 12's
// wgmma_gemm main loop: TMA, a producer warpgroup and two wgmma consumers,
// 128 x 256 tiles. Both chapter 12 files name their tile sizes BM, BN,
// BK and STAGES, so wgmma_gemm.cu comes in a namespace of its own: inside
// it, its constants hide tc_gemm.cu's. Elsewhere these kernels do not
// exist, and the host launches the ones above.
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
namespace hopper {
#include "../matmul_tc/wgmma_gemm.cu"
}

#define WGMMA_TAIL(NAME, EPI)                                                                 \
    extern "C" __global__ void __launch_bounds__(hopper::THREADS, 1) NAME(                    \
        const hopper::TensorMap* a_map, const hopper::TensorMap* b_map,                       \
        const bf16* __restrict__ bias, const bf16* __restrict__ res, bf16* __restrict__ out,  \
        int M, int N, int K, int T, int D)                                                    \
    {                                                                                         \
        hopper::wgmma_tile(a_map, b_map, M, N, K, [&](const float (&d)[128], int row0, int col0) { \
            epilogue_store<EPI, 1, 32>(reinterpret_cast<const float (&)[1][32][4]>(d), bias, res, \
                                       out, row0, col0, M, N, T, D);                          \
        });                                                                                   \
    }

WGMMA_TAIL(wgmma_bias, EPI_BIAS)
WGMMA_TAIL(wgmma_gelu, EPI_GELU)
WGMMA_TAIL(wgmma_residual, EPI_RESIDUAL)
WGMMA_TAIL(wgmma_qkv, EPI_QKV)
#endif
// --8<-- [end:hopper]

// --8<-- [start:merge]
// Attention's output, B x H x T x D, back to the residual stream's layout,
// (B T) x (H D): row b T + t holds the heads of token t side by side. A
// thread moves 8 bf16 (16 bytes); D % 8 == 0 (the host checks), so the 8
// never straddle two heads. Reads and writes are both whole 16-byte pieces
// of rows that neighbouring threads continue.
extern "C" __global__ void merge_heads(const bf16* __restrict__ o, bf16* __restrict__ y,
                                       int B, int H, int T, int D)
{
    const int n8 = B * H * T * D / 8;                   // the host keeps B H T D below 2^31
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
        const int e = 8 * i;                            // element of y: (b T + t) H D + h D + d
        const int d = e % D, hd = e / D;                // hd = (b T + t) H + h
        const int h = hd % H, bt = hd / H;              // bt = b T + t
        const int t = bt % T, b = bt / T;
        const int src = ((b * H + h) * T + t) * D + d;
        *reinterpret_cast<uint4*>(y + e) = *reinterpret_cast<const uint4*>(o + src);
    }
}
// --8<-- [end:merge]
