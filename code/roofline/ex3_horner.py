"""Solution to exercise 3: predict from the roofline whether a kernel is
memory- or compute-bound, then check the prediction twice.

The kernel evaluates a polynomial of degree D by Horner's rule: D fused
multiply-adds (2D FLOPs) per element, for 8 bytes moved, an intensity of
D / 4 FLOPs per byte. Degree 16 (4 FLOP/B) sits below the ridge point,
degree 256 (64 FLOP/B) above it. The roofline predicts each one's bound and
its shortest time, max(bytes / copy bandwidth, FLOPs / FP32 rate), both
ceilings measured in this run. The check: the measured time against that
floor, and Nsight Compute's speed-of-light reading of each launch, whose
larger share (memory or compute) should name the same bound.

Run:    python code/roofline/ex3_horner.py [--seed S] [--bench]
Checks: both degrees against Horner's rule in float64 with the same float32
        coefficients, every element within k = D + 1 unit roundoffs, scale
        sum |c_j| |x|^j (one rounding per FMA, each at most u of a partial
        sum no larger than that).
Bench:  at n = 67,108,867: each degree's time and its roofline floor, the
        bound the roofline predicts, and Nsight Compute's compute (SM) and
        memory throughput, as shares of their peaks, for each launch.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.roofline import roofline  # noqa: E402
from roofline.intensity_sweep import fp32_roof  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
DEGREES = (16, 256)                                    # the kernels horner_16 and horner_256
BLOCK = 256
CHECK_N, BENCH_N = 1_000_003, 67_108_867
COEF = (1 / np.arange(1, max(DEGREES) + 2)).astype(np.float32)   # c_j = 1 / (j + 1)
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"                  # "Compute (SM) Throughput"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"  # "Memory Throughput"


def load_kernels() -> dict:
    """The two kernels, with the coefficients copied into constant memory."""
    import pycuda.driver as cuda

    module = cb.compile(KERNEL_FILE)
    ptr, size = module.get_global("coef")
    if size != COEF.nbytes:
        raise RuntimeError(f"coef: the kernel holds {size} bytes, the host has {COEF.nbytes}")
    cuda.memcpy_htod(ptr, COEF)
    return {d: module.get_function(f"horner_{d}").prepare("PPi") for d in DEGREES}


def polynomial(kernels, degree: int, x, y) -> None:
    """y = p(x) with the kernel for `degree`. x, y: 1-D float32 GPUArrays of
    one size, 16-byte aligned (float4s)."""
    if degree not in kernels:
        raise ValueError(f"degree: expected one of {sorted(kernels)}, got {degree!r}")
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    threads = max(n // 4, n % 4)
    kernels[degree].prepared_call((cb.ceil_div(threads, BLOCK), 1, 1), (BLOCK, 1, 1),
                                  x.gpudata, y.gpudata, np.int32(n))


def horner64(x, coef) -> np.ndarray:
    """Horner's rule in float64."""
    x = x.astype(np.float64)
    p = np.full_like(x, float(coef[-1]))
    for c in coef[-2::-1]:
        p *= x
        p += float(c)
    return p


# --8<-- [start:solution]
def predict_and_time(kernels, x, y, copy_bw: float, peak: float) -> list[dict]:
    """For each degree: the roofline's bound and floor, and the measured time."""
    n = x.size
    rows = []
    for d in DEGREES:
        t = cb.bench(lambda d=d: polynomial(kernels, d, x, y), working_set_bytes=8 * n)
        r = roofline(t.median_ms * 1e-3, bytes_moved=8 * n, flops=2 * d * n,
                     bandwidth=copy_bw, peak_flops=peak)
        rows.append({"degree": d, "flops_per_byte": 2 * d / 8, "predicted": r["bound"],
                     "floor_ms": r["floor_s"] * 1e3, "ms": t.median_ms, "of_floor": r["fraction"]})
    return rows


def agrees(row: dict, counted: dict) -> bool:
    """Does Nsight Compute's larger speed-of-light share name the predicted bound?"""
    seen = "compute" if counted[SM_PCT] > counted[MEMORY_PCT] else "memory"
    return seen == row["predicted"]
# --8<-- [end:solution]


def ncu_child(seed: int) -> int:
    """Under Nsight Compute: launch each degree once."""
    cb.init()
    from pycuda import gpuarray

    kernels = load_kernels()
    x = gpuarray.to_gpu(np.random.default_rng(seed).uniform(-1, 1, BENCH_N).astype(np.float32))
    y = gpuarray.empty_like(x)
    for d in DEGREES:
        polynomial(kernels, d, x, y)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 2 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]))
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    from pycuda import gpuarray

    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    x_host = rng.uniform(-1, 1, CHECK_N).astype(np.float32)
    x, y = gpuarray.to_gpu(x_host), gpuarray.empty(CHECK_N, np.float32)
    for d in DEGREES:
        coef = COEF[:d + 1]
        cb.poison(y)
        polynomial(kernels, d, x, y)
        cb.report_check(cb.compare(f"degree {d}", y.get(), horner64(x_host, coef), k=d + 1,
                                   scale=horner64(np.abs(x_host), np.abs(coef))))
    if args.bench:
        from cudabook import ncu

        x = gpuarray.to_gpu(np.random.default_rng(args.seed).uniform(-1, 1, BENCH_N).astype(np.float32))
        y = gpuarray.empty_like(x)
        copy_bw, peak = cb.ceiling(), fp32_roof(gpu)
        rows = predict_and_time(kernels, x, y, copy_bw, peak)
        counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(args.seed)],
                                      kernel="regex:^horner_", metrics=(SM_PCT, MEMORY_PCT))
        print(f"copy {copy_bw / 1e9:,.0f} GB/s, FP32 {peak / 1e12:.1f} TFLOP/s: "
              f"ridge {peak / copy_bw:.1f} FLOP/B")
        print("degree  FLOP/B  predicted  floor ms  measured ms  of floor")
        for r in rows:
            print(f"{r['degree']:6d} {r['flops_per_byte']:7.0f}  {r['predicted']:>9s} {r['floor_ms']:9.3f}"
                  f" {r['ms']:12.3f} {100 * r['of_floor']:8.1f}%")
        if counted is not None:
            if [c["kernel"] for c in counted] != [f"horner_{d}" for d in DEGREES]:
                raise RuntimeError(f"ncu profiled {[c['kernel'] for c in counted]}, expected one launch per degree")
            for r, c in zip(rows, counted):
                r["sm_pct"], r["memory_pct"] = c[SM_PCT], c[MEMORY_PCT]
                cb.report_check(cb.expect(f"degree {r['degree']}: {r['predicted']}-bound", agrees(r, c),
                                          f"Nsight Compute: compute (SM) {c[SM_PCT]:.0f}%, "
                                          f"memory {c[MEMORY_PCT]:.0f}% of peak"), timing=True)
        cb.report_facts(rows=rows, copy_gbs=copy_bw / 1e9, fp32_tflops=peak / 1e12,
                        ridge_flops_per_byte=peak / copy_bw,
                        **{f"degree{r['degree']}_of_floor": r["of_floor"] for r in rows},
                        **{f"degree{r['degree']}_{k}": r[k] for r in rows for k in ("sm_pct", "memory_pct")
                           if k in r})
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
