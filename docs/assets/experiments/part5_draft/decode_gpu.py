"""Part V's token loop on the book's kernels: the GPU side of decode_step's interface.

Draft for Part V ("Serving a model"); written on a CPU, never run. It
needs a GPU and PyTorch, and reads part4_draft's training_kernels (the
embedding) and training_gpu (the tape of buffers).

BookDecodeOps implements decode_step.NumpyDecodeOps's methods with the
book's kernels in bf16: chapter 14's LayerNorm, part5_draft's gemv (the
weights stored (N, K), transposed once at load), decode_kernels.cu's bias
tail and q/k/v split with the cache append, decode_attention over a paged
cache (pages of 16 keys, the block table filled in order). The check:
every position's logits against float64 (NumpyDecodeOps on the same bf16
weights), norm-wise, at most twice PyTorch bf16's error on the same
position through the whole-sequence forward; then tokens a second from a
greedy loop.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part5_draft/decode_gpu.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "part4_draft"))
sys.path.insert(0, str(HERE.parents[3] / "code"))
import cudabook as cb  # noqa: E402
import decode_attention as da  # noqa: E402
import decode_step as ds  # noqa: E402
import gemv as gv  # noqa: E402
import reference_train as ref  # noqa: E402
import training_kernels as tk  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from training_gpu import Tape  # noqa: E402

PAGE = 16
TAILS = {"bias": 0, "gelu": 1, "residual": 2}


class BookDecodeOps:
    """decode_step's interface on the book's kernels."""

    def __init__(self, cfg, batch: int):
        from softmax_norm import layernorm as ln

        self.cfg, self.info, self.ln = cfg, cb.init(), ln
        mod = cb.compile(HERE / "decode_kernels.cu")
        self.k = {"gemv": gv.load_kernels(), "attn": da.load_kernels(), "tk": tk.load_kernels(),
                  "ln": ln.load_kernels(), "tail": mod.get_function("bias_tail").prepare("PPPiii"),
                  "split": mod.get_function("split_qkv").prepare("PPPPPiiiiii")}
        self.tape = Tape()
        self.batch = batch

    def _e(self, *shape):
        return self.tape(shape, np.uint16)

    def embed(self, tok, pos, wte, wpe):
        """tok: (B,) int32 on the device (the last step's draws) or the host."""
        from pycuda import gpuarray

        b, c = len(tok), wte.shape[1]
        if not isinstance(tok, gpuarray.GPUArray):
            tok = gpuarray.to_gpu(np.ascontiguousarray(tok, np.int32))
        x = self._e(b, c)
        # One position for every row: wpe from row pos, T = 1.
        self.k["tk"]["embed_fwd"].prepared_call((cb.ceil_div(b * c // 8, 256), 1, 1), (256, 1, 1), tok.gpudata,
                                                wte.gpudata, int(wpe.gpudata) + 2 * pos * c, x.gpudata,
                                                np.int32(b), np.int32(1), np.int32(c))
        return x

    def layernorm(self, x, g, b):
        m, c = x.shape
        y, mean, rstd = self._e(m, c), self.tape((m,), np.float32), self.tape((m,), np.float32)
        self.ln.layernorm(self.k["ln"], x, g, b, y, mean, rstd)
        return y

    def _tail(self, y, bias, tail, res=None):
        b, n = y.shape
        self.k["tail"].prepared_call((cb.ceil_div(b * n, 256), 1, 1), (256, 1, 1), y.gpudata, bias.gpudata,
                                     (res if res is not None else y).gpudata, np.int32(b), np.int32(n),
                                     np.int32(TAILS[tail]))

    def linear(self, x, w, bias, tail="bias", res=None):
        """w: the serving copy, (N, K)."""
        y = self._e(x.shape[0], w.shape[0])
        gv.gemv(self.k["gemv"], "bf16", x, w, y)
        self._tail(y, bias, tail, res)
        return y

    def qkv(self, a, w, bias, cache, layer, pos, h):
        b, c = a.shape
        qkv = self.linear(a, w, bias)
        q = self._e(b, h, c // h)
        table = cache["table"]
        self.k["split"].prepared_call((cb.ceil_div(b * c, 256), 1, 1), (256, 1, 1), qkv.gpudata, q.gpudata,
                                      cache[layer + "k"].gpudata, cache[layer + "v"].gpudata, table.gpudata,
                                      np.int32(table.shape[1]), np.int32(PAGE.bit_length() - 1), np.int32(b),
                                      np.int32(h), np.int32(c // h), np.int32(pos))
        return q

    def decode_attention(self, q, cache, layer, length):
        b, h, d = q.shape
        span = da.fill_span(b, h, length, self.info.sm_count)
        o = self._e(b, h, d)
        work = self.tape((b * h * cb.ceil_div(self.cfg.context, 128) * (d + 2),), np.float32)
        da.decode_attention(self.k["attn"], q, cache[layer + "k"], cache[layer + "v"], o, work, span,
                            cache["table"], length)
        return o.reshape(b, h * d)

    def logits(self, x, wte):
        y = self._e(x.shape[0], wte.shape[0])
        gv.gemv(self.k["gemv"], "bf16", x, wte, y)
        return y


def serving_weights(w32: dict) -> dict:
    """The weights on the device in bf16, each product's stored (N, K)."""
    from pycuda import gpuarray

    out = {}
    for k, v in w32.items():
        a = v.T if k.endswith("_wt") else v          # w_t (K, N) -> W (N, K), once
        out[k] = gpuarray.to_gpu(to_bf16(np.ascontiguousarray(a, np.float32)))
    return out


def new_cache(cfg, b: int) -> dict:
    from pycuda import gpuarray

    d, n = cfg.width // cfg.heads, cb.ceil_div(cfg.context, PAGE)
    shape = (b * n, cfg.heads, PAGE, d)
    cache = {f"h{i}.{kv}": gpuarray.zeros(shape, np.uint16) for i in range(cfg.layers) for kv in "kv"}
    cache["table"] = gpuarray.to_gpu(np.arange(b * n, dtype=np.int32).reshape(b, n))   # pages in order
    return cache


def check(cfg, b=2, positions=24, seed=0) -> int:
    """Every position's logits against float64 beside PyTorch bf16's error."""
    import torch
    import torch.nn.functional as F

    w64 = {k: from_bf16(to_bf16(v)).astype(np.float64) for k, v in ref.init_weights(cfg).items()}
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab, (b, positions))
    ops, dev, cache = BookDecodeOps(cfg, b), serving_weights({k: v.astype(np.float32) for k, v in w64.items()}), \
        new_cache(cfg, b)
    np_ops, np_cache = ds.NumpyDecodeOps(), ds.new_cache(cfg, b)
    tp = {k: torch.tensor(v, device="cuda", dtype=torch.float32) for k, v in w64.items()}
    bad = 0
    for pos in range(positions):
        ops.tape.rewind()
        got = from_bf16(ds.step(ops, dev, cache, tokens[:, pos], pos, cfg).get()).astype(np.float64)
        want = ds.step(np_ops, w64, np_cache, tokens[:, pos], pos, cfg)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            peer = ref.forward(torch, F, tp, torch.from_numpy(tokens[:, :pos + 1]).cuda(), cfg)[:, -1]
        e_ours = np.linalg.norm(got - want) / np.linalg.norm(want)
        e_torch = np.linalg.norm(peer.double().cpu().numpy() - want) / np.linalg.norm(want)
        ok = e_ours <= 2 * e_torch + 1e-6
        bad += not ok
        if not ok or pos in (0, positions - 1):
            print(f"{'ok  ' if ok else 'FAIL'} position {pos}: ours {e_ours:.2e}, PyTorch bf16 {e_torch:.2e}")
    return bad


def generate(cfg, b: int, steps: int) -> None:
    """A greedy loop on the device: each step's draw is the next step's
    token, without a trip to the host but for the timing's sync."""
    from pycuda import gpuarray

    ops, dev, cache = BookDecodeOps(cfg, b), serving_weights(ref.init_weights(cfg)), new_cache(cfg, b)
    sampler = __import__("sample_topk")
    sk = sampler.load_kernels()
    tok = gpuarray.to_gpu(np.zeros(b, np.int32))
    out = gpuarray.empty(b, np.int32)
    t0 = time.perf_counter()
    for pos in range(steps):
        ops.tape.rewind()
        logits = ds.step(ops, dev, cache, tok, pos, cfg)
        sampler.sample(sk, logits, None, out, 1, 1.0, seed=0, step=pos)     # k = 1: greedy
        tok, out = out, tok
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    dt = time.perf_counter() - t0
    print(f"B = {b}: {steps} steps in {dt * 1e3:.1f} ms, {b * steps / dt:,.0f} tokens/s (Python issues every launch)")


def main() -> int:
    small = ref.Config(layers=2, heads=4, width=256, context=64, batch=2)
    bad = check(small)
    cfg = ref.Config()
    for b in (1, 8):
        generate(cfg, b, 64)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
