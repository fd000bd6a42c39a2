// Boxes, as an object detector produces them, stored two ways:
// an array of structures (AoS: one 32-byte record per box, all fields
// together) and a structure of arrays (SoA: one array per field).
// Two jobs: read one field (the score), and read four (the box's area).

// --8<-- [start:box]
struct Box {                     // 8 floats = 32 bytes: one sector per box
    float x1, y1, x2, y2;        // corners
    float score, label, image, unused;
};
// --8<-- [end:box]

// --8<-- [start:score]
extern "C" __global__ void score_aos(const Box* __restrict__ boxes, float* __restrict__ out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = boxes[i].score;          // lane i reads 4 bytes 32 bytes after lane i-1's
}

extern "C" __global__ void score_soa(const float* __restrict__ score, float* __restrict__ out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = score[i];                // lane i reads the 4 bytes after lane i-1's
}
// --8<-- [end:score]

// --8<-- [start:area]
extern "C" __global__ void area_aos(const Box* __restrict__ boxes, float* __restrict__ area, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) area[i] = (boxes[i].x2 - boxes[i].x1) * (boxes[i].y2 - boxes[i].y1);
}

extern "C" __global__ void area_soa(const float* __restrict__ x1, const float* __restrict__ y1,
                                    const float* __restrict__ x2, const float* __restrict__ y2,
                                    float* __restrict__ area, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) area[i] = (x2[i] - x1[i]) * (y2[i] - y1[i]);
}
// --8<-- [end:area]

// --8<-- [start:area4]
// The AoS area with the four corners read as one 16-byte load: boxes start
// on 32-byte boundaries, so the first half of each box is a float4.
extern "C" __global__ void area_aos4(const Box* __restrict__ boxes, float* __restrict__ area, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 c = *reinterpret_cast<const float4*>(&boxes[i].x1);
        area[i] = (c.z - c.x) * (c.w - c.y);
    }
}
// --8<-- [end:area4]
