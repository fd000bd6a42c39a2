// Solution to exercise 2: boxes of four corners (16 bytes), their area
// read field by field, and read as one float4 per box.

// --8<-- [start:kernel]
struct Corners { float x1, y1, x2, y2; };        // 16 bytes per box

extern "C" __global__ void area_fields(const Corners* __restrict__ boxes,
                                       float* __restrict__ area, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        // Four 4-byte loads: each one a request whose lanes are 16 bytes apart.
        float x1 = boxes[i].x1, y1 = boxes[i].y1, x2 = boxes[i].x2, y2 = boxes[i].y2;
        area[i] = (x2 - x1) * (y2 - y1);
    }
}

extern "C" __global__ void area_float4(const float4* __restrict__ boxes,
                                       float* __restrict__ area, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 b = boxes[i];                      // one 16-byte load: one request
        area[i] = (b.z - b.x) * (b.w - b.y);
    }
}
// --8<-- [end:kernel]
