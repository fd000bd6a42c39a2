"""Solution to exercise 2: one element per thread, or eight.

The chapter's fused kernel gives each thread 8 bf16 elements: one 16-byte
load each of x, its bias and the residual, and one 16-byte store.
bias_gelu_residual_narrow gives each thread one element: 2-byte loads, a
2-byte store, and the same arithmetic. Two things change with it.

Bytes in flight: a thread now has 4 bytes of x and r on their way from
device memory instead of 32, and a warp's load instruction asks for 64
bytes instead of 512. By Little's law the bandwidth a kernel reaches is at
most the bytes it keeps in flight divided by the memory's latency, and an
SM holds a limited number of threads (2,048 on compute capability 9.0):
for as many threads, the narrow kernel has an eighth of the bytes in
flight. Instructions per byte: each load or store instruction moves an eighth of
the bytes, and what a thread does besides the arithmetic (its index, the
bounds test, the column i % cols) it now does per element, not per 8.

Run:    python code/fusion/ex2_narrow_loads.py [--seed S] [--bench]
Checks: the narrow kernel, every element, at the chapter listing's shapes
        (under compute-sanitizer its small ones), against the float64
        r + gelu(x + b) of the bf16 inputs within the chapter's fused bound
        (the same arithmetic, in the same order); under --bench both kernels
        at 8192 x 3072.
Bench:  at 8192 x 3072 (GPT-2 small's MLP): each kernel's time and GB/s by
        its 6 bytes per element against the copy bandwidth, and the ratio of
        their times.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from fusion.bias_gelu_residual import (BLOCK, FUSED_BYTES, SANITIZER_SHAPES, SHAPES,  # noqa: E402
                                       _check_inputs, check, fused, load_kernels, random_inputs,
                                       reference)

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BENCH_SHAPE = (8 * 1024, 3072)      # rows, cols: GPT-2 small's MLP, batch 8 x sequence 1024


def load_narrow():
    return cb.compile(KERNEL_FILE).get_function("bias_gelu_residual_narrow").prepare("PPPPii")


# --8<-- [start:solution]
def fused_narrow(kernel, x, bias, residual, y) -> None:
    """y = residual + gelu(x + bias), one element a thread; arguments as the
    chapter's fused() (2-byte accesses need no alignment beyond bf16's)."""
    rows, cols, _ = _check_inputs(x, bias, {"residual": residual, "y": y})
    kernel.prepared_call((cb.ceil_div(rows * cols, BLOCK), 1, 1), (BLOCK, 1, 1), x.gpudata, bias.gpudata,
                         residual.gpudata, y.gpudata, np.int32(rows), np.int32(cols))


def measure(kernels, narrow, seed: int) -> dict:
    """Both kernels at BENCH_SHAPE on the same data: checked, then timed."""
    from pycuda import gpuarray

    rows, cols = BENCH_SHAPE
    n, tag = rows * cols, f"{rows}x{cols}"
    x, bias, r = random_inputs(rows, cols, np.random.default_rng(seed))
    ref, t_abs, r_abs = reference(x, bias, r)
    xg, bg, rg = gpuarray.to_gpu(x), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    y = gpuarray.empty_like(xg)
    runs = {"8 a thread (16-byte loads)": lambda: fused(kernels, xg, bg, rg, y),
            "1 a thread (2-byte loads)": lambda: fused_narrow(narrow, xg, bg, rg, y)}
    timed = []
    for name, fn in runs.items():
        cb.poison(y)
        fn()
        check(f"{name} {tag}", y, ref, t_abs, r_abs, fused_bound=True)
        timed.append(cb.benchmark(name, fn, bytes_moved=FUSED_BYTES * n))
    wide, one = timed
    return {"wide_of_copy": wide.fraction_of_ceiling, "narrow_of_copy": one.fraction_of_ceiling,
            "narrow_over_wide": one.timing.median_ms / wide.timing.median_ms}
# --8<-- [end:solution]


def check_shape(narrow, rows: int, cols: int, rng) -> None:
    from pycuda import gpuarray

    x, bias, r = random_inputs(rows, cols, rng)
    ref, t_abs, r_abs = reference(x, bias, r)
    xg, bg, rg = gpuarray.to_gpu(x), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    y = gpuarray.empty_like(xg)
    cb.poison(y)
    fused_narrow(narrow, xg, bg, rg, y)
    check(f"1 a thread {rows}x{cols}", y, ref, t_abs, r_abs, fused_bound=True)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    narrow = load_narrow()
    rng = np.random.default_rng(args.seed)
    for rows, cols in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        check_shape(narrow, rows, cols, rng)
    facts = {}
    if args.bench:
        facts = measure(load_kernels(), narrow, args.seed)
        print(f"share of copy: 8 a thread {100 * facts['wide_of_copy']:.1f}%, 1 a thread "
              f"{100 * facts['narrow_of_copy']:.1f}%")
        print(f"1 a thread takes {facts['narrow_over_wide']:.2f}x as long as 8 a thread")
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
