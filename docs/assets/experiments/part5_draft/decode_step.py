"""Part V's token loop as the order of the book's kernels: a prefill, then one token a step against a KV cache; checked on a CPU.

Draft for Part V ("Serving a model"). Decoding runs the model one new
token at a time. The keys and values of every earlier token are kept (the
KV cache), so a step computes only the new token's row: products with one
row (gemv), attention of one query against the cache (decode_attention),
and an append of the new key and value to the cache. This file writes that
loop once, against an interface whose methods are kernels (as Part IV's
training_step.py does), and implements it in float64 with NumPy.

The check: the logits of every step equal those of the whole sequence run
through reference_train.forward (PyTorch's model) at once, to 1e-10, for
a prefill of P tokens and then S steps; with a greedy choice, the tokens
generated equal those of running the full model again at every step.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part5_draft/decode_step.py
        (needs NumPy and PyTorch; a CPU is enough)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "part4_draft"))
import reference_train as ref  # noqa: E402
from training_step import gelu  # noqa: E402

EPS = 1e-5


class NumpyDecodeOps:
    """One method a kernel or two (named in each docstring), float64. The
    cache: per layer, keys and values (B, H, Lmax, D)."""

    def embed(self, tok, pos, wte, wpe):
        """x = wte[tok] + wpe[pos], one row a sequence (training_kernels.embed_forward)."""
        return wte[tok] + wpe[pos]

    def layernorm(self, x, g, b):
        """softmax_norm/layernorm, one row a sequence."""
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + EPS) * g + b

    def linear(self, x, w_t, bias, tail="bias", res=None):
        """part5_draft/gemv (W stored (N, K) = w_t.T, transposed once when
        the model is loaded), then decode_kernels.bias_tail: + bias, then
        GELU or + res."""
        y = x @ w_t + bias
        if tail == "gelu":
            return gelu(y)
        return y + res if tail == "residual" else y

    def qkv(self, a, w_t, bias, cache, layer, pos, h):
        """gemv and bias_tail for c_attn, then decode_kernels.split_qkv: q
        (B, H, D) out, this position's k and v into the cache."""
        qkv = a @ w_t + bias
        b, c = a.shape
        q, k, v = (z.reshape(b, h, c // h) for z in np.split(qkv, 3, axis=1))
        cache[layer + "k"][:, :, pos] = k
        cache[layer + "v"][:, :, pos] = v
        return q

    def decode_attention(self, q, cache, layer, length):
        """part5_draft/decode_attention: q (B, H, D) against the cache's
        first `length` positions; the output as rows (B, H D)."""
        d = q.shape[-1]
        kk, vv = cache[layer + "k"][:, :, :length], cache[layer + "v"][:, :, :length]
        s = np.einsum("bhd,bhld->bhl", q, kk) / math.sqrt(d)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("bhl,bhld->bhd", p, vv).reshape(q.shape[0], -1)

    def logits(self, x, wte):
        """part5_draft/gemv with W = wte itself: (V, C) is already (N, K)."""
        return x @ wte.T


# --8<-- [start:step]
def step(ops, p: dict, cache, tok, pos: int, cfg):
    """The logits (B, V) of the next token after `tok` (B,) at position
    `pos`, every earlier position's keys and values already in the cache;
    appends this position's."""
    x = ops.embed(tok, pos, p["wte"], p["wpe"])                         # (B, C)
    for i in range(cfg.layers):
        q = f"h{i}."
        a = ops.layernorm(x, p[q + "ln1_g"], p[q + "ln1_b"])
        qh = ops.qkv(a, p[q + "attn_wt"], p[q + "attn_b"], cache, q, pos, cfg.heads)
        o = ops.decode_attention(qh, cache, q, pos + 1)
        x = ops.linear(o, p[q + "proj_wt"], p[q + "proj_b"], "residual", res=x)
        a = ops.layernorm(x, p[q + "ln2_g"], p[q + "ln2_b"])
        m = ops.linear(a, p[q + "fc_wt"], p[q + "fc_b"], "gelu")
        x = ops.linear(m, p[q + "fc2_wt"], p[q + "fc2_b"], "residual", res=x)
    x = ops.layernorm(x, p["lnf_g"], p["lnf_b"])
    return ops.logits(x, p["wte"])                                      # tied: the output product reads wte
# --8<-- [end:step]


def new_cache(cfg, b: int) -> dict:
    d = cfg.width // cfg.heads
    shape = (b, cfg.heads, cfg.context, d)
    return {f"h{i}.{kv}": np.zeros(shape) for i in range(cfg.layers) for kv in "kv"}


def check(cfg, prompt_len: int = 5, steps: int = 6, seed: int = 0) -> int:
    import torch
    import torch.nn.functional as F

    w = {k: v.astype(np.float64) for k, v in ref.init_weights(cfg).items()}
    rng = np.random.default_rng(seed)
    for k in w:                                     # off their initial values, so every weight matters
        if k.endswith(("_b", "_g")):
            w[k] = w[k] + 0.1 * rng.standard_normal(w[k].shape)
    b = 2
    tokens = rng.integers(0, cfg.vocab, (b, prompt_len))
    ops, cache = NumpyDecodeOps(), new_cache(cfg, b)
    tp = {k: torch.tensor(v) for k, v in w.items()}
    bad = 0
    for pos in range(prompt_len + steps - 1):       # the prompt fed a token at a time, then the loop
        logits = step(ops, w, cache, tokens[:, pos], pos, cfg)
        full = ref.forward(torch, F, tp, torch.from_numpy(tokens[:, :pos + 1]), cfg)[:, -1].numpy()
        err = float(np.abs(logits - full).max())
        if err > 1e-10:
            print(f"FAIL position {pos}: logits differ from the full forward by {err:.1e}")
            bad += 1
        if pos >= prompt_len - 1:                    # greedy: the next token from our logits
            tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    print(f"{prompt_len + steps - 1} positions: the cached step's logits equal the full forward's "
          f"({'all' if not bad else f'{bad} not'}); generated {tokens[:, prompt_len:].tolist()}")
    return bad


def main() -> int:
    cfg = ref.Config(**{**ref.TINY, "context": 32})
    bad = check(cfg)
    print("ok" if not bad else f"FAILED: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
