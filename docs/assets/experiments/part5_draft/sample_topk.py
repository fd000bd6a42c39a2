"""Sampling the next token with temperature and top-k, one block a row, no sort.

Draft for Part V ("Serving a model"), not yet a listing, and not yet run on
a GPU: run it from the repository root with PYTHONPATH=code. For each row
of bf16 logits and its uniform number u: the tokens at or above the k-th
largest logit (ties kept), weights exp((x - max) / T), and the first token
whose running sum of weights, in index order, passes u times the total.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part5_draft/sample_topk.py [--seed S] [--bench]
Checks: V = 1, 7, 256, 1,000 and 50,257, k = 1, 5, 50 and V, T = 0.7 and 1,
        64 rows of logits ~ N(0, 2^2) in bf16 each with a random u: the token
        drawn is kept, and its interval of the running sum, in float64,
        holds u times the total, to within the float32 roundings of the
        kernel's sums ((V / 256 + 256 + 8) units of the total); then one row
        4,096 times with u = (i + 1/2) / 4,096: every token drawn
        within 2 of 4,096 times its probability (a stratified draw: any
        wrong weight or threshold shows).
Bench:  64 rows of GPT-2's 50,257 logits, k = 50, T = 0.8: time against
        what a PyTorch user writes (torch.topk, softmax of the top k over T,
        torch.multinomial, the index mapped back), timed in alternation, and
        the logits' GB/s against the copy bandwidth of the same run.
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS, MAX_V = 256, 65536
U32 = 2.0**-24


def load_kernel():
    import pycuda.driver as cuda

    f = cb.compile(KERNEL_FILE).get_function("sample_topk")
    f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, 2 * MAX_V)
    return f.prepare("PPPiif")


# --8<-- [start:launch]
def sample(kernel, logits, u, out, k: int, temperature: float) -> None:
    """out[r] = the token drawn from row r of logits (B, V) bf16 (uint16),
    V <= 65,536, with u (B,) float32 in [0, 1); out (B,) int32; the top k
    logits (ties at the k-th kept), temperature > 0."""
    cb.check_array("logits", logits, dtype=np.uint16, ndim=2, on_device=True)
    b = cb.check_size("logits rows", logits.shape[0], high=2**31 - 1)
    v = cb.check_size("logits columns (V)", logits.shape[1], high=MAX_V)
    cb.check_array("u", u, dtype=np.float32, shape=(b,), on_device=True)
    cb.check_array("out", out, dtype=np.int32, shape=(b,), on_device=True)
    cb.check_size("k", k, high=v)
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature: a finite number above 0, got {temperature}")
    kernel.prepared_call((b, 1, 1), (THREADS, 1, 1), logits.gpudata, u.gpudata, out.gpudata, np.int32(v),
                         np.int32(k), np.float32(1 / temperature), shared_size=2 * v)
# --8<-- [end:launch]


def reference(x64, k, temperature):
    """Per row: the kept mask, and the running sum of weights (float64)."""
    kth = -np.sort(-x64, axis=1)[:, k - 1:k]
    kept = x64 >= kth
    w = np.where(kept, np.exp((x64 - x64.max(1, keepdims=True)) / temperature), 0.0)
    return kept, np.cumsum(w, axis=1)


def check_draws(tag, picks, u, x64, k, temperature):
    kept, cum = reference(x64, k, temperature)
    b, v = x64.shape
    total = cum[:, -1]
    tol = (math.ceil(v / THREADS) + THREADS + 8) * U32 * total
    rows = np.arange(b)
    ok_range = (picks >= 0) & (picks < v)
    p = np.clip(picks, 0, v - 1)
    lo = np.where(p > 0, cum[rows, p - 1], 0.0)
    goal = u.astype(np.float64) * total
    good = ok_range & kept[rows, p] & (lo - tol <= goal) & (goal <= cum[rows, p] + tol)
    bad = np.where(~good)[0]
    cb.report_check(cb.expect(f"{tag}: every draw kept and where u falls", bad.size == 0,
                              "all" if bad.size == 0 else
                              f"{bad.size} of {b} rows wrong, e.g. row {bad[0]}: token {picks[bad[0]]}"))


def run_rows(kernel, b, v, k, temperature, rng):
    from pycuda import gpuarray

    x16 = to_bf16((2 * rng.standard_normal((b, v))).astype(np.float32))
    u = rng.random(b).astype(np.float32)
    xg, ug = gpuarray.to_gpu(x16), gpuarray.to_gpu(u)
    out = gpuarray.empty(b, np.int32)
    out.fill(np.int32(-1))                           # a row not written shows as -1
    sample(kernel, xg, ug, out, k, temperature)
    check_draws(f"V={v} k={k} T={temperature}", out.get(), u, from_bf16(x16).astype(np.float64), k, temperature)
    return xg, ug, out


def run_stratified(kernel, v, k, temperature, rng, n=4096):
    from pycuda import gpuarray

    x16 = to_bf16((2 * rng.standard_normal((1, v))).astype(np.float32))
    xg = gpuarray.to_gpu(np.repeat(x16, n, axis=0))
    u = ((np.arange(n) + 0.5) / n).astype(np.float32)
    out = gpuarray.empty(n, np.int32)
    out.fill(np.int32(-1))
    sample(kernel, xg, gpuarray.to_gpu(u), out, k, temperature)
    picks = out.get()
    kept, cum = reference(from_bf16(x16).astype(np.float64), k, temperature)
    prob = np.diff(np.concatenate([[0.0], cum[0]])) / cum[0, -1]
    counts = np.bincount(np.clip(picks, 0, v - 1), minlength=v) * (picks >= 0).all()
    worst = float(np.abs(counts - n * prob).max())
    cb.report_check(cb.expect(f"stratified V={v} k={k} T={temperature}: counts within 2 of {n} p", worst <= 2,
                              f"worst {worst:.2f}"))


def bench(kernel, seed):
    import torch

    rng = np.random.default_rng(seed)
    b, v, k, t = 64, 50257, 50, 0.8
    xg, ug, out = run_rows(kernel, b, v, k, t, rng)
    tx = torch.from_numpy(from_bf16(xg.get())).cuda().to(torch.bfloat16)

    def torch_sample():
        vals, idx = torch.topk(tx, k, dim=-1)
        probs = torch.softmax(vals.float() / t, dim=-1)
        return idx.gather(-1, torch.multinomial(probs, 1))

    evidence.benchmark(f"sample top-{k} B={b} V={v}", lambda: sample(kernel, xg, ug, out, k, t),
                       bytes_moved=xg.nbytes, ceiling=("device-to-device copy", cb.ceiling()),
                       baseline=("torch.topk, softmax, torch.multinomial", torch_sample))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernel = load_kernel()
    rng = np.random.default_rng(args.seed)
    for v in (1, 7, 256, 1000, 50257):
        for k in sorted({1, min(5, v), min(50, v), v}):
            for t in (0.7, 1.0):
                run_rows(kernel, 64, v, k, t, rng)
    for v, k in ((256, 256), (1000, 50), (50257, 50)):
        run_stratified(kernel, v, k, 1.0, rng)
    if args.bench:
        bench(kernel, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
