// Inclusive prefix sum (scan) of n floats: y[i] = x[0] + ... + x[i].
//
// Host program: scan.py. Built bottom up: scan_warp scans 32 values in
// registers with shuffles; scan_tile (used by every kernel) scans a tile of
// TILE = 8,192 elements with one block, from warp scans and a scan of the
// warp totals in shared memory. A whole array then takes either three
// kernels (scan_block scans each tile and writes its total, scan_totals
// scans the totals, add_totals adds them back: every element read and
// written twice), or one: scan_lookback, where each tile finds the sum of
// all the tiles before it by decoupled look-back (Merrill and Garland,
// "Single-pass Parallel Prefix Scan with Decoupled Look-back", NVIDIA,
// 2016), so every element is read once and written once.
// Every kernel takes any n >= 1 and runs with BLOCK threads per block.

#include <cuda/atomic>

#define BLOCK 256                        // threads per block: a multiple of 32
#define WARPS (BLOCK / 32)
#define PER 8                            // float4s per thread per tile
#define TILE (BLOCK * 4 * PER)           // elements per tile: 8,192
#define FULL 0xffffffffu                 // every lane of the warp takes part

// --8<-- [start:scan_warp]
// Inclusive scan across a warp: lane i returns v_0 + v_1 + ... + v_i. At the
// step with distance d, each lane adds the value d lanes below it (lanes
// below d have none): after d = 1, 2, 4, 8, 16, each lane holds its prefix.
__device__ __forceinline__ float scan_warp(float v)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const float below = __shfl_up_sync(FULL, v, d);   // every lane shuffles, even those that ignore it
        if (lane >= d) {
            v += below;
        }
    }
    return v;
}
// --8<-- [end:scan_warp]

// 16 bytes of x from element e (a multiple of 4, so aligned), with zeros
// past the end n: a zero changes no sum.
__device__ __forceinline__ float4 load4(const float* x, long long e, long long n)
{
    if (e + 4 <= n) {
        return *reinterpret_cast<const float4*>(x + e);
    }
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (e < n)     v.x = x[e];
    if (e + 1 < n) v.y = x[e + 1];
    if (e + 2 < n) v.z = x[e + 2];
    return v;
}

__device__ __forceinline__ void store4(float* y, long long e, long long n, float4 v)
{
    if (e + 4 <= n) {
        __stwb(reinterpret_cast<float4*>(y + e), v);   // an intrinsic, so nvcc keeps it one 16-byte store
        return;
    }
    if (e < n)     y[e] = v.x;
    if (e + 1 < n) y[e + 1] = v.y;
    if (e + 2 < n) y[e + 2] = v.z;
}

// --8<-- [start:scan_block]
// One tile in registers. Warp w owns tile elements [1024 w, 1024 w + 1024)
// and reads them as PER chunks of 128: in chunk q, lane l holds the float4 at
// 1024 w + 128 q + 4 l, so each load instruction of the warp reads 512
// contiguous bytes. v[q] holds the running sums inside that float4; off[q]
// the sum of everything before that float4 in the tile.
struct Tile {
    float4 v[PER];
    float off[PER];
};

// Loads the tile that starts at element `base` and scans it. Returns the
// tile's total, in every thread. Every thread of the block must call it.
__device__ __forceinline__ float scan_tile(Tile& t, const float* x, long long base, long long n)
{
    __shared__ float warp_totals[WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long first = base + warp * (128 * PER) + 4 * lane;
#pragma unroll
    for (int q = 0; q < PER; ++q) {
        t.v[q] = load4(x, first + 128 * q, n);          // all PER loads in flight before any add
    }
    float carry = 0.0f;                                 // the warp's chunks so far
#pragma unroll
    for (int q = 0; q < PER; ++q) {
        float4& v = t.v[q];
        v.y += v.x;                                     // this lane's four elements, in order
        v.z += v.y;
        v.w += v.z;
        const float inclusive = scan_warp(v.w);         // lanes 0..lane of this chunk
        const float below = __shfl_up_sync(FULL, inclusive, 1);
        t.off[q] = carry + (lane > 0 ? below : 0.0f);   // exclusive: without our own four
        carry += __shfl_sync(FULL, inclusive, 31);      // the chunk's total, from lane 31
    }
    if (lane == 0) {
        warp_totals[warp] = carry;
    }
    __syncthreads();                                    // all warp totals written
    if (warp == 0) {
        const float s = scan_warp(lane < WARPS ? warp_totals[lane] : 0.0f);
        if (lane < WARPS) {
            warp_totals[lane] = s;                      // now inclusive: warps 0..lane
        }
    }
    __syncthreads();                                    // the scanned totals are written
    const float before = warp > 0 ? warp_totals[warp - 1] : 0.0f;
    const float total = warp_totals[WARPS - 1];
    __syncthreads();                                    // all read, before a next call overwrites them
#pragma unroll
    for (int q = 0; q < PER; ++q) {
        t.off[q] += before;
    }
    return total;
}

// Writes the scanned tile to y, each element plus `prefix` (the sum of all
// elements before the tile): one add per element.
__device__ __forceinline__ void store_tile(const Tile& t, float* y, long long base, long long n,
                                           float prefix)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long first = base + warp * (128 * PER) + 4 * lane;
#pragma unroll
    for (int q = 0; q < PER; ++q) {
        const float o = t.off[q] + prefix;
        const float4 v = t.v[q];
        store4(y, first + 128 * q, n, make_float4(v.x + o, v.y + o, v.z + o, v.w + o));
    }
}

// Each block scans its own tile, blockIdx.x, as if no tile came before it,
// and writes the tile's total to totals[blockIdx.x].
extern "C" __global__ void scan_block(const float* __restrict__ x,
                                      float* __restrict__ y,
                                      float* __restrict__ totals,
                                      int n)
{
    const long long base = (long long)blockIdx.x * TILE;
    Tile t;
    const float total = scan_tile(t, x, base, n);
    store_tile(t, y, base, n, 0.0f);
    if (threadIdx.x == 0) {
        totals[blockIdx.x] = total;
    }
}
// --8<-- [end:scan_block]

// --8<-- [start:three_pass]
// Step 2: one block scans the tile totals, a tile of them at a time,
// carrying the sum so far from one tile to the next. scanned[t] is the sum
// of tiles 0..t.
extern "C" __global__ void scan_totals(const float* __restrict__ totals,
                                       float* __restrict__ scanned,
                                       int tiles)
{
    float carry = 0.0f;
    for (long long base = 0; base < tiles; base += TILE) {
        Tile t;
        const float total = scan_tile(t, totals, base, tiles);
        store_tile(t, scanned, base, tiles, carry);
        carry += total;
    }
}

// Step 3: block b adds the sum of all tiles before tile b + 1 to that tile
// (tile 0 has nothing before it and is already right).
extern "C" __global__ void add_totals(float* __restrict__ y,
                                      const float* __restrict__ scanned,
                                      int n)
{
    const long long tile = blockIdx.x + 1LL;
    const float before = scanned[tile - 1];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long first = tile * TILE + warp * (128 * PER) + 4 * lane;
    float4 v[PER];
#pragma unroll
    for (int q = 0; q < PER; ++q) {
        v[q] = load4(y, first + 128 * q, n);
    }
#pragma unroll
    for (int q = 0; q < PER; ++q) {
        store4(y, first + 128 * q, n,
               make_float4(v[q].x + before, v[q].y + before, v[q].z + before, v[q].w + before));
    }
}
// --8<-- [end:three_pass]

// --8<-- [start:lookback]
// Tile t's status is one 64-bit word, state[1 + t]: a flag in the high half,
// a float's bits in the low half. EMPTY: nothing yet. AGGREGATE: the value is
// the tile's own total. PREFIX: the value is the inclusive prefix, the sum of
// tiles 0..t. A word only ever goes EMPTY -> AGGREGATE -> PREFIX (tile 0:
// EMPTY -> PREFIX).
#define EMPTY 0u
#define AGGREGATE 1u
#define PREFIX 2u

__device__ __forceinline__ unsigned long long pack(unsigned int flag, float value)
{
    return ((unsigned long long)flag << 32) | __float_as_uint(value);
}

// Memory ordering. A flag and its value travel in one aligned 64-bit word,
// written by one store and read by one load, and such accesses are
// single-copy atomic: a reader that sees the flag sees the value that came
// with it, never half of an old word. Nothing else passes between tiles
// (each writes only its own part of y and reads only x), so relaxed atomics
// at device scope are enough: they go to L2, where all SMs see one order of
// writes to each word, so a spinning reader sees the new word once it is
// written, and the compiler may not hoist the load out of the loop. No
// release/acquire fence is needed on this path, and none is paid for.
using Status = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;

// state[0] hands out tile numbers; the host zeroes all of state before
// every launch (EMPTY is 0).
extern "C" __global__ void scan_lookback(const float* __restrict__ x,
                                         float* __restrict__ y,
                                         unsigned long long* state,
                                         int n)
{
    __shared__ long long tile_s;
    __shared__ float prefix_s;
    // Forward progress: the tile comes from a counter, in the order blocks
    // start, not from blockIdx.x (the hardware may start blocks in any
    // order). Every tile before ours belongs to a block that has already
    // started, so it is resident and will publish its total without waiting
    // for anyone: our wait below always ends, whatever the grid size.
    if (threadIdx.x == 0) {
        tile_s = (long long)Status(state[0]).fetch_add(1ull, cuda::memory_order_relaxed);
    }
    __syncthreads();
    const long long tile = tile_s;
    const long long base = tile * TILE;
    Tile t;
    const float total = scan_tile(t, x, base, n);       // loads and local scan: no waiting on anyone

    if (threadIdx.x < 32) {                             // warp 0 publishes, then looks back
        const int lane = threadIdx.x;
        Status mine(state[1 + tile]);
        float exclusive = 0.0f;                         // sum of all tiles before ours
        if (tile == 0) {
            if (lane == 0) mine.store(pack(PREFIX, total), cuda::memory_order_relaxed);
        } else {
            if (lane == 0) mine.store(pack(AGGREGATE, total), cuda::memory_order_relaxed);
            // Look at the 32 tiles before `newest` at once, lane i at tile
            // newest - i, until a tile with its inclusive prefix turns up.
            for (long long newest = tile - 1;; newest -= 32) {
                const long long j = newest - lane;
                unsigned long long word = pack(PREFIX, 0.0f);   // before tile 0: a prefix of 0
                if (j >= 0) {
                    Status theirs(state[1 + j]);
                    unsigned int pause = 8;                 // ns; doubles up to 256 (as CUB does),
                    while (true) {                          // so spinning warps do not crowd the L2
                        word = theirs.load(cuda::memory_order_relaxed);
                        if ((unsigned int)(word >> 32) != EMPTY) break;   // published
                        __nanosleep(pause);
                        pause = min(2 * pause, 256u);
                    }
                }
                const unsigned int prefixes = __ballot_sync(FULL, (unsigned int)(word >> 32) == PREFIX);
                // Add the nearest tile with a prefix (lowest such lane) and the
                // aggregates of the tiles between it and us; nothing beyond.
                const int stop = prefixes ? __ffs(prefixes) - 1 : 31;
                float s = lane <= stop ? __uint_as_float((unsigned int)word) : 0.0f;
#pragma unroll
                for (int o = 16; o > 0; o /= 2) {
                    s += __shfl_xor_sync(FULL, s, o);   // every lane gets the same sum
                }
                exclusive += s;
                if (prefixes) {
                    break;
                }
            }
            if (lane == 0) mine.store(pack(PREFIX, exclusive + total), cuda::memory_order_relaxed);
        }
        if (lane == 0) {
            prefix_s = exclusive;
        }
    }
    __syncthreads();                                    // the prefix reaches the other warps
    store_tile(t, y, base, n, prefix_s);
}
// --8<-- [end:lookback]
