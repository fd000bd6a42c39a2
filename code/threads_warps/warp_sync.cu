// The lanes of a warp do not run in step: independent thread scheduling.
//
// Since Volta (compute capability 7.0), and so on every GPU this book runs
// on, each thread has its own program counter. When the lanes of a warp take
// different paths, the warp scheduler may run a little of one path, then a
// little of another, and nothing promises when, or whether, they come back
// together. Two consequences, one kernel each:
//   handoff: lanes of one warp can wait for each other, as threads can;
//   rotate:  lanes that share data through memory must say when they meet,
//            with __syncwarp(), as a block's threads do with __syncthreads().
//
// Host program: warp_sync.py.

#define BLOCK 256

// --8<-- [start:handoff]
extern "C" __global__ void handoff(volatile int* mailbox, int* got, int* spins,
                                   int max_spins, long long delay)
{
    const int lane = threadIdx.x % 32;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    volatile int* box = mailbox + 2 * warp;       // box[0]: message, box[1]: flag
    if (lane == 0) {                               // consumer: wait for lane 31's flag
        int s = 0;
        while (box[1] == 0 && s < max_spins) {     // (1)!
            ++s;
        }
        __threadfence_block();                     // read the message after the flag
        got[warp] = box[0];
        spins[warp] = s;
    } else if (lane == 31) {                       // producer: work a while, then send
        const long long t0 = clock64();
        while (clock64() - t0 < delay) {
        }
        box[0] = 1000 + warp;
        __threadfence_block();                     // (2)!
        box[1] = 1;
    }
}
// --8<-- [end:handoff]

// --8<-- [start:rotate]
extern "C" __global__ void rotate(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float s[BLOCK];
    const int t = threadIdx.x;
    const int i = blockIdx.x * BLOCK + t;
    const int lane = t % 32;
    s[t] = (i < n) ? x[i] : 0.0f;                  // every lane fills its slot
    __syncwarp();                                  // (1)!
    const int next = t - lane + (lane + 1) % 32;   // the next lane of the same warp
    if (i < n) {
        y[i] = s[next];
    }
}
// --8<-- [end:rotate]
