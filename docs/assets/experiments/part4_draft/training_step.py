"""Chapter 20's training step, as the order of the book's kernels: checked on a CPU.

Draft for Part IV ("A training step, end to end"). A GPT-2 training step is
some sixty launches a layer's worth of kernels in a fixed order: the
forward pass keeping what the backward pass needs, the backward pass in
reverse with the residual stream's gradient carried down, and the
optimiser. This file writes that order once, against an interface `Ops`
whose methods are the book's kernels, one method a launch (the kernel
each stands for is named in its docstring), in the layouts those kernels
read and write: linear weights as w_t (K x N), q, k and v one head at a
time (B, H, T, D), attention's row statistics in base 2 (lse2).

`NumpyOps` implements the interface in float64 with NumPy, to the letter
of each kernel's contract. Run on a CPU with PyTorch, this file checks
that the order is right: every parameter's gradient after one step
against torch.autograd of reference_train.forward (the model PyTorch
trains) in float64, and AdamW's update against torch.optim.AdamW. The GPU
implementation maps each method to its launcher (part4_chapters.patch's
listings, chapters 14, 16 and 17); it is not written yet.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/training_step.py
        (needs NumPy and PyTorch; a CPU is enough)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_train as ref  # noqa: E402

LOG2E = 1.4426950408889634
EPS = 1e-5


class NumpyOps:
    """The book's kernels, in float64: each method one launch."""

    def embed(self, tok, wte, wpe):
        """x[b t] = wte[tok] + wpe[t] (a gather; the GPU's is a small kernel)."""
        b, t = tok.shape
        return (wte[tok] + wpe[:t]).reshape(b * t, -1)

    def layernorm(self, x, g, b):
        """softmax_norm/layernorm: y, and the row statistics it keeps."""
        mean = x.mean(1)
        rstd = 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(1) + EPS)
        return (x - mean[:, None]) * rstd[:, None] * g + b, mean, rstd

    def linear(self, a, w_t, bias, tail="bias", res=None):
        """transformer/gpt2_block.linear: a @ w_t + bias, then the tail
        (gelu: returns the output and the activation before it, which the
        backward needs; residual: adds res)."""
        pre = a @ w_t + bias
        if tail == "gelu":
            return gelu(pre), pre
        return pre + res if tail == "residual" else pre

    def linear_nt(self, a, w):
        """backprop/linear_backward.grad_x's layout: a @ w.T, w stored
        (N, K) row-major (the tied output embedding reads wte so)."""
        return a @ w.T

    def linear_qkv(self, a, w_t, bias, b, t, h):
        """transformer/gpt2_block.linear_qkv: a @ w_t + bias, written as q,
        k, v one head at a time, (B, H, T, D) each."""
        qkv = a @ w_t + bias
        c = qkv.shape[1] // 3
        return [z.reshape(b, t, h, c // h).transpose(0, 2, 1, 3) for z in np.split(qkv, 3, axis=1)]

    def attention(self, q, k, v):
        """attention/flash_bf16 (causal), keeping lse2: O, and per row
        c m + log2(sum 2^(c s - c m)), c = log2(e) / sqrt(D)."""
        d = q.shape[-1]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        lse = m[..., 0] + np.log(e.sum(-1))
        return (e / e.sum(-1, keepdims=True)) @ v, lse * LOG2E

    def merge_heads(self, o):
        """transformer/gpt2_block.merge_heads: (B, H, T, D) to rows (B T, H D)."""
        b, h, t, d = o.shape
        return o.transpose(0, 2, 1, 3).reshape(b * t, h * d)

    def split_heads(self, y, b, t, h):
        """The inverse, for the gradient of attention's output: rows to
        (B, H, T, D) (a small kernel still to write)."""
        return y.reshape(b, t, h, -1).transpose(0, 2, 1, 3)

    def cross_entropy(self, logits, targets, scale):
        """backprop/cross_entropy: each row's loss and the gradient of
        scale * sum(losses), from one read of the logits."""
        m = logits.max(1, keepdims=True)
        e = np.exp(logits - m)
        d = e.sum(1, keepdims=True)
        losses = np.log(d[:, 0]) + m[:, 0] - logits[np.arange(len(targets)), targets]
        g = e / d
        g[np.arange(len(targets)), targets] -= 1
        return losses, g * scale

    def zeros_like(self, a):
        """A zeroed buffer (a memset on the GPU)."""
        return np.zeros_like(a)

    def mean(self, losses) -> float:
        """The batch's mean loss, on the host (the GPU copies N floats back)."""
        return float(np.mean(losses))

    def grad_x(self, dy, w_t):
        """backprop/linear_backward.grad_x: dy @ w_t.T."""
        return dy @ w_t.T

    def grad_x_gelu(self, dy, w_t, pre):
        """backprop/linear_backward.grad_x_gelu: (dy @ w_t.T) * gelu'(pre)."""
        return (dy @ w_t.T) * gelu_grad(pre)

    def grad_w(self, x, dy):
        """backprop/linear_backward.grad_w: x.T @ dy, the gradient of w_t."""
        return x.T @ dy

    def bias_grad(self, dy):
        """backprop/bias_grad: dy summed down its columns."""
        return dy.sum(0)

    def attention_backward(self, q, k, v, o, do, lse2):
        """attention_backward/flash_backward (dQ by a pass), causal."""
        d = q.shape[-1]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
        mask = np.tril(np.ones(s.shape[-2:], bool))
        p = np.where(mask, np.exp2(s * LOG2E - lse2[..., None]), 0.0)
        dv = np.swapaxes(p, -1, -2) @ do
        dp = do @ np.swapaxes(v, -1, -2)
        delta = (do * o).sum(-1, keepdims=True)
        ds = p * (dp - delta)
        return ds @ k / math.sqrt(d), np.swapaxes(ds, -1, -2) @ q / math.sqrt(d), dv

    def layernorm_backward_add(self, dres, dy, x, g, mean, rstd):
        """training_kernels.layernorm_bwd_add: dres += LayerNorm's dx (in
        place on the GPU), and dgamma, dbeta."""
        xhat = (x - mean[:, None]) * rstd[:, None]
        gy = dy * g
        dx = rstd[:, None] * (gy - gy.mean(1, keepdims=True) - xhat * (gy * xhat).mean(1, keepdims=True))
        return dres + dx, (dy * xhat).sum(0), dy.sum(0)

    def merge_qkv_grad(self, dq, dk, dv):
        """training_kernels.merge_qkv_grad: (B T, 3 H D) from three (B, H, T, D)."""
        return np.concatenate([self.merge_heads(z) for z in (dq, dk, dv)], axis=1)

    def linear_nn(self, a, w):
        """matmul_tc/wgmma_gemm: a @ w, no bias (w stored (K, N) row-major)."""
        return a @ w

    def embed_backward(self, dwte_tied, dx, tok, context):
        """wte's gradient: the tied output product's half (dwte_tied) plus
        backprop/embedding_backward's scatter of dx (sorted: deterministic);
        wpe's: backprop/bias_grad over dx viewed as (B, T C)."""
        b, t = tok.shape
        dwte = dwte_tied.copy()
        np.add.at(dwte, tok.reshape(-1), dx)
        dwpe = np.zeros((context, dx.shape[1]))
        dwpe[:t] = self.bias_grad(dx.reshape(b, t * dx.shape[1])).reshape(t, -1)
        return dwte, dwpe


def gelu(v):
    return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))


def gelu_grad(v):
    k = math.sqrt(2 / math.pi)
    th = np.tanh(k * (v + 0.044715 * v**3))
    return 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v)


# --8<-- [start:forward]
def forward(ops, p: dict, tok, targets, cfg) -> tuple[float, dict]:
    """The mean loss, and what the backward pass needs, kept by name."""
    b, t = tok.shape
    h, L = cfg.heads, cfg.layers
    keep = {}
    x = ops.embed(tok, p["wte"], p["wpe"])
    for i in range(L):
        q = f"h{i}."
        keep[q + "x"] = x                                   # the residual stream entering the layer
        a, keep[q + "mean1"], keep[q + "rstd1"] = ops.layernorm(x, p[q + "ln1_g"], p[q + "ln1_b"])
        keep[q + "a1"] = a
        qh, kh, vh = ops.linear_qkv(a, p[q + "attn_wt"], p[q + "attn_b"], b, t, h)
        o, lse2 = ops.attention(qh, kh, vh)
        keep[q + "qkv"], keep[q + "o"], keep[q + "lse2"] = (qh, kh, vh), o, lse2
        y = ops.merge_heads(o)
        keep[q + "y"] = y
        x = ops.linear(y, p[q + "proj_wt"], p[q + "proj_b"], "residual", res=x)
        keep[q + "x2"] = x
        a, keep[q + "mean2"], keep[q + "rstd2"] = ops.layernorm(x, p[q + "ln2_g"], p[q + "ln2_b"])
        keep[q + "a2"] = a
        m, keep[q + "pre"] = ops.linear(a, p[q + "fc_wt"], p[q + "fc_b"], "gelu")
        keep[q + "m"] = m
        x = ops.linear(m, p[q + "fc2_wt"], p[q + "fc2_b"], "residual", res=x)
    keep["xf"] = x
    xf, keep["meanf"], keep["rstdf"] = ops.layernorm(x, p["lnf_g"], p["lnf_b"])
    keep["af"] = xf
    logits = ops.linear_nt(xf, p["wte"])                    # tied: the output product reads wte as it is
    losses, keep["dlogits"] = ops.cross_entropy(logits, targets.reshape(-1), 1.0 / tok.size)
    return ops.mean(losses), keep
# --8<-- [end:forward]


# --8<-- [start:backward]
def backward(ops, p: dict, keep: dict, tok, cfg) -> dict:
    """Every parameter's gradient, in reverse order; dx is the residual
    stream's gradient, carried down and added to at each branch."""
    b, t = tok.shape
    h, L = cfg.heads, cfg.layers
    g = {}
    dlogits = keep["dlogits"]
    dxf = ops.linear_nn(dlogits, p["wte"])                  # d(xf) = dlogits @ wte: the forward layout
    dwte_tied = ops.grad_w(dlogits, keep["af"])             # dwte = dlogits^T xf (the tied half)
    dx, g["lnf_g"], g["lnf_b"] = ops.layernorm_backward_add(ops.zeros_like(keep["xf"]), dxf, keep["xf"],
                                                            p["lnf_g"], keep["meanf"], keep["rstdf"])
    for i in reversed(range(L)):
        q = f"h{i}."
        # MLP: x3 = x2 + fc2(gelu(fc(ln2(x2))))
        g[q + "fc2_wt"] = ops.grad_w(keep[q + "m"], dx)
        g[q + "fc2_b"] = ops.bias_grad(dx)
        dpre = ops.grad_x_gelu(dx, p[q + "fc2_wt"], keep[q + "pre"])
        g[q + "fc_wt"] = ops.grad_w(keep[q + "a2"], dpre)
        g[q + "fc_b"] = ops.bias_grad(dpre)
        da = ops.grad_x(dpre, p[q + "fc_wt"])
        dx, g[q + "ln2_g"], g[q + "ln2_b"] = ops.layernorm_backward_add(    # the branch's gradient joins dx
            dx, da, keep[q + "x2"], p[q + "ln2_g"], keep[q + "mean2"], keep[q + "rstd2"])
        # attention: x2 = x + proj(merge(attn(heads(c_attn(ln1(x))))))
        g[q + "proj_wt"] = ops.grad_w(keep[q + "y"], dx)
        g[q + "proj_b"] = ops.bias_grad(dx)
        dy = ops.grad_x(dx, p[q + "proj_wt"])
        qh, kh, vh = keep[q + "qkv"]
        dq, dk, dv = ops.attention_backward(qh, kh, vh, keep[q + "o"], ops.split_heads(dy, b, t, h),
                                            keep[q + "lse2"])
        dqkv = ops.merge_qkv_grad(dq, dk, dv)
        g[q + "attn_wt"] = ops.grad_w(keep[q + "a1"], dqkv)
        g[q + "attn_b"] = ops.bias_grad(dqkv)
        da = ops.grad_x(dqkv, p[q + "attn_wt"])
        dx, g[q + "ln1_g"], g[q + "ln1_b"] = ops.layernorm_backward_add(
            dx, da, keep[q + "x"], p[q + "ln1_g"], keep[q + "mean1"], keep[q + "rstd1"])
    g["wte"], g["wpe"] = ops.embed_backward(dwte_tied, dx, tok, cfg.context)   # the tied embedding's two halves
    return g
# --8<-- [end:backward]


def adamw(p: dict, grads: dict, state: dict, cfg, step: int) -> float:
    """training/adamw's arithmetic (clip to a global norm, then AdamW with
    decay on the matrices), in float64; returns the norm before clipping."""
    norm = math.sqrt(sum(float((gr * gr).sum()) for gr in grads.values()))
    clip = min(1.0, cfg.clip / (norm + 1e-6))
    lr, b1, b2, eps = ref.lr_at(cfg, step), 0.9, 0.95, 1e-8
    for k in p:
        gr = grads[k] * clip
        m, v = state.setdefault(k, (np.zeros_like(p[k]), np.zeros_like(p[k])))
        m = b1 * m + (1 - b1) * gr
        v = b2 * v + (1 - b2) * gr * gr
        state[k] = (m, v)
        if ref.decayed(k, p[k]):
            p[k] = p[k] * (1 - lr * cfg.weight_decay)
        mhat, vhat = m / (1 - b1 ** (step + 1)), v / (1 - b2 ** (step + 1))
        p[k] = p[k] - lr * mhat / (np.sqrt(vhat) + eps)
    return norm


def check_against_torch(cfg) -> int:
    """One step's gradients and update, ours against torch.autograd and
    torch.optim.AdamW, both in float64; returns the number of failures."""
    import torch
    import torch.nn.functional as F

    w = {k: v.astype(np.float64) for k, v in ref.init_weights(cfg).items()}
    rng = np.random.default_rng(1)
    # Small random biases and LayerNorm parameters, so that no gradient is checked only at its initial zeros.
    for k in w:
        if k.endswith(("_b", "_g")):
            w[k] = w[k] + 0.1 * rng.standard_normal(w[k].shape)
    tok = rng.integers(0, cfg.vocab, (cfg.batch, cfg.context))
    targets = rng.integers(0, cfg.vocab, (cfg.batch, cfg.context))
    ops = NumpyOps()
    loss, keep = forward(ops, w, tok, targets, cfg)
    grads = backward(ops, w, keep, tok, cfg)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in w.items()}
    logits = ref.forward(torch, F, tp, torch.from_numpy(tok), cfg)
    tloss = F.cross_entropy(logits.view(-1, cfg.vocab), torch.from_numpy(targets).view(-1))
    tloss.backward()
    bad = 0
    print(f"loss: ours {loss:.12f}, torch {float(tloss):.12f}")
    if abs(loss - float(tloss)) > 1e-10:
        bad += 1
    for k in w:
        want = tp[k].grad.numpy()
        err = float(np.abs(grads[k] - want).max() / (np.abs(want).max() + 1e-300))
        if err > 1e-9 or grads[k].shape != want.shape:
            print(f"FAIL gradient of {k}: relative error {err:.1e}")
            bad += 1
    print(f"{len(w) - bad} of {len(w)} gradients within 1e-9 of torch.autograd (float64)")

    # One optimiser step, two groups as reference_train makes them.
    state = {}
    p_ours = {k: v.copy() for k, v in w.items()}
    adamw(p_ours, grads, state, cfg, 0)
    groups = [{"params": [tp[k] for k in w if ref.decayed(k, w[k])], "weight_decay": cfg.weight_decay},
              {"params": [tp[k] for k in w if not ref.decayed(k, w[k])], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=ref.lr_at(cfg, 0), betas=(0.9, 0.95), eps=1e-8)
    torch.nn.utils.clip_grad_norm_(list(tp.values()), cfg.clip)
    opt.step()
    worst = max(float(np.abs(p_ours[k] - tp[k].detach().numpy()).max()) for k in w)
    print(f"after one AdamW step, the largest difference from torch.optim.AdamW: {worst:.1e}")
    if worst > 1e-9:
        bad += 1
    return bad


def main() -> int:
    cfg = ref.Config(**{**ref.TINY, "context": 16, "batch": 2})
    bad = check_against_torch(cfg)
    print("ok" if bad == 0 else f"FAILED: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
