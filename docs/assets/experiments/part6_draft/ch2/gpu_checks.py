"""Part VI chapter 2 draft: what must run on a GPU (nothing here has yet).

  1. Every path this GPU has, forced, at awkward shapes: each C element by
     element against the float64 product of the bf16 inputs within its
     path's bound (dispatch.bound: its listing's accumulation bound plus
     C's one rounding), and every pair of paths against each other within
     the sum of their bounds (|C_p - C_q| <= tol_p + tol_q). wgmma only at
     shapes with K and N multiples of 8. Outputs poisoned first.
  2. The automatic choice is dispatch.select's for this GPU, and a forced
     path this GPU lacks (or wgmma at N = 30) raises, naming the compute
     capability (or the argument), with the context still usable.
  3. The same answers from the fat image (fatbin.py's build, loaded with
     module_from_buffer), for every path it holds for this GPU.
  4. The asynchronous fault, in a child process (a fault is sticky): the
     mma path launched on a C pointer at an unmapped address. With debug
     sync, AsyncFault at the call, naming the operator and path; without,
     the call returns and the error surfaces at the next synchronize.
  --bench:
  5. The cost of debug sync: host wall time a call, normal and debug, at
     64^3 and 4096^3 (200 calls a round, 11 alternated rounds, median).
  6. PTX JIT against SASS at load (fatbin.time_loads): cold JIT with
     CUDA_CACHE_DISABLE=1, eager and lazy loading, and the compute cache
     cold then warm.

Run:    python docs/assets/experiments/part6_draft/ch2/gpu_checks.py [--bench]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as d  # noqa: E402
import fatbin  # noqa: E402
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

SHAPES = [(1, 1, 1), (1, 8, 8), (33, 31, 17), (33, 40, 24), (130, 257, 100), (200, 520, 1000),
          (1027, 1001, 1003), (4097, 3000, 1032)]         # M, N, K


def runnable(op: d.Bf16Matmul, m: int, n: int, k: int) -> list[d.GemmPath]:
    """The paths this operator can be forced to at this shape."""
    out = []
    for p in d.PATHS:
        try:
            op.choose(m, n, k, p.name)
            out.append(p)
        except (d.UnsupportedGpu, ValueError):
            pass
    return out


def check_paths(op: d.Bf16Matmul, rng, tag: str) -> None:
    from pycuda import gpuarray

    for m, n, k in SHAPES:
        a16 = to_bf16(rng.standard_normal((m, k), dtype=np.float32))
        b16 = to_bf16(rng.standard_normal((k, n), dtype=np.float32))
        a64, b64 = from_bf16(a16).astype(np.float64), from_bf16(b16).astype(np.float64)
        ref, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
        a, b = gpuarray.to_gpu(a16), gpuarray.to_gpu(b16)
        got = {}
        for p in runnable(op, m, n, k):
            c = gpuarray.empty((m, n), np.uint16)
            cb.poison(c)
            op(a, b, c, path=p.name, debug=True)
            out = from_bf16(c.get())
            kb, s = d.bound(p, k, scale)
            cb.report_check(cb.compare(f"{tag} {p.name} {m}x{n}x{k}", out, ref, k=kb, scale=s))
            got[p.name] = (out, d.tolerance(p, k, ref, scale))
        names = list(got)
        for i, p in enumerate(names):
            for q in names[i + 1:]:
                diff = np.abs(got[p][0].astype(np.float64) - got[q][0])
                slack = got[p][1] + got[q][1]
                worst = float(np.max(diff / slack))
                cb.report_check(cb.expect(f"{tag} {p} ~ {q} {m}x{n}x{k}", bool(np.all(diff <= slack)),
                                          f"max |C_p - C_q| / (tol_p + tol_q) = {worst:.3f}"))
        auto = op.choose(m, n, k)
        cb.report_check(cb.expect(f"{tag} automatic choice {m}x{n}x{k}", auto.path.name in got,
                                  f"{auto.path.name} ({'; '.join(auto.why)})"))


def check_errors(op: d.Bf16Matmul) -> None:
    from pycuda import gpuarray

    cc = op.cc
    a, b = gpuarray.zeros((8, 8), np.uint16), gpuarray.zeros((8, 30), np.uint16)
    if cc != (9, 0):
        try:
            op(a, gpuarray.zeros((8, 8), np.uint16), path="wgmma")
            ok, seen = False, "no error"
        except d.UnsupportedGpu as e:
            ok, seen = f"{cc[0]}.{cc[1]}" in str(e), str(e)
        cb.report_check(cb.expect("forcing wgmma off Hopper names the compute capability", ok, seen))
    else:
        try:
            op(a, b, path="wgmma")
            ok, seen = False, "no error"
        except ValueError as e:
            ok, seen = str(e).startswith(f"{d.OPERATOR}: b.shape[1] (N)"), str(e)
        cb.report_check(cb.expect("forcing wgmma at N = 30 names the argument", ok, seen))
    try:
        op(a, gpuarray.zeros((9, 8), np.uint16))
        ok, seen = False, "no error"
    except ValueError as e:
        ok, seen = str(e).startswith(f"{d.OPERATOR}: b: expected 8 rows"), str(e)
    cb.report_check(cb.expect("a shape mistake names the operator and b", ok, seen))
    c = op(a, gpuarray.zeros((8, 8), np.uint16))        # the context is still usable
    cb.report_check(cb.expect("the context works after the errors", bool(np.all(c.get() == 0)), "zeros"))


FAULT_CHILD = "--fault-child"


def fault_child(debug: bool) -> int:
    """Launch the mma path's kernel on an unmapped C (the check of the
    operator bypassed: the launch is what a bug in a launcher would do).
    Prints what happened; exit 0 when it is what the mode promises."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    op = d.Bf16Matmul()
    a, b = gpuarray.zeros((256, 256), np.uint16), gpuarray.zeros((256, 256), np.uint16)
    kernel = op._get("tc_mma_pipelined", "PPPiii")
    bad_c = 0x10                                        # never mapped
    launch = lambda: kernel.prepared_call((2, 2, 1), (128, 1, 1), a.gpudata, b.gpudata, np.intp(bad_c),  # noqa: E731
                                          np.int32(256), np.int32(256), np.int32(256))
    try:
        d.at_boundary(f"{d.OPERATOR} (path mma, 256x256x256)", launch, cuda.Context.synchronize,
                      (cuda.Error,), debug)
    except d.AsyncFault as e:
        print(f"raised at the call: {e}")
        return 0 if debug and d.OPERATOR in str(e) and "path mma" in str(e) else 1
    print("the call returned")
    try:
        cuda.Context.synchronize()
    except cuda.Error as e:
        print(f"surfaced at the next synchronize: {e}")
        return 0 if not debug else 1
    return 1


def check_fault() -> None:
    for debug in (True, False):
        env = {**os.environ, d.ENV_DEBUG: "1" if debug else "0"}
        r = subprocess.run([sys.executable, __file__, FAULT_CHILD, str(int(debug))], env=env,
                           capture_output=True, text=True, timeout=300)
        cb.report_check(cb.expect(f"fault with debug sync {'on' if debug else 'off'}", r.returncode == 0,
                                  (r.stdout + r.stderr).strip()[-400:]))


def debug_cost(op: d.Bf16Matmul, rounds: int = 11, calls: int = 200) -> dict:
    """Host wall time a call, normal and debug mode, alternated in rounds."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    facts = {}
    for m, n, k in [(64, 64, 64), (4096, 4096, 4096)]:
        rng = np.random.default_rng(0)
        a = gpuarray.to_gpu(to_bf16(rng.standard_normal((m, k), dtype=np.float32)))
        b = gpuarray.to_gpu(to_bf16(rng.standard_normal((k, n), dtype=np.float32)))
        c = gpuarray.empty((m, n), np.uint16)
        reps = calls if m < 1024 else 20
        per = {False: [], True: []}
        for _ in range(rounds):
            for debug in (False, True):
                op(a, b, c, debug=debug)
                cuda.Context.synchronize()
                t0 = time.perf_counter()
                for _ in range(reps):
                    op(a, b, c, debug=debug)
                cuda.Context.synchronize()
                per[debug].append((time.perf_counter() - t0) / reps)
        normal, debug = statistics.median(per[False]), statistics.median(per[True])
        path = op.choose(m, n, k).path.name
        print(f"  {m}x{n}x{k} ({path}): normal {1e6 * normal:10.1f} us a call, debug sync "
              f"{1e6 * debug:10.1f} us ({debug / normal:.2f}x)")
        facts[f"debug_sync_{m}_normal_us"] = 1e6 * normal
        facts[f"debug_sync_{m}_debug_us"] = 1e6 * debug
    return facts


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [FAULT_CHILD]:
        return fault_child(argv[1] == "1")
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    rng = np.random.default_rng(args.seed)
    op = d.Bf16Matmul()
    print(f"{gpu.name}, compute capability {d.cc_text(op.cc)}")
    check_paths(op, rng, "source")
    check_errors(op)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gemm_fat.fatbin"
        fatbin.build(out)
        image_op = d.Bf16Matmul(image=out.read_bytes(), contents=fatbin.contents(out))
        check_paths(image_op, rng, "fat image")
    check_fault()
    facts = {}
    if args.bench:
        facts.update(debug_cost(op))
        with tempfile.TemporaryDirectory() as tmp:
            rows = fatbin.time_loads(Path(tmp))
        facts["loads"] = rows
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
