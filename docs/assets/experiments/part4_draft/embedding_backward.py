"""The embedding's backward pass: atomics against buckets sorted on the host.

Draft for Part IV ("Backpropagation on the GPU"), not yet a listing: run it
from the repository root with PYTHONPATH=code. dW[v] += the sum of dX[i]
over the positions i whose token is v. embed_bwd_atomic adds with atomics,
in whatever order the threads run; embed_bwd_sorted adds each token's
positions in a fixed order, from buckets the host builds (tokens come from
the host's data loader anyway), and gives the same bits every run.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/embedding_backward.py [--seed S] [--bench]
Checks: N positions x C channels into V rows, at (1, 4, 1), (33, 8, 5),
        (1000, 64, 300), (8192, 768, 50257), tokens drawn Zipf-like (a
        few tokens at many positions, as in text): both kernels, dW
        starting from whole-number values and gradients that are multiples
        of 1/4, so every sum is exact: every element of dW exactly, the rows
        of absent tokens unchanged included. Then gradients ~ N(0, 1): both
        within a float32 sum's bound (a row's count of positions, in units,
        of the sum of |dX|); the sorted kernel also bit for bit against the
        same additions in the same order in float32 on the host, and twice,
        bitwise equal.
        The atomic kernel's two runs are compared too, and the count of
        elements that differ is kept as a fact, not a check.
Bench:  at N = 8192, C = 768, V = 50257: each kernel's time and GB/s (dX
        read once, each touched row of dW read and written) against the copy
        bandwidth of the same run, in alternation with torch.index_add_ (the
        in-place scatter a user would write) and with
        aten.embedding_dense_backward (what autograd runs, which writes a
        whole new V x C gradient); the host's bucketing time beside them.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS = 128
SHAPES = [(1, 4, 1), (33, 8, 5), (1000, 64, 300), (8192, 768, 50257)]
BENCH = (8192, 768, 50257)
MAX_BUCKETS = 65535                             # gridDim.y


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    return {"atomic": module.get_function("embed_bwd_atomic").prepare("PPPii"),
            "sorted": module.get_function("embed_bwd_sorted").prepare("PPPPPi")}


# --8<-- [start:buckets]
def buckets(tok: np.ndarray):
    """The positions grouped by token, each group in increasing order:
    (order, starts, bucket_tok), bucket b holding order[starts[b]:starts[b+1]]
    for token bucket_tok[b]."""
    order = np.argsort(tok, kind="stable").astype(np.int32)
    bucket_tok, first = np.unique(tok[order], return_index=True)
    starts = np.append(first, len(tok)).astype(np.int32)
    return order, starts, bucket_tok.astype(np.int32)
# --8<-- [end:buckets]


def _check_common(dX, dW, C):
    cb.check_array("dX", dX, dtype=np.float32, ndim=2, on_device=True, alignment=16)
    n, c = dX.shape
    if c != C or C % 4:
        raise ValueError(f"dX: expected C columns, C a multiple of 4 (float4s), got {dX.shape}")
    cb.check_array("dW", dW, dtype=np.float32, ndim=2, on_device=True, alignment=16)
    if dW.shape[1] != C:
        raise ValueError(f"dW: expected {C} columns, got {dW.shape[1]}")
    return cb.check_size("dX rows", n)


def backward_atomic(kernels, dX, tok, dW) -> None:
    """dW[tok[i]] += dX[i] for every i, with atomics. dX: (N, C) float32,
    tok: (N,) int32 in [0, V), dW: (V, C) float32, all on the GPU."""
    C = dX.shape[1]
    n = _check_common(dX, dW, C)
    cb.check_array("tok", tok, dtype=np.int32, shape=(n,), on_device=True)
    total = n * (C // 4)
    kernels["atomic"].prepared_call((cb.ceil_div(total, THREADS), 1, 1), (THREADS, 1, 1), dX.gpudata,
                                    tok.gpudata, dW.gpudata, np.int32(n), np.int32(C))


def backward_sorted(kernels, dX, order, starts, bucket_tok, dW) -> None:
    """The same sum, bucket by bucket in a fixed order (see buckets())."""
    C = dX.shape[1]
    n = _check_common(dX, dW, C)
    cb.check_array("order", order, dtype=np.int32, shape=(n,), on_device=True)
    nb = cb.check_size("bucket_tok.size", bucket_tok.size)
    if nb > MAX_BUCKETS:
        raise ValueError(f"bucket_tok: at most {MAX_BUCKETS:,} distinct tokens a launch, got {nb:,}")
    cb.check_array("bucket_tok", bucket_tok, dtype=np.int32, shape=(nb,), on_device=True)
    cb.check_array("starts", starts, dtype=np.int32, shape=(nb + 1,), on_device=True)
    grid = (cb.ceil_div(C // 4, THREADS), nb, 1)
    kernels["sorted"].prepared_call(grid, (THREADS, 1, 1), dX.gpudata, order.gpudata, starts.gpudata,
                                    bucket_tok.gpudata, dW.gpudata, np.int32(C))


def tokens(n, V, rng):
    """Zipf-like tokens: token k drawn with weight 1 / (k + 1)."""
    w = 1.0 / np.arange(1, V + 1)
    return rng.choice(V, size=n, p=w / w.sum()).astype(np.int32)


def reference(dX64, tok, W0):
    out = W0.astype(np.float64)
    np.add.at(out, tok, dX64)
    return out


def in_order(dX, order, starts, btok, W0):
    """What embed_bwd_sorted computes, in float32 and in its order: each
    bucket's rows added one after another, then added to the row of W."""
    out = W0.copy()
    for b, t in enumerate(btok):
        rows = dX[order[starts[b]:starts[b + 1]]]
        out[t] += np.add.accumulate(rows, axis=0, dtype=np.float32)[-1]
    return out


def run_case(kernels, n, C, V, rng):
    from pycuda import gpuarray

    tok = tokens(n, V, rng)
    order, starts, btok = buckets(tok)
    W0 = rng.integers(-8, 9, (V, C)).astype(np.float32)
    dXi = (rng.integers(-8, 9, (n, C)) / 4).astype(np.float32)    # exact sums
    ref = reference(dXi, tok, W0)
    g = {k: gpuarray.to_gpu(a) for k, a in (("dX", dXi), ("tok", tok), ("order", order), ("starts", starts),
                                            ("btok", btok))}
    tag = f"N={n:,} C={C} V={V:,}"
    for kind in ("atomic", "sorted"):
        dW = gpuarray.to_gpu(W0)
        if kind == "atomic":
            backward_atomic(kernels, g["dX"], g["tok"], dW)
        else:
            backward_sorted(kernels, g["dX"], g["order"], g["starts"], g["btok"], dW)
        cb.report_check(cb.compare(f"{kind} {tag}, whole-number sums", dW.get(), ref, k=0))
    dXr = rng.standard_normal((n, C), dtype=np.float32)
    g["dX"] = gpuarray.to_gpu(dXr)
    ref = reference(dXr.astype(np.float64), tok, W0)
    counts = np.bincount(tok, minlength=V)[:, None]
    mag = reference(np.abs(dXr.astype(np.float64)), tok, np.abs(W0))
    runs = {}
    for kind in ("atomic", "sorted"):
        for r in range(2):
            dW = gpuarray.to_gpu(W0)
            if kind == "atomic":
                backward_atomic(kernels, g["dX"], g["tok"], dW)
            else:
                backward_sorted(kernels, g["dX"], g["order"], g["starts"], g["btok"], dW)
            runs[kind, r] = dW.get()
        cb.report_check(cb.compare(f"{kind} {tag}, random gradients", runs[kind, 0], ref, k=1,
                                   scale=(counts + 1) * mag))
    want = in_order(dXr, order, starts, btok, W0)
    cb.report_check(cb.compare(f"sorted {tag}, random gradients, its own order in float32",
                               runs["sorted", 0], want, k=0))
    same = np.array_equal(runs["sorted", 0].view(np.uint32), runs["sorted", 1].view(np.uint32))
    cb.report_check(cb.expect(f"sorted {tag}: two runs, the same bits", same,
                              "bitwise equal" if same else "they differ"))
    differ = int(np.sum(runs["atomic", 0].view(np.uint32) != runs["atomic", 1].view(np.uint32)))
    print(f"atomic {tag}: two runs differ in {differ:,} of {runs['atomic', 0].size:,} elements")
    return tok, g, W0, differ


def bench(kernels, seed):
    import torch
    from pycuda import gpuarray

    n, C, V = BENCH
    rng = np.random.default_rng(seed)
    tok, g, W0, differ = run_case(kernels, n, C, V, rng)
    host = cb.time_cpu(lambda: buckets(tok), budget_ms=50).median_ms
    order, starts, btok = buckets(tok)
    touched = len(btok)
    nbytes = 4 * n * C + 2 * 4 * touched * C
    dW = gpuarray.to_gpu(W0)
    tdX = torch.from_numpy(g["dX"].get()).cuda()
    ttok = torch.from_numpy(tok.astype(np.int64)).cuda()
    tW = torch.from_numpy(W0).cuda()
    ceiling = ("device-to-device copy", cb.ceiling())
    baselines = (("torch.index_add_", lambda: tW.index_add_(0, ttok, tdX)),
                 ("aten.embedding_dense_backward",
                  lambda: torch.ops.aten.embedding_dense_backward(tdX, ttok, V, -1, False)))
    for kind, fn in (("atomic", lambda: backward_atomic(kernels, g["dX"], g["tok"], dW)),
                     ("sorted", lambda: backward_sorted(kernels, g["dX"], g["order"], g["starts"], g["btok"], dW))):
        for bname, bfn in baselines:
            evidence.benchmark(f"embedding backward {kind} vs {bname}", fn, bytes_moved=nbytes, ceiling=ceiling,
                               baseline=(bname, bfn))
    cb.report_facts(host_bucketing_ms=host, distinct_tokens=touched, atomic_bits_differ=differ,
                    largest_bucket=int(np.max(np.diff(starts))))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for n, C, V in SHAPES:
        run_case(kernels, n, C, V, rng)
    if args.bench:
        bench(kernels, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
