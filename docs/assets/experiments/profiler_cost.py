"""What does naming a call's kernels cost (issue #45)? evidence.py profiles
each side of each benchmark with torch.profiler (comparison.kernels). The
first converted listings ran far longer than before and one did not exit
within its limit, so this times, in one process: five profiles of a PyCUDA
kernel in a row, then a CUDA-event timing after them, then the exit.

Run:  TEARDOWN_CUPTI=1 python profiler_cost.py; then with TEARDOWN_CUPTI=0.
"""
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "code"))
import cudabook as cb  # noqa: E402
from cudabook import comparison  # noqa: E402

t_start = time.perf_counter()
cb.init()
from first_kernel.add_one_per_thread import add, load_kernel  # noqa: E402
from pycuda import gpuarray  # noqa: E402
import numpy as np  # noqa: E402

k = load_kernel()
n = 1 << 24
a = gpuarray.to_gpu(np.ones(n, np.float32))
b = gpuarray.to_gpu(np.ones(n, np.float32))
c = gpuarray.empty_like(a)


def fn():
    add(k, a, b, c)


print(f"TEARDOWN_CUPTI={os.environ.get('TEARDOWN_CUPTI')}", flush=True)
before = cb.bench(fn, working_set_bytes=3 * 4 * n).median_ms
for i in range(5):
    t0 = time.perf_counter()
    p = comparison.kernels(fn, calls=3)
    print(f"profile {i}: {time.perf_counter() - t0:6.2f} s, kernels {p.kernels}", flush=True)
after = cb.bench(fn, working_set_bytes=3 * 4 * n).median_ms
print(f"timing before the profiles {before:.4f} ms, after {after:.4f} ms", flush=True)
print(f"work done at {time.perf_counter() - t_start:.1f} s; exiting", flush=True)
