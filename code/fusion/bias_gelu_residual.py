"""Elementwise fusion: residual + gelu(x + bias) in one kernel, not three.

The tail of a transformer's MLP, in bfloat16 as networks store it, with
float32 arithmetic. Written as three library calls (an add, a GELU, an add),
each call reads its inputs from memory and writes its output back, and the
next call reads that output again: 14 bytes per element (x and t + bias
write t: 2 + 2; the GELU reads t, writes g: 2 + 2; the residual add reads g
and r, writes y: 2 + 2 + 2). Fused into one kernel, x + bias and its GELU
stay in registers: 6 bytes per element (x, r in; y out). All of these are
memory-bound, so time goes with bytes: the prediction is 14 / 6 = 2.33x.

Run:    python code/fusion/bias_gelu_residual.py [--seed S] [--bench]
Checks: the fused kernel and the three unfused kernels (bias_add, gelu_bf16,
        residual_add), every element, at rows x cols = 1x1, 1x8, 3x5, 31x33,
        1031x772, 1000x3072 and 4097x1000 (under compute-sanitizer 1x1, 3x5,
        31x33 and 37x40), and under --bench at each benchmark shape, against
        float64 r + gelu(x + b) of the bf16 inputs. Bound, fused: the one
        rounding of y to bf16 (u_bf16 = 2^-8 of |y|) plus 12 float32
        roundings (u = 2^-24) of the terms' size |x + b| + |r| (1 for the
        add, 8 for the GELU and 2 for tanhf, as in "Why GPUs", 1 for the
        residual add). Unfused: also the roundings of t and g to bf16, each
        at most u_bf16 |t| (|gelu(v)| <= |v|), t's carried into y by the
        GELU's slope (at most 1.13): u_bf16 (|y| + 2.2 |t|) + the same 12
        float32 roundings. Under --bench the torch sequence, and the
        output of torch.compile's code for each mode, are checked with the
        unfused bound too: they must compute the same function.
Bench:  at GPT-2 MLP shapes (batch 8 x sequence 1024 rows; 3072 columns for
        GPT-2 small, 4096 for medium), each a typed entry
        (cudabook.evidence): the fused kernel's time and GB/s (6 bytes per
        element) against the copy bandwidth measured in this run
        (device-to-device copy), timed in alternation (ABBA rounds) with
        the eager PyTorch sequence torch.add, torch.ops.aten.gelu.out
        (tanh), torch.add, each into a bf16 buffer allocated once; the
        book's three unfused kernels, timed alone against the same copy;
        then the fused kernel again, in alternation with torch.compile of
        the same chain (gelu(x + bias, tanh) + residual, a new bf16 tensor
        a call), once with mode="default" and once with "max-autotune",
        each compiled, warmed and checked before it is timed (its inputs
        marked static, so max-autotune's CUDA graph reads them in place).
        Each sequence's bandwidth is also given by the bytes it really
        moved (14 per element for the three-kernel ones). Target: the
        fused kernel >= 2x the eager sequence at both shapes (judged on
        the median of the alternated rounds' ratios).
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from why_gpus.gelu_cpu_vs_gpu import reference as gelu_float64  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK, GROUP = 256, 8                       # threads per block; elements per thread (the .cu's GROUP)
SHAPES = [(1, 1), (1, 8), (3, 5), (31, 33), (1031, 772), (1000, 3072), (4097, 1000)]   # rows, cols
SANITIZER_SHAPES = [(1, 1), (3, 5), (31, 33), (37, 40)]
BENCH_SHAPES = {"GPT-2 small": (8 * 1024, 3072), "GPT-2 medium": (8 * 1024, 4096)}
FUSED_BYTES, UNFUSED_BYTES = 6, 14          # bytes per element moved (bf16: 2 bytes a value)
TARGET = 2.0                                # fused / eager sequence, by time
BASELINE = "torch eager (add, gelu, add)"
COMPILE_MODES = ("default", "max-autotune")    # torch.compile's modes, each timed against the fused kernel
CEILING = "device-to-device copy"
U_BF16, U_FP32 = 2.0**-8, 2.0**-24
MAX_ELEMENTS = 2**31 - 1


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    sigs = {"bias_add": "PPPiii", "gelu_bf16": "PPqi", "residual_add": "PPPqi",
            "bias_gelu_residual": "PPPPiii"}
    return {name: module.get_function(name).prepare(sig) for name, sig in sigs.items()}


def _check_inputs(x, bias, others: dict) -> tuple[int, int, int]:
    """Check x (rows, cols), bias (cols,) and each array of `others` (same
    shape as x), all bf16 bit patterns on the device. Returns rows, cols and
    vec: 1 if one 16-byte load per 8 elements is safe (cols a multiple of 8,
    every array on a 16-byte boundary)."""
    cb.check_array("x", x, dtype=np.uint16, ndim=2, on_device=True)
    rows = cb.check_size("x.shape[0] (rows)", x.shape[0])
    cols = cb.check_size("x.shape[1] (cols)", x.shape[1])
    cb.check_size("x.size", x.size, high=MAX_ELEMENTS)
    if bias is not None:
        cb.check_array("bias", bias, dtype=np.uint16, shape=(cols,), on_device=True)
    for name, arr in others.items():
        cb.check_array(name, arr, dtype=np.uint16, shape=(rows, cols), on_device=True)
    arrays = [x, *([bias] if bias is not None else []), *others.values()]
    vec = cols % GROUP == 0 and all(int(a.gpudata) % 16 == 0 for a in arrays)
    return rows, cols, int(vec)


def _grid(n: int) -> tuple[int, int, int]:
    return (cb.ceil_div(cb.ceil_div(n, GROUP), BLOCK), 1, 1)


# --8<-- [start:launch]
def fused(kernels, x, bias, residual, y) -> None:
    """y = residual + gelu(x + bias), one kernel. x, residual, y: (rows,
    cols) bf16 bit patterns (np.uint16 GPUArrays); bias: (cols,)."""
    rows, cols, vec = _check_inputs(x, bias, {"residual": residual, "y": y})
    kernels["bias_gelu_residual"].prepared_call(
        _grid(rows * cols), (BLOCK, 1, 1), x.gpudata, bias.gpudata, residual.gpudata, y.gpudata,
        np.int32(rows), np.int32(cols), np.int32(vec))


def unfused(kernels, x, bias, residual, t, g, y) -> None:
    """The same in three kernels, through two bf16 buffers t and g (shaped
    like x): t = x + bias; g = gelu(t); y = g + residual."""
    rows, cols, vec = _check_inputs(x, bias, {"residual": residual, "t": t, "g": g, "y": y})
    n, grid, block = rows * cols, _grid(rows * cols), (BLOCK, 1, 1)
    kernels["bias_add"].prepared_call(grid, block, x.gpudata, bias.gpudata, t.gpudata,
                                      np.int32(rows), np.int32(cols), np.int32(vec))
    kernels["gelu_bf16"].prepared_call(grid, block, t.gpudata, g.gpudata, np.int64(n), np.int32(vec))
    kernels["residual_add"].prepared_call(grid, block, g.gpudata, residual.gpudata, y.gpudata,
                                          np.int64(n), np.int32(vec))
# --8<-- [end:launch]


def random_inputs(rows: int, cols: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bf16 bit patterns: x a pre-activation ~ N(0, 1), bias ~ N(0, 0.1^2), r ~ N(0, 1)."""
    x = to_bf16(rng.standard_normal((rows, cols), dtype=np.float32))
    bias = to_bf16(0.1 * rng.standard_normal(cols, dtype=np.float32))
    r = to_bf16(rng.standard_normal((rows, cols), dtype=np.float32))
    return x, bias, r


def reference(x16, bias16, r16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 r + gelu(x + b) of the bf16 values, and the sizes |x + b|, |r|."""
    t = from_bf16(x16).astype(np.float64) + from_bf16(bias16).astype(np.float64)
    r = from_bf16(r16).astype(np.float64)
    return r + gelu_float64(t), np.abs(t), np.abs(r)


def check(name: str, y_gpu_or_host, ref, t_abs, r_abs, *, fused_bound: bool) -> float:
    """Every element of y against the float64 reference; returns the
    norm-wise relative error. In compare()'s terms (k u (|ref| + scale),
    u the float32 unit roundoff as y is compared as float32): k = 2^16 makes
    k u = u_bf16, and scale holds the rest of the bound over u_bf16."""
    y16 = y_gpu_or_host.get() if hasattr(y_gpu_or_host, "get") else y_gpu_or_host
    y = from_bf16(y16)
    extra = 12 * U_FP32 / U_BF16 * (t_abs + r_abs)
    scale = extra if fused_bound else extra + 2.2 * t_abs
    result = cb.compare(name, y, ref, k=U_BF16 / U_FP32, scale=scale)
    cb.report_check(result)
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def check_shape(kernels, rows: int, cols: int, rng, inputs=None) -> dict:
    from pycuda import gpuarray

    x, bias, r = inputs if inputs is not None else random_inputs(rows, cols, rng)
    ref, t_abs, r_abs = reference(x, bias, r)
    xg, bg, rg = gpuarray.to_gpu(x), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    t, g, y = (gpuarray.empty_like(xg) for _ in range(3))
    cb.poison(y)
    fused(kernels, xg, bg, rg, y)
    err_fused = check(f"fused {rows}x{cols}", y, ref, t_abs, r_abs, fused_bound=True)
    for buf in (t, g, y):
        cb.poison(buf)
    unfused(kernels, xg, bg, rg, t, g, y)
    err_unfused = check(f"unfused {rows}x{cols}", y, ref, t_abs, r_abs, fused_bound=False)
    return {"err_fused": err_fused, "err_unfused": err_unfused}


def torch_inputs(x16, bias16, r16):
    """x, bias and r as bf16 tensors on the GPU (None without torch)."""
    torch = cb.torch_cuda()
    if torch is None:
        return None

    def dev(a):
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    return dev(x16), dev(bias16), dev(r16)


def torch_sequence(x16, bias16, r16, tensors=None):
    """The eager PyTorch sequence a user writes, into bf16 buffers allocated
    once: (name, fn, y tensor). tensors: torch_inputs' (x, bias, r), made
    here when not given."""
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx, tb, tr = tensors if tensors is not None else torch_inputs(x16, bias16, r16)
    tt, tg, ty = (torch.empty_like(tx) for _ in range(3))

    def run():
        torch.add(tx, tb, out=tt)
        torch.ops.aten.gelu.out(tt, approximate="tanh", out=tg)
        torch.add(tg, tr, out=ty)
    return BASELINE, run, ty


def _to_host(torch, t) -> np.ndarray:
    """A bf16 tensor's bit patterns on the host (np.uint16)."""
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def torch_compiled(mode: str, tensors):
    """torch.compile of the chain as a user writes it, returning a new bf16
    tensor, compiled and warmed here, before anything is timed:
    (name, fn, the first call's output on the host)."""
    torch = cb.torch_cuda()
    gelu = torch.nn.functional.gelu

    def chain(x, bias, residual):
        return gelu(x + bias, approximate="tanh") + residual

    torch._dynamo.reset()               # a fresh compile for each mode and shape
    for t in tensors:                   # max-autotune's CUDA graph then reads them in place, not a copy
        torch._dynamo.mark_static_address(t)
    comp = torch.compile(chain, mode=mode)
    y = _to_host(torch, comp(*tensors))     # compiles; read now: a CUDA graph's next run reuses its memory
    for _ in range(2):                  # with CUDA graphs (max-autotune): recorded, then replayed
        comp(*tensors)
    torch.cuda.synchronize()
    return f"torch.compile {mode}", lambda: comp(*tensors), y


def bench_shape(kernels, model: str, rows: int, cols: int, seed: int) -> dict:
    from pycuda import gpuarray

    n = rows * cols
    inputs = random_inputs(rows, cols, np.random.default_rng(seed))
    x, bias, r = inputs
    tag = f"{rows}x{cols}"
    facts = {f"{tag}_{k}": v for k, v in check_shape(kernels, rows, cols, None, inputs).items()}
    xg, bg, rg = gpuarray.to_gpu(x), gpuarray.to_gpu(bias), gpuarray.to_gpu(r)
    t, g, y = (gpuarray.empty_like(xg) for _ in range(3))
    torch = cb.torch_cuda()
    tensors = torch_inputs(x, bias, r)
    base = torch_sequence(x, bias, r, tensors)
    ceiling = (CEILING, cb.ceiling())

    def run_fused():
        fused(kernels, xg, bg, rg, y)

    print(f"{model} MLP, {rows} x {cols} bf16 ({n * 2 / 2**20:,.0f} MiB a tensor):")
    b = evidence.benchmark(f"fused {tag}", run_fused, bytes_moved=FUSED_BYTES * n, ceiling=ceiling,
                           baseline=base[:2] if base else None, targets={"baseline": TARGET})
    ours3 = evidence.benchmark(f"unfused {tag}", lambda: unfused(kernels, xg, bg, rg, t, g, y),
                               bytes_moved=UNFUSED_BYTES * n, ceiling=ceiling)
    fused_ms = b.timing.median_ms
    # (label, facts key, ms, bytes per element, its time over the fused kernel's)
    rows_out = [("fused", "fused", fused_ms, FUSED_BYTES, 1.0),
                ("book unfused (3 kernels)", "unfused", ours3.timing.median_ms, UNFUSED_BYTES,
                 ours3.timing.median_ms / fused_ms)]
    if b.baseline is not None:
        ref, t_abs, r_abs = reference(x, bias, r)
        check(f"{BASELINE} {tag}", _to_host(torch, base[2]), ref, t_abs, r_abs, fused_bound=False)
        rows_out.append((BASELINE, "torch", b.baseline.timing.median_ms, UNFUSED_BYTES, b.baseline.ratio))
        for mode in COMPILE_MODES:
            key = "compile_" + mode.replace("-", "_")
            name, fn, y_compiled = torch_compiled(mode, tensors)
            check(f"{name} {tag}", y_compiled, ref, t_abs, r_abs, fused_bound=False)
            del y_compiled
            m = evidence.benchmark(f"fused {tag} vs {name}", run_fused, bytes_moved=FUSED_BYTES * n,
                                   ceiling=ceiling, baseline=(name, fn))
            rows_out.append((name, key, m.baseline.timing.median_ms, FUSED_BYTES, m.baseline.ratio))
            facts[f"{tag}_fused_over_{key}"] = m.baseline.ratio
        del ref, t_abs, r_abs
    print(f"  {'':28s} {'ms':>8s} {'bytes/elem':>10s} {'GB/s':>8s} {'% copy':>7s} {'fused is':>9s}")
    for name, key, ms, nbytes, over in rows_out:
        rate = nbytes * n / (ms * 1e-3)
        print(f"  {name:28s} {ms:8.4f} {nbytes:10d} {rate / 1e9:8.1f} {100 * rate / ceiling[1]:6.1f}% "
              f"{over:8.2f}x")
        facts[f"{tag}_{key}_ms"] = ms
        facts[f"{tag}_{key}_of_copy"] = rate / ceiling[1]
        facts[f"{tag}_{key}_over_fused"] = over
    print("  (fused is: the median of the alternated rounds' ratios for PyTorch's rows; for the book's "
          "unfused kernels, their time over the first fused entry's)")
    if b.targets is not None:
        facts[f"{tag}_target_met"] = bool(b.targets.met.get("baseline"))
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    facts = {"predicted_speedup": UNFUSED_BYTES / FUSED_BYTES}
    for rows, cols in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        errs = check_shape(kernels, rows, cols, rng)
        facts.update({f"{rows}x{cols}_{k}": v for k, v in errs.items()})
    if args.bench:
        facts["baseline"] = BASELINE
        met = []
        for model, (rows, cols) in BENCH_SHAPES.items():
            facts.update(bench_shape(kernels, model, rows, cols, args.seed))
            met.append(facts.get(f"{rows}x{cols}_target_met", False))
        facts.update(target=TARGET, target_met=all(met))
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
