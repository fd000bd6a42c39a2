"""Does bench.py's L2 flush (memset of 2x the L2) slow the timed kernel by
leaving the L2 full of dirty lines? One-off device experiment (~20 s):
copy into prof/ and run `bash .gpu/gpu-env.sh python3 prof/flush_experiment.py`.

For copies of several sizes (below 4x L2, where bench flushes), times
memcpy_dtod with CUDA events after four kinds of flush, interleaved:
  memset  - what bench.py does now: memset_d8 over 2x L2 (dirty lines left)
  read    - a kernel reads a clean 2x L2 buffer (clean lines left)
  both    - memset, then the read (dirty lines written back before timing)
  none    - no flush (warm L2 where the copy fits)
If memset >> read ~ both, bench.py should flush by reading."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))
import cudabook as cb  # noqa: E402

SRC = r'''
extern "C" __global__ void read_all(const int4* __restrict__ p, long long n, int* sink) {
    int4 acc = make_int4(0, 0, 0, 0);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        int4 v = p[i]; acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x7fffffff) *sink = 1;   // keeps the loads
}
'''

def main():
    gpu = cb.init()
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule
    read_all = SourceModule(SRC, no_extern_c=True, options=["-O3"]).get_function("read_all")
    L2 = gpu.l2_bytes
    fl = cuda.mem_alloc(2 * L2); cuda.memset_d8(fl, 1, 2 * L2)
    clean = cuda.mem_alloc(2 * L2); cuda.memset_d8(clean, 2, 2 * L2)
    sink = cuda.mem_alloc(4)
    blocks = 4 * gpu.sm_count
    def rd(buf): read_all(buf, np.int64(2 * L2 // 16), sink, block=(512, 1, 1), grid=(blocks, 1))
    flushes = {"memset": lambda: cuda.memset_d8(fl, 0, 2 * L2),
               "read": lambda: rd(clean),
               "both": lambda: (cuda.memset_d8(fl, 0, 2 * L2), rd(clean)),
               "none": lambda: None}
    print(f"{gpu.name}, L2 {L2 / 2**20:.0f} MiB")
    for mib in (8, 24, 48, 96, 200):
        nb = mib << 20
        a, b = cuda.mem_alloc(nb), cuda.mem_alloc(nb); cuda.memset_d8(a, 3, nb)
        times = {k: [] for k in flushes}
        for _ in range(100):
            for k, f in flushes.items():
                s, e = cuda.Event(), cuda.Event()
                f(); s.record(); cuda.memcpy_dtod(b, a, nb); e.record(); e.synchronize()
                times[k].append(s.time_till(e))
        row = {k: float(np.median(v)) for k, v in times.items()}
        print(f"{mib:4d} MiB copy: " + "  ".join(f"{k} {1e3 * v:8.2f} us ({2 * nb / (v * 1e-3) / 1e9:7.0f} GB/s)"
                                               for k, v in row.items()), flush=True)
        a.free(); b.free()

if __name__ == "__main__":
    main()
