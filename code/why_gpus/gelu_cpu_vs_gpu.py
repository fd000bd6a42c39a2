"""GELU on the CPU and on the GPU: when does the GPU start to win?

Computes the same elementwise function, GELU (tanh form), with NumPy on the
CPU and with a CUDA kernel on the GPU, and times it three ways at sizes from
a few dozen to a quarter of a billion elements: the GPU kernel alone, the
GPU including the copies to and from host memory, and the CPU. The crossover
is the smallest size at which the GPU, copies included, beats the CPU.

Run:    python code/why_gpus/gelu_cpu_vs_gpu.py [--n N] [--seed S] [--bench]
Checks: y against a float64 NumPy GELU; relative error <= 1e-6.
Bench:  the size sweep (CPU, GPU kernel, GPU with copies), then the kernel's
        GB/s against the copy bandwidth and torch's GELU.
"""

import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
SWEEP = [33, 257, 1_031, 4_099, 16_411, 65_537, 262_147, 1_048_583, 4_194_319, 16_777_259, 67_108_879, 268_435_459]
K = np.sqrt(2 / np.pi)


# --8<-- [start:cpu]
def gelu_cpu(x):
    """GELU with NumPy, in the precision of x (what a CPU user would run)."""
    return 0.5 * x * (1 + np.tanh(x.dtype.type(K) * (x + x.dtype.type(0.044715) * x**3)))
# --8<-- [end:cpu]


def reference(x):
    return gelu_cpu(x.astype(np.float64))


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("gelu").prepare("PPi")


def gelu_gpu(kernel, x, y, block=BLOCK):
    """y = GELU(x) on the GPU. x, y: 1-D float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1), x.gpudata, y.gpudata, np.int32(n))


def cpu_seconds(x, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        gelu_cpu(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# --8<-- [start:sweep]
def sweep(kernel, rng):
    """Time CPU, GPU kernel, and GPU with copies at every size in SWEEP."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    rows = []
    for n in SWEEP:
        x = rng.standard_normal(n, dtype=np.float32)
        y = np.empty_like(x)
        x_gpu, y_gpu = gpuarray.empty(n, np.float32), gpuarray.empty(n, np.float32)

        def with_copies():                      # what a program that starts on the host pays
            cuda.memcpy_htod(x_gpu.gpudata, x)
            gelu_gpu(kernel, x_gpu, y_gpu)
            cuda.memcpy_dtoh(y, y_gpu.gpudata)

        with_copies()
        kernel_only = cb.bench(lambda: gelu_gpu(kernel, x_gpu, y_gpu), working_set_bytes=8 * n, reps=20)
        total = cb.bench(with_copies, working_set_bytes=8 * n, reps=5 if n > 10**7 else 20)
        cpu = cpu_seconds(x, 1 if n > 10**8 else 3 if n > 10**7 else 10)
        rows.append({"n": n, "cpu_ms": 1e3 * cpu, "gpu_kernel_ms": kernel_only.median_ms,
                     "gpu_with_copies_ms": total.median_ms})
        print(f"{n:>12,}  CPU {1e3 * cpu:10.3f} ms   GPU kernel {kernel_only.median_ms:8.3f} ms"
              f"   GPU + copies {total.median_ms:9.3f} ms", flush=True)
    return rows
# --8<-- [end:sweep]


def crossover(rows, key):
    """Smallest n from which on the GPU (timed by `key`) beats the CPU."""
    for i, r in enumerate(rows):
        if all(s[key] < s["cpu_ms"] for s in rows[i:]):
            return r["n"]
    return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=67_108_879)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    gelu_gpu(kernel, x_gpu, y_gpu)
    cb.report_check(cb.compare("y = gelu(x)", y_gpu.get(), reference(x)))

    if args.bench:
        print(f"CPU: {cpu_name()} (NumPy, one thread)")
        rows = sweep(kernel, rng)
        cross = crossover(rows, "gpu_with_copies_ms")
        print(f"GPU with copies beats the CPU from n = {cross:,}" if cross else "the CPU won at every size")
        cb.report_facts(sweep=rows, cpu=cpu_name(), crossover_with_copies=cross,
                        crossover_kernel_only=crossover(rows, "gpu_kernel_ms"))
        torch = cb.torch_cuda()
        baseline = None
        if torch is not None:
            tx = torch.from_numpy(x).cuda()
            gelu = torch.nn.functional.gelu
            baseline = ("torch gelu(tanh)", lambda: gelu(tx, approximate="tanh"))
        cb.benchmark("gelu kernel", lambda: gelu_gpu(kernel, x_gpu, y_gpu), bytes_moved=8 * x.size,
                     reps=args.reps, baseline=baseline)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
