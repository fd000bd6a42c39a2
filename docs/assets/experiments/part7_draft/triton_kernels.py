"""The book's four kernels in Triton: fused bias + GELU + residual, row
softmax, a bf16 GEMM and FlashAttention-style attention forward.

Draft for Part VII, chapter 1 ("Triton", issue #43). Each kernel is the
Triton form of a CUDA listing of the book, with a launcher that checks its
arguments first (dtype, shape, contiguity, device: an error names the
argument) and then launches it:

    bias_gelu_residual(x, bias, residual)  code/fusion/bias_gelu_residual.cu
    softmax(x)                             code/softmax_norm/softmax.cu
    matmul(a, b)                           code/matmul_tc/wgmma_gemm.cu
    matmul_tma(a, b)                       the same, its tiles moved by TMA
    attention(q, k, v, causal=False)       code/attention/flash_bf16.cu

Inputs are torch tensors on a CUDA device, or on the CPU when Triton runs
in its interpreter (TRITON_INTERPRET=1 set before triton is imported):
test_triton_cpu.py runs every kernel that way. Each launcher takes `out=`
(written in place, as the book's benchmarks do) and returns the output;
after a launch, COMPILED[name] holds what Triton compiled (its .asm has
the 'ttgir' and 'ptx' text; gpu_bench.py greps them).

Where a CUDA listing chooses threads, vector widths, shared memory and the
order of loads, a Triton program chooses a block of data: the compiler
maps it onto threads, vectorises its loads, stages tiles through shared
memory and picks the tensor-core instruction (mma.sync or, on Hopper,
wgmma). What stays ours: the tile sizes, the masks at the edges, the
order of the tiles, and the numerics (float32 arithmetic, the online
softmax, where a value is rounded to bf16).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

COMPILED: dict = {}          # kernel name -> the CompiledKernel of its last launch
MAX_ELEMENTS = 2**31 - 1     # the kernels index with int32: every tensor below this many elements
LOG2E = 1.4426950408889634


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU, in its interpreter."""
    return os.environ.get("TRITON_INTERPRET") == "1"


# ---------------------------------------------------------------- argument checks

def _check(name: str, t, *, dtypes: tuple, ndim: int | None = None, shape: tuple | None = None,
           device: torch.device | None = None) -> None:
    """Raise TypeError/ValueError naming `name` unless `t` is a contiguous
    tensor of one of `dtypes`, of `ndim` dimensions or exactly `shape`, on
    `device` (a CUDA device unless the interpreter runs), small enough for
    int32 indexing."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        want = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name}: expected dtype {want}, got {str(t.dtype).removeprefix('torch.')}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if any(s == 0 for s in t.shape):
        raise ValueError(f"{name}: expected no empty dimension, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor, got strides {tuple(t.stride())}")
    if t.numel() > MAX_ELEMENTS:
        raise ValueError(f"{name}: {t.numel():,} elements, more than the {MAX_ELEMENTS:,} that "
                         "int32 indexing reaches")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (where the first input is), got {t.device}")
    if device is None and t.device.type != "cuda" and not interpreting():
        raise ValueError(f"{name}: expected a tensor on a CUDA device, got {t.device} "
                         "(CPU tensors run only in Triton's interpreter, TRITON_INTERPRET=1)")


def _check_out(out, inputs: dict, *, dtypes: tuple, shape: tuple, device: torch.device):
    """out, checked like an input, and sharing no memory with any input."""
    _check("out", out, dtypes=dtypes, shape=shape, device=device)
    lo, hi = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    for name, t in inputs.items():
        t_lo = t.data_ptr()
        if t_lo < hi and lo < t_lo + t.numel() * t.element_size():
            raise ValueError(f"out: shares memory with {name}; give a separate output tensor")
    return out


# ---------------------------------------------------------------- (a) bias + GELU + residual

# --8<-- [start:gelu]
@triton.jit
def _tanh(z):
    """tanh(z) = sign(z) (1 - e) / (1 + e), e = exp(-2 |z|) <= 1: no overflow
    for any z. (libdevice's tanh, the .cu's tanhf, has no interpreter
    version; this form is within a few float32 units of it.)"""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z >= 0, t, -t)


@triton.jit
def bias_gelu_residual_kernel(x_ptr, bias_ptr, r_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    """y = r + gelu(x + bias) for BLOCK consecutive elements of the (rows,
    cols) matrices, seen as one flat array of n elements."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    x = tl.load(x_ptr + offs, mask=inside).to(tl.float32)
    b = tl.load(bias_ptr + offs % cols, mask=inside).to(tl.float32)   # column offs % cols
    r = tl.load(r_ptr + offs, mask=inside).to(tl.float32)
    v = x + b
    g = 0.5 * v * (1.0 + _tanh(0.7978845608 * (v + 0.044715 * v * v * v)))   # sqrt(2/pi)
    tl.store(y_ptr + offs, (r + g).to(tl.bfloat16), mask=inside)      # the one rounding to bf16
# --8<-- [end:gelu]


FUSION_BLOCK, FUSION_WARPS = 1024, 4      # 8 bf16 (16 bytes) a thread


def bias_gelu_residual(x, bias, residual, out=None, *, block: int = FUSION_BLOCK):
    """residual + gelu(x + bias) (tanh form), bf16 in and out, float32 math.
    x, residual: (rows, cols); bias: (cols,)."""
    _check("x", x, dtypes=(torch.bfloat16,), ndim=2)
    rows, cols = x.shape
    _check("bias", bias, dtypes=(torch.bfloat16,), shape=(cols,), device=x.device)
    _check("residual", residual, dtypes=(torch.bfloat16,), shape=(rows, cols), device=x.device)
    if out is None:
        out = torch.empty_like(x)
    _check_out(out, {"x": x, "bias": bias, "residual": residual}, dtypes=(torch.bfloat16,),
               shape=(rows, cols), device=x.device)
    n = x.numel()
    if n > MAX_ELEMENTS - block:
        raise ValueError(f"x: {n:,} elements; the last block's offsets must stay below 2^31")
    COMPILED["bias_gelu_residual"] = bias_gelu_residual_kernel[(triton.cdiv(n, block),)](
        x, bias, residual, out, n, cols, BLOCK=block, num_warps=FUSION_WARPS)
    return out


# ---------------------------------------------------------------- (b) row softmax

# --8<-- [start:softmax]
@triton.jit
def softmax_rows_kernel(x_ptr, y_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """ROWS whole rows a program, each held in registers (BLOCK >= cols):
    one read of the row, one write, as the .cu's softmax_warp and
    softmax_block."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK)
    inside = (r[:, None] < rows) & (c[None, :] < cols)
    at = r[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + at, mask=inside, other=-float("inf")).to(tl.float32)   # exp(-inf) = 0
    m = tl.max(x, axis=1)                           # the "safe" softmax: exp(x - m) <= 1
    e = tl.exp(x - m[:, None])
    inv = 1.0 / tl.sum(e, axis=1)
    tl.store(y_ptr + at, (e * inv[:, None]).to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    """One row a program, any length, BLOCK columns at a time: pass 1 keeps
    the running maximum m and the sum d of exp(x - m), rescaling d when m
    grows (the online softmax); pass 2 writes the output."""
    row = x_ptr + tl.program_id(0).to(tl.int64) * cols
    out = y_ptr + tl.program_id(0).to(tl.int64) * cols
    m = -float("inf")
    d = 0.0
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        x = tl.load(row + c, mask=c < cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)   # all -inf so far: no -inf - -inf
        d = d * tl.exp(m - m_ref) + tl.sum(tl.exp(x - m_ref), axis=0)
        m = m_new
    inv = 1.0 / d
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        x = tl.load(row + c, mask=c < cols, other=-float("inf")).to(tl.float32)
        tl.store(out + c, (tl.exp(x - m) * inv).to(y_ptr.dtype.element_ty), mask=c < cols)
# --8<-- [end:softmax]


SOFTMAX_REGISTER_MAX = 16384     # longest row held in registers; longer rows go online
SOFTMAX_ONLINE_BLOCK = 4096
SOFTMAX_TILE = 2048              # short rows: ROWS rows a program, about this many elements


def softmax_plan(cols: int, register_max: int = SOFTMAX_REGISTER_MAX) -> dict:
    """Which kernel and block a row of `cols` elements gets, and its warps."""
    if cols > register_max:
        return {"kernel": "online", "BLOCK": SOFTMAX_ONLINE_BLOCK, "ROWS": 1, "num_warps": 8}
    block = triton.next_power_of_2(cols)
    rows = max(1, min(16, SOFTMAX_TILE // block))
    warps = 4 if block * rows <= 2048 else 8 if block <= 8192 else 16
    return {"kernel": "rows", "BLOCK": block, "ROWS": rows, "num_warps": warps}


def softmax(x, out=None, *, plan: dict | None = None):
    """Softmax of each row of x (rows, cols), float32 or bf16 (computed in
    float32, stored in x's dtype). plan: softmax_plan's dict, to force a
    kernel or a block (the tests make small blocks)."""
    _check("x", x, dtypes=(torch.float32, torch.bfloat16), ndim=2)
    rows, cols = x.shape
    if out is None:
        out = torch.empty_like(x)
    _check_out(out, {"x": x}, dtypes=(x.dtype,), shape=(rows, cols), device=x.device)
    p = softmax_plan(cols) if plan is None else plan
    if p["kernel"] == "rows":
        if p["BLOCK"] < cols:
            raise ValueError(f"plan: BLOCK {p['BLOCK']} cannot hold a row of {cols} columns")
        COMPILED["softmax_rows"] = softmax_rows_kernel[(triton.cdiv(rows, p["ROWS"]),)](
            x, out, rows, cols, ROWS=p["ROWS"], BLOCK=p["BLOCK"], num_warps=p["num_warps"])
    else:
        COMPILED["softmax_online"] = softmax_online_kernel[(rows,)](
            x, out, cols, BLOCK=p["BLOCK"], num_warps=p["num_warps"])
    return out


# ---------------------------------------------------------------- (c) bf16 GEMM

@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Program pid's tile (row, column) of C. GROUP_M tile rows walk along N
    together, so the B tiles they share are read from the L2, not from
    memory (the .cu's tile_of)."""
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    first_m = pid // (GROUP_M * tiles_n) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    within = pid % (GROUP_M * tiles_n)
    return first_m + within % group_rows, within // group_rows


# --8<-- [start:matmul]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B. A (M, K) and B (K, N) are
    row-major bf16, as the book's wgmma_gemm reads them; C (M, N) bf16,
    accumulated in float32 and rounded once."""
    tile_m, tile_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rm[:, None] * K + rk[None, :]          # BLOCK_M x BLOCK_K of A
    b_tile = b_ptr + rk[:, None] * N + rn[None, :]          # BLOCK_K x BLOCK_N of B
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):                         # software-pipelined by num_stages
        a = tl.load(a_tile, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)                              # tensor cores, float32 accumulator
        a_tile += BLOCK_K
        b_tile += BLOCK_K * N
    c = c_ptr + rm[:, None] * N + rn[None, :]
    tl.store(c, acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
# --8<-- [end:matmul]


def _config_dict(cfg: triton.Config) -> dict:
    """A config as the launchers' config= takes it."""
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def _matmul_config(bm, bn, bk, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                         num_warps=warps, num_stages=stages)


# Hopper (sm_90): a warpgroup is 4 warps; 128 x 256 x 64 is the book's tile
# (3 stages: 144 KiB of shared memory; the .cu keeps 4 with its own layout).
MATMUL_CONFIGS = [
    _matmul_config(128, 256, 64, 8, 3),
    _matmul_config(256, 128, 64, 8, 3),
    _matmul_config(128, 128, 64, 8, 4),
    _matmul_config(128, 128, 64, 4, 4),
    _matmul_config(128, 64, 64, 4, 4),
    _matmul_config(64, 128, 64, 4, 4),
]
matmul_tuned = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])(matmul_kernel)


def matmul(a, b, out=None, *, config: dict | None = None):
    """C = A @ B, bf16 (M, K) by bf16 (K, N), row-major, C bf16 with float32
    accumulation. config: {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M",
    "num_warps", "num_stages"} to skip autotuning (the tests use small
    blocks); otherwise the fastest of MATMUL_CONFIGS for this M, N, K (in
    the interpreter, which cannot time them, the first)."""
    _check("a", a, dtypes=(torch.bfloat16,), ndim=2)
    _check("b", b, dtypes=(torch.bfloat16,), ndim=2, device=a.device)
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"b: expected {k} rows (a is {m} x {k}: the inner dimensions must agree), "
                         f"got shape {tuple(b.shape)}")
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    _check_out(out, {"a": a, "b": b}, dtypes=(torch.bfloat16,), shape=(m, n), device=a.device)
    if config is None and interpreting():      # nothing to time configs with: take the first
        config = _config_dict(MATMUL_CONFIGS[0])
    if config is None:
        def grid(meta):
            return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
        COMPILED["matmul"] = matmul_tuned[grid](a, b, out, m, n, k)
    else:
        cfg = {"GROUP_M": 8, "num_warps": 4, "num_stages": 3, **config}
        grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
        COMPILED["matmul"] = matmul_kernel[grid](a, b, out, m, n, k, **cfg)
    return out


# --8<-- [start:matmul_tma]
@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """The same tile of C = A @ B, its tiles moved by TMA: each descriptor
    (made on the host) holds its matrix's address, sizes, row stride and
    tile shape; a load names the tile's corner, and the copy engine fills
    what lies outside the matrix with zeros, so no masks. (The book's
    wgmma_gemm moves its tiles the same way.)"""
    tile_m, tile_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    m0, n0 = tile_m * BLOCK_M, tile_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        acc = tl.dot(a_desc.load([m0, k0]), b_desc.load([k0, n0]), acc)
    c_desc.store([m0, n0], acc.to(tl.bfloat16))              # clipped at the matrix's edge
# --8<-- [end:matmul_tma]


def _set_tma_blocks(meta):
    """Autotuning's pre-hook: each descriptor's tile is the config's."""
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    meta["a_desc"].block_shape = [bm, bk]
    meta["b_desc"].block_shape = [bk, bn]
    meta["c_desc"].block_shape = [bm, bn]


MATMUL_TMA_CONFIGS = [triton.Config(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages,
                                    pre_hook=_set_tma_blocks) for c in MATMUL_CONFIGS]
matmul_tma_tuned = triton.autotune(configs=MATMUL_TMA_CONFIGS, key=["M", "N", "K"])(matmul_tma_kernel)


def matmul_tma(a, b, out=None, *, config: dict | None = None):
    """matmul()'s product through TMA descriptors. TMA needs every row on a
    16-byte boundary: K and N multiples of 8 (as the book's wgmma_gemm)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    _check("a", a, dtypes=(torch.bfloat16,), ndim=2)
    _check("b", b, dtypes=(torch.bfloat16,), ndim=2, device=a.device)
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"b: expected {k} rows (a is {m} x {k}: the inner dimensions must agree), "
                         f"got shape {tuple(b.shape)}")
    for name, size in (("a.shape[1] (K)", k), ("b.shape[1] (N)", n)):
        if size % 8:
            raise ValueError(f"{name}: must be a multiple of 8 for TMA (each row on a 16-byte "
                             f"boundary), got {size}; matmul() takes any shape")
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    _check_out(out, {"a": a, "b": b}, dtypes=(torch.bfloat16,), shape=(m, n), device=a.device)
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.data_ptr() % 16:
            raise ValueError(f"{name}: TMA needs a 16-byte aligned address, got {t.data_ptr():#x}")
    if config is None and interpreting():
        config = _config_dict(MATMUL_CONFIGS[0])
    cfg = None if config is None else {"GROUP_M": 8, "num_warps": 4, "num_stages": 3, **config}
    bm, bn, bk = (cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) if cfg else (16, 16, 16)  # tuned: set by the pre-hook
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
             TensorDescriptor.from_tensor(out, [bm, bn]))
    if cfg is None:
        def grid(meta):
            return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
        COMPILED["matmul_tma"] = matmul_tma_tuned[grid](*descs, m, n, k)
    else:
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
        COMPILED["matmul_tma"] = matmul_tma_kernel[grid](*descs, m, n, k, **cfg)
    return out


# ---------------------------------------------------------------- (d) attention forward

# --8<-- [start:attention]
@triton.jit
def _attend(acc, l, m, q, k_ptr, v_ptr, q_idx, lo, hi, S, qk_scale,
            D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold the keys lo .. hi - 1 into one block of query rows, BLOCK_N keys
    a step. Running state per row: m, the largest score so far (log2
    units); l, the sum of 2^(s - m); acc, the sum of 2^(s - m) v. MASKED:
    the tile may hold keys past S, or (CAUSAL) after the query."""
    d = tl.arange(0, D)
    for start in range(lo, hi, BLOCK_N):
        kv = start + tl.arange(0, BLOCK_N)
        if MASKED:
            k = tl.load(k_ptr + kv[:, None] * D + d[None, :], mask=kv[:, None] < S, other=0.0)
        else:
            k = tl.load(k_ptr + kv[:, None] * D + d[None, :])
        s = tl.dot(q, tl.trans(k)) * qk_scale               # scores, times log2(e) / sqrt(D)
        if MASKED:
            keep = kv[None, :] < S
            if CAUSAL:
                keep = keep & (kv[None, :] <= q_idx[:, None])
            s = tl.where(keep, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)                          # rescales what was summed against m
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        if MASKED:
            v = tl.load(v_ptr + kv[:, None] * D + d[None, :], mask=kv[:, None] < S, other=0.0)
        else:
            v = tl.load(v_ptr + kv[:, None] * D + d[None, :])
        acc = tl.dot(p.to(tl.bfloat16), v, acc)             # P rounded to bf16, as the .cu does
        m = m_new
    return acc, l, m


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale, D: tl.constexpr, CAUSAL: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """BLOCK_M query rows of one (batch, head) against all its keys (or, with
    CAUSAL, the keys up to each row). Q, K, V, O: (B, H, S, D) bf16."""
    head = tl.program_id(1).to(tl.int64) * S * D           # this (batch, head)'s S x D matrices
    q_ptr += head
    k_ptr += head
    v_ptr += head
    o_ptr += head
    first = tl.program_id(0) * BLOCK_M
    q_idx = first + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + q_idx[:, None] * D + d[None, :], mask=q_idx[:, None] < S, other=0.0)
    m = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    # Key tiles that need no mask first, then the few that do: with CAUSAL,
    # keys before `first` are seen by every row (BLOCK_M is a multiple of
    # BLOCK_N, so `first` starts a tile); the tiles that cross the diagonal,
    # or S, are masked.
    if CAUSAL:
        unmasked_end = first
        end = tl.minimum(first + BLOCK_M, S)
    else:
        unmasked_end = (S // BLOCK_N) * BLOCK_N
        end = S
    acc, l, m = _attend(acc, l, m, q, k_ptr, v_ptr, q_idx, 0, unmasked_end, S, qk_scale,
                        D, BLOCK_N, False, CAUSAL)
    acc, l, m = _attend(acc, l, m, q, k_ptr, v_ptr, q_idx, unmasked_end, end, S, qk_scale,
                        D, BLOCK_N, True, CAUSAL)
    o = acc / l[:, None]                                     # every row saw its first key: l >= 1
    tl.store(o_ptr + q_idx[:, None] * D + d[None, :], o.to(tl.bfloat16), mask=q_idx[:, None] < S)
# --8<-- [end:attention]


def _attention_config(bm, bn, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


ATTENTION_CONFIGS = [
    _attention_config(128, 64, 8, 3),
    _attention_config(128, 64, 4, 3),
    _attention_config(128, 128, 8, 2),
    _attention_config(64, 64, 4, 3),
    _attention_config(128, 32, 4, 3),
]
attention_tuned = triton.autotune(configs=ATTENTION_CONFIGS, key=["S", "D", "CAUSAL"])(attention_kernel)
HEAD_DIMS = (64, 128)


def attention(q, k, v, causal: bool = False, out=None, *, config: dict | None = None):
    """O = softmax(Q K^T / sqrt(D)) V for each (batch, head), Q, K, V, O of
    shape (B, H, S, D) bf16, D 64 or 128; causal: each query sees the keys
    up to its own position. config: {"BLOCK_M", "BLOCK_N", "num_warps",
    "num_stages"} to skip autotuning (BLOCK_M a multiple of BLOCK_N); in
    the interpreter, which cannot time configs, the first of ATTENTION_CONFIGS."""
    _check("q", q, dtypes=(torch.bfloat16,), ndim=4)
    b, h, s, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"q: head dimension D = q.shape[3] must be one of {HEAD_DIMS}, got {d}")
    _check("k", k, dtypes=(torch.bfloat16,), shape=(b, h, s, d), device=q.device)
    _check("v", v, dtypes=(torch.bfloat16,), shape=(b, h, s, d), device=q.device)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    if out is None:
        out = torch.empty_like(q)
    _check_out(out, {"q": q, "k": k, "v": v}, dtypes=(torch.bfloat16,), shape=(b, h, s, d),
               device=q.device)
    if b * h > 65_535:
        raise ValueError(f"q: B x H = {b * h:,} heads, more than the 65,535 a grid allows in y")
    scale = LOG2E / math.sqrt(d)
    if config is None and interpreting():
        config = _config_dict(ATTENTION_CONFIGS[0])
    if config is None:
        def grid(meta):
            return (triton.cdiv(s, meta["BLOCK_M"]), b * h)
        COMPILED["attention"] = attention_tuned[grid](q, k, v, out, s, scale, D=d, CAUSAL=causal)
    else:
        cfg = {"num_warps": 4, "num_stages": 2, **config}
        if cfg["BLOCK_M"] % cfg["BLOCK_N"]:
            raise ValueError(f"config: BLOCK_M ({cfg['BLOCK_M']}) must be a multiple of "
                             f"BLOCK_N ({cfg['BLOCK_N']})")
        grid = (triton.cdiv(s, cfg["BLOCK_M"]), b * h)
        COMPILED["attention"] = attention_kernel[grid](q, k, v, out, s, scale, D=d, CAUSAL=causal, **cfg)
    return out
