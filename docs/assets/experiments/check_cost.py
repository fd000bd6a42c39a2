"""Where the CPU time of a check at n = 2**27 + 7 goes, alone and with 16
processes at once (as in the GPU suite's checks pass). Modelled on
first_kernel/add_vectorized's check: two float32 inputs, a float64
reference, cudabook.compare; then uniform inputs and a reference made in
one pass (np.add with dtype=float64, no float64 temporaries). Each process
is fresh, so its big allocations are first touches, as in a listing. Run from the repository root:
python3 prof/check_cost.py [procs]"""
import json
import multiprocessing as mp
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, "code")
N = 2**27 + 7


def stages(variant):
    import cudabook as cb
    out = {}
    rng = np.random.default_rng(1)
    t = time.perf_counter()
    if variant == "normal_astype":
        a = rng.standard_normal(N, dtype=np.float32); b = rng.standard_normal(N, dtype=np.float32)
    else:
        a = rng.random(N, dtype=np.float32); b = rng.random(N, dtype=np.float32)
    out["inputs"] = time.perf_counter() - t
    t = time.perf_counter()
    if variant == "normal_astype":
        ref = a.astype(np.float64) + b.astype(np.float64)
    else:
        ref = np.add(a, b, dtype=np.float64)
    out["reference"] = time.perf_counter() - t
    c = a + b
    t = time.perf_counter(); cb.compare("c", c, ref)
    out["compare"] = time.perf_counter() - t
    return out


def main():
    for procs in [int(p) for p in sys.argv[1:]] or [1, 16]:
        for variant in ("normal_astype", "uniform_add_dtype"):
            t = time.perf_counter()
            ctx = mp.get_context("spawn")
            with ctx.Pool(procs, maxtasksperchild=1) as pool:
                rows = pool.map(stages, [variant] * procs)
            wall = time.perf_counter() - t
            med = {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}
            print(json.dumps({"procs": procs, "variant": variant, "wall_s": round(wall, 1), "median_s": med}), flush=True)


if __name__ == "__main__":
    main()
