"""Why does PyTorch's CPU GELU sometimes take milliseconds at 65K-4M elements?
One-off experiment for the device (copy into the repo's untracked prof/ and run
`bash .gpu/gpu-env.sh python3 prof/torch_jump.py`; ~40 s). Prints, for 16 and
15 intra-op threads, with and without one busy core beside it, the median
time of 200 calls at each size, five sweeps each: if the jumps are one
descheduled thread holding up a parallel call, they appear with 16 threads
and a busy core, and not with 15."""
import multiprocessing as mp
import os
import statistics
import time

import torch

SIZES = [16411, 65537, 262147, 1048583, 4194319]


def spin(stop):
    while not stop.is_set():
        pass


def median_ms(fn, reps=200):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(1e3 * (time.perf_counter() - t))
    return statistics.median(ts)


def sweep():
    out = []
    for n in SIZES:
        x = torch.randn(n); y = torch.empty(n)
        out.append(median_ms(lambda: torch.ops.aten.gelu.out(x, approximate="tanh", out=y)))
    return out


if __name__ == "__main__":
    cores = os.cpu_count()
    print(f"{cores} cores; sizes {SIZES}")
    for busy in (False, True):
        stop = mp.Event()
        p = mp.Process(target=spin, args=(stop,)) if busy else None
        if p:
            p.start(); time.sleep(0.5)
        for threads in (cores, cores - 1):
            torch.set_num_threads(threads)
            for k in range(5):
                print(f"busy={busy} threads={threads} sweep {k}: " + " ".join(f"{t:8.4f}" for t in sweep()), flush=True)
        if p:
            stop.set(); p.join()
