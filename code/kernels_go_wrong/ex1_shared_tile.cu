// Solution to exercise 1: the three-point moving average of fixed_oob.cu,
// with each block staging its elements in shared memory first.
//
// Host program: ex1_shared_tile.py. A block of BLOCK threads needs BLOCK + 2
// elements of x: its own, plus one halo element on each side. Each thread
// loads its own element into tile[t + 1]; the first thread also loads the
// left halo into tile[0] and the last thread the right halo into
// tile[BLOCK + 1]. The tile must have room for all BLOCK + 2: declared one or
// two elements short, the halo writes land past its end, which memcheck
// reports as an invalid __shared__ write. The barrier between loading and
// using the tile is what racecheck would miss if it were gone.

#define BLOCK 256  // threads per block; must match BLOCK in the host program

// --8<-- [start:kernel]
extern "C" __global__ void average3_tiled(const float* __restrict__ x,
                                          float* __restrict__ y,
                                          int n)
{
    __shared__ float tile[BLOCK + 2];  // (1)!
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * BLOCK + t;
    tile[t + 1] = (i < n) ? x[i] : 0.0f;
    if (t == 0) {
        tile[0] = (i > 0) ? x[i - 1] : 0.0f;               // left halo
    }
    if (t == BLOCK - 1) {
        tile[BLOCK + 1] = (i + 1 < n) ? x[i + 1] : 0.0f;   // right halo
    }
    __syncthreads();  // (2)!
    if (i < n) {
        y[i] = (tile[t] + tile[t + 1] + tile[t + 2]) / 3.0f;
    }
}
// --8<-- [end:kernel]
