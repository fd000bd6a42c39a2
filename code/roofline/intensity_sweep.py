"""The roofline, measured: one kernel swept from memory-bound to compute-bound.

Each element of x goes through F fused multiply-adds, v = v * a + b, and
lands in y: 8 bytes moved (4 read, 4 written) and 2F floating-point
operations, an arithmetic intensity of 2F / 8 = F / 4 FLOPs per byte. One
kernel per F, from 1 to 512; nothing else changes between them. Each
thread takes four elements at a time (a float4), four independent chains,
so the FMAs of many elements are in flight together. Beside the sweep, in
the same run, the two ceilings it runs into: the device-to-device copy
bandwidth, and the FP32 rate of peak_flops.py's FMA chains. Their ratio is
the ridge point, the intensity at which the two roofs meet.

Run:    python code/roofline/intensity_sweep.py [--n N] [--seed S] [--bench]
Checks: every kernel's y against the closed form of its chain in float64,
        a^F x + b (1 - a^F) / (1 - a), with a = 0.99, b = 0.01 and x in
        [-1, 1], so every value stays in [-1, 1]. Each FMA rounds once, by at
        most u, and a later step multiplies that error by a < 1, so the total
        stays below u * min(F, 1 / (1 - a)); the bound is k = that + 1 unit
        roundoffs, scale 1 (the size of the values).
Bench:  at n = 67,108,867: each kernel's time, GB/s and GFLOP/s, against the
        copy bandwidth, the FP32 FMA rate and the roofline's bound
        min(FP32 rate, intensity x copy bandwidth); the ridge point; and the
        FP32 rate on paper (FP32 lanes x SMs x 2 x the top SM clock).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.roofline import fp32_peak_flops  # noqa: E402
from roofline import peak_flops  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
FMAS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512)   # one kernel each, as in intensity_sweep.cu
BLOCK = 256
A, B = np.float32(0.99), np.float32(0.01)
BYTES_PER_ELEMENT = 8                                    # one float read, one written


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {f: module.get_function(f"fma_{f}").prepare("PPiff") for f in FMAS}


def reference(x, fmas: int) -> np.ndarray:
    """F steps of v = v * a + b from v = x, in closed form, in float64."""
    a, b = float(A), float(B)
    af = a ** fmas
    return af * x.astype(np.float64) + b * (1 - af) / (1 - a)


def bound_k(fmas: int) -> float:
    """Unit roundoffs the F-step chain may be off by: F roundings, each
    shrunk by a at every later step, so at most min(F, 1 / (1 - a)); plus one."""
    return min(fmas, 1 / (1 - float(A))) + 1


# --8<-- [start:launch]
def sweep(kernels, fmas: int, x, y) -> None:
    """y = x after `fmas` FMAs per element. x, y: 1-D float32 GPUArrays of
    one size, 16-byte aligned (the kernel loads and stores float4s)."""
    if fmas not in kernels:
        raise ValueError(f"fmas: expected one of {sorted(kernels)}, got {fmas!r}")
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    threads = max(n // 4, n % 4)            # one per float4, and at least one per tail element
    kernels[fmas].prepared_call((cb.ceil_div(threads, BLOCK), 1, 1), (BLOCK, 1, 1),
                                x.gpudata, y.gpudata, np.int32(n), A, B)
# --8<-- [end:launch]


def fp32_roof(gpu) -> float:
    """FP32 FLOP/s of peak_flops.py's FMA chains, timed here as it times them."""
    from pycuda import gpuarray

    kernel = peak_flops.load_kernel()
    blocks = 4 * 8 * gpu.sm_count                       # four waves of 8 blocks per SM
    out = gpuarray.empty(blocks * peak_flops.BLOCK, np.float32)
    t = cb.bench(lambda: peak_flops.fma_chains(kernel, out, peak_flops.BENCH_ITERATIONS),
                 working_set_bytes=out.nbytes)
    flops = 2 * peak_flops.CHAINS * peak_flops.BENCH_ITERATIONS * out.size
    return flops / (t.median_ms * 1e-3)


def nominal_fp32(gpu) -> float | None:
    """The FP32 rate on paper: FP32 lanes x SMs x 2 FLOPs x the SM's top clock."""
    import pycuda.driver as cuda

    attribute = getattr(cuda.device_attribute, "CLOCK_RATE", None)
    if attribute is None:
        return None
    return fp32_peak_flops(gpu.compute_capability, gpu.sm_count, gpu.device.get_attribute(attribute) * 1e3)


# --8<-- [start:measure]
def measure(kernels, x, y, copy_bw: float, peak: float) -> list[dict]:
    """Time every kernel; its rates, and the roofline's bound at its intensity."""
    n = x.size
    rows = []
    for f in FMAS:
        t = cb.bench(lambda f=f: sweep(kernels, f, x, y), working_set_bytes=BYTES_PER_ELEMENT * n)
        s = t.median_ms * 1e-3
        intensity = 2 * f / BYTES_PER_ELEMENT                   # FLOPs per byte, counted
        roof = min(peak, intensity * copy_bw)                   # the roofline's bound, FLOP/s
        rows.append({"fmas": f, "flops_per_byte": intensity, "ms": t.median_ms,
                     "gbs": BYTES_PER_ELEMENT * n / s / 1e9, "gflops": 2 * f * n / s / 1e9,
                     "roof_gflops": roof / 1e9, "of_roof": 2 * f * n / s / roof})
    return rows
# --8<-- [end:measure]


def report(rows: list[dict], copy_bw: float, peak: float, nominal: float | None) -> None:
    ridge = peak / copy_bw
    print(f"copy {copy_bw / 1e9:,.0f} GB/s, FP32 FMA chains {peak / 1e12:.1f} TFLOP/s: "
          f"ridge point {ridge:.1f} FLOP/B")
    if nominal:
        print(f"(FP32 on paper, lanes x SMs x 2 x top clock: {nominal / 1e12:.1f} TFLOP/s)")
        cb.report_facts(fp32_nominal_tflops=nominal / 1e12, fp32_of_nominal=peak / nominal)
    print("  FMAs  FLOP/B       ms    GB/s   GFLOP/s  roofline  of roof")
    for r in rows:
        print(f"{r['fmas']:6d} {r['flops_per_byte']:7.2f} {r['ms']:8.4f} {r['gbs']:7,.0f} "
              f"{r['gflops']:9,.0f} {r['roof_gflops']:9,.0f} {100 * r['of_roof']:7.1f}%")
    first, last = rows[0], rows[-1]
    near = min(rows, key=lambda r: abs(r["flops_per_byte"] - ridge))       # the rung nearest the ridge
    cb.report_facts(sweep=rows, copy_gbs=copy_bw / 1e9, fp32_tflops=peak / 1e12, ridge_flops_per_byte=ridge,
                    first_gbs=first["gbs"], first_of_copy=first["gbs"] * 1e9 / copy_bw,
                    last_tflops=last["gflops"] / 1e3, last_of_fp32=last["gflops"] * 1e9 / peak,
                    near_ridge_fmas=near["fmas"], near_ridge_flops_per_byte=near["flops_per_byte"],
                    near_ridge_of_roof=near["of_roof"], lowest_of_roof=min(r["of_roof"] for r in rows))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=67_108_867)
    n = args.n
    gpu = cb.init()
    from pycuda import gpuarray

    x_host = np.random.default_rng(args.seed).uniform(-1, 1, n).astype(np.float32)
    x, y = gpuarray.to_gpu(x_host), gpuarray.empty(n, np.float32)
    kernels = load_kernels()
    for f in FMAS:
        cb.poison(y)
        sweep(kernels, f, x, y)
        cb.report_check(cb.compare(f"{f} FMAs", y.get(), reference(x_host, f), k=bound_k(f), scale=1.0))
    if args.bench:
        copy_bw, peak = cb.ceiling(), fp32_roof(gpu)
        report(measure(kernels, x, y, copy_bw, peak), copy_bw, peak, nominal_fp32(gpu))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
