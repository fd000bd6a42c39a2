"""How fast cudabook.compare checks n = 2**27 + 7 float32 elements against a
float64 reference, one process alone and 16 at once (the GPU suite's checks
pass), with its chunk size and thread count changed: today's 2**21 elements
on up to 8 threads, and single-threaded chunks of 2**21, 2**18 and 2**16.
Each row is fresh processes; the inputs are uniform and the reference made
in one pass, so that the comparison is most of the work. Run from the
repository root: python3 prof/compare_threads.py"""
import json
import multiprocessing as mp
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, "code")
N = 2**27 + 7
CONFIGS = [(21, 8), (21, 1), (18, 1), (16, 1)]


def one(config):
    import importlib
    check = importlib.import_module("cudabook.check")
    check._CHUNK, check._THREADS = 1 << config[0], config[1]
    rng = np.random.default_rng(1)
    a = rng.random(N, dtype=np.float32); b = rng.random(N, dtype=np.float32)
    ref = np.add(a, b, dtype=np.float64)
    c = a + b
    t = time.perf_counter()
    r = check.compare("c", c, ref)
    assert r.passed
    return time.perf_counter() - t


def main():
    ctx = mp.get_context("spawn")
    for procs in (1, 16):
        for config in CONFIGS:
            t = time.perf_counter()
            with ctx.Pool(procs, maxtasksperchild=1) as pool:
                times = pool.map(one, [config] * procs)
            print(json.dumps({"procs": procs, "chunk": f"2**{config[0]}", "threads": config[1],
                              "compare_median_s": round(statistics.median(times), 2),
                              "compare_max_s": round(max(times), 2),
                              "wall_s": round(time.perf_counter() - t, 1)}), flush=True)


if __name__ == "__main__":
    main()
