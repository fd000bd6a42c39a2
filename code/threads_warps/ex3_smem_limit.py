"""Solution to exercise 3: a shared-memory limit, predicted and observed.

Launches block_placement's kernel with small blocks (256 threads, so the
thread limit would allow 8 per SM) that each ask for 100 KB of dynamic
shared memory. With 228 KB per SM and 1 KB reserved per block, only
233,472 // (102,400 + 1,024) = 2 blocks fit. The timeline should show
exactly that: two blocks at a time on each SM, and a grid of
2 x 2 x (number of SMs) blocks running in two waves.

Run:    python code/threads_warps/ex3_smem_limit.py
Checks: block_placement's checks with the shared-memory prediction: every
        block recorded, SM ids, every SM used, the most blocks resident on
        one SM = 2, waves observed = 2.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and block_placement
import block_placement as bp  # noqa: E402
import cudabook as cb  # noqa: E402

THREADS = 256
SHARED = 100 * 1024     # bytes of dynamic shared memory per block


# --8<-- [start:solution]
def main(argv=None) -> int:
    cb.parse_args(argv, __doc__)
    cb.gpu_alone()                                            # it measures the hardware
    gpu = cb.init()
    import pycuda.driver as cuda

    attr = cuda.device_attribute
    get = gpu.device.get_attribute
    kernel = bp.load_kernel()
    kernel.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, SHARED)  # > 48 KB
    by_threads = get(attr.MAX_THREADS_PER_MULTIPROCESSOR) // THREADS                     # 8
    per_block = SHARED + get(attr.RESERVED_SHARED_MEMORY_PER_BLOCK) + kernel.shared_size_bytes
    by_shared = get(attr.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) // per_block              # 2
    per_sm = min(by_threads, by_shared, get(attr.MAX_BLOCKS_PER_MULTIPROCESSOR))
    print(f"{THREADS} threads and {SHARED // 1024} KB per block: threads allow {by_threads} "
          f"blocks per SM, shared memory {by_shared}")
    bp.place(kernel, gpu.sm_count, THREADS, 1000, SHARED)    # warm-up
    facts = bp.run_and_check(kernel, gpu, 2 * per_sm * gpu.sm_count, per_sm, THREADS, SHARED)
    cb.report_facts(**facts, by_threads=by_threads, by_shared=by_shared, shared_kb=SHARED // 1024)
    return cb.finish()
# --8<-- [end:solution]


if __name__ == "__main__":
    sys.exit(cb.run(main))
