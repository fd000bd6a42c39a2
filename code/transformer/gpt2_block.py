"""A GPT-2 block, end to end, from the book's own kernels.

The block (pre-LayerNorm, as GPT-2), for B sequences of T tokens, width
C = H D, in bf16 with fp32 arithmetic:
    a = x + c_proj(attention(c_attn(ln_1(x))))       (causal, H heads)
    y = a + c_proj2(gelu(c_fc(ln_2(a))))
Eight launches, each a chapter's kernel:
    ln_1, ln_2     chapter 14's LayerNorm (bf16, two-pass statistics)
    c_attn         a chapter 12 product with bias, written straight into
                   q, k, v in heads layout, B x H x T x D (*_qkv)
    attention      chapter 16's flash_bf16, causal
    merge_heads    B x H x T x D back to (B T) x C
    c_proj         a product with bias and the residual x added (*_residual)
    c_fc           a product with bias and GELU (*_gelu)
    c_proj2        a product with bias and the residual a added (*_residual)
The weights are stored as W^T (in x out), chapter 12's B. The products
are chapter 12's wgmma_gemm (wgmma_*: TMA, wgmma, 128 x 256 tiles) on a
compute capability 9.0 GPU, where the .cu is compiled for sm_90a, and its
rung 4 (gemm_*: cp.async, mma.sync, 128 x 128 tiles) on any other; the
tails are the same code in both.

Run:    python code/transformer/gpt2_block.py [--seed S] [--bench]
Checks: at (B, T, C, H) in SHAPES (T = 1, T not a multiple of any tile,
        D = 64 and 128; under compute-sanitizer SANITIZER_SHAPES) and, under
        --bench, at the benchmark shape:
        - each launch against float64 of its own inputs (the bf16 outputs
          of the launch before), every element, with its chapter's bound:
          LayerNorm's (chapter 14), attention's (chapter 16), merge_heads
          exactly, and for a product with its tail: the fp32 dot product
          (2 K roundings of |A| @ |B|, chapter 12), the bias add, GELU
          (12 roundings, slope at most 1.13), the residual add, and one
          rounding to bf16 (u_bf16 = 2^-8);
        - the block's output y against the float64 block of the same bf16
          input and weights (the same nn.Module in float64 where torch is
          installed, else NumPy): every element within TOL_K u_bf16 (|ref|
          + rms(ref)). The same tolerance is applied, in the same run, to
          PyTorch's own bf16 block (eager), so the reader sees that the
          tolerance is one bf16 arithmetic meets.
        On a compute capability 9.0 GPU, both kinds of product are checked.
Bench:  GPT-2 small (C = 768, H = 12, D = 64) at B = 8, T = 1024, each a
        typed entry (cudabook.evidence): the whole block (its eight
        launches, their arguments checked once beforehand: Block.plan,
        timed with CUDA events around the eight) at its FLOP rate against
        chapter 12's tensor-core ceiling (tc_gemm.tensor_core_ceiling:
        cuBLAS bf16 at 8192^3 through torch.matmul, timed once a run), in
        alternation (ABBA rounds) with the same nn.Module in bf16: first
        its eager forward captured once as one CUDA graph and replayed, so
        that the host that issues its launches cannot decide the
        comparison; then its eager forward as Python issues it, each call
        timed with events (the host-bound figure); then torch.compile of
        the module (mode "default", compiled and warmed before it is
        timed). On compute capability 9.0, also the block with rung 4's
        products, alone. Then each launch alone, and the PyTorch ops that
        do the same step, to show where the time goes. Target: ours >=
        0.6x the eager block replayed as a CUDA graph (its time over ours,
        the median of the alternated rounds' ratios).
"""

import functools
import math
import os
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from attention import _ref, flash_bf16  # noqa: E402
from matmul_tc import wgmma_gemm  # noqa: E402
from matmul_tc.tc_gemm import bound_k, tensor_core_ceiling  # noqa: E402
from softmax_norm import layernorm as ln  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")


class Product(NamedTuple):
    """One kind of product: its kernels' names and the block each launches."""
    prefix: str                   # kernel names: prefix + tail ("gemm_bias", "wgmma_gelu")
    tile: tuple[int, int]         # rows, columns of C a block
    blocks_per_sm: int            # blocks an SM holds at once
    threads: int                  # threads a block


#: (B, T, C, H): sequences, tokens, width, heads (D = C / H)
SHAPES = [(1, 1, 64, 1), (2, 77, 128, 2), (1, 130, 192, 3), (1, 33, 256, 2), (2, 200, 768, 12)]
SANITIZER_SHAPES = [(1, 1, 64, 1), (1, 70, 128, 2)]
BENCH_SHAPE = (8, 1024, 768, 12)              # GPT-2 small, batch 8, sequence 1024
#: chapter 16's variant for each head dimension
ATTENTION = {64: "flash_d64_m2_n64", 128: "flash_d128_m2_n64"}
TAILS = {"bias": "bias", "gelu": "gelu", "residual": "residual"}
#: the two kinds of product
PRODUCTS = {"mma": Product("gemm_", (128, 128), 2, 128),                # tc_gemm.cu's rung 4
            "wgmma": Product("wgmma_", (wgmma_gemm.BM, wgmma_gemm.BN), 1, wgmma_gemm.THREADS)}
HOPPER_ARCH = wgmma_gemm.ARCH
TILE = 128                                    # rows of C a block, both kinds
MAX_GRID_Y = 65_535
U_FP32, U_BF16 = _ref.U_FP32, _ref.U_BF16
TOL_K = 4                                     # end to end: |y - ref| <= TOL_K u_bf16 (|ref| + rms)
GELU_SLOPE, GELU_ROUNDINGS = 1.13, 12         # |gelu'| <= 1.13; chapter 13's count for the tanh form
TARGET = 0.6
BASELINE = "torch eager block"                              # as Python issues it: the host-bound figure
GRAPH_BASELINE = "torch eager block as one CUDA graph"      # the same launches, replayed: the target's
COMPILE_BASELINE = "torch.compile block"
# The eager block issues some twenty operations from Python, and at these
# sizes the GPU can wait on them: its time is partly the CPU's. The bench
# therefore compares with the same launches replayed as one CUDA graph, and
# also keeps the host-bound time. The book's suite runs the timings of this
# listing, and of those that import it, with nothing else on the machine
# (cudabook.listings.times_host).
HOST_BOUND_TIMINGS = True


def load_kernels(products: str | None = None) -> dict:
    """Our GEMM tails and merge_heads, chapter 14's LayerNorm, chapter 16's
    attention. products: "wgmma" (compute capability 9.0 only) or "mma";
    by default wgmma where the GPU has it. On 9.0 both kinds are loaded,
    and out["products"] says which the launches use."""
    import pycuda.driver as cuda

    gpu = cb.init()
    hopper = gpu.compute_capability == (9, 0)
    if products not in (None, "mma", "wgmma"):
        raise ValueError(f"products: expected 'mma' or 'wgmma', got {products!r}")
    if products == "wgmma" and not hopper:
        raise cb.Unavailable(f"wgmma products need a compute capability 9.0 GPU; this {gpu.name} "
                             f"is {gpu.arch}")
    module = cb.compile(KERNEL_FILE, arch=HOPPER_ARCH if hopper else None)
    out = {"products": products or ("wgmma" if hopper else "mma")}
    for kind in (("mma", "wgmma") if hopper else ("mma",)):
        prefix = PRODUCTS[kind].prefix
        for tail in (*TAILS.values(), "qkv"):
            f = module.get_function(prefix + tail)
            if kind == "wgmma":
                f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                wgmma_gemm.SHARED_BYTES)
            out[prefix + tail] = f.prepare("PPPPPiiiii")
    out["merge_heads"] = module.get_function("merge_heads").prepare("PPiiii")
    out["ln"] = ln.load_kernels()
    out["attention"] = flash_bf16.load_kernels()
    return out


def _product(kernels, tail: str, a, w_t, bias, res, out, m: int, n: int, k: int, t: int,
             d: int) -> None:
    """Launch the product kind kernels["products"] names (rung 4 where the
    dict does not say) with the tail `tail` ("bias", "gelu", "residual",
    "qkv"); arguments already checked."""
    kind = kernels.get("products", "mma")
    product = PRODUCTS[kind]
    prefix, (bm, bn), threads = product.prefix, product.tile, product.threads
    args = (bias.gpudata, res.gpudata, out.gpudata,
            np.int32(m), np.int32(n), np.int32(k), np.int32(t), np.int32(d))
    if kind == "wgmma":                 # one block per 128 x 256 tile, in wgmma_gemm's order
        a_map = wgmma_gemm.tensor_map(int(a.gpudata), m, k, bm, wgmma_gemm.BK)
        b_map = wgmma_gemm.tensor_map(int(w_t.gpudata), k, n, wgmma_gemm.BK, 64)
        kernels[prefix + tail].prepared_call(
            (cb.ceil_div(m, bm) * cb.ceil_div(n, bn), 1, 1), (threads, 1, 1), a_map.gpudata,
            b_map.gpudata, *args, shared_size=wgmma_gemm.SHARED_BYTES)
    else:
        kernels[prefix + tail].prepared_call((cb.ceil_div(n, bn), cb.ceil_div(m, bm), 1),
                                             (threads, 1, 1), a.gpudata, w_t.gpudata, *args)


def _check_product(a, w_t, bias) -> tuple[int, int, int]:
    cb.check_array("a", a, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    cb.check_array("w_t", w_t, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    m = cb.check_size("a.shape[0] (M)", a.shape[0], high=MAX_GRID_Y * TILE)
    k = cb.check_size("a.shape[1] (K)", a.shape[1])
    if w_t.shape[0] != k:
        raise ValueError(f"w_t: expected {k:,} rows (a is {m:,} x {k:,}), got shape {tuple(w_t.shape)}")
    n = cb.check_size("w_t.shape[1] (N)", w_t.shape[1])
    if k % 8 or n % 8:
        raise ValueError(f"w_t: the tails need K and N multiples of 8, got {k} x {n}")
    cb.check_array("bias", bias, dtype=np.uint16, shape=(n,), on_device=True, alignment=16)
    return m, n, k


# --8<-- [start:launch]
def linear(kernels, tail: str, a, w_t, bias, out, res=None) -> None:
    """out = tail(a @ w_t + bias), bf16 bit patterns (np.uint16) on the
    device, C-contiguous: a (M, K), w_t (K, N), bias (N,), out (M, N).
    tail: "bias" (nothing more), "gelu", or "residual" (out = res + ...,
    res (M, N)). K and N multiples of 8."""
    if tail not in TAILS:
        raise ValueError(f"tail: expected one of {', '.join(TAILS)}, got {tail!r}")
    m, n, k = _check_product(a, w_t, bias)
    cb.check_array("out", out, dtype=np.uint16, shape=(m, n), on_device=True, alignment=16)
    if tail == "residual":
        cb.check_array("res", res, dtype=np.uint16, shape=(m, n), on_device=True, alignment=16)
    elif res is not None:
        raise ValueError(f"res: only the residual tail takes one (tail is {tail!r})")
    cb.check_separate("out", out, a=a, w_t=w_t, bias=bias, res=res)
    _product(kernels, TAILS[tail], a, w_t, bias, res if res is not None else out, out, m, n, k, 1, 8)


def linear_qkv(kernels, a, w_t, bias, qkv) -> None:
    """a @ w_t + bias, its 3C columns written as q, k, v in heads layout:
    qkv (3, B, H, T, D) with B T = M and H D = C (see gpt2_block.cu)."""
    m, n, k = _check_product(a, w_t, bias)
    cb.check_array("qkv", qkv, dtype=np.uint16, ndim=5, on_device=True, alignment=16)
    three, b, h, t, d = qkv.shape
    if three != 3 or b * t != m or 3 * h * d != n or d % 8:
        raise ValueError(f"qkv: expected (3, B, H, T, D) with B T = {m:,}, 3 H D = {n:,} and "
                         f"D a multiple of 8, got shape {tuple(qkv.shape)}")
    cb.check_separate("qkv", qkv, a=a, w_t=w_t, bias=bias)
    _product(kernels, "qkv", a, w_t, bias, qkv, qkv, m, n, k, t, d)


def merge_heads(kernels, o, y) -> None:
    """y[(b T + t), h D + d] = o[b, h, t, d]: o (B, H, T, D), y (B T, H D)."""
    cb.check_array("o", o, dtype=np.uint16, ndim=4, on_device=True, alignment=16)
    b, h, t, d = o.shape
    if d % 8:
        raise ValueError(f"o: merge_heads moves 8 elements at a time; D must be a multiple of 8, got {d}")
    cb.check_size("o.size", b * h * t * d)                  # the kernel's indices are int
    cb.check_array("y", y, dtype=np.uint16, shape=(b * t, h * d), on_device=True, alignment=16)
    cb.check_separate("y", y, o=o)
    n8 = b * h * t * d // 8
    kernels["merge_heads"].prepared_call((min(cb.ceil_div(n8, 256), 2**31 - 1), 1, 1), (256, 1, 1),
                                         o.gpudata, y.gpudata, np.int32(b), np.int32(h), np.int32(t),
                                         np.int32(d))
# --8<-- [end:launch]


class Block:
    """The block's weights and activations on the device, for one (B, T, C, H)."""

    def __init__(self, params: dict, x16: np.ndarray, b: int, t: int, c: int, h: int):
        if c % h or c // h not in ATTENTION:
            raise ValueError(f"C / H: chapter 16's kernel takes head dimensions {sorted(ATTENTION)}, "
                             f"got C = {c}, H = {h}")
        from pycuda import gpuarray

        self.shape = (b, t, c, h)
        self.p = {name: gpuarray.to_gpu(v) for name, v in params.items()}
        m, d = b * t, c // h
        e = lambda *s: gpuarray.empty(s, np.uint16)         # noqa: E731
        f = lambda *s: gpuarray.empty(s, np.float32)        # noqa: E731
        self.x = gpuarray.to_gpu(x16)
        self.ln1, self.ln2, self.merged, self.a, self.y = e(m, c), e(m, c), e(m, c), e(m, c), e(m, c)
        self.mean1, self.rstd1, self.mean2, self.rstd2 = f(m), f(m), f(m), f(m)
        self.qkv, self.o, self.hid = e(3, b, h, t, d), e(b, h, t, d), e(m, 4 * c)
        self.attention = ATTENTION[d]

    # --8<-- [start:forward]
    def steps(self, k) -> dict:
        """The eight launches, by name, in order."""
        p = self
        w = self.p
        return {
            "ln_1": lambda: ln.layernorm(k["ln"], p.x, w["ln1_g"], w["ln1_b"], p.ln1, p.mean1, p.rstd1),
            "c_attn": lambda: linear_qkv(k, p.ln1, w["attn_wt"], w["attn_b"], p.qkv),
            "attention": lambda: flash_bf16.attention(k["attention"], p.attention, p.qkv[0], p.qkv[1],
                                                      p.qkv[2], p.o, causal=True),
            "merge_heads": lambda: merge_heads(k, p.o, p.merged),
            "c_proj": lambda: linear(k, "residual", p.merged, w["proj_wt"], w["proj_b"], p.a, res=p.x),
            "ln_2": lambda: ln.layernorm(k["ln"], p.a, w["ln2_g"], w["ln2_b"], p.ln2, p.mean2, p.rstd2),
            "c_fc": lambda: linear(k, "gelu", p.ln2, w["fc_wt"], w["fc_b"], p.hid),
            "c_proj2": lambda: linear(k, "residual", p.hid, w["proj2_wt"], w["proj2_b"], p.y, res=p.a),
        }

    def forward(self, k) -> None:
        for step in self.steps(k).values():
            step()
    # --8<-- [end:forward]

    # --8<-- [start:plan]
    def plan(self, k) -> dict:
        """The eight launches with their arguments checked once: each step's
        wrapper runs against stand-ins for the kernels that keep the call
        instead of making it. Running the plan is then eight prepared_calls,
        with none of the wrappers' Python in between."""
        calls, now = {}, [None]
        for name, step in self.steps(_capture(k, calls, now)).items():
            now[0] = name
            step()
        return calls
    # --8<-- [end:plan]

    def poison(self) -> None:
        for arr in (self.ln1, self.qkv, self.o, self.merged, self.a, self.ln2, self.hid, self.y,
                    self.mean1, self.rstd1, self.mean2, self.rstd2):
            cb.poison(arr)


class _Kept:
    """A kernel stand-in: prepared_call keeps the call, for the step being planned."""

    def __init__(self, kernel, calls: dict, now: list):
        self.kernel, self.calls, self.now = kernel, calls, now

    def prepared_call(self, *args, **kw):
        if self.now[0] in self.calls:
            raise RuntimeError(f"plan: step {self.now[0]} launched twice")
        self.calls[self.now[0]] = functools.partial(self.kernel.prepared_call, *args, **kw)


def _capture(kernels: dict, calls: dict, now: list) -> dict:
    """kernels (nested dicts of prepared kernels) with every kernel a _Kept;
    the names in it (such as "products") kept as they are."""
    return {key: _capture(v, calls, now) if isinstance(v, dict) else
            v if isinstance(v, str) else _Kept(v, calls, now) for key, v in kernels.items()}


def random_params(c: int, rng) -> tuple[dict, dict]:
    """GPT-2's initialisation (weights N(0, 0.02^2), the two projections into
    the residual stream scaled by 1 / sqrt(2 x 12 layers)), but random
    biases and LayerNorm parameters, so that a forgotten bias cannot pass.
    bf16 bit patterns, and the same values in float64. Weights as W^T."""
    def normal(shape, std, mean=0.0):
        return to_bf16(mean + std * rng.standard_normal(shape, dtype=np.float32))

    proj_std = 0.02 / math.sqrt(24)
    p = {"ln1_g": normal(c, 0.1, 1.0), "ln1_b": normal(c, 0.1),
         "attn_wt": normal((c, 3 * c), 0.02), "attn_b": normal(3 * c, 0.02),
         "proj_wt": normal((c, c), proj_std), "proj_b": normal(c, 0.02),
         "ln2_g": normal(c, 0.1, 1.0), "ln2_b": normal(c, 0.1),
         "fc_wt": normal((c, 4 * c), 0.02), "fc_b": normal(4 * c, 0.02),
         "proj2_wt": normal((4 * c, c), proj_std), "proj2_b": normal(c, 0.02)}
    return p, {name: from_bf16(v).astype(np.float64) for name, v in p.items()}


def gelu64(v):
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def _mm(a64, b64, torch):
    """a @ b in float64: on the GPU through torch when given (big shapes)."""
    if torch is None:
        return a64 @ b64
    return (torch.from_numpy(a64).cuda() @ torch.from_numpy(b64).cuda()).cpu().numpy()


def check_product(name, got16, a16, wt16, b16, tail, res16=None, torch=None) -> None:
    """One product with its tail against float64 of its own bf16 inputs.
    Bound (in units of u = 2^-24, then the rounding to bf16): the dot
    product's 2 bound_k(K) |A| @ |B| (chapter 12), the bias add u |v|,
    GELU's slope times those plus its own 12 u |v|, or the residual add
    u (|r| + |v|); then u_bf16 of the result."""
    a64, w64 = from_bf16(a16).astype(np.float64), from_bf16(wt16).astype(np.float64)
    bias = from_bf16(b16).astype(np.float64)
    v = _mm(a64, w64, torch) + bias
    size = _mm(np.abs(a64), np.abs(w64), torch)
    dot = 2 * bound_k(a64.shape[1]) * size
    av = np.abs(v) + dot * U_FP32
    if tail == "gelu":
        ref, e32 = gelu64(v), GELU_SLOPE * (dot + av) + GELU_ROUNDINGS * av
    elif tail == "residual":
        r = from_bf16(res16).astype(np.float64)
        ref, e32 = v + r, dot + 2 * av + np.abs(r)
    else:
        ref, e32 = v, dot + av
    kb = U_BF16 / U_FP32 + 1
    cb.report_check(cb.compare(name, from_bf16(got16), ref, k=kb,
                               scale=e32 * U_FP32 * (1 + U_BF16) / (U_BF16 + U_FP32)))


def check_steps(blk: Block, params64: dict, torch, label: str = "") -> None:
    """Each launch against float64 of the inputs it was given."""
    b, t, c, h = blk.shape
    d, tag = c // h, f"{b}x{t}x{c} H={h}{label}"
    p16 = {name: arr.get() for name, arr in blk.p.items()}
    x16, ln1, qkv, o, merged = blk.x.get(), blk.ln1.get(), blk.qkv.get(), blk.o.get(), blk.merged.get()
    a16, ln2, hid, y16 = blk.a.get(), blk.ln2.get(), blk.hid.get(), blk.y.get()
    f64 = lambda a: from_bf16(a).astype(np.float64)     # noqa: E731
    ln.check_forward(f"ln_1 {tag}", ln1, blk.mean1.get(), blk.rstd1.get(), f64(x16),
                     params64["ln1_g"], params64["ln1_b"], "bf16")
    # c_attn: undo the heads layout, then check as one (M, 3C) product
    flat = qkv.reshape(3, b, h, t, d).transpose(1, 3, 0, 2, 4).reshape(b * t, 3 * c)
    check_product(f"c_attn {tag}", flat, ln1, p16["attn_wt"], p16["attn_b"], "bias", torch=torch)
    ref, mag, smax = _ref.reference(qkv[0], qkv[1], qkv[2], True, torch)
    kb = _ref.bound_k(t, d, smax, u_out=U_BF16, u_p=U_BF16)
    cb.report_check(cb.compare(f"attention {tag}", from_bf16(o), ref, k=kb * U_BF16 / U_FP32, scale=mag))
    want = o.transpose(0, 2, 1, 3).reshape(b * t, c)
    cb.report_check(cb.compare(f"merge_heads {tag}", merged, want, k=0))
    check_product(f"c_proj {tag}", a16, merged, p16["proj_wt"], p16["proj_b"], "residual", x16, torch)
    ln.check_forward(f"ln_2 {tag}", ln2, blk.mean2.get(), blk.rstd2.get(), f64(a16),
                     params64["ln2_g"], params64["ln2_b"], "bf16")
    check_product(f"c_fc {tag}", hid, ln2, p16["fc_wt"], p16["fc_b"], "gelu", torch=torch)
    check_product(f"c_proj2 {tag}", y16, hid, p16["proj2_wt"], p16["proj2_b"], "residual", a16, torch)


def layernorm64(x, g, b):
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(var + ln.EPS) * g + b


def block64(x, p, b, t, c, h) -> np.ndarray:
    """The block in float64 NumPy (used where torch is not installed)."""
    d = c // h
    qkv = layernorm64(x, p["ln1_g"], p["ln1_b"]) @ p["attn_wt"] + p["attn_b"]
    q, k, v = (qkv[:, i * c:(i + 1) * c].reshape(b, t, h, d).transpose(0, 2, 1, 3) for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    s[..., np.triu(np.ones((t, t), dtype=bool), 1)] = -np.inf
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    o = (e / e.sum(axis=-1, keepdims=True)) @ v
    a = x + o.transpose(0, 2, 1, 3).reshape(b * t, c) @ p["proj_wt"] + p["proj_b"]
    hid = gelu64(layernorm64(a, p["ln2_g"], p["ln2_b"]) @ p["fc_wt"] + p["fc_b"])
    return a + hid @ p["proj2_wt"] + p["proj2_b"]


# --8<-- [start:torch]
def torch_block(torch, c: int, h: int, params64: dict, dtype):
    """nanoGPT's Block with GPT-2's tanh GELU (nanoGPT's nn.GELU() is the
    erf form), with our weights, in `dtype`, on the GPU."""
    import torch.nn.functional as F

    class GPT2Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = torch.nn.LayerNorm(c, eps=ln.EPS), torch.nn.LayerNorm(c, eps=ln.EPS)
            self.c_attn, self.c_proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
            self.c_fc, self.c_proj2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

        def forward(self, x):                                # x: (B, T, C)
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(o.transpose(1, 2).reshape(b, t, c))
            return x + self.c_proj2(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
# --8<-- [end:torch]

    m = GPT2Block()
    with torch.no_grad():
        for mod, g, bta in ((m.ln_1, "ln1_g", "ln1_b"), (m.ln_2, "ln2_g", "ln2_b")):
            mod.weight.copy_(torch.from_numpy(params64[g]))
            mod.bias.copy_(torch.from_numpy(params64[bta]))
        for mod, wt, bias in ((m.c_attn, "attn_wt", "attn_b"), (m.c_proj, "proj_wt", "proj_b"),
                              (m.c_fc, "fc_wt", "fc_b"), (m.c_proj2, "proj2_wt", "proj2_b")):
            mod.weight.copy_(torch.from_numpy(params64[wt].T.copy()))
            mod.bias.copy_(torch.from_numpy(params64[bias]))
    return m.to(device="cuda", dtype=dtype).eval()


def to_torch(torch, a16: np.ndarray):
    return torch.from_numpy(a16.view(np.int16)).cuda().view(torch.bfloat16)


def check_end_to_end(blk: Block, x64, params64, torch, label: str = "",
                     with_torch: bool = True) -> dict:
    """y against the float64 block, and (where torch is installed and
    with_torch) PyTorch's bf16 block against the same reference, with the
    same tolerance."""
    b, t, c, h = blk.shape
    tag = f"{b}x{t}x{c} H={h}{label}"
    outs = {"ours": from_bf16(blk.y.get())}                # float32: compare's u is 2^-24
    if torch is None:
        ref = block64(x64, params64, b, t, c, h)
        what = "NumPy float64"
    else:
        with torch.no_grad():
            ref = torch_block(torch, c, h, params64, torch.float64)(
                torch.from_numpy(x64.reshape(b, t, c)).cuda()).reshape(b * t, c).cpu().numpy()
            if with_torch:
                eager = torch_block(torch, c, h, params64, torch.bfloat16)
                xt = to_torch(torch, blk.x.get()).reshape(b, t, c)
                outs["torch eager bf16"] = eager(xt).float().reshape(b * t, c).cpu().numpy()
        what = "torch float64 module"
    rms = float(np.sqrt(np.mean(ref**2)))
    facts = {}
    for name, y in outs.items():
        r = cb.compare(f"block {tag}: {name} vs {what}", y, ref, k=TOL_K * U_BF16 / U_FP32,
                       scale=np.full_like(ref, rms))
        cb.report_check(r)
        facts[f"{name.split()[0]}_worst_ratio"] = r.worst_ratio
    return facts


def kinds(k) -> list[str]:
    """The kinds of product loaded in k, the one the launches use last."""
    loaded = [kind for kind, product in PRODUCTS.items() if product.prefix + "bias" in k]
    default = k.get("products", "mma")
    return [kind for kind in loaded if kind != default] + [default]


def run_shape(k, b, t, c, h, rng, torch) -> tuple[Block, np.ndarray, dict]:
    """The block at one shape, checked step by step and end to end, with
    each kind of product loaded (the one k uses last, so that the block's
    arrays then hold its results)."""
    params16, params64 = random_params(c, rng)
    x16 = to_bf16(rng.standard_normal((b * t, c), dtype=np.float32))
    blk = Block(params16, x16, b, t, c, h)
    both = kinds(k)
    facts = {}
    for kind in both:
        label = f" ({kind})" if len(both) > 1 else ""
        blk.poison()
        blk.forward({**k, "products": kind})
        check_steps(blk, params64, torch, label)
        facts = check_end_to_end(blk, from_bf16(x16).astype(np.float64), params64, torch, label,
                                 with_torch=kind == both[-1])
    return blk, params64, facts


def torch_steps(torch, m, xt, b, t, c, h) -> dict:
    """PyTorch's ops for each of our launches, each step on its own inputs."""
    import torch.nn.functional as F

    with torch.no_grad():
        x = xt
        l1 = m.ln_1(x)
        qkv = m.c_attn(l1)
        q, kk, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in qkv.split(c, dim=2))
        o = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        merged = o.transpose(1, 2).reshape(b, t, c)
        a = x + m.c_proj(merged)
        l2 = m.ln_2(a)
        hid = F.gelu(m.c_fc(l2), approximate="tanh")

    def ng(fn):
        def run():
            with torch.no_grad():
                fn()
        return run

    return {
        "ln_1": ng(lambda: m.ln_1(x)),
        "c_attn": ng(lambda: m.c_attn(l1)),
        "attention": ng(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True)),
        "merge_heads": ng(lambda: o.transpose(1, 2).reshape(b, t, c)),
        "c_proj": ng(lambda: x + m.c_proj(merged)),
        "ln_2": ng(lambda: m.ln_2(a)),
        "c_fc": ng(lambda: F.gelu(m.c_fc(l2), approximate="tanh")),
        "c_proj2": ng(lambda: a + m.c_proj2(hid)),
    }


def step_bytes(b, t, c, h) -> dict:
    """Bytes each launch reads and writes at least once (bf16 activations
    and weights, fp32 row statistics): each step's working set."""
    e, w = 2 * b * t * c, 2 * c * c                  # one (B T) x C activation, one C x C weight
    return {"ln_1": 2 * e + 8 * b * t, "c_attn": e + 3 * w + 3 * e, "attention": 4 * e,
            "merge_heads": 2 * e, "c_proj": 3 * e + w, "ln_2": 2 * e + 8 * b * t,
            "c_fc": e + 4 * w + 4 * e, "c_proj2": 4 * e + 4 * w + 2 * e}


def step_flops(b, t, c, h) -> dict:
    m = b * t
    return {"c_attn": 2 * m * c * 3 * c, "attention": _ref.flops(b, h, t, c // h, True),
            "c_proj": 2 * m * c * c, "c_fc": 2 * m * c * 4 * c, "c_proj2": 2 * m * 4 * c * c}


def time_block(k, shape, seed: int, budget_ms: float, *, compile: bool = True, steps: bool = True,
               tag: str = "", target: float | None = None) -> dict:
    """Check, then time, the block at shape (B, T, C, H) against the same
    nn.Module in bf16: replayed as one CUDA graph (with `target`, judged
    there), eager as Python issues it, and (with compile) torch.compile's;
    with steps, each launch alone beside PyTorch's ops for the same step.
    Facts named with `tag`."""
    b, t, c, h = shape
    torch = cb.torch_cuda()
    blk, params64, checks = run_shape(k, b, t, c, h, np.random.default_rng(seed), torch)
    facts = {f"{tag}{name}": v for name, v in checks.items()}
    ws = sum(a.nbytes for a in blk.p.values()) + 2 * 14 * b * t * c       # weights, 14 activations
    plan = blk.plan(k)                  # arguments checked once; timed: the eight launches alone
    flops = step_flops(b, t, c, h)
    total_flops = sum(flops.values())
    print(f"GPT-2 block, B={b} T={t} C={c} H={h}, bf16: {total_flops / 1e9:,.1f} GFLOP")
    label = f"GPT-2 block B={b} T={t}"
    # chapter 12's, measured once a run (a later call, at another shape, reads the same)
    ceiling = tensor_core_ceiling(None, seed, budget_ms) if torch is not None else None
    if ceiling is not None:
        facts.update(ceiling=ceiling[0], ceiling_tflops=ceiling[1] / 1e12)

    def measure(name, fn, baseline=None, as_graph=False, targets=None):
        """(our median ms, the typed entry); without torch there is no
        cuBLAS to measure the ceiling with, nor a baseline: then the time
        alone (None)."""
        if ceiling is None:
            return cb.bench(fn, working_set_bytes=ws, budget_ms=budget_ms).median_ms, None
        e = evidence.benchmark(name, fn, flops=total_flops, working_set_bytes=ws, ceiling=ceiling,
                               baseline=baseline, baseline_as_graph=as_graph, targets=targets,
                               budget_ms=budget_ms)
        return e.timing.median_ms, e

    def run_plan(p):
        return lambda: [launch() for launch in p.values()]

    default = k.get("products", "mma")
    m = xt = eager = None
    if torch is not None:
        m = torch_block(torch, c, h, params64, torch.bfloat16)
        xt = to_torch(torch, blk.x.get()).reshape(b, t, c)

        def eager_block():
            with torch.no_grad():
                m(xt)
        eager = eager_block

    # the whole block: name -> (ms, ours' time over its, the median of the rounds where alternated)
    rows = {}
    ours, e = measure(label, run_plan(plan), (GRAPH_BASELINE, eager) if eager else None, as_graph=True,
                      targets={"baseline": target} if target is not None and eager else None)
    rows[f"ours ({default} products)"] = (ours, None)
    facts.update({f"{tag}ours_ms": ours, f"{tag}ours_tflops": total_flops / ours / 1e9,
                  f"{tag}products": default})
    if e is not None and e.baseline is not None:
        rows[GRAPH_BASELINE] = (e.baseline.timing.median_ms, 1 / e.baseline.ratio)
        facts.update({f"{tag}graph_ms": e.baseline.timing.median_ms, f"{tag}of_graph": e.baseline.ratio})
        if e.targets is not None:
            facts[f"{tag}target_met"] = bool(e.targets.met["baseline"])
    for kind in kinds(k)[:-1]:          # the other kind of product, in the same run
        ms, _ = measure(f"{label} ({kind} products)", run_plan(blk.plan({**k, "products": kind})))
        rows[f"ours ({kind} products)"] = (ms, ours / ms)
        facts.update({f"{tag}ours_{kind}_ms": ms, f"{tag}ours_{kind}_tflops": total_flops / ms / 1e9})
    if eager is not None:
        _, e = measure(f"{label} vs host-bound eager", run_plan(plan), (BASELINE, eager))
        rows[BASELINE] = (e.baseline.timing.median_ms, 1 / e.baseline.ratio)
        facts.update({f"{tag}eager_ms": e.baseline.timing.median_ms, f"{tag}of_eager": e.baseline.ratio})
        if compile:
            try:
                compiled = torch.compile(m)

                def comp():
                    with torch.no_grad():
                        compiled(xt)

                for _ in range(3):                                # compile, then warm, before any timing
                    comp()
                torch.cuda.synchronize()
            except Exception as err:                             # noqa: BLE001 (reported, not hidden)
                print(f"  {COMPILE_BASELINE}: not available here ({type(err).__name__}: "
                      f"{str(err).splitlines()[0][:100]})")
                facts[f"{tag}compile_error"] = type(err).__name__
            else:
                _, e = measure(f"{label} vs torch.compile", run_plan(plan), (COMPILE_BASELINE, comp))
                rows[COMPILE_BASELINE] = (e.baseline.timing.median_ms, 1 / e.baseline.ratio)
                facts.update({f"{tag}compile_ms": e.baseline.timing.median_ms,
                              f"{tag}of_compile": e.baseline.ratio})
    for name, (ms, ours_over) in rows.items():
        vs = f"   ours takes {ours_over:5.2f}x its time" if ours_over is not None else ""
        print(f"  {name:36s} {ms:8.3f} ms {total_flops / ms / 1e9:7.1f} TFLOP/s{vs}")
    if not steps:
        return facts

    # Step by step: each launch alone (its inputs already in place), and
    # PyTorch's ops for the same step.
    theirs = torch_steps(torch, m, xt, b, t, c, h) if torch is not None else {}
    print(f"  {'step':12s} {'ours ms':>9s} {'torch ms':>9s} {'ours TFLOP/s':>13s}")
    total = 0.0
    for name, fn in plan.items():
        step_ws = step_bytes(b, t, c, h)[name]
        t_ours = cb.bench(fn, working_set_bytes=step_ws, budget_ms=budget_ms / 4).median_ms
        total += t_ours
        t_torch = (cb.bench(theirs[name], working_set_bytes=step_ws, budget_ms=budget_ms / 4).median_ms
                   if name in theirs else None)
        rate = f"{flops[name] / t_ours / 1e9:13.1f}" if name in flops else " " * 13
        tt = f"{t_torch:9.3f}" if t_torch is not None else " " * 9
        print(f"  {name:12s} {t_ours:9.3f} {tt} {rate}")
        facts[f"{tag}step_{name}_ms"] = t_ours
        if t_torch is not None:
            facts[f"{tag}torch_step_{name}_ms"] = t_torch
    facts[f"{tag}steps_sum_ms"] = total
    print(f"  {'sum':12s} {total:9.3f}  (the block in one go: {ours:.3f} ms)")
    return facts


def bench(k, seed: int, budget_ms: float) -> dict:
    """GPT-2 small at the benchmark shape, and the target (judged against
    the eager block replayed as one CUDA graph)."""
    return time_block(k, BENCH_SHAPE, seed, budget_ms, target=TARGET)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    k = load_kernels()
    rng = np.random.default_rng(args.seed)
    sanitized = bool(os.environ.get("CUDABOOK_SANITIZER"))
    torch = None if sanitized else cb.torch_cuda()
    for b, t, c, h in SANITIZER_SHAPES if sanitized else SHAPES:
        run_shape(k, b, t, c, h, rng, torch)
    if args.bench:
        print(f"{gpu.name}: {gpu.sm_count} SMs")
        cb.report_facts(baseline=GRAPH_BASELINE, target=TARGET, **bench(k, args.seed, args.budget_ms))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
