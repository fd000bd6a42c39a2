// FP32 matrix product on CUDA cores, C = A @ B, as a ladder of kernels.
//
// Host program: sgemm.py. A is M x K, B is K x N, C is M x N, all row-major
// float32. Every kernel takes (A, B, C, M, N, K) and is correct for any
// M, N, K >= 1: a tile that hangs over an edge of A or B is filled with
// zeros in shared memory (a zero adds nothing to a dot product), and only
// the elements of C inside the matrix are written. Row offsets are 64-bit
// (M * K, K * N and M * N may pass 2^31); indices inside a matrix row fit
// in int (the host keeps each dimension below 2^31 - 256).
//
// Each rung changes one thing, said in the comment above it:
//   naive       one thread per element of C, threadIdx.x down a column of C
//   coalesced   threadIdx.x along a row of C
//   smem        32 x 32 tiles of A and B staged in shared memory
//   1d          64 x 64 block tile, BK = 8, each thread 8 elements of C
//   2d          128 x 128 block tile, BK = 8, each thread an 8 x 8 tile
//   vec         float4 global loads, A's tile stored transposed
//   warptile    each warp owns a 64 x 32 piece; no bank conflicts
//   double_buffer  two shared stages: load slice k+1 while computing k

#define TILE 32          // the 32 x 32 rungs: naive, coalesced, smem

// --8<-- [start:naive]
// Rung 1: one thread per element of C, the dot product of a row of A and a
// column of B straight from global memory. threadIdx.x runs down a column
// of C (along M): the 32 lanes of a warp read A[m][k] for 32 rows m, K
// floats apart, a sector each, and write C 32 rows apart. B[k][n] is the
// same address for the whole warp (a broadcast).
extern "C" __global__ void sgemm_naive(const float* __restrict__ A,
                                       const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K)
{
    const int m = blockIdx.x * TILE + threadIdx.x;
    const int n = blockIdx.y * TILE + threadIdx.y;
    if (m < M && n < N) {
        const float* a = A + (size_t)m * K;
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += a[k] * B[(size_t)k * N + n];       // one FMA, one rounding
        }
        C[(size_t)m * N + n] = acc;
    }
}
// --8<-- [end:naive]

// --8<-- [start:coalesced]
// Rung 2: the same arithmetic, threadIdx.x now along a row of C (along N).
// A warp reads B[k][n .. n+31]: 128 contiguous bytes, four sectors; A[m][k]
// is one address for the warp (a broadcast); the stores are contiguous.
extern "C" __global__ void sgemm_coalesced(const float* __restrict__ A,
                                           const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K)
{
    const int n = blockIdx.x * TILE + threadIdx.x;
    const int m = blockIdx.y * TILE + threadIdx.y;
    if (m < M && n < N) {
        const float* a = A + (size_t)m * K;
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += a[k] * B[(size_t)k * N + n];
        }
        C[(size_t)m * N + n] = acc;
    }
}
// --8<-- [end:coalesced]

// --8<-- [start:smem]
// Rung 3: every element of A is read by N threads and every element of B
// by M threads; from global memory (or L2) that is the bottleneck. Here a
// 32 x 32 block stages a 32 x 32 tile of A and one of B in shared memory,
// so each global element is read once per block and used 32 times.
// Out-of-range elements are stored as 0.
extern "C" __global__ void sgemm_smem(const float* __restrict__ A,
                                      const float* __restrict__ B,
                                      float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m = blockIdx.y * TILE + ty;
    const int n = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (m < M && k0 + tx < K) ? A[(size_t)m * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && n < N) ? B[(size_t)(k0 + ty) * N + n] : 0.0f;
        __syncthreads();                  // both tiles are in
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];   // As: broadcast; Bs: 32 banks
        }
        __syncthreads();                  // done reading before the next load
    }
    if (m < M && n < N) {
        C[(size_t)m * N + n] = acc;
    }
}
// --8<-- [end:smem]

// 1-D register blocking: a 64 x 64 block tile, BK = 8, 512 threads.
#define BM1 64
#define BN1 64
#define BK1 8
#define TM1 8            // elements of C per thread, down one column

// --8<-- [start:blocking_1d]
// Rung 4: in rung 3 every FMA needs two shared loads. Here each thread
// computes TM1 = 8 elements of one column of C: one value of B, kept in a
// register, serves 8 FMAs, so a k step costs 9 shared loads for 8 FMAs
// instead of 16, and the 64 x 64 tile reuses each global load 64 times.
extern "C" __global__ void __launch_bounds__(BM1 * BN1 / TM1)
sgemm_1d(const float* __restrict__ A, const float* __restrict__ B,
         float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[BM1][BK1];
    __shared__ float Bs[BK1][BN1];
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM1, n0 = blockIdx.x * BN1;
    const int a_row = tid / BK1, a_col = tid % BK1;   // 512 threads: one element each
    const int b_row = tid / BN1, b_col = tid % BN1;
    const int tc = tid % BN1;                         // this thread's column of C
    const int tr = tid / BN1;                         // and its group of TM1 rows
    float acc[TM1] = {};
    for (int k0 = 0; k0 < K; k0 += BK1) {
        const int am = m0 + a_row, ak = k0 + a_col;
        As[a_row][a_col] = (am < M && ak < K) ? A[(size_t)am * K + ak] : 0.0f;
        const int bk = k0 + b_row, bn = n0 + b_col;
        Bs[b_row][b_col] = (bk < K && bn < N) ? B[(size_t)bk * N + bn] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK1; ++k) {
            const float b = Bs[k][tc];
#pragma unroll
            for (int i = 0; i < TM1; ++i) {
                acc[i] += As[tr * TM1 + i][k] * b;   // a warp shares tr: broadcast
            }
        }
        __syncthreads();
    }
    const int n = n0 + tc;
#pragma unroll
    for (int i = 0; i < TM1; ++i) {
        const int m = m0 + tr * TM1 + i;
        if (m < M && n < N) {
            C[(size_t)m * N + n] = acc[i];
        }
    }
}
// --8<-- [end:blocking_1d]

// The 128 x 128 rungs: BK = 8, 256 threads, an 8 x 8 tile of C per thread.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define NT 256           // threads per block = BM * BN / (TM * TN)

// --8<-- [start:blocking_2d]
// Rung 5: 2-D register blocking. Each thread computes an 8 x 8 tile of C
// as a sum of outer products: per k it loads 8 values of A's column and 8
// of B's row into registers, then does 64 FMAs with them: 16 shared loads
// for 64 FMAs (rung 4: 72 for 64). Per block, each global float is used
// 128 times.
extern "C" __global__ void __launch_bounds__(NT)
sgemm_2d(const float* __restrict__ A, const float* __restrict__ B,
         float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);   // 16 x 16 threads
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int i = 0; i < BM * BK / NT; ++i) {          // 4 elements of A each
            const int idx = tid + i * NT;
            const int r = idx / BK, c = idx % BK;
            const int m = m0 + r, k = k0 + c;
            As[r][c] = (m < M && k < K) ? A[(size_t)m * K + k] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < BK * BN / NT; ++i) {          // and 4 of B
            const int idx = tid + i * NT;
            const int r = idx / BN, c = idx % BN;
            const int k = k0 + r, n = n0 + c;
            Bs[r][c] = (k < K && n < N) ? B[(size_t)k * N + n] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) ra[i] = As[tr * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = Bs[k][tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + tr * TM + i;
        if (m >= M) break;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + tc * TN + j;
            if (n < N) C[(size_t)m * N + n] = acc[i][j];
        }
    }
}
// --8<-- [end:blocking_2d]

// --8<-- [start:helpers]
// Helpers of the float4 rungs. A float4 load needs a 16-byte aligned
// address: the arrays start aligned (the host checks), so A[m][k] with k a
// multiple of 4 is aligned when K is a multiple of 4, and B[k][n] when N
// is. Otherwise, and for a float4 that would cross the matrix's edge, the
// four floats are loaded one by one, with zeros outside the matrix.
__device__ __forceinline__ float4 load4(const float* __restrict__ row, int col, int cols,
                                        bool vec)
{
    if (vec && col + 3 < cols) {
        return *reinterpret_cast<const float4*>(row + col);
    }
    float4 v;
    v.x = col < cols ? row[col] : 0.0f;
    v.y = col + 1 < cols ? row[col + 1] : 0.0f;
    v.z = col + 2 < cols ? row[col + 2] : 0.0f;
    v.w = col + 3 < cols ? row[col + 3] : 0.0f;
    return v;
}

// The A tile (BM x BK) is one float4 per thread: rows tid / 2, columns
// (tid % 2) * 4 .. + 3. Rows past M read as zeros.
__device__ __forceinline__ float4 load_a(const float* __restrict__ A, int M, int K,
                                         int m0, int k0, bool vec)
{
    const int m = m0 + threadIdx.x / (BK / 4);
    const int k = k0 + (threadIdx.x % (BK / 4)) * 4;
    return m < M ? load4(A + (size_t)m * K, k, K, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
}

// The B tile (BK x BN) is one float4 per thread too: row tid / 32,
// columns (tid % 32) * 4 .. + 3. Rows past K read as zeros.
__device__ __forceinline__ float4 load_b(const float* __restrict__ B, int N, int K,
                                         int k0, int n0, bool vec)
{
    const int k = k0 + threadIdx.x / (BN / 4);
    const int n = n0 + (threadIdx.x % (BN / 4)) * 4;
    return k < K ? load4(B + (size_t)k * N, n, N, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
}

// Store 4 elements of row m of C from column n on, with float4 when the
// row is inside and aligned, else one by one inside the matrix.
__device__ __forceinline__ void store4(float* __restrict__ C, int M, int N, int m, int n,
                                       float4 v, bool vec)
{
    if (m >= M) return;
    float* row = C + (size_t)m * N;
    if (vec && n + 3 < N) {
        *reinterpret_cast<float4*>(row + n) = v;
        return;
    }
    if (n < N) row[n] = v.x;
    if (n + 1 < N) row[n + 1] = v.y;
    if (n + 2 < N) row[n + 2] = v.z;
    if (n + 3 < N) row[n + 3] = v.w;
}
// --8<-- [end:helpers]

// --8<-- [start:vec]
// Rung 6: the loads of rung 5 move one float per instruction, and the
// inner loop reads A's column As[tr*8 + i][k] eight floats apart. Here
// each thread moves one float4 of A and one of B per slice, and stores
// A's float4 transposed, As[k][m], so that a thread's 8 values of A's
// column are 8 contiguous floats: two float4 shared loads, like B's.
extern "C" __global__ void __launch_bounds__(NT)
sgemm_vec(const float* __restrict__ A, const float* __restrict__ B,
          float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) float As[BK][BM];      // transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool vec_a = (K & 3) == 0, vec_b = (N & 3) == 0;
    const int a_r = tid / (BK / 4), a_c = (tid % (BK / 4)) * 4;
    const int b_r = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 a = load_a(A, M, K, m0, k0, vec_a);
        As[a_c + 0][a_r] = a.x;
        As[a_c + 1][a_r] = a.y;
        As[a_c + 2][a_r] = a.z;
        As[a_c + 3][a_r] = a.w;
        *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = load_b(B, N, K, k0, n0, vec_b);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&ra[i]) =
                    *reinterpret_cast<const float4*>(&As[k][tr * TM + i]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&rb[j]) =
                    *reinterpret_cast<const float4*>(&Bs[k][tc * TN + j]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        __syncthreads();
    }
    const bool vec_c = (N & 3) == 0;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4(C, M, N, m0 + tr * TM + i, n0 + tc * TN + j,
                   make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), vec_c);
}
// --8<-- [end:vec]

// Warp tiling: 8 warps as 2 (along M) x 4 (along N), each owning a 64 x 32
// piece of the block tile. Within it the 32 lanes stand as 8 x 4 and each
// owns 2 x 2 sub-tiles of 4 x 4, 32 rows / 16 columns apart.
#define WM 64
#define WN 32
#define PAD 4            // As rows of BM + 4 floats: the transposed stores miss no bank

// --8<-- [start:warptile]
// Rung 7: in rung 6 the 16 threads along N of a warp read float4s 32 bytes
// apart and the transposed stores of A hit each bank twice. Here a warp's
// lanes read As[k][.] at 8 neighbouring float4s and Bs[k][.] at 4: each
// shared load is one pass, shared by the lanes that need the same values;
// and the padding puts the two columns of A's float4s in different banks.
// The warp's 64 x 32 piece of C reads 64 + 32 floats per k; a thread's
// 8 x 8 elements are 4 x 4 blocks, stored as float4 rows.
extern "C" __global__ void __launch_bounds__(NT, 2)
sgemm_warptile(const float* __restrict__ A, const float* __restrict__ B,
               float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) float As[BK][BM + PAD];
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const bool vec_a = (K & 3) == 0, vec_b = (N & 3) == 0;
    const int a_r = tid / (BK / 4), a_c = (tid % (BK / 4)) * 4;
    const int b_r = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
    const int lm = (lane / 4) * 4, ln = (lane % 4) * 4;   // lane's corner in a sub-tile
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 a = load_a(A, M, K, m0, k0, vec_a);
        As[a_c + 0][a_r] = a.x;
        As[a_c + 1][a_r] = a.y;
        As[a_c + 2][a_r] = a.z;
        As[a_c + 3][a_r] = a.w;
        *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = load_b(B, N, K, k0, n0, vec_b);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < 2; ++i)          // rows wm + 32i + lm .. + 3
                *reinterpret_cast<float4*>(&ra[4 * i]) =
                    *reinterpret_cast<const float4*>(&As[k][wm + 32 * i + lm]);
#pragma unroll
            for (int j = 0; j < 2; ++j)          // columns wn + 16j + ln .. + 3
                *reinterpret_cast<float4*>(&rb[4 * j]) =
                    *reinterpret_cast<const float4*>(&Bs[k][wn + 16 * j + ln]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        __syncthreads();
    }
    const bool vec_c = (N & 3) == 0;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4(C, M, N, m0 + wm + 32 * (i / 4) + lm + i % 4, n0 + wn + 16 * (j / 4) + ln,
                   make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), vec_c);
}
// --8<-- [end:warptile]

// --8<-- [start:double_buffer]
// Rung 8: in rung 7 a block waits for its global loads at every slice,
// with nothing to compute meanwhile (other blocks on the SM may cover some
// of it). Here shared memory holds two stages: while the block computes
// slice k from one, the float4s of slice k+1 are already on their way into
// registers, and go into the other stage after the arithmetic. One
// __syncthreads per slice is enough: a stage is written only after every
// thread has passed the barrier that ended the last reads of it.
// The loop is compiled twice: with VEC (K and N multiples of 4) every load
// is a float4 or, past the edge, zeros; without, four scalar loads. One
// loop holding both kinds of load needs more than the 128 registers that
// let two blocks share an SM.
template <bool VEC>
__device__ __forceinline__ float4 load4_left(const float* __restrict__ p, int left)
{
    if (VEC) {                  // left is a multiple of 4: > 0 means >= 4
        return left > 0 ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float4 v;
    v.x = left > 0 ? p[0] : 0.0f;
    v.y = left > 1 ? p[1] : 0.0f;
    v.z = left > 2 ? p[2] : 0.0f;
    v.w = left > 3 ? p[3] : 0.0f;
    return v;
}

template <bool VEC>
__device__ __forceinline__ void double_buffer_body(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, float (*As)[BK][BM + PAD], float (*Bs)[BK][BN])
{
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int a_r = tid / (BK / 4), a_c = (tid % (BK / 4)) * 4;
    const int b_r = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4;
    const bool a_in = m0 + a_r < M;                   // this thread's row of A exists
    const int b_left = N - (n0 + b_c);                // columns of B left from its float4
    const float* a_src = A + (size_t)(a_in ? m0 + a_r : 0) * K + a_c;   // moves BK a slice
    const float* b_src = B + (size_t)b_r * N + n0 + b_c;                // moves BK rows
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
    const int lm = (lane / 4) * 4, ln = (lane % 4) * 4;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];

    float4 a = a_in ? load4_left<VEC>(a_src, K - a_c) : zero;     // slice 0 into stage 0
    float4 b = b_r < K ? load4_left<VEC>(b_src, b_left) : zero;
    As[0][a_c + 0][a_r] = a.x;
    As[0][a_c + 1][a_r] = a.y;
    As[0][a_c + 2][a_r] = a.z;
    As[0][a_c + 3][a_r] = a.w;
    *reinterpret_cast<float4*>(&Bs[0][b_r][b_c]) = b;
    __syncthreads();

    int s = 0;                                        // the stage computed now
    for (int k0 = 0; k0 < K; k0 += BK, s ^= 1) {
        const int k1 = k0 + BK;                       // slice k+1: past K it loads zeros
        a_src += BK;
        b_src += (size_t)BK * N;
        a = a_in ? load4_left<VEC>(a_src, K - k1 - a_c) : zero;
        b = k1 + b_r < K ? load4_left<VEC>(b_src, b_left) : zero;
#pragma unroll
        for (int k = 0; k < BK; ++k) {                // meanwhile, compute slice k
#pragma unroll
            for (int i = 0; i < 2; ++i)
                *reinterpret_cast<float4*>(&ra[4 * i]) =
                    *reinterpret_cast<const float4*>(&As[s][k][wm + 32 * i + lm]);
#pragma unroll
            for (int j = 0; j < 2; ++j)
                *reinterpret_cast<float4*>(&rb[4 * j]) =
                    *reinterpret_cast<const float4*>(&Bs[s][k][wn + 16 * j + ln]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        As[s ^ 1][a_c + 0][a_r] = a.x;                // slice k+1 into the other stage
        As[s ^ 1][a_c + 1][a_r] = a.y;
        As[s ^ 1][a_c + 2][a_r] = a.z;
        As[s ^ 1][a_c + 3][a_r] = a.w;
        *reinterpret_cast<float4*>(&Bs[s ^ 1][b_r][b_c]) = b;
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            store4(C, M, N, m0 + wm + 32 * (i / 4) + lm + i % 4, n0 + wn + 16 * (j / 4) + ln,
                   make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), VEC);
}

extern "C" __global__ void __launch_bounds__(NT, 2)
sgemm_double_buffer(const float* __restrict__ A, const float* __restrict__ B,
                    float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) float As[2][BK][BM + PAD];
    __shared__ __align__(16) float Bs[2][BK][BN];
    if ((K & 3) == 0 && (N & 3) == 0) {               // the same for the whole grid
        double_buffer_body<true>(A, B, C, M, N, K, As, Bs);
    } else {
        double_buffer_body<false>(A, B, C, M, N, K, As, Bs);
    }
}
// --8<-- [end:double_buffer]
