"""GELU on the CPU and on the GPU: when does the GPU start to win?

Computes the same elementwise function, GELU (tanh form), on the CPU and
with a CUDA kernel on the GPU, and times it at sizes from a few dozen to 67
million elements: NumPy on one core (nine passes over memory), PyTorch on
one thread (one fused pass: the same core, so the passes alone change) and
on all the CPU's logical CPUs but one, the GPU kernel alone, and the GPU
including the copies to and from host memory, from pageable host arrays
(what np.empty gives) and from pinned ones (page-locked, which the copy
engines read directly).
The CPU code is the fastest honest NumPy: x*x*x rather than x**3 (a general
power function), and results written into arrays allocated once. The
crossover is the smallest size from which the GPU, copies included, beats
the CPU at every larger size measured.

Run:    python code/why_gpus/gelu_cpu_vs_gpu.py [--n N] [--seed S] [--bench]
Checks: y from the GPU, and from every CPU version, against a float64 NumPy
        GELU, every element within 8 roundings of its terms (k=8, scale |x|:
        where tanh is near -1, 1 + tanh cancels, so the bound is absolute).
Bench:  the size sweep, then the kernel's GB/s against the copy bandwidth
        and torch.nn.functional.gelu on the GPU.
"""

import contextlib
import sys
from functools import cache, partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
SWEEP = [33, 257, 1_031, 4_099, 16_411, 65_537, 262_147, 1_048_583, 4_194_319, 16_777_259, 67_108_879]
K = np.sqrt(2 / np.pi)


# --8<-- [start:cpu]
def gelu_numpy(x, out, tmp):
    """GELU with NumPy on one core, in float32, into arrays allocated once:
    x*x*x, not x**3 (a general power function, many times slower)."""
    np.multiply(x, x, out=tmp)
    tmp *= x                                  # x^3
    tmp *= np.float32(0.044715)
    tmp += x
    tmp *= np.float32(K)
    np.tanh(tmp, out=tmp)
    tmp += np.float32(1)
    np.multiply(x, tmp, out=out)
    out *= np.float32(0.5)


def gelu_torch_cpu(torch, x, out):
    """GELU with PyTorch on the CPU: one vectorised pass, on the threads
    torch.set_num_threads allows."""
    torch.ops.aten.gelu.out(x, approximate="tanh", out=out)
# --8<-- [end:cpu]


def reference(x):
    """GELU in float64, in place in one float64 array beside x64."""
    x64 = x.astype(np.float64)
    t = np.multiply(x64, 0.044715)
    t *= x64
    t *= x64
    t += x64                                  # x + 0.044715 x^3
    t *= K
    np.tanh(t, out=t)
    t += 1
    t *= x64
    t *= 0.5
    return t


def check_gelu(name, y, x, ref=None):
    """Every element within 8 roundings of the size of its terms (|x|)."""
    ref = reference(x) if ref is None else ref
    return cb.report_check(cb.compare(name, y, ref, k=8, scale=np.abs(x)))


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("gelu").prepare("PPi")


def gelu_gpu(kernel, x, y, block=BLOCK):
    """y = GELU(x) on the GPU. x, y: 1-D float32 GPUArrays of one size."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((cb.ceil_div(n, block), 1, 1), (block, 1, 1), x.gpudata, y.gpudata, np.int32(n))


def torch_gelu(torch, x):
    """The library call a user would make instead, on the GPU."""
    if torch is None:
        return None
    tx = torch.from_numpy(x).cuda()
    return "F.gelu", lambda: torch.nn.functional.gelu(tx, approximate="tanh")


@contextlib.contextmanager
def torch_threads(torch, threads: int | None):
    """PyTorch's CPU threads set to `threads` for the block (None: as they are)."""
    if torch is None or threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@cache
def leave_one_core(torch):
    """Give PyTorch's CPU work one thread fewer than its default, one per core.
    A parallel call returns when its last thread is done. With a thread on
    every core, any other busy process (the test runner, a driver thread)
    takes a core from one of them, and the whole call waits a scheduler
    slice: milliseconds, at sizes whose work takes microseconds. With one
    core left free, no thread has to wait. (It acts once: a second call
    changes nothing.)"""
    torch.set_num_threads(max(1, torch.get_num_threads() - 1))


def cpu_versions(torch, numpy_fn, torch_fn):
    """The CPU baselines of a sweep: name -> (label, prepare(x, y) -> run(),
    PyTorch threads to time it with, or None)."""
    out = {"numpy": ("NumPy, 1 core", lambda x, y: partial(numpy_fn, x, y, np.empty_like(x)), None)}
    if torch is not None:
        leave_one_core(torch)
        run = lambda x, y: partial(torch_fn, torch, torch.from_numpy(x), torch.from_numpy(y))  # noqa: E731
        out["torch_cpu_1"] = ("PyTorch, 1 thread", run, 1)
        out["torch_cpu"] = (f"PyTorch, {torch.get_num_threads()} threads", run, None)
    return out


# --8<-- [start:sweep]
def sweep(sizes, gpu_fn, cpu, rng, torch=None, budget_ms=50):
    """At every size: each CPU version, the GPU kernel alone (data already on
    the GPU), and the GPU including the copy of x over and of y back, as a
    program whose data starts in host memory pays: from pageable arrays,
    and from pinned ones. Medians, in ms."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    print(f"{'n':>11} " + " ".join(f"{k:>11}" for k in cpu) + "  GPU kernel  +pageable  +pinned  (ms)")
    rows = []
    for n in sizes:
        x = rng.standard_normal(n, dtype=np.float32)
        y = np.empty_like(x)
        x_pinned, y_pinned = cuda.pagelocked_empty(n, np.float32), cuda.pagelocked_empty(n, np.float32)
        x_pinned[:] = x
        x_gpu, y_gpu = gpuarray.empty(n, np.float32), gpuarray.empty(n, np.float32)

        def with_copies(src=x, dst=y):
            cuda.memcpy_htod(x_gpu.gpudata, src)
            gpu_fn(x_gpu, y_gpu)
            cuda.memcpy_dtoh(dst, y_gpu.gpudata)

        row = {"n": n}
        for key, (_, prepare, threads) in cpu.items():
            with torch_threads(torch, threads):
                row[f"{key}_ms"] = cb.time_cpu(prepare(x, y), budget_ms=budget_ms).median_ms
        row["gpu_kernel_ms"] = cb.bench(lambda: gpu_fn(x_gpu, y_gpu), working_set_bytes=8 * n,
                                        budget_ms=budget_ms).median_ms
        row["gpu_with_copies_ms"] = cb.bench(with_copies, working_set_bytes=8 * n,
                                             budget_ms=budget_ms).median_ms
        row["gpu_with_pinned_copies_ms"] = cb.bench(partial(with_copies, x_pinned, y_pinned),
                                                    working_set_bytes=8 * n, budget_ms=budget_ms).median_ms
        rows.append(row)
        print(f"{n:>11,} " + " ".join(f"{row[f'{k}_ms']:11.3f}" for k in cpu)
              + f"  {row['gpu_kernel_ms']:10.3f}  {row['gpu_with_copies_ms']:9.3f}"
              f"  {row['gpu_with_pinned_copies_ms']:7.3f}", flush=True)
        del x_pinned, y_pinned
    return rows
# --8<-- [end:sweep]


def crossover(rows, gpu_key, cpu_key):
    """Smallest n from which the GPU (timed by gpu_key) beats the CPU
    (cpu_key) at every larger size measured, or None if it never does."""
    for i, r in enumerate(rows):
        if all(s[gpu_key] < s[cpu_key] for s in rows[i:]):
            return r["n"]
    return None


def sweep_facts(rows, cpu):
    """Crossovers and the speed-ups at the largest size, for the record."""
    last = rows[-1]
    facts = {"sweep": rows, "cpu_labels": {k: label for k, (label, _, _) in cpu.items()}}
    for key in cpu:
        for gpu_key, what in (("gpu_with_copies_ms", "with_copies"), ("gpu_with_pinned_copies_ms", "with_pinned_copies"),
                              ("gpu_kernel_ms", "kernel")):
            cross = crossover(rows, gpu_key, f"{key}_ms")
            facts[f"crossover_{what}_vs_{key}"] = cross if cross is not None else "never"
            facts[f"largest_{key}_over_{what}"] = last[f"{key}_ms"] / last[gpu_key]
            print(f"GPU {what.replace('_', ' ')} beats {cpu[key][0]}: "
                  + (f"from n = {cross:,}" if cross else "never, up to the largest n")
                  + f"\n  at n = {last['n']:,}: {last[f'{key}_ms'] / last[gpu_key]:,.1f}x as fast")
    facts["largest_n"] = last["n"]
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=67_108_879)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal(args.n, dtype=np.float32)

    cb.init()
    from pycuda import gpuarray
    torch = cb.torch_cuda()
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    cb.poison(y_gpu)
    kernel = load_kernel()
    gelu_gpu(kernel, x_gpu, y_gpu)
    ref = reference(x)
    check_gelu("y = gelu(x), GPU", y_gpu.get(), x, ref)
    cpu = cpu_versions(torch, gelu_numpy, gelu_torch_cpu)
    for key, (label, prepare, threads) in cpu.items():    # the baselines must be right too
        y = np.full_like(x, np.nan)
        with torch_threads(torch, threads):
            prepare(x, y)()
        check_gelu(f"y = gelu(x), {label}", y, x, ref)

    if args.bench:
        print(f"CPU: {cb.host_cpu()}")
        rows = sweep(SWEEP, partial(gelu_gpu, kernel), cpu, rng, torch)
        cb.report_facts(**sweep_facts(rows, cpu), cpu=cb.host_cpu(),
                        torch_threads=torch.get_num_threads() if torch is not None else None)
        cb.benchmark("gelu kernel", lambda: gelu_gpu(kernel, x_gpu, y_gpu), bytes_moved=8 * x.size,
                     baseline=torch_gelu(torch, x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
