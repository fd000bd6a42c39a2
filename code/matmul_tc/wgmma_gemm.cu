// BF16 matrix product on Hopper's own path, C = A @ B: TMA copies tiles into
// shared memory, wgmma multiplies them there, and the two run in different
// warps that pass the tiles along through mbarriers.
//
// Host program: wgmma_gemm.py. A is M x K bf16, B is K x N bf16, C is M x N
// bf16, all row-major; the tensor cores accumulate in fp32 and C is rounded
// to bf16 once, at the end (as cuBLAS does for bf16 output).
// cudabook: arch sm_90a
// (wgmma exists only on sm_90a among current targets: this file is compiled
// for that architecture alone, and runs only on compute capability 9.0.)
//
// What changes from tc_gemm.cu's last rung (mma_pipelined):
//   - loads: one thread asks the TMA unit (the Tensor Memory Accelerator) for
//     a whole tile; TMA computes the addresses, fills what lies outside the
//     matrix with zeros and writes the tile swizzled (the 128-byte pattern);
//     the threads issue no load instructions at all;
//   - products: wgmma.mma_async, issued by a warpgroup (4 warps, 128
//     threads) for a 64 x 256 x 16 piece, reads both operands straight from
//     shared memory (no ldmatrix) and runs asynchronously;
//   - warp specialisation: warpgroup 0 only loads (the producer), warpgroups
//     1 and 2 only multiply (the consumers). A ring of STAGES buffers sits
//     between them, each with two mbarriers: `full` (the producer's TMA has
//     landed) and `empty` (both consumers are done reading);
//   - setmaxnreg moves registers from the producer (which needs few) to the
//     consumers (which hold a 64 x 256 fp32 accumulator: 128 per thread).
//
// Block tile 128 x 256, K in slices of 64. Limits the host checks: K and N
// multiples of 8 (TMA needs every row to start on a 16-byte boundary), each
// matrix on a 16-byte boundary, every dimension below 2^31.

#include <cuda_bf16.h>
#include <stdint.h>

using bf16 = __nv_bfloat16;

constexpr int BM = 128, BN = 256, BK = 64;   // block tile; BK * 2 bytes = one 128-byte row
constexpr int STAGES = 4;                    // 4 x 48 KiB of shared memory in flight
constexpr int CONSUMERS = 2;                 // warpgroups that multiply, 64 rows of C each
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int GROUP_M = 8;                   // tile rows that share B tiles in the L2 (see tile_of)
constexpr int A_BYTES = BM * BK * 2;         // 16 KiB: 128 rows of 128 bytes
constexpr int B_BOX = BK * 64 * 2;           // 8 KiB: 64 rows of K, 64 columns of N
constexpr int B_BYTES = BN * BK * 2;         // 32 KiB: four such boxes side by side
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;

// A CUtensorMap (cuda.h), made on the host by cuTensorMapEncodeTiled: 128
// opaque bytes that tell TMA the matrix's address, sizes, row stride, box
// and swizzle. The host copies it into global memory (64-byte aligned) and
// passes its address; TMA reads it from there, after the fence the CUDA
// C++ Programming Guide asks for (see the producer). C++ programs usually
// pass it by value as a __grid_constant__ parameter instead; its 64-byte
// alignment then moves the parameters away from where PyCUDA's packed
// launch puts them (see the chapter).
struct __align__(64) TensorMap { uint64_t opaque[16]; };

// --8<-- [start:sync]
__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// An mbarrier counts arrivals and, for TMA, bytes. Each completed phase
// flips its parity bit; a waiter names the parity of the phase it waits for.
__device__ __forceinline__ void bar_init(uint64_t* bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void bar_wait(uint64_t* bar, int parity)
{
    asm volatile(
        "{\n .reg .pred done;\n"
        "WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra WAIT_%=;\n}" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive, and tell the barrier to wait also for `bytes` bytes of TMA writes.
__device__ __forceinline__ void bar_expect_bytes(uint64_t* bar, int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// One TMA copy: the box at (x = column, y = row) of the map's matrix into
// shared memory at dst; its bytes count against bar when they land. Parts of
// the box outside the matrix arrive as zeros (and still count).
__device__ __forceinline__ void tma_load(void* dst, const TensorMap* map, int x, int y,
                                         uint64_t* bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y),
          "r"(smem_addr(bar)) : "memory");
}
// --8<-- [end:sync]

// --8<-- [start:wgmma]
// A wgmma operand in shared memory is named by a 64-bit descriptor: start
// address, two strides (LBO, SBO; both in 16-byte units) and the swizzle
// (1 in bits 62-63: the 128-byte pattern TMA wrote).
//   A, K-major (its rows run along K): 8-row groups of 128-byte rows, SBO =
//     1024 bytes apart; LBO is unused with this swizzle (16 by convention).
//   B, N-major (its rows run along N): 8 rows of K make a 1024-byte group,
//     SBO = 1024; a 64-column box is 128 bytes wide, so the 256 columns are
//     four boxes, LBO = B_BOX bytes apart.
__device__ __forceinline__ uint64_t descriptor(const void* p, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 |
           (uint64_t)(sbo >> 4) << 32 | 1ull << 62;
}

// d (64 x 256 fp32, 128 registers a thread) += A (64 x 16) @ B (16 x 256).
// The five trailing immediates: scale-d 1 (add to d, not overwrite it),
// scale A and B by +1, A not transposed (K-major), B transposed (N-major;
// wgmma's default B is K-major).
__device__ __forceinline__ void wgmma_64x256x16(float (&d)[128], uint64_t a, uint64_t b)
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
        "%123, %124, %125, %126, %127}, %128, %129, 1, 1, 1, 0, 1;"
#define D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
              "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
        : D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56),
          D8(64), D8(72), D8(80), D8(88), D8(96), D8(104), D8(112), D8(120)
#undef D8
        : "l"(a), "l"(b));
}
// --8<-- [end:wgmma]

// The accumulators may be touched only outside the products in flight.
// wgmma's asm statements name them, but the fence and wait statements do
// not, so nothing would stop the compiler from moving the zeroing below
// the first product, or the epilogue's reads above the last wait: this
// empty statement, which "changes" every accumulator, pins them in place.
__device__ __forceinline__ void hold(float (&d)[128])
{
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Tile (row, column) of C for this block. Blocks run roughly in order of
// blockIdx.x; going down a group of GROUP_M tile rows before moving right
// lets the blocks running at once share tiles of both A and B in the L2.
__device__ __forceinline__ void tile_of(int block, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP_M * tiles_n;
    const int first = block / per_group * GROUP_M;
    const int rows = min(tiles_m - first, GROUP_M);
    tm = first + block % per_group % rows;
    tn = block % per_group / rows;
}

// --8<-- [start:kernel]
// One block's 128 x 256 tile of C: the producer fills the ring, the two
// consumers multiply, and each warp hands its 16 x 256 share of its
// consumer's 64 x 256 accumulator to store(d, row0, col0), with row0 the
// warp's first row: rows row0 + (t % 32) / 4 + 8h and columns
// col0 + 8j + 2 (t % 4) + c hold d[4j + 2h + c] (PTX ISA, wgmma D
// fragments). The kernel below stores C; chapter 17 stores its layers'
// tails instead.
template <class Store>
__device__ __forceinline__ void wgmma_tile(const TensorMap* a_map, const TensorMap* b_map,
                                           int M, int N, int K, Store store)
{
    extern __shared__ uint8_t smem_raw[];
    // TMA's 128-byte swizzle repeats every 1024 bytes: align the stages to it.
    uint8_t* smem = (uint8_t*)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint64_t* full = (uint64_t*)(smem + STAGES * STAGE_BYTES);
    uint64_t* empty = full + STAGES;

    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    int tm, tn;
    tile_of(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, tm, tn);
    const int slices = (K + BK - 1) / BK;     // the last slice's overhang arrives as zeros

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(&full[s], 1);                  // the producer's arrive (plus its bytes)
            bar_init(&empty[s], CONSUMERS * 4);     // one arrive per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {                                   // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            // The maps were written to global memory by a copy from the
            // host: make them visible to the TMA unit's reads, then start
            // fetching them.
            asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;"
                         ::"l"(a_map) : "memory");
            asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;"
                         ::"l"(b_map) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(a_map) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(b_map) : "memory");
            for (int k = 0; k < slices; ++k) {
                const int s = k % STAGES;
                bar_wait(&empty[s], (k / STAGES + 1) & 1);   // the first round finds it empty
                uint8_t* a = smem + s * STAGE_BYTES;
                uint8_t* b = a + A_BYTES;
                bar_expect_bytes(&full[s], STAGE_BYTES);
                tma_load(a, a_map, k * BK, tm * BM, &full[s]);
                for (int j = 0; j < BN / 64; ++j)
                    tma_load(b + j * B_BOX, b_map, tn * BN + j * 64, k * BK, &full[s]);
            }
        }
        return;
    }

    // consumer: warpgroup wg computes rows (wg - 1) * 64 .. + 63 of the tile
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    float d[128];
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    hold(d);
    for (int k = 0; k < slices; ++k) {
        const int s = k % STAGES;
        bar_wait(&full[s], (k / STAGES) & 1);
        const uint8_t* a = smem + s * STAGE_BYTES + (wg - 1) * 64 * BK * 2;
        const uint8_t* b = smem + s * STAGE_BYTES + A_BYTES;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        for (int kk = 0; kk < BK / 16; ++kk)            // 16 columns of A = 32 bytes;
            wgmma_64x256x16(d, descriptor(a + kk * 32, 16, 1024),      // 16 rows of B =
                            descriptor(b + kk * 16 * 128, B_BOX, 1024)); // 2048 bytes
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        // Keep this slice's products in flight; wait for the previous
        // slice's, then hand its buffer back to the producer.
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (k > 0 && tid % 32 == 0) bar_arrive(&empty[(k - 1) % STAGES]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    hold(d);
    store(d, tm * BM + (wg - 1) * 64 + tid / 32 * 16, tn * BN);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
wgmma_gemm(const TensorMap* a_map, const TensorMap* b_map, bf16* __restrict__ C, int M, int N,
           int K)
{
    wgmma_tile(a_map, b_map, M, N, K, [&](const float (&d)[128], int row0, int col0) {
        const int lane = threadIdx.x % 32;
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j + 2 * (lane % 4);   // even, and N is even:
            if (col >= N) break;                              // both columns in or out
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + lane / 4 + 8 * h;
                if (row < M)
                    *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + col) =
                        __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            }
        }
    });
}
// --8<-- [end:kernel]
