"""Chapter 20's training step on the book's kernels: the GPU side of training_step.Ops.

Draft for Part IV ("A training step, end to end"); written on a CPU, never
run. It needs part4_chapters.patch applied (chapters 18 and 19's listings)
and a Hopper GPU (the products are chapter 12's wgmma kernel).

BookOps implements the interface that training_step.NumpyOps implements in
float64, one method one or two launches of the book's kernels, in bf16
with float32 arithmetic. Its outputs come from a tape: the n-th output of
a step is the n-th buffer, allocated on the first step and reused on
every later one, so the step's launches see the same addresses every time
(what capturing it as a CUDA graph needs). The parameters live in flat
buffers, as backprop's AdamW wants them: float32 master weights, moments,
bf16 weights (the views the kernels read) and bf16 gradients, matrices
first (they take weight decay), each parameter on a 16-element boundary.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/training_gpu.py [--steps N]
        first: one step at a small size, every gradient against the
        float64 NumpyOps from the same bf16 weights, beside PyTorch bf16's
        error (autocast) on the same batch; then N steps at GPT-2 small's
        size on the book's text, the losses printed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[3] / "code"))
import cudabook as cb  # noqa: E402
import corpus  # noqa: E402
import reference_train as ref  # noqa: E402
import training_step as ts  # noqa: E402
import training_kernels as tk  # noqa: E402
import adamw as opt  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

ALIGN = 16                                          # elements: 64 bytes of float32, 32 of bf16


class Tape:
    """The n-th buffer asked for in a step: made on the first step, the
    same one (shape and dtype checked) on every later step."""

    def __init__(self):
        self.buffers, self.i, self.frozen = [], 0, False

    def freeze(self) -> None:
        """From now on a step may not ask for more buffers than it has:
        one that does (a part re-run from the wrong place) raises."""
        self.frozen = True

    def rewind(self):
        self.i = 0

    def __call__(self, shape, dtype):
        from pycuda import gpuarray

        shape = tuple(int(s) for s in shape)
        if self.i == len(self.buffers):
            if self.frozen:
                raise RuntimeError(f"tape: output {self.i} asked for after the tape was frozen")
            self.buffers.append(gpuarray.empty(shape, dtype))
        buf = self.buffers[self.i]
        if buf.shape != shape or buf.dtype != np.dtype(dtype):
            raise RuntimeError(f"tape: output {self.i} was {buf.shape} {buf.dtype} last step, now {shape} "
                               f"{np.dtype(dtype)}: the step's launches must be the same every time")
        self.i += 1
        return buf


class Params:
    """Every parameter in flat buffers, matrices first: p (float32 master),
    m, v (float32 moments), w (bf16, what the kernels read), g (bf16
    gradients). view(name) is the parameter's bf16 weights, shaped."""

    def __init__(self, weights: dict[str, np.ndarray]):
        from pycuda import gpuarray

        order = sorted(weights, key=lambda k: not ref.decayed(k, weights[k]))   # stable: matrices first
        self.slots, off = {}, 0
        for k in order:
            n = weights[k].size
            self.slots[k] = (off, weights[k].shape)
            off += -(-n // ALIGN) * ALIGN
            if ref.decayed(k, weights[k]):
                self.n_decay = off
        self.n = off
        flat = np.zeros(self.n, np.float32)
        for k, (o, shape) in self.slots.items():
            flat[o:o + weights[k].size] = weights[k].reshape(-1)
        self.p = gpuarray.to_gpu(flat)
        self.m, self.v = gpuarray.zeros(self.n, np.float32), gpuarray.zeros(self.n, np.float32)
        self.w = gpuarray.to_gpu(to_bf16(flat))
        self.g = gpuarray.zeros(self.n, np.uint16)

    def _view(self, flat, name):
        o, shape = self.slots[name]
        return flat[o:o + int(np.prod(shape))].reshape(shape)

    def weights(self) -> dict:
        return {k: self._view(self.w, k) for k in self.slots}

    def grad(self, name):
        return self._view(self.g, name)


class BookOps:
    """training_step's interface on the book's kernels (bf16 activations)."""

    def __init__(self, cfg):
        from attention_backward import flash_backward
        from backprop import bias_grad, cross_entropy, embedding_backward, linear_backward
        from matmul_tc import wgmma_gemm
        from transformer import gpt2_block

        self.cfg, self.info = cfg, cb.init()
        self.m = dict(flash_backward=flash_backward, bias_grad=bias_grad, cross_entropy=cross_entropy,
                      embedding_backward=embedding_backward, linear_backward=linear_backward,
                      wgmma_gemm=wgmma_gemm, gpt2_block=gpt2_block)
        self.k = {"block": gpt2_block.load_kernels("wgmma"), "lb": linear_backward.load_kernels(),
                  "ce": cross_entropy.load_kernel(), "bias": bias_grad.load_kernels(),
                  "embed": embedding_backward.load_kernels(), "fb": flash_backward.load_kernels(),
                  "tk": tk.load_kernels(), "nn": wgmma_gemm.load_kernel(self.info), "adamw": opt.load_kernels()}
        for name in ("embed_fwd", "f32_to_bf16", "bf16_to_f32"):
            self.k[name] = self.k["tk"][name]
        self.tape = Tape()

    # the tape's shorthands
    def _e(self, *shape):
        return self.tape(shape, np.uint16)

    def _f(self, *shape):
        return self.tape(shape, np.float32)

    def _elementwise(self, name, src, dst, n):
        self.k[name].prepared_call((min(cb.ceil_div(n, 256), 65_535), 1, 1), (256, 1, 1), src.gpudata,
                                   dst.gpudata, np.int64(n))

    # ---- the step's inputs, uploaded once at its start
    def begin_step(self, tok, targets) -> None:
        """The batch's tokens, targets and the embedding's buckets to the
        device before any kernel of the step runs: a copy from pageable
        host memory waits for the stream, so copies in the middle of the
        step would hold the host until the work before them finished.
        The buckets are always V of them (an empty one adds 0), so the
        launch is the same every step."""
        from pycuda import driver as cuda

        v = self.cfg.vocab
        flat = np.ascontiguousarray(tok.reshape(-1), np.int32)
        order = np.argsort(flat, kind="stable").astype(np.int32)
        starts = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=v))]).astype(np.int32)
        host = {"tok": flat, "targets": np.ascontiguousarray(targets.reshape(-1), np.int32), "order": order,
                "starts": starts, "btok": np.arange(v, dtype=np.int32)}
        self.inputs = {}
        for name, a in host.items():
            d = self.tape(a.shape, np.int32)
            cuda.memcpy_htod(d.gpudata, a)
            self.inputs[name] = d

    # ---- forward
    def embed(self, tok, wte, wpe):
        b, t = tok.shape
        c = wte.shape[1]
        x = self._e(b * t, c)
        tk.embed_forward(self.k["tk"], self.inputs["tok"], wte, wpe, x, t)
        return x

    def layernorm(self, x, g, b):
        from softmax_norm import layernorm as ln

        m, c = x.shape
        y, mean, rstd = self._e(m, c), self._f(m), self._f(m)
        ln.layernorm(self.k["block"]["ln"], x, g, b, y, mean, rstd)
        return y, mean, rstd

    def linear(self, a, w_t, bias, tail="bias", res=None):
        gb = self.m["gpt2_block"]
        m, n = a.shape[0], w_t.shape[1]
        if tail == "gelu":                           # c_fc: keep the activation before the GELU
            pre, hid = self._e(m, n), self._e(m, n)
            gb.linear(self.k["block"], "bias", a, w_t, bias, pre)
            tk.gelu_forward(self.k["tk"], pre, hid)
            return hid, pre
        out = self._e(m, n)
        gb.linear(self.k["block"], tail, a, w_t, bias, out, res=res)
        return out

    def linear_qkv(self, a, w_t, bias, b, t, h):
        c = w_t.shape[1] // 3
        qkv = self._e(3, b, h, t, c // h)
        self.m["gpt2_block"].linear_qkv(self.k["block"], a, w_t, bias, qkv)
        return qkv[0], qkv[1], qkv[2]

    def attention(self, q, k, v):
        from attention import flash_bf16

        b, h, t, d = q.shape
        o, lse2 = self._e(b, h, t, d), self._f(b, h, t)
        flash_bf16.attention(self.k["block"]["attention"], self.m["gpt2_block"].ATTENTION[d], q, k, v, o,
                             causal=True)
        self.m["flash_backward"].row_stats(self.k["fb"], q, k, lse2, True)   # until the forward keeps it
        return o, lse2

    def merge_heads(self, o):
        b, h, t, d = o.shape
        y = self._e(b * t, h * d)
        self.m["gpt2_block"].merge_heads(self.k["block"], o, y)
        return y

    def linear_nt(self, a, w):
        out = self._e(a.shape[0], w.shape[0])
        self.m["linear_backward"].grad_x(self.k["lb"], a, w, out)       # a @ w.T: grad_x's layout
        return out

    def cross_entropy(self, logits, targets, scale):
        n, v = logits.shape
        tg = self.inputs["targets"]
        losses, dlogits = self._f(n), self._e(n, v)
        self.m["cross_entropy"].cross_entropy(self.k["ce"], logits, tg, losses, dlogits, v, scale)
        return losses, dlogits

    def mean(self, losses):
        """The losses stay on the device; train_step's caller reads them
        after the step (a read here would wait for the forward pass)."""
        return losses

    # ---- backward
    def zeros_like(self, a):
        z = self.tape(a.shape, a.dtype)
        z.fill(a.dtype.type(0))
        return z

    def linear_nn(self, a, w):
        out = self._e(a.shape[0], w.shape[1])
        self.m["wgmma_gemm"].wgmma_gemm(self.k["nn"], a, w, out)
        return out

    def grad_x(self, dy, w_t):
        dx = self._e(dy.shape[0], w_t.shape[0])
        self.m["linear_backward"].grad_x(self.k["lb"], dy, w_t, dx)
        return dx

    def grad_x_gelu(self, dy, w_t, pre):
        dx = self._e(dy.shape[0], w_t.shape[0])
        self.m["linear_backward"].grad_x_gelu(self.k["lb"], dy, w_t, pre, dx)
        return dx

    def grad_w(self, x, dy):
        dw = self._e(x.shape[1], dy.shape[1])
        self.m["linear_backward"].grad_w(self.k["lb"], x, dy, dw)
        return dw

    def bias_grad(self, dy):
        bg = self.m["bias_grad"]
        m, n = dy.shape
        db, part = self._f(n), self._f(bg.shares(m, n, self.info.sm_count), n)
        bg.bias_grad(self.k["bias"], dy, db, part, self.info.sm_count)
        return db

    def split_heads(self, y, b, t, h):
        o = self._e(b, h, t, y.shape[1] // h)
        tk.split_heads(self.k["tk"], y, o)
        return o

    def attention_backward(self, q, k, v, o, do, lse2):
        b, h, t, d = q.shape
        dq, dk, dv = self._e(b, h, t, d), self._e(b, h, t, d), self._e(b, h, t, d)
        work = self._f(b * h * t * d + b * h * t)
        self.m["flash_backward"].backward(self.k["fb"], q, k, v, o, do, lse2, dq, dk, dv, work, True, "pass")
        return dq, dk, dv

    def merge_qkv_grad(self, dq, dk, dv):
        b, h, t, d = dq.shape
        out = self._e(b * t, 3 * h * d)
        tk.merge_qkv_grad(self.k["tk"], dq, dk, dv, out)
        return out

    def layernorm_backward_add(self, dres, dy, x, g, mean, rstd):
        rows, c = x.shape
        dg, db = self._f(c), self._f(c)
        part = self._f(2, min(2 * self.info.sm_count, cb.ceil_div(rows, tk.LN_WARPS)), c)   # 2 blocks an SM fit
        tk.layernorm_bwd_add(self.k["tk"], dy, x, g, mean, rstd, dres, dg, db, part)
        return dres, dg, db

    def embed_backward(self, dwte_tied, dx, tok, context):
        eb = self.m["embedding_backward"]
        b, t = tok.shape
        m, c = dx.shape
        dwte, dx32 = self._f(*dwte_tied.shape), self._f(m, c)
        self._elementwise("bf16_to_f32", dwte_tied, dwte, dwte.size)
        self._elementwise("bf16_to_f32", dx, dx32, dx32.size)
        from pycuda import driver as cuda

        i = self.inputs                                  # the buckets, uploaded with the batch
        eb.backward_sorted(self.k["embed"], dx32, i["order"], i["starts"], i["btok"], dwte)
        dwpe = self.zeros_like_f32((context, c))
        dpos = self.bias_grad(dx.reshape(b, t * c))     # sum over the batch of each (t, channel)
        cuda.memcpy_dtod(dwpe.gpudata, dpos.gpudata, 4 * t * c)
        return dwte, dwpe

    def zeros_like_f32(self, shape):
        z = self._f(*shape)
        z.fill(np.float32(0))
        return z

    # ---- the optimiser
    def gather_grads(self, grads: dict, params: Params) -> None:
        """Each gradient into its place in params.g, as bf16."""
        from pycuda import driver as cuda

        for name, gr in grads.items():
            dst = params.grad(name)
            if gr.dtype == np.float32:
                self._elementwise("f32_to_bf16", gr, dst, gr.size)
            else:
                cuda.memcpy_dtod(dst.gpudata, gr.gpudata, 2 * gr.size)

    def adamw(self, params: Params, step: int):
        """Clip to cfg.clip over every gradient, then AdamW: weight decay on
        the matrices (the first n_decay elements), none on the rest.
        Returns the device's (scale, norm) pair, read by the caller."""
        cfg, k = self.cfg, self.k["adamw"]
        blocks = opt.norm_blocks(self.info.sm_count)
        partials, scale = self.tape((blocks,), np.float64), self._f(2)
        k["norm"].prepared_call((blocks, 1, 1), (opt.THREADS, 1, 1), params.g.gpudata, np.int64(params.n),
                                partials.gpudata)
        k["scale"].prepared_call((1, 1, 1), (opt.THREADS, 1, 1), partials.gpudata, np.int32(blocks),
                                 np.float32(cfg.clip), scale.gpudata)
        t = step + 1
        c1, c2 = 1 - 0.9**t, 1 - 0.95**t
        for lo, hi, wd in ((0, params.n_decay, cfg.weight_decay), (params.n_decay, params.n, 0.0)):
            n = hi - lo
            if n == 0:
                continue
            k["adamw"].prepared_call((cb.ceil_div(cb.ceil_div(n, 4), opt.THREADS), 1, 1), (opt.THREADS, 1, 1),
                                     int(params.g.gpudata) + 2 * lo, int(params.p.gpudata) + 4 * lo,
                                     int(params.m.gpudata) + 4 * lo, int(params.v.gpudata) + 4 * lo,
                                     int(params.w.gpudata) + 2 * lo, np.int64(n), scale.gpudata,
                                     *(np.float32(x) for x in (ref.lr_at(cfg, step), 0.9, 0.95, 1e-8, wd, c1, c2)))
        return scale


def train_step(ops: BookOps, params: Params, tok, targets, step: int):
    """One step: forward, backward, AdamW, with no read back to the host.
    Returns the device's losses and (clip scale, norm): read them with
    read_step after the step, when they are wanted."""
    ops.tape.rewind()
    ops.begin_step(tok, targets)
    w = params.weights()
    losses, keep = ts.forward(ops, w, tok, targets, ops.cfg)
    grads = ts.backward(ops, w, keep, tok, ops.cfg)
    ops.gather_grads(grads, params)
    return losses, ops.adamw(params, step)


def read_step(losses, scale) -> tuple[float, float]:
    """(mean loss, gradient norm before clipping) from train_step's arrays."""
    return float(losses.get().astype(np.float64).mean()), float(scale.get()[1])


def check_first_step(cfg, seed: int = 0) -> int:
    """One step's gradients at a small size against float64 (NumpyOps from
    the same bf16 weights), beside PyTorch bf16 autocast's against the same
    float64; returns the number of parameters where ours is more than twice
    PyTorch's error (issue #40's same-precision-peer bound)."""
    import torch
    import torch.nn.functional as F

    w32 = ref.init_weights(cfg)
    w16 = {k: from_bf16(to_bf16(v)).astype(np.float64) for k, v in w32.items()}   # the weights both see
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, cfg.vocab, (cfg.batch, cfg.context))
    targets = rng.integers(0, cfg.vocab, (cfg.batch, cfg.context))
    loss64, keep = ts.forward(ts.NumpyOps(), w16, tok, targets, cfg)
    want = ts.backward(ts.NumpyOps(), w16, keep, tok, cfg)

    ops, params = BookOps(cfg), Params({k: v.astype(np.float32) for k, v in w16.items()})
    ops.tape.rewind()
    ops.begin_step(tok, targets)
    w = params.weights()
    losses, kept = ts.forward(ops, w, tok, targets, cfg)
    loss = float(losses.get().astype(np.float64).mean())
    grads = ts.backward(ops, w, kept, tok, cfg)
    before = {k: (g.get() if g.dtype == np.float32 else from_bf16(g.get())).astype(np.float64)
              for k, g in grads.items()}                 # each gradient as its kernel left it
    ops.gather_grads(grads, params)
    ours = {k: from_bf16(params.grad(k).get()).astype(np.float64) for k in want}

    tp = {k: torch.tensor(v, device="cuda", dtype=torch.float32, requires_grad=True) for k, v in w16.items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = ref.forward(torch, F, tp, torch.from_numpy(tok).cuda(), cfg)
        tl = F.cross_entropy(logits.float().view(-1, cfg.vocab), torch.from_numpy(targets).cuda().view(-1))
    tl.backward()
    print(f"loss: float64 {loss64:.6f}, ours {loss:.6f}, PyTorch bf16 {float(tl):.6f}")
    bad = 0
    for k in want:
        scale = np.linalg.norm(want[k]) + 1e-30
        e_ours = np.linalg.norm(ours[k] - want[k]) / scale
        e_before = np.linalg.norm(before[k] - want[k]) / scale
        e_torch = np.linalg.norm(tp[k].grad.double().cpu().numpy() - want[k]) / scale
        ok = e_ours <= 2 * e_torch + 1e-7
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {k:16s} ours {e_ours:.2e} (before the bf16 gather {e_before:.2e})  "
              f"PyTorch bf16 {e_torch:.2e}")
    return bad


def sample_book(params: Params, cfg, prompt: bytes = b"The GPU ", length: int = 300) -> str:
    """`length` bytes after `prompt`, from the book's own forward pass.
    Each byte runs the forward on the last `context` bytes, padded at the
    end to the full context (causal attention: a row reads only the bytes
    before it, so the padding changes nothing the last real row sees), and
    draws the next byte from that row's softmax, in float64 on the host,
    with a NumPy generator seeded from cfg.seed: the same text for the
    same weights."""
    import dataclasses

    one = dataclasses.replace(cfg, batch=1)
    ops, kept = BookOps(one), {}
    product = ops.linear_nt

    def linear_nt(a, w):                         # the logits, kept as the forward makes them
        kept["logits"] = product(a, w)
        return kept["logits"]
    ops.linear_nt = linear_nt
    rng = np.random.default_rng(cfg.seed)
    idx, w = list(prompt), params.weights()
    for _ in range(length):
        ctx = idx[-one.context:]
        tok = np.zeros((1, one.context), np.int64)
        tok[0, :len(ctx)] = ctx
        ops.tape.rewind()
        ops.begin_step(tok, tok)
        ts.forward(ops, w, tok, tok, one)
        row = from_bf16(kept["logits"].get()[len(ctx) - 1]).astype(np.float64)
        p = np.exp(row - row.max())
        idx.append(int(rng.choice(one.vocab, p=p / p.sum())))
        ops.tape.freeze()
    return corpus.decode(idx)


def torch_step_fn(cfg, x, y, compiled: bool):
    """PyTorch's step on the same model and batch, as reference_train runs
    it (bf16 autocast, fused AdamW, clipping): eager, or its forward and
    loss through torch.compile (default mode)."""
    import torch
    import torch.nn.functional as F

    w = ref.init_weights(cfg)
    p = {k: torch.tensor(v, device="cuda", requires_grad=True) for k, v in w.items()}
    groups = [{"params": [p[k] for k in w if ref.decayed(k, w[k])], "weight_decay": cfg.weight_decay},
              {"params": [p[k] for k in w if not ref.decayed(k, w[k])], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    tx, ty = (torch.from_numpy(a).long().cuda() for a in (x, y))

    def loss_of(p, tx, ty):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = ref.forward(torch, F, p, tx, cfg)
        return F.cross_entropy(logits.float().view(-1, cfg.vocab), ty.view(-1))

    fwd = torch.compile(loss_of) if compiled else loss_of

    def step():
        opt.zero_grad(set_to_none=True)
        fwd(p, tx, ty).backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), cfg.clip)
        opt.step()
    for _ in range(3):                           # warm-up (and torch.compile's compile)
        step()
    return step


def bench_step(cfg, seed: int = 0) -> dict:
    """The step's time against PyTorch eager and torch.compile, each timed
    in alternation with ours (issue #40's target: >= 0.8x eager), and our
    step's parts (forward, backward with the gradients gathered, AdamW)
    timed alone."""
    from cudabook import evidence
    from matmul_tc import tc_gemm

    tokens = corpus.tokens_of(corpus.text())
    train_tokens, _ = corpus.split(tokens)
    x, y = corpus.batches(train_tokens, 0, cfg.batch, cfg.context, cfg.seed)
    ops, params = BookOps(cfg), Params(ref.init_weights(cfg))
    n_params = sum(v.size for v in ref.init_weights(cfg).values())
    flops = 6 * n_params * x.size                # the usual count: 2 forward, 4 backward a weight a token
    ceiling = tc_gemm.tensor_core_ceiling(None, seed, 100.0)
    ours = lambda: train_step(ops, params, x, y, 0)   # noqa: E731
    facts = {}
    for name, compiled in (("PyTorch eager", False), ("torch.compile", True)):
        m = evidence.benchmark(f"training step B={cfg.batch} T={cfg.context} vs {name}", ours, flops=flops,
                               working_set_bytes=1 << 30, ceiling=ceiling,
                               baseline=(f"{name} step", torch_step_fn(cfg, x, y, compiled)))
        facts[f"step_over_{'eager' if not compiled else 'compile'}"] = m.baseline.ratio
    w = params.weights()
    ops.tape.rewind()
    ops.begin_step(x, y)
    after_inputs = ops.tape.i                    # the forward's buffers start here on the tape
    _, keep = ts.forward(ops, w, x, y, cfg)
    after_forward = ops.tape.i                   # the backward's
    ops.gather_grads(ts.backward(ops, w, keep, x, cfg), params)
    after_backward = ops.tape.i                  # AdamW's
    ops.adamw(params, 0)
    ops.tape.freeze()
    copy = ("device-to-device copy", cb.ceiling())
    parts = {"forward": (lambda: (setattr(ops.tape, "i", after_inputs), ts.forward(ops, w, x, y, cfg)),
                         dict(flops=2 * n_params * x.size, working_set_bytes=1 << 30, ceiling=ceiling)),
             "backward": (lambda: (setattr(ops.tape, "i", after_forward),
                                   ops.gather_grads(ts.backward(ops, w, keep, x, cfg), params)),
                          dict(flops=4 * n_params * x.size, working_set_bytes=1 << 30, ceiling=ceiling)),
             "adamw": (lambda: (setattr(ops.tape, "i", after_backward), ops.adamw(params, 0)),
                       dict(bytes_moved=opt.BYTES_PER_PARAM * params.n, ceiling=copy))}
    for part, (fn, work) in parts.items():
        m = evidence.benchmark(f"training step's {part}", fn, **work)
        facts[f"{part}_ms"] = m.timing.median_ms
    print(f"target: our step >= 0.8x PyTorch eager's speed: "
          f"{'met' if facts['step_over_eager'] >= 0.8 else 'MISSED'}")
    return facts


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--bench", action="store_true", help="time the step against PyTorch eager and torch.compile")
    ap.add_argument("--json", help="write the losses, norms, step times and the sample here")
    ap.add_argument("--skip-check", action="store_true", help="skip the first step's peer-bound check")
    args = ap.parse_args(argv)
    small = ref.Config(layers=2, heads=4, width=256, context=128, batch=2)
    bad = 0 if args.skip_check else check_first_step(small)
    cfg = ref.Config(steps=args.steps)
    tokens = corpus.tokens_of(corpus.text())
    train_tokens, _ = corpus.split(tokens)
    ops, params = BookOps(cfg), Params(ref.init_weights(cfg))
    out = {"losses": [], "norms": [], "step_s": []}
    for step in range(cfg.steps):
        x, y = corpus.batches(train_tokens, step, cfg.batch, cfg.context, cfg.seed)
        t0 = time.perf_counter()
        loss, norm = read_step(*train_step(ops, params, x, y, step))
        out["step_s"].append(time.perf_counter() - t0)
        out["losses"].append(loss)
        out["norms"].append(norm)
        print(f"step {step}: loss {loss:.4f}, norm {norm:.3f}, {1e3 * out['step_s'][-1]:.1f} ms")
        ops.tape.freeze()                        # every later step must ask for the same buffers
    out["sample"] = sample_book(params, cfg)
    print(out["sample"])
    if args.json:
        import json
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.bench:
        print(bench_step(cfg))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
