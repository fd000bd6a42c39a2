"""Diagnostic: first touch of host memory in 8 GiB steps (after the suite),
each step's seconds; the steps that reuse pages the suite touched are fast."""
import time
import numpy as np
keep = []
for i in range(13):
    t = time.perf_counter()
    a = np.empty(8 << 30, dtype=np.uint8)
    a.fill(1)
    keep.append(a)
    print(f"step {i} ({8 * (i + 1)} GiB held): {time.perf_counter() - t:.2f} s", flush=True)
