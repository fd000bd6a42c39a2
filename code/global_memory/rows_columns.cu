// A matrix is stored row after row (row-major): element (r, c) of a
// rows x cols matrix is at r * cols + c. Which index the lanes of a warp
// walk decides whether their addresses are neighbours (the column index)
// or cols floats apart (the row index).

// --8<-- [start:scale]
// 2-D grid, x along the columns: lanes read neighbouring floats.
extern "C" __global__ void scale_x_cols(const float* __restrict__ a, float* __restrict__ b,
                                        int rows, int cols, float alpha)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) b[(long long)r * cols + c] = alpha * a[(long long)r * cols + c];
}

// The same, x along the rows: lanes read floats a whole row apart.
extern "C" __global__ void scale_x_rows(const float* __restrict__ a, float* __restrict__ b,
                                        int rows, int cols, float alpha)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int c = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) b[(long long)r * cols + c] = alpha * a[(long long)r * cols + c];
}
// --8<-- [end:scale]

// --8<-- [start:sums]
// One thread per column, walking down it: at each step the warp's lanes
// read neighbouring floats of one row.
extern "C" __global__ void column_sums(const float* __restrict__ a, float* __restrict__ out,
                                       int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += a[(long long)r * cols + c];
    out[c] = s;
}

// One thread per row, walking along it: at each step the lanes read floats
// a whole row apart.
extern "C" __global__ void row_sums(const float* __restrict__ a, float* __restrict__ out,
                                    int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += a[(long long)r * cols + c];
    out[r] = s;
}
// --8<-- [end:sums]
