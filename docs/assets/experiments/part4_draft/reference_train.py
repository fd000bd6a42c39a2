"""PyTorch's side of Part IV's training run: GPT-2 on the book's own bytes.

Draft. The same model, initial weights, batches and optimizer settings the
book's kernels will use, in plain PyTorch, so the two loss curves can be
drawn in one figure. Weights come from a NumPy generator with a fixed seed
(init_weights), batches from corpus.batches (a seed and the step number),
so another program builds exactly the same ones.

Model: GPT-2 (pre-LayerNorm blocks, tanh GELU, causal attention, tied
input and output embeddings), vocabulary 256 (bytes). AdamW with
b1 = 0.9, b2 = 0.95, eps = 1e-8, weight decay 0.1 on the matrices only,
the gradients clipped to a global norm of 1.0, and a learning rate that
warms up linearly over the first steps and is then held.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/reference_train.py [--tiny] [--steps N] [--json OUT]
        (--tiny: 2 layers of width 64 on 64 bytes, for a CPU; the default
        is GPT-2 small's 12 layers of 768 at T = 1024, B = 8, bf16
        autocast on the GPU)
"""

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402


@dataclass
class Config:
    layers: int = 12
    heads: int = 12
    width: int = 768
    context: int = 1024
    batch: int = 8
    vocab: int = corpus.VOCAB
    steps: int = 200
    lr: float = 6e-4
    warmup: int = 20
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0


TINY = dict(layers=2, heads=4, width=64, context=64, batch=4, steps=60, lr=3e-3, warmup=5)


def init_weights(cfg: Config) -> dict[str, np.ndarray]:
    """GPT-2's initialisation, drawn in a fixed order from one seeded
    generator: matrices ~ N(0, 0.02^2), the two projections into the
    residual stream scaled by 1 / sqrt(2 L), biases 0, LayerNorm scales 1.
    Linear weights are stored as W^T (in x out), as the book's kernels read
    them."""
    rng = np.random.default_rng(cfg.seed)
    c, L = cfg.width, cfg.layers
    normal = lambda *shape, std=0.02: (std * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    w = {"wte": normal(cfg.vocab, c), "wpe": normal(cfg.context, c)}
    for i in range(L):
        p = f"h{i}."
        w[p + "ln1_g"], w[p + "ln1_b"] = np.ones(c, np.float32), np.zeros(c, np.float32)
        w[p + "attn_wt"], w[p + "attn_b"] = normal(c, 3 * c), np.zeros(3 * c, np.float32)
        w[p + "proj_wt"], w[p + "proj_b"] = normal(c, c, std=0.02 / math.sqrt(2 * L)), np.zeros(c, np.float32)
        w[p + "ln2_g"], w[p + "ln2_b"] = np.ones(c, np.float32), np.zeros(c, np.float32)
        w[p + "fc_wt"], w[p + "fc_b"] = normal(c, 4 * c), np.zeros(4 * c, np.float32)
        w[p + "fc2_wt"], w[p + "fc2_b"] = normal(4 * c, c, std=0.02 / math.sqrt(2 * L)), np.zeros(c, np.float32)
    w["lnf_g"], w["lnf_b"] = np.ones(c, np.float32), np.zeros(c, np.float32)
    return w


def decayed(name: str, a: np.ndarray) -> bool:
    """Weight decay goes on the matrices, not on biases or LayerNorm's
    scales and shifts (the embeddings are matrices)."""
    return a.ndim == 2


def forward(torch, F, p: dict, idx, cfg: Config):
    """Logits (B, T, V) of the byte sequence idx (B, T)."""
    b, t = idx.shape
    c, h = cfg.width, cfg.heads
    x = p["wte"][idx] + p["wpe"][:t]
    for i in range(cfg.layers):
        q = f"h{i}."
        a = F.layer_norm(x, (c,), p[q + "ln1_g"], p[q + "ln1_b"])
        qkv = a @ p[q + "attn_wt"] + p[q + "attn_b"]
        qq, kk, vv = (z.view(b, t, h, c // h).transpose(1, 2) for z in qkv.split(c, dim=2))
        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
        x = x + o.transpose(1, 2).reshape(b, t, c) @ p[q + "proj_wt"] + p[q + "proj_b"]
        a = F.layer_norm(x, (c,), p[q + "ln2_g"], p[q + "ln2_b"])
        m = F.gelu(a @ p[q + "fc_wt"] + p[q + "fc_b"], approximate="tanh")
        x = x + m @ p[q + "fc2_wt"] + p[q + "fc2_b"]
    x = F.layer_norm(x, (c,), p["lnf_g"], p["lnf_b"])
    return x @ p["wte"].T                                  # tied output embedding


def lr_at(cfg: Config, step: int) -> float:
    return cfg.lr * min(1.0, (step + 1) / cfg.warmup)


def train(cfg: Config, device: str = "cuda") -> dict:
    import torch
    import torch.nn.functional as F

    tokens = corpus.tokens_of(corpus.text())
    train_tokens, val_tokens = corpus.split(tokens)
    w = init_weights(cfg)
    p = {k: torch.tensor(v, device=device, requires_grad=True) for k, v in w.items()}
    groups = [{"params": [p[k] for k in w if decayed(k, w[k])], "weight_decay": cfg.weight_decay},
              {"params": [p[k] for k in w if not decayed(k, w[k])], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)
    losses, norms, times, val = [], [], [], []
    for step in range(cfg.steps):
        x, y = (torch.from_numpy(a).long().to(device) for a in corpus.batches(train_tokens, step, cfg.batch,
                                                                               cfg.context, cfg.seed))
        t0 = time.perf_counter()
        with amp:
            logits = forward(torch, F, p, x, cfg)
            loss = F.cross_entropy(logits.float().view(-1, cfg.vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), cfg.clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        norms.append(float(norm))
        if step % 50 == 49 or step == cfg.steps - 1:
            val.append((step, evaluate(torch, F, p, val_tokens, cfg, device, amp)))
    return {"config": asdict(cfg), "losses": losses, "grad_norms": norms, "step_s": times, "val": val,
            "sample": sample(torch, F, p, cfg, device, amp)}


def evaluate(torch, F, p, tokens, cfg, device, amp, batches: int = 4) -> float:
    with torch.no_grad(), amp:
        out = []
        for i in range(batches):
            x, y = (torch.from_numpy(a).long().to(device)
                    for a in corpus.batches(tokens, i, cfg.batch, cfg.context, seed=cfg.seed + 1))
            out.append(float(F.cross_entropy(forward(torch, F, p, x, cfg).float().view(-1, cfg.vocab), y.view(-1))))
    return sum(out) / len(out)


def sample(torch, F, p, cfg, device, amp, prompt: bytes = b"The GPU ", length: int = 300) -> str:
    """`length` bytes after `prompt`, each drawn from the model's softmax
    with a fixed generator: the same text for the same weights."""
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    idx = torch.tensor([list(prompt)], device=device)
    with torch.no_grad(), amp:
        for _ in range(length):
            logits = forward(torch, F, p, idx[:, -cfg.context:], cfg)[:, -1].float()
            nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)
            idx = torch.cat([idx, nxt], dim=1)
    return corpus.decode(idx[0].tolist())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    cfg = Config(**TINY) if args.tiny else Config()
    if args.steps:
        cfg.steps = args.steps
    import torch
    out = train(cfg, "cuda" if torch.cuda.is_available() else "cpu")
    print(f"loss {out['losses'][0]:.3f} -> {out['losses'][-1]:.3f} over {cfg.steps} steps; "
          f"validation {out['val']}; median step {1e3 * float(np.median(out['step_s'])):.1f} ms")
    print(out["sample"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
