"""Solution to exercise 1: a faster tanh, to see what limits the fused kernel.

In the chapter's record the fused kernel moved its 6 bytes per element at
a lower share of the copy bandwidth than the three unfused kernels moved
their 14: the fused kernel does all of the chain's arithmetic for its 6
bytes, and two of the three unfused kernels do almost none. Is
the fused kernel waiting for memory, or is its arithmetic part of the
limit? Change the arithmetic alone and see. bias_gelu_residual_fast
replaces the GELU's tanhf, a software routine of some twenty instructions,
with the one instruction tanh.approx.f32, whose relative error the PTX ISA
bounds by 2^-11. If the time stays, memory was the limit; if it falls, the
instructions were part of it.

The approximation costs little accuracy: tanh off by at most 2^-11 (and
|tanh| <= 1), times the GELU's factor v / 2, is at most 2^-12 |x + b| in y,
a sixteenth of bf16's unit roundoff u_bf16 = 2^-8 at that size. y is
rounded to bf16 anyway.

Run:    python code/fusion/ex1_fast_tanh.py [--seed S] [--bench]
Checks: the fast kernel, every element, at the chapter listing's shapes
        (under compute-sanitizer its small ones), against the float64
        r + gelu(x + b) of the bf16 inputs, within the chapter's fused bound
        plus the approximation's 2^-12 |x + b|; under --bench, at 8192 x
        3072, both kernels, the accurate one within the chapter's bound.
Bench:  at 8192 x 3072 (GPT-2 small's MLP): the accurate (tanhf) and fast
        (tanh.approx) fused kernels, each by its 6 bytes per element against
        the copy bandwidth, and the ratio of their times; the error of each:
        norm-wise, and its worst element in units of u_bf16 times the size
        of the element's terms (|y| + |x + b| + |r|); and the share of the
        elements whose bf16 result differs between the two kernels.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16  # noqa: E402
from fusion.bias_gelu_residual import (BLOCK, FUSED_BYTES, SANITIZER_SHAPES, SHAPES, U_BF16,  # noqa: E402
                                       U_FP32, _check_inputs, _grid, check, fused, load_kernels,
                                       random_inputs, reference)

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BENCH_SHAPE = (8 * 1024, 3072)      # rows, cols: GPT-2 small's MLP, batch 8 x sequence 1024
TANH_APPROX_REL = 2.0**-11          # PTX ISA, "tanh": tanh.approx.f32's largest relative error


def load_fast():
    return cb.compile(KERNEL_FILE).get_function("bias_gelu_residual_fast").prepare("PPPPiii")


# --8<-- [start:solution]
def fused_fast(kernel, x, bias, residual, y) -> None:
    """y = residual + gelu(x + bias) with tanh.approx.f32; arguments as the
    chapter's fused()."""
    rows, cols, vec = _check_inputs(x, bias, {"residual": residual, "y": y})
    kernel.prepared_call(_grid(rows * cols), (BLOCK, 1, 1), x.gpudata, bias.gpudata, residual.gpudata,
                         y.gpudata, np.int32(rows), np.int32(cols), np.int32(vec))


def check_fast(name: str, y16, ref, t_abs, r_abs) -> None:
    """The chapter's fused bound, u_bf16 |y| + 12 u (|x + b| + |r|), plus
    the approximation: 2^-11 of |tanh| <= 1, times the GELU's v / 2."""
    extra = 12 * U_FP32 * (t_abs + r_abs) + TANH_APPROX_REL / 2 * t_abs
    cb.report_check(cb.compare(name, from_bf16(y16), ref, k=U_BF16 / U_FP32, scale=extra / U_BF16))


def errors(y16, ref, t_abs, r_abs) -> dict:
    """The norm-wise relative error, and the worst element's error in units
    of u_bf16 times the size of its terms, |y| + |x + b| + |r|."""
    err = np.abs(from_bf16(y16) - ref)
    size = np.abs(ref) + t_abs + r_abs
    return {"norm_err": float(np.linalg.norm(err) / np.linalg.norm(ref)),
            "worst_u": float(np.max(err / np.where(size > 0, size, 1.0)) / U_BF16)}


def measure(kernels, fast, seed: int) -> dict:
    """Both kernels at BENCH_SHAPE: checked, their errors, then timed."""
    from pycuda import gpuarray

    rows, cols = BENCH_SHAPE
    n, tag = rows * cols, f"{rows}x{cols}"
    x, bias, r = random_inputs(rows, cols, np.random.default_rng(seed))
    ref, t_abs, r_abs = reference(x, bias, r)
    xg, bg, rg = gpuarray.to_gpu(x), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    y_acc, y_fast = gpuarray.empty_like(xg), gpuarray.empty_like(xg)
    cb.poison(y_acc)
    cb.poison(y_fast)
    fused(kernels, xg, bg, rg, y_acc)
    fused_fast(fast, xg, bg, rg, y_fast)
    acc16, fast16 = y_acc.get(), y_fast.get()
    check(f"tanhf {tag}", acc16, ref, t_abs, r_abs, fused_bound=True)
    check_fast(f"tanh.approx {tag}", fast16, ref, t_abs, r_abs)
    facts = {f"accurate_{k}": v for k, v in errors(acc16, ref, t_abs, r_abs).items()}
    facts.update({f"fast_{k}": v for k, v in errors(fast16, ref, t_abs, r_abs).items()})
    facts["differ_share"] = np.count_nonzero(acc16 != fast16) / n
    acc = cb.benchmark(f"fused, tanhf {tag}", lambda: fused(kernels, xg, bg, rg, y_acc),
                       bytes_moved=FUSED_BYTES * n)
    fst = cb.benchmark(f"fused, tanh.approx {tag}", lambda: fused_fast(fast, xg, bg, rg, y_fast),
                       bytes_moved=FUSED_BYTES * n)
    facts.update(accurate_of_copy=acc.fraction_of_ceiling, fast_of_copy=fst.fraction_of_ceiling,
                 speedup=acc.timing.median_ms / fst.timing.median_ms)
    return facts
# --8<-- [end:solution]


def check_shape(fast, rows: int, cols: int, rng) -> None:
    from pycuda import gpuarray

    x, bias, r = random_inputs(rows, cols, rng)
    ref, t_abs, r_abs = reference(x, bias, r)
    xg, bg, rg = gpuarray.to_gpu(x), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    y = gpuarray.empty_like(xg)
    cb.poison(y)
    fused_fast(fast, xg, bg, rg, y)
    check_fast(f"tanh.approx {rows}x{cols}", y.get(), ref, t_abs, r_abs)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    fast = load_fast()
    rng = np.random.default_rng(args.seed)
    for rows, cols in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        check_shape(fast, rows, cols, rng)
    facts = {"tanh_approx_rel": TANH_APPROX_REL}
    if args.bench:
        facts.update(measure(load_kernels(), fast, args.seed))
        print(f"share of copy: tanhf {100 * facts['accurate_of_copy']:.1f}%, tanh.approx "
              f"{100 * facts['fast_of_copy']:.1f}%; tanh.approx {facts['speedup']:.2f}x as fast")
        for name in ("accurate", "fast"):
            print(f"{name:>8s}: norm-wise error {facts[f'{name}_norm_err']:.2e}, worst element "
                  f"{facts[f'{name}_worst_u']:.3f} u_bf16 of its terms")
        print(f"bf16 results that differ between the two: {100 * facts['differ_share']:.3f}%")
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
