"""Attention backward, FlashAttention-2's way, in bf16 on mma.sync.

Draft for Part IV ("Attention backward"), not yet a listing, and not yet
run on a GPU: run it from the repository root with PYTHONPATH=code. Given
Q, K, V, the forward's output O and its row statistics, and dO, it writes
dQ, dK and dV: attn_bwd_delta (delta_i = dO_i . O_i), then attn_bwd_kv (a
block per 64 keys, walking the query tiles: dK and dV in registers, dQ
added to a float32 buffer with atomics), then attn_bwd_dq_cast. attn_lse
recomputes the forward's row statistics, which the book's forward kernel
does not keep.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/attention_backward.py [--seed S] [--bench]
Checks: both ways of making dQ, at B x H x S x D = 1x1x1x64, 1x2x65x64, 2x2x200x128, 1x1x1000x128,
        1x2x4096x64 (sizes below a tile, past one, odd), causal and not:
        the row statistics against float64; dQ, dK, dV against float64
        from the same bf16 inputs (O from the book's forward kernel), each
        tensor's worst element and norm-wise error at most PEER times
        PyTorch's bf16 SDPA backward's on the same inputs (a same-precision
        peer: a dropped tile or row, or a wrong mask, is far outside it);
        the atomic-free way's dQ twice, bitwise equal.
Bench:  B = 8, H = 16, S = 4096, D = 64 and 128, causal and not: the
        backward, both ways (atomic dQ: delta, the key blocks, the cast, the
        dQ buffer's memset included; dQ by a pass: delta, the key blocks,
        the query blocks) in TFLOP/s, counting 2.5 times the forward's 4 B H S^2 D
        (half, causal), against SDPA's backward with its FlashAttention-2
        backend and with its cuDNN backend, each timed in alternation.
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from attention import flash_bf16  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS, BK, BQ = 128, 64, 64
LOG2E = 1.4426950408889634
PEER = 2.0
SHAPES = [(1, 1, 1, 64), (1, 2, 65, 64), (2, 2, 200, 128), (1, 1, 1000, 128), (1, 2, 4096, 64)]
BENCH = [(8, 16, 4096, 64), (8, 16, 4096, 128)]
FORWARD = {64: "flash_d64_m1_n64", 128: "flash_d128_m2_n64"}


def kv_shared(d: int) -> int:
    return (2 * BK + 2 * BQ) * 2 * d + BK * BQ * 2 + 2 * BQ * 4


def dq_shared(d: int) -> int:
    return (2 * BQ + 2 * BK) * 2 * d


def lse_shared(d: int) -> int:
    return (BQ + BK) * 2 * d


def load_kernels():
    import pycuda.driver as cuda

    module = cb.compile(KERNEL_FILE)

    def big(name: str, shared: int):               # a kernel that asks for more than 48 KiB
        f = module.get_function(name)
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        return f

    k = {}
    for d in (64, 128):
        k["delta", d] = module.get_function(f"attn_bwd_delta_d{d}").prepare("PPPq")
        k["lse", d] = big(f"attn_lse_d{d}", lse_shared(d)).prepare("PPPifi")
        k["kv", d] = big(f"attn_bwd_kv_d{d}", kv_shared(d)).prepare("PPPPPPPPPiffi")
        k["kv_nodq", d] = big(f"attn_bwd_kv_nodq_d{d}", kv_shared(d)).prepare("PPPPPPPPiffi")
        k["dq", d] = big(f"attn_bwd_dq_d{d}", dq_shared(d)).prepare("PPPPPPPiffi")
    k["cast"] = module.get_function("attn_bwd_dq_cast").prepare("PPqf")
    return k


def _shape(name, x):
    cb.check_array(name, x, dtype=np.uint16, ndim=4, on_device=True, alignment=16)
    b, h, s, d = x.shape
    if d not in (64, 128):
        raise ValueError(f"{name}: head dimension 64 or 128, got {d}")
    return b, h, s, d


def row_stats(kernels, q, k, lse2, causal: bool) -> None:
    """lse2[b, h, i] = c max_j S_ij + log2(sum_j 2^(c S_ij - c max)), c = log2(e)/sqrt(D)."""
    b, h, s, d = _shape("q", q)
    cb.check_array("k", k, dtype=np.uint16, shape=q.shape, on_device=True, alignment=16)
    cb.check_array("lse2", lse2, dtype=np.float32, shape=(b, h, s), on_device=True)
    kernels["lse", d].prepared_call((cb.ceil_div(s, BQ), b * h, 1), (THREADS, 1, 1), q.gpudata, k.gpudata,
                                    lse2.gpudata, np.int32(s), np.float32(LOG2E / math.sqrt(d)),
                                    np.int32(causal), shared_size=lse_shared(d))


# --8<-- [start:backward]
def backward(kernels, q, k, v, o, do, lse2, dq, dk, dv, work, causal: bool, method: str = "atomic") -> None:
    """dq, dk, dv: the gradients of attention(q, k, v) (o its output, lse2
    its row statistics) against do. All B x H x S x D bf16 (uint16) but
    lse2 (B x H x S float32); work: float32, B x H x S x D + B x H x S (the
    dQ buffer and delta). method: "atomic" (dQ added by every key block
    with atomics) or "pass" (dQ by a second kernel over the keys, no
    atomics)."""
    import pycuda.driver as cuda

    b, h, s, d = _shape("q", q)
    for name, x in (("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
        cb.check_array(name, x, dtype=np.uint16, shape=q.shape, on_device=True, alignment=16)
    cb.check_array("lse2", lse2, dtype=np.float32, shape=(b, h, s), on_device=True)
    n = b * h * s * d
    cb.check_array("work", work, dtype=np.float32, shape=(n + b * h * s,), on_device=True)
    if method not in ("atomic", "pass"):
        raise ValueError(f"method: expected 'atomic' or 'pass', got {method!r}")
    dq_acc, delta = int(work.gpudata), int(work.gpudata) + 4 * n
    rows = b * h * s
    c, scale = np.float32(LOG2E / math.sqrt(d)), np.float32(1 / math.sqrt(d))
    kernels["delta", d].prepared_call((cb.ceil_div(rows, 4), 1, 1), (THREADS, 1, 1), do.gpudata, o.gpudata,
                                      delta, np.int64(rows))
    if method == "pass":
        kernels["kv_nodq", d].prepared_call((cb.ceil_div(s, BK), b * h, 1), (THREADS, 1, 1), q.gpudata,
                                            k.gpudata, v.gpudata, do.gpudata, lse2.gpudata, delta, dk.gpudata,
                                            dv.gpudata, np.int32(s), c, scale, np.int32(causal),
                                            shared_size=kv_shared(d))
        kernels["dq", d].prepared_call((cb.ceil_div(s, BQ), b * h, 1), (THREADS, 1, 1), q.gpudata, k.gpudata,
                                       v.gpudata, do.gpudata, lse2.gpudata, delta, dq.gpudata, np.int32(s), c,
                                       scale, np.int32(causal), shared_size=dq_shared(d))
        return
    cuda.memset_d32(dq_acc, 0, n)
    kernels["kv", d].prepared_call((cb.ceil_div(s, BK), b * h, 1), (THREADS, 1, 1), q.gpudata, k.gpudata,
                                   v.gpudata, do.gpudata, lse2.gpudata, delta, dq_acc, dk.gpudata, dv.gpudata,
                                   np.int32(s), np.float32(LOG2E / math.sqrt(d)), np.float32(1 / math.sqrt(d)),
                                   np.int32(causal), shared_size=kv_shared(d))
    kernels["cast"].prepared_call((cb.ceil_div(cb.ceil_div(n, 2), 256), 1, 1), (256, 1, 1), dq_acc, dq.gpudata,
                                  np.int64(n), np.float32(1 / math.sqrt(d)))
# --8<-- [end:backward]


def reference(q, k, v, do, o_ours, causal):
    """Float64 gradients from the same bf16 inputs, delta from the O our
    forward produced (as the kernel uses it), and the row statistics."""
    d = q.shape[-1]
    sc = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    if causal:
        s = q.shape[2]
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    m = sc.max(-1, keepdims=True)
    e = np.exp(sc - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    p = e / e.sum(-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    delta = (do * o_ours).sum(-1, keepdims=True)
    ds = p * (dp - delta)
    dq = ds @ k / math.sqrt(d)
    dk = np.swapaxes(ds, -1, -2) @ q / math.sqrt(d)
    return lse * LOG2E, dq, dk, dv


def torch_grads(torch, q16, k16, v16, do16, causal, backend=None):
    """PyTorch's bf16 SDPA backward on the same inputs, as float64 arrays."""
    from torch.nn.attention import sdpa_kernel

    t = [torch.from_numpy(from_bf16(a)).cuda().to(torch.bfloat16).requires_grad_() for a in (q16, k16, v16)]
    tdo = torch.from_numpy(from_bf16(do16)).cuda().to(torch.bfloat16)
    ctx = sdpa_kernel(backend) if backend is not None else _null()
    with ctx:
        o = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal)
        g = torch.autograd.grad(o, t, tdo)
    return [x.float().cpu().numpy().astype(np.float64) for x in g]


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def run_shape(kernels, fwd, shape, causal, rng, torch):
    from pycuda import gpuarray

    b, h, s, d = shape
    q16, k16, v16, do16 = (to_bf16(rng.standard_normal(shape, dtype=np.float32)) for _ in range(4))
    g = {n: gpuarray.to_gpu(a) for n, a in (("q", q16), ("k", k16), ("v", v16), ("do", do16))}
    g["o"] = gpuarray.empty_like(g["q"])
    flash_bf16.attention(fwd, FORWARD[d], g["q"], g["k"], g["v"], g["o"], causal)
    lse2 = gpuarray.empty((b, h, s), np.float32)
    row_stats(kernels, g["q"], g["k"], lse2, causal)
    outs = {n: gpuarray.empty_like(g["q"]) for n in ("dq", "dk", "dv")}
    work = gpuarray.empty(b * h * s * d + b * h * s, np.float32)
    # Float64 for every head of the small shapes; at the benchmark's, for
    # the first and the last head (the whole float64 reference would take
    # minutes), with PyTorch's bf16 gradients standing in for the rest.
    heads = [(i, j) for i in range(b) for j in range(h)] if b * h * s * s <= 1 << 24 else [(0, 0), (b - 1, h - 1)]
    pick = lambda a: np.concatenate([a[i:i + 1, j:j + 1] for i, j in heads], axis=1)  # noqa: E731
    x64 = [pick(from_bf16(a).astype(np.float64)) for a in (q16, k16, v16, do16)]
    o64 = pick(from_bf16(g["o"].get()).astype(np.float64))
    want_lse, *want = reference(*x64[:3], x64[3], o64, causal)
    tag = f"{b}x{h}x{s}x{d}{' causal' if causal else ''}"
    cb.report_check(cb.compare(f"lse2 {tag}", pick(lse2.get()[..., None])[..., 0], want_lse, k=64,
                               scale=np.abs(want_lse) + 1))
    full = torch_grads(torch, q16, k16, v16, do16, causal) if torch is not None else None
    peers = [pick(a) for a in full] if full is not None else None
    for method in ("atomic", "pass"):
        for x in outs.values():
            x.fill(np.uint16(0x7FC0))                # bf16 NaN: every element must be written
        backward(kernels, g["q"], g["k"], g["v"], g["o"], g["do"], lse2, outs["dq"], outs["dk"], outs["dv"], work,
                 causal, method)
        every = [from_bf16(outs[n].get()).astype(np.float64) for n in ("dq", "dk", "dv")]
        check_grads(f"{method} {tag}", [pick(a) for a in every], want, peers)
        if full is not None and len(heads) < b * h:     # the other heads, against PyTorch's
            for i, name in enumerate(("dq", "dk", "dv")):
                allowed = 2 * PEER * np.abs(peers[i] - want[i]).max()
                worst = np.abs(every[i] - full[i]).max()
                cb.report_check(cb.expect(f"{name} {method} {tag}, every head: within {2 * PEER:g}x the "
                                          "checked heads' peer error of PyTorch's", worst <= allowed,
                                          f"worst {worst:.2e}, allowed {allowed:.2e}"))
        if method == "pass":
            first = outs["dq"].get()
            backward(kernels, g["q"], g["k"], g["v"], g["o"], g["do"], lse2, outs["dq"], outs["dk"], outs["dv"],
                     work, causal, method)
            same = np.array_equal(first, outs["dq"].get())
            cb.report_check(cb.expect(f"dq {method} {tag}: two runs, the same bits", same,
                                      "bitwise equal" if same else "they differ"))
    return g, lse2, outs, work


def check_grads(tag, got, want, peers):
    for i, name in enumerate(("dq", "dk", "dv")):
        err = np.abs(got[i] - want[i])
        finite = bool(np.all(np.isfinite(got[i])))
        if peers is None:
            ok = finite and err.max() <= 0.05 * np.abs(want[i]).max() + 1e-6
            detail = f"worst {err.max():.2e} (no PyTorch for a peer; 5% of the largest element allowed)"
        else:
            perr = np.abs(peers[i] - want[i])
            ok = finite and err.max() <= PEER * perr.max() and np.linalg.norm(err) <= PEER * np.linalg.norm(perr)
            detail = (f"worst {err.max():.2e} against PyTorch's {perr.max():.2e}, norm-wise "
                      f"{np.linalg.norm(err):.2e} against {np.linalg.norm(perr):.2e}")
        cb.report_check(cb.expect(f"{name} {tag}: within {PEER:g}x PyTorch bf16's error", ok, detail))


def bench(kernels, fwd, seed, torch):
    from torch.nn.attention import SDPBackend

    rng = np.random.default_rng(seed)
    ceiling = tc_gemm.tensor_core_ceiling(None, seed, 100.0)   # cuBLAS bf16 at 8192^3, this run
    for shape in BENCH:
        for causal in (False, True):
            g, lse2, outs, work = run_shape(kernels, fwd, shape, causal, rng, torch)
            b, h, s, d = shape
            flops = int(2.5 * 4 * b * h * s * s * d / (2 if causal else 1))
            def ours(method, g=g, lse2=lse2, outs=outs, work=work, causal=causal):
                return lambda: backward(kernels, g["q"], g["k"], g["v"], g["o"], g["do"], lse2, outs["dq"],
                                        outs["dk"], outs["dv"], work, causal, method)
            t = [torch.from_numpy(from_bf16(g[n].get())).cuda().to(torch.bfloat16).requires_grad_()
                 for n in ("q", "k", "v")]
            tdo = torch.from_numpy(from_bf16(g["do"].get())).cuda().to(torch.bfloat16)
            for method, bname, backend in (("atomic", "FlashAttention-2", SDPBackend.FLASH_ATTENTION),
                                           ("atomic", "cuDNN", SDPBackend.CUDNN_ATTENTION),
                                           ("pass", "FlashAttention-2", SDPBackend.FLASH_ATTENTION)):
                from torch.nn.attention import sdpa_kernel
                with sdpa_kernel(backend):
                    o = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal)
                fn = lambda o=o: torch.autograd.grad(o, t, tdo, retain_graph=True)  # noqa: E731
                tag = f"B={b} H={h} S={s} D={d}{' causal' if causal else ''}"
                evidence.benchmark(f"attention backward ({method} dQ) {tag} vs SDPA {bname}", ours(method),
                                   flops=flops,
                                   working_set_bytes=2 * 8 * b * h * s * d,
                                   ceiling=ceiling,
                                   baseline=(f"SDPA {bname} backward", fn))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    fwd = flash_bf16.load_kernels()
    torch = cb.torch_cuda()
    rng = np.random.default_rng(args.seed)
    for shape in SHAPES:
        for causal in (False, True):
            run_shape(kernels, fwd, shape, causal, rng, torch)
    if args.bench and torch is not None:
        bench(kernels, fwd, args.seed, torch)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
