"""Does the order of the GELU sweep's CPU timings make PyTorch's threads stall?

The re-record of 2026-12-07 showed PyTorch's GELU on 15 threads taking
milliseconds at sizes where one thread took far less (why_gpus, "PyTorch's
threads sometimes stall"). That record was the first to time PyTorch on one
thread too, just before the many threads, at every size: the thread pool
was shrunk to one and grown back each time. This experiment times the same
call three ways in one process, with nothing else running:

  alone        15 threads at every size, never switched
  one_first    at each size, 1 thread, then 15 (what the listing does)
  many_first   at each size, 15 threads, then 1

each twice over, as medians (cudabook.time_cpu, 50 ms budgets), and
prints them in ms. Run from the repository root on the GPU machine:

    PYTHONPATH=code python3 docs/assets/experiments/torch_threads_order.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, "code")
import cudabook as cb  # noqa: E402

SIZES = [16_411, 65_537, 262_147, 1_048_583, 4_194_319, 16_777_259]


def main() -> None:
    import torch

    many = max(1, (os.cpu_count() or 2) - 1)
    torch.set_num_threads(many)
    rng = np.random.default_rng(0)
    arrays = {n: (torch.from_numpy(rng.standard_normal(n, dtype=np.float32)), torch.empty(n)) for n in SIZES}

    def gelu(n):
        x, y = arrays[n]
        return lambda: torch.ops.aten.gelu.out(x, approximate="tanh", out=y)

    def timed(n, threads):
        torch.set_num_threads(threads)
        return cb.time_cpu(gelu(n), budget_ms=50).median_ms

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, many = {many} threads; "
          f"parallel info: {torch.__config__.parallel_info().splitlines()[:6]}")
    print(f"{'order':>11} {'rep':>3} " + " ".join(f"{n:>11,}" for n in SIZES) + "   (ms, 15-thread medians; "
          "1-thread in brackets)")
    for rep in range(2):
        row = [timed(n, many) for n in SIZES]
        print(f"{'alone':>11} {rep:>3} " + " ".join(f"{t:11.3f}" for t in row), flush=True)
        ones, rows = [], []
        for n in SIZES:
            ones.append(timed(n, 1))
            rows.append(timed(n, many))
        print(f"{'one_first':>11} {rep:>3} " + " ".join(f"{t:11.3f}" for t in rows)
              + "   [" + " ".join(f"{t:.3f}" for t in ones) + "]", flush=True)
        ones, rows = [], []
        for n in SIZES:
            rows.append(timed(n, many))
            ones.append(timed(n, 1))
        print(f"{'many_first':>11} {rep:>3} " + " ".join(f"{t:11.3f}" for t in rows)
              + "   [" + " ".join(f"{t:.3f}" for t in ones) + "]", flush=True)


if __name__ == "__main__":
    main()
