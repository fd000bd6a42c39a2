// The linear layer's backward on Hopper's tensor cores: the same product in
// the layouts the gradients need (draft for Part IV, "Backpropagation on
// the GPU"). Not yet run on a GPU.
//
// Forward (chapter 17):  Y = X W^T + b, with W^T stored as w_t, K x N
// row-major, so the product is chapter 12's A (M x K, K-major) times
// B (K x N, N-major). Backward, for dY (M x N):
//   dX   (M x K) = dY W       A = dY, K-major (as forward's A);
//                             B = W = w_t^T: stored as w_t, its rows run
//                             along this product's K (= N): K-major.
//   dW^T (K x N) = X^T dY     A = X^T: stored as X, its rows run along this
//                             product's M (= K): M-major;
//                             B = dY, N-major (as forward's B).
// wgmma reads either layout of a 16-bit operand from shared memory, told by
// two immediates (transpose A, transpose B) and by the descriptor's
// strides; TMA copies the boxes in whichever orientation the matrix has in
// memory. So the two gradients need no transposed copy of anything: only
// different boxes and descriptors. The kernel is wgmma_gemm's (chapter 12),
// templated on the two layouts:
//   A_MN  A is M-major: two 64 x 64 boxes a slice (64 of K rows, 64 of M
//         columns each), one per consumer warpgroup; descriptor LBO = the
//         box, SBO = 1024 (8 rows of K); transpose-A immediate 1.
//   B_K   B is K-major: one 256 x 64 box a slice (256 rows of N, 64 of K),
//         laid out as A's (8-row groups of 128-byte rows): descriptor
//         LBO 16, SBO 1024, stepping 32 bytes a k16; transpose-B 0.

#include "../../../../code/matmul_tc/wgmma_gemm.cu"

// --8<-- [start:wgmma_t]
// d += A (64 x 16) @ B (16 x 256), the two transpose immediates chosen at
// compile time (1: the operand is MN-major).
template <int TA, int TB>
__device__ __forceinline__ void wgmma_64x256x16_t(float (&d)[128], uint64_t a, uint64_t b)
{
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "
        "%110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
        "%123, %124, %125, %126, %127}, %128, %129, 1, 1, 1, %130, %131;"
#define D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
              "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
        : D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56),
          D8(64), D8(72), D8(80), D8(88), D8(96), D8(104), D8(112), D8(120)
#undef D8
        : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
// --8<-- [end:wgmma_t]

constexpr int A_BOX = 64 * BK * 2;           // 8 KiB: 64 rows of K, 64 columns of M (A_MN)

// --8<-- [start:tile_t]
template <bool A_MN, bool B_K, class Store>
__device__ __forceinline__ void wgmma_tile_t(const TensorMap* a_map, const TensorMap* b_map,
                                             int M, int N, int K, Store store)
{
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = (uint8_t*)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint64_t* full = (uint64_t*)(smem + STAGES * STAGE_BYTES);
    uint64_t* empty = full + STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    int tm, tn;
    tile_of(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, tm, tn);
    const int slices = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {                                   // producer: the boxes of each slice
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(a_map) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" ::"l"(b_map) : "memory");
            for (int k = 0; k < slices; ++k) {
                const int s = k % STAGES;
                bar_wait(&empty[s], (k / STAGES + 1) & 1);
                uint8_t* a = smem + s * STAGE_BYTES;
                uint8_t* b = a + A_BYTES;
                bar_expect_bytes(&full[s], STAGE_BYTES);
                if constexpr (A_MN) {                // X stored K x M: boxes at (column m, row k)
                    tma_load(a, a_map, tm * BM, k * BK, &full[s]);
                    tma_load(a + A_BOX, a_map, tm * BM + 64, k * BK, &full[s]);
                } else {
                    tma_load(a, a_map, k * BK, tm * BM, &full[s]);
                }
                if constexpr (B_K) {                 // w_t stored N x K: one box at (column k, row n)
                    tma_load(b, b_map, k * BK, tn * BN, &full[s]);
                } else {
                    for (int j = 0; j < BN / 64; ++j)
                        tma_load(b + j * B_BOX, b_map, tn * BN + j * 64, k * BK, &full[s]);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    float d[128];
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    hold(d);
    for (int k = 0; k < slices; ++k) {
        const int s = k % STAGES;
        bar_wait(&full[s], (k / STAGES) & 1);
        const uint8_t* a = smem + s * STAGE_BYTES + (wg - 1) * (A_MN ? A_BOX : 64 * BK * 2);
        const uint8_t* b = smem + s * STAGE_BYTES + A_BYTES;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        for (int kk = 0; kk < BK / 16; ++kk) {
            // A: K-major steps 32 bytes along a row; M-major steps 16 rows of 128 bytes.
            const uint64_t da = A_MN ? descriptor(a + kk * 16 * 128, A_BOX, 1024) : descriptor(a + kk * 32, 16, 1024);
            const uint64_t db = B_K ? descriptor(b + kk * 32, 16, 1024) : descriptor(b + kk * 16 * 128, B_BOX, 1024);
            wgmma_64x256x16_t<A_MN ? 1 : 0, B_K ? 0 : 1>(d, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (k > 0 && tid % 32 == 0) bar_arrive(&empty[(k - 1) % STAGES]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    hold(d);
    store(d, tm * BM + (wg - 1) * 64 + tid / 32 * 16, tn * BN);
}
// --8<-- [end:tile_t]

template <bool A_MN, bool B_K>
__device__ __forceinline__ void gemm_t(const TensorMap* a_map, const TensorMap* b_map, bf16* __restrict__ C,
                                       int M, int N, int K)
{
    wgmma_tile_t<A_MN, B_K>(a_map, b_map, M, N, K, [&](const float (&d)[128], int row0, int col0) {
        const int lane = threadIdx.x % 32;
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j + 2 * (lane % 4);
            if (col >= N) break;
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + lane / 4 + 8 * h;
                if (row < M)
                    *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + col) =
                        __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            }
        }
    });
}

// --8<-- [start:gelu_bwd]
// GELU's derivative, tanh form: with u = k (v + 0.044715 v^3) and
// gelu(v) = v (1 + tanh u) / 2,
//   gelu'(v) = (1 + tanh u) / 2 + v (1 - tanh^2 u) k (1 + 3 0.044715 v^2) / 2.
__device__ __forceinline__ float gelu_tanh_grad(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    const float th = tanhf(k * (v + 0.044715f * v * v * v));
    return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * v * v);
}

// dX of the MLP's second product, c_proj2, is the gradient of GELU's output;
// the gradient of its input, what c_fc's backward needs, is that times
// gelu'(pre), pre the activation before the GELU that the forward kept. One
// more read (pre) in the epilogue saves a kernel that would read dX, read
// pre and write the result.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_dx_gelu(const TensorMap* a_map, const TensorMap* b_map, const bf16* __restrict__ pre,
             bf16* __restrict__ C, int M, int N, int K)
{
    wgmma_tile_t<false, true>(a_map, b_map, M, N, K, [&](const float (&d)[128], int row0, int col0) {
        const int lane = threadIdx.x % 32;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {             // unrolled: d's indices stay constants,
            const int col = col0 + 8 * j + 2 * (lane % 4);  // so d stays in registers
            if (col >= N) break;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + lane / 4 + 8 * h;
                if (row >= M) continue;
                const size_t at = (size_t)row * N + col;
                const __nv_bfloat162 p = *reinterpret_cast<const __nv_bfloat162*>(pre + at);
                *reinterpret_cast<__nv_bfloat162*>(C + at) = __floats2bfloat162_rn(
                    d[4 * j + 2 * h] * gelu_tanh_grad(__low2float(p)),
                    d[4 * j + 2 * h + 1] * gelu_tanh_grad(__high2float(p)));
            }
        }
    });
}
// --8<-- [end:gelu_bwd]

// dX = dY W: A K-major (dY), B K-major (w_t).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_dx(const TensorMap* a_map, const TensorMap* b_map, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_t<false, true>(a_map, b_map, C, M, N, K);
}

// dW^T = X^T dY: A M-major (X), B N-major (dY).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_dw(const TensorMap* a_map, const TensorMap* b_map, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_t<true, false>(a_map, b_map, C, M, N, K);
}
