"""Softmax and cross-entropy, forward and backward, in one pass over the logits.

Draft for Part IV ("Backpropagation on the GPU"), not yet a listing: run it
from the repository root with PYTHONPATH=code. For N rows of bf16 logits
(V classes, row stride Vp, a multiple of 8) and one target class a row,
cross_entropy_fwd_bwd writes each row's loss (float32) and the gradient of
the mean loss with respect to the logits (bf16), reading each row from
memory once and never writing the probabilities.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/cross_entropy.py [--seed S] [--bench]
Checks: N x V (Vp) = 1x1 (8), 3x7 (8), 5x256 (256), 4x1000 (1000),
        7x8193 (8200), 2x50257 (50304), targets at random and in the first
        and last class; every loss and every gradient element (padding
        included, which must be 0) against float64 from the same
        bf16-rounded logits. Bound for a gradient element g = (p - [j = t]) s:
        one bf16 rounding of g, plus p s (|x_j - m| + h + 8) float32 units,
        where h is the chain of additions and rescalings behind the row's
        sum (3 per piece a thread folds in, 2 per level of the reductions);
        for a loss, (|loss| + |m| + |x_t| + h + 8) float32 units.
Bench:  at N = 8192, V = 50257, Vp = 50304 (GPT-2's vocabulary as llm.c
        pads it; 824 MB of logits), time and GB/s (the logits read once, the
        gradient written once) against the copy bandwidth of the same run,
        timed in alternation with: PyTorch eager (cross_entropy on the
        logits as float32, then autograd's gradient, as a bf16 model's loss
        runs under autocast), torch.compile (default mode) of the same loss
        and its gradient written out as one function, and liger-kernel's
        LigerCrossEntropyLoss where it imports (its Triton kernel writes the
        gradient in the forward pass, over the logits).
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
THREADS = 1024
SHAPES = [(1, 1, 8), (3, 7, 8), (5, 256, 256), (4, 1000, 1000), (7, 8193, 8200), (2, 50257, 50304)]
BENCH = (8192, 50257, 50304)
U32, U_BF16 = 2.0**-24, 2.0**-8


def load_kernel():
    import pycuda.driver as cuda

    f = cb.compile(KERNEL_FILE).get_function("cross_entropy_fwd_bwd")
    f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, 2 * BENCH[2])
    return f.prepare("PPPPiif")


def max_row_bytes():
    return 2 * BENCH[2]


# --8<-- [start:launch]
def cross_entropy(kernel, logits, targets, losses, dlogits, V: int, scale: float) -> None:
    """losses[r] = cross-entropy of row r against targets[r]; dlogits = the
    gradient of scale * sum(losses) with respect to the logits (0 in the
    padding). logits, dlogits: (N, Vp) bf16 bit patterns (uint16) on the
    GPU, Vp a multiple of 8 and at least V; targets: (N,) int32 in [0, V);
    losses: (N,) float32."""
    cb.check_array("logits", logits, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    n, vp = logits.shape
    cb.check_size("logits rows", n)
    if vp % 8:
        raise ValueError(f"logits: the row stride must be a multiple of 8 (16-byte pieces), got {vp}")
    if not 1 <= V <= vp:
        raise ValueError(f"V: expected 1 <= V <= the row stride {vp}, got {V}")
    if 2 * vp > max_row_bytes():
        raise ValueError(f"logits: a row of {vp} bf16 values does not fit the {max_row_bytes():,} bytes of "
                         "shared memory the kernel asks for")
    cb.check_array("dlogits", dlogits, dtype=np.uint16, shape=(n, vp), on_device=True, alignment=16)
    cb.check_array("targets", targets, dtype=np.int32, shape=(n,), on_device=True)
    cb.check_array("losses", losses, dtype=np.float32, shape=(n,), on_device=True)
    kernel.prepared_call((n, 1, 1), (THREADS, 1, 1), logits.gpudata, targets.gpudata, losses.gpudata,
                         dlogits.gpudata, np.int32(V), np.int32(vp), np.float32(scale), shared_size=2 * vp)
# --8<-- [end:launch]


def inputs(n, V, vp, rng, where="random"):
    x = np.zeros((n, vp), np.float32)
    x[:, :V] = 2 * rng.standard_normal((n, V), dtype=np.float32)
    t = {"random": rng.integers(0, V, n), "first": np.zeros(n), "last": np.full(n, V - 1)}[where].astype(np.int32)
    x16 = to_bf16(x)
    return x16, from_bf16(x16).astype(np.float64), t


def reference(x64, t, V, scale):
    x = x64[:, :V]
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    d = e.sum(axis=1, keepdims=True)
    loss = np.log(d[:, 0]) + m[:, 0] - x[np.arange(len(t)), t]
    g = np.zeros_like(x64)
    g[:, :V] = e / d
    g[np.arange(len(t)), t] -= 1
    return loss, g * scale, m[:, 0]


def chain(vp):
    return 3 * math.ceil(vp / 8 / THREADS) + 2 * 2 * int(math.log2(32))


def check(tag, losses, grad16, x64, t, V, scale):
    n, vp = x64.shape
    loss, g, m = reference(x64, t, V, scale)
    h = chain(vp)
    lb = (np.abs(loss) + np.abs(m) + np.abs(x64[np.arange(n), t]) + h + 8)
    cb.report_check(cb.compare(f"loss {tag}", losses, loss, k=1, scale=lb))
    p = np.zeros_like(x64)
    p[:, :V] = np.exp(x64[:, :V] - m[:, None]) / np.exp(x64[:, :V] - m[:, None]).sum(axis=1, keepdims=True)
    dist = np.zeros_like(x64)
    dist[:, :V] = np.abs(x64[:, :V] - m[:, None])
    carried = p * abs(scale) * (dist + h + 8)                       # float32 units before the rounding
    bound = (np.abs(g) + carried * U32) * U_BF16 / U32 + carried     # and one bf16 rounding of the result
    cb.report_check(cb.compare(f"dlogits {tag}", from_bf16(grad16), g, k=1, scale=bound))


def run_shape(kernel, n, V, vp, rng, where="random"):
    from pycuda import gpuarray

    x16, x64, t = inputs(n, V, vp, rng, where)
    xg, tg = gpuarray.to_gpu(x16), gpuarray.to_gpu(t)
    lg, gg = gpuarray.empty(n, np.float32), gpuarray.empty_like(xg)
    cb.poison(lg)
    gg.fill(np.uint16(0x7FC0))                      # bf16 NaN: every element must be written
    scale = 1.0 / n
    cross_entropy(kernel, xg, tg, lg, gg, V, scale)
    check(f"{n}x{V} ({vp}) targets {where}", lg.get(), gg.get(), x64, t, V, scale)
    return xg, tg, lg, gg


def bench(kernel, seed):
    import torch

    n, V, vp = BENCH
    rng = np.random.default_rng(seed)
    xg, tg, lg, gg = run_shape(kernel, n, V, vp, rng)
    nbytes = 2 * 2 * n * vp
    ceiling = ("device-to-device copy", cb.ceiling())
    ours = lambda: cross_entropy(kernel, xg, tg, lg, gg, V, 1.0 / n)  # noqa: E731
    tx = torch.from_numpy(from_bf16(xg.get()).astype(np.float32)).cuda().to(torch.bfloat16)[:, :V].contiguous()
    tt = torch.from_numpy(tg.get().astype(np.int64)).cuda()

    def eager():
        leaf = tx.detach().requires_grad_()
        loss = torch.nn.functional.cross_entropy(leaf.float(), tt)
        return torch.autograd.grad(loss, leaf)[0]

    def fused(x, t):
        xf = x.float()
        lse = torch.logsumexp(xf, dim=-1)
        loss = (lse - xf.gather(1, t[:, None]).squeeze(1)).mean()
        hot = torch.arange(x.shape[1], device=x.device)[None, :] == t[:, None]
        g = (torch.exp(xf - lse[:, None]) - hot.float()) / x.shape[0]
        return loss, g.to(torch.bfloat16)

    compiled = torch.compile(fused)
    for _ in range(3):
        compiled(tx, tt)
    torch.cuda.synchronize()
    for name, fn in (("PyTorch eager (cross_entropy, autograd)", eager),
                     ("torch.compile default (loss and gradient)", lambda: compiled(tx, tt))):
        evidence.benchmark(f"cross_entropy fwd+bwd vs {name}", ours, bytes_moved=nbytes, ceiling=ceiling,
                           baseline=(name, fn))
    try:
        from liger_kernel.transformers import LigerCrossEntropyLoss
        liger_loss = LigerCrossEntropyLoss()
        lx = tx.clone().requires_grad_()

        def liger():
            lx.grad = None                      # no accumulation kernel between calls
            liger_loss(lx, tt).backward()
        liger()
        evidence.benchmark("cross_entropy fwd+bwd vs liger-kernel", ours, bytes_moved=nbytes, ceiling=ceiling,
                           baseline=("LigerCrossEntropyLoss", liger))
    except Exception as e:                      # a baseline that will not run is said, not hidden
        print(f"liger-kernel not timed: {type(e).__name__}: {e}")


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernel = load_kernel()
    rng = np.random.default_rng(args.seed)
    for n, V, vp in SHAPES:
        run_shape(kernel, n, V, vp, rng)
    for where in ("first", "last"):
        run_shape(kernel, 3, 1000, 1000, rng, where)
    if args.bench:
        bench(kernel, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
