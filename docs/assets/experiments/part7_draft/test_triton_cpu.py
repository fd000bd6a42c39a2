"""CPU tests of triton_kernels.py, in Triton's interpreter (no GPU).

Every kernel at small, awkward shapes (rows and columns not multiples of
any block, S = 77, M x N x K = 65 x 33 x 47), every element against a
float64 NumPy reference, within a bound derived from the unit roundoffs
(bf16 u = 2^-8, fp32 u = 2^-24) and the length of each sum, as the book's
listings bound them. Outputs are poisoned (NaN) before each launch. Then
the launchers' argument checks (each error names the argument), and
"teeth": a kernel with one deliberate bug (no rescale in the online
softmax, no -inf in the padding, no accumulation across K tiles, tanh
without its sign) must fail the same comparison.

The interpreter, Triton 3.9.0, departs from the GPU in two places, which
this file mends for the kernels under test (interpreter_as_gpu) and
watches (test_interpreter_quirks): tl.dot on bf16 operands multiplies their
bit patterns as integers, and float32 -> bf16 conversion truncates where
the GPU rounds to nearest even. The mends widen bf16 to float32 (exact)
before tl.dot, and round to nearest even. A third test compiles each
kernel for sm_90 ahead of time (no GPU needed), in a subprocess without
the interpreter.

Run:  TRITON_INTERPRET=1 is set here, before triton is imported.
      /tmp/trvenv/bin/python -m pytest docs/assets/experiments/part7_draft/test_triton_cpu.py -q
"""

import math
import os
import subprocess
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"              # before triton is imported

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import triton_kernels as tk  # noqa: E402

U_BF16, U_FP32 = 2.0**-8, 2.0**-24
# The rows kernel's padding rows (past the last row) are all -inf: their
# max - max is NaN in NumPy's hands, and they are never stored.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")


# ---------------------------------------------------------------- the interpreter, made to round as the GPU does

def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to even (NaN stays NaN), as cvt.rn.bf16.f32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


_ORIGINAL = {"create_dot": interpreter.InterpreterBuilder.create_dot,
             "cast_impl": interpreter.InterpreterBuilder.cast_impl}


def _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """bf16 operands widened to float32 (exact), then the interpreter's own dot."""
    def widen(h):
        if h.dtype.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_bf16_bits_to_f32(h.data), tl.float32)
        return h
    return _ORIGINAL["create_dot"](self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)


def _cast_impl(self, src, dst_type):
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
        return interpreter.TensorHandle(_f32_to_bf16_bits(src.data), tl.bfloat16)
    return _ORIGINAL["cast_impl"](self, src, dst_type)


def _set_mends(on: bool) -> None:
    interpreter.InterpreterBuilder.create_dot = _create_dot if on else _ORIGINAL["create_dot"]
    interpreter.InterpreterBuilder.cast_impl = _cast_impl if on else _ORIGINAL["cast_impl"]


@pytest.fixture(autouse=True)
def interpreter_as_gpu():
    _set_mends(True)
    yield
    _set_mends(False)


@triton.jit
def _quirk_kernel(a_ptr, b_ptr, c_ptr, y_ptr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
    tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))
    tl.store(y_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b).to(tl.bfloat16))


def _quirk_run():
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(16, 16, generator=g).to(torch.bfloat16) for _ in range(2))
    c, y = torch.empty(16, 16), torch.empty(16, 16, dtype=torch.bfloat16)
    _quirk_kernel[(1,)](a, b, c, y)
    exact = a.double() @ b.double()
    return (c.double() - exact).abs().max().item(), bool(torch.equal(y, c.to(torch.bfloat16)))


def test_interpreter_quirks():
    """Without the mends the interpreter's bf16 dot is garbage and its bf16
    rounding truncates; with them, the dot is float32-exact-ish and the
    rounding matches torch's (nearest even). If the first assertion fails,
    Triton has fixed its interpreter: drop the mends."""
    _set_mends(False)
    raw_err, raw_rounds = _quirk_run()
    _set_mends(True)
    err, rounds = _quirk_run()
    assert raw_err > 1.0 and not raw_rounds, (raw_err, raw_rounds)
    assert err < 1e-4 and rounds, (err, rounds)


# ---------------------------------------------------------------- helpers

def rng(seed=0):
    return torch.Generator().manual_seed(seed)


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16)


def f64(t: torch.Tensor) -> np.ndarray:
    return t.double().numpy()


def poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def assert_within(name, got: torch.Tensor, ref: np.ndarray, bound: np.ndarray):
    """Every element: |got - ref| <= bound, NaN failing; the worst shown."""
    g = f64(got)
    err = np.abs(g - ref)
    bad = ~(err <= bound)                      # NaN fails too
    if bad.any():
        ratio = np.where(np.isnan(err), np.inf, err / np.maximum(bound, 1e-300))
        worst = np.unravel_index(np.argmax(ratio), ratio.shape)
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} elements outside the bound; worst at "
                             f"{tuple(int(i) for i in worst)}: got {g[worst]!r}, want {ref[worst]!r}, "
                             f"error {err[worst]:.3e} > bound {bound[worst]:.3e}")


# ---------------------------------------------------------------- (a) bias + GELU + residual

def gelu64(v):
    return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))


def fusion_inputs(rows, cols, seed=0):
    g = rng(seed)
    x = bf16(torch.randn(rows, cols, generator=g))
    bias = bf16(0.1 * torch.randn(cols, generator=g))
    r = bf16(torch.randn(rows, cols, generator=g))
    return x, bias, r


def check_fusion(mod, rows, cols, block, seed=0):
    """y's one rounding to bf16 (u_bf16 |ref|) plus 16 float32 roundings of
    the terms' size |x + b| + |r| (the .cu's bound counts 12; the tanh here
    is exp-based: 1 - e, 1 + e and their quotient add a few)."""
    x, bias, r = fusion_inputs(rows, cols, seed)
    t = f64(x) + f64(bias)[None, :]
    ref = f64(r) + gelu64(t)
    y = poisoned((rows, cols), torch.bfloat16)
    mod.bias_gelu_residual(x, bias, r, out=y, block=block)
    extra = 16 * U_FP32 * (np.abs(t) + np.abs(f64(r)))
    assert_within(f"fusion {rows}x{cols}", y, ref, U_BF16 * np.abs(ref) + (1 + U_BF16) * extra)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 8), (3, 5), (31, 33), (65, 47), (7, 1031)])
@pytest.mark.parametrize("block", [64, tk.FUSION_BLOCK])
def test_fusion(rows, cols, block):
    check_fusion(tk, rows, cols, block)


def test_fusion_large_arguments():
    """|v| up to 30: tanh saturates to +-1 on both sides without overflow."""
    x = bf16(torch.linspace(-30, 30, 301).reshape(7, 43))
    bias = bf16(torch.zeros(43))
    r = bf16(torch.zeros(7, 43))
    y = poisoned((7, 43), torch.bfloat16)
    tk.bias_gelu_residual(x, bias, r, out=y)
    ref = gelu64(f64(x))
    assert_within("fusion saturation", y, ref, U_BF16 * np.abs(ref) + 16 * U_FP32 * np.abs(f64(x)))


# ---------------------------------------------------------------- (b) softmax

def softmax64(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_inputs(rows, cols, dtype, seed=0, masked=False):
    """Logits ~ 3 N(0, 1); masked: -inf in the first quarter of each row and
    30% of the rest, the last logit finite (as the book's softmax draws)."""
    g = rng(seed)
    x = 3 * torch.randn(rows, cols, generator=g)
    if masked:
        mask = torch.rand(rows, cols, generator=g) < 0.3
        mask[:, : cols // 4] = True
        mask[:, -1] = False
        x[mask] = -math.inf
    return x.to(dtype)


def softmax_bound(x64, ref, plan, cols, bf16_out):
    """The book's softmax bound, relative to each y_j, in float32 units:
    |x_j - m| (the rounding of x_j - m carried by exp) + 3 max |x_k - m|
    (the exps' arguments in the sum, and the online rescalings) + h (the
    longest chain of additions behind the sum: at most one per column, the
    worst case, and 3 a chunk for the online kernel's rescaling) + 4 (exp,
    reciprocal, product); for bf16 output, its rounding on top."""
    finite = np.isfinite(x64)
    dist = np.where(finite, np.abs(x64 - x64.max(axis=1, keepdims=True)), 0.0)
    chunks = math.ceil(cols / plan["BLOCK"]) if plan["kernel"] == "online" else 1
    h = max(cols, plan["BLOCK"] if plan["kernel"] == "rows" else cols) + 3 * chunks
    rel = (dist + 3 * dist.max(axis=1, keepdims=True) + h + 4) * U_FP32
    if bf16_out:
        return (U_BF16 + (1 + U_BF16) * rel) * ref
    return rel * ref


def check_softmax(mod, rows, cols, dtype, plan=None, masked=False, seed=0):
    x = softmax_inputs(rows, cols, dtype, seed, masked)
    x64 = f64(x)
    ref = softmax64(x64)
    y = poisoned((rows, cols), dtype)
    mod.softmax(x, out=y, plan=plan)
    used = plan or tk.softmax_plan(cols)
    assert_within(f"softmax {used['kernel']} {rows}x{cols} {dtype}", y, ref,
                  softmax_bound(x64, ref, used, cols, dtype == torch.bfloat16))
    if masked:
        assert (f64(y)[~np.isfinite(x64)] == 0).all(), "a masked logit's output must be exactly 0"


SOFTMAX_SHAPES = [(1, 1), (3, 7), (5, 32), (33, 100), (17, 129), (4, 1025)]
ONLINE = {"kernel": "online", "BLOCK": 64, "ROWS": 1, "num_warps": 4}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", SOFTMAX_SHAPES)
def test_softmax_rows(rows, cols, dtype):
    check_softmax(tk, rows, cols, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (3, 200), (2, 1000), (5, 64)])
def test_softmax_online(rows, cols, dtype):
    check_softmax(tk, rows, cols, dtype, plan=ONLINE)


@pytest.mark.parametrize("plan", [None, ONLINE], ids=["rows", "online"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(3, 7), (33, 100), (2, 1000)])
def test_softmax_masked(rows, cols, dtype, plan):
    """-inf logits, some rows starting with a whole chunk of them (the online
    kernel's -inf - -inf guard), give exact zeros."""
    check_softmax(tk, rows, cols, dtype, plan=plan, masked=True)


def test_softmax_plan():
    assert tk.softmax_plan(7) == {"kernel": "rows", "BLOCK": 8, "ROWS": 16, "num_warps": 4}
    assert tk.softmax_plan(4096)["kernel"] == "rows" and tk.softmax_plan(4096)["ROWS"] == 1
    assert tk.softmax_plan(tk.SOFTMAX_REGISTER_MAX + 1)["kernel"] == "online"


# ---------------------------------------------------------------- (c) GEMM

def bound_k(k):
    """tc_gemm.bound_k: K roundings of up to an ulp (2u) in float32, and the reference's own."""
    return 2 * k / (1 - 2 * k * U_FP32) + 1


def check_matmul(mod, m, n, k, config, seed=0, launcher="matmul"):
    """C's one rounding to bf16 (u_bf16 |C|), plus the float32 accumulation:
    bound_k(K) u_fp32 |A| @ |B| (bf16 products are exact in float32)."""
    g = rng(seed)
    a, b = bf16(torch.randn(m, k, generator=g)), bf16(torch.randn(k, n, generator=g))
    a64, b64 = f64(a), f64(b)
    ref, size = a64 @ b64, np.abs(a64) @ np.abs(b64)
    c = poisoned((m, n), torch.bfloat16)
    getattr(mod, launcher)(a, b, out=c, config=config)
    assert_within(f"matmul {m}x{n}x{k}", c, ref,
                  U_BF16 * np.abs(ref) + (1 + U_BF16) * bound_k(k) * U_FP32 * size)


SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}
MEDIUM = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4}


@pytest.mark.parametrize("config", [SMALL, MEDIUM], ids=["16x16x16", "32x64x32"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (16, 16, 16), (65, 33, 47), (33, 40, 24),
                                   (130, 70, 100), (7, 129, 200)])
def test_matmul(m, n, k, config):
    check_matmul(tk, m, n, k, config)


def test_matmul_default():
    """config=None: in the interpreter, the first of MATMUL_CONFIGS."""
    check_matmul(tk, 65, 33, 47, None)


@pytest.mark.parametrize("i", range(len(tk.MATMUL_CONFIGS)))
def test_matmul_every_autotune_config(i):
    """Each block shape autotuning may pick, at an awkward shape (several K
    tiles, edges in M and N)."""
    check_matmul(tk, 130, 300, 200, tk._config_dict(tk.MATMUL_CONFIGS[i]))


@pytest.mark.parametrize("config", [SMALL, MEDIUM, None], ids=["16x16x16", "32x64x32", "default"])
@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (65, 40, 48), (33, 40, 24), (130, 72, 104)])
def test_matmul_tma(m, n, k, config):
    """The TMA form: K and N multiples of 8, M anything; the descriptors'
    zero fill and clipped store stand in for the masks."""
    check_matmul(tk, m, n, k, config, launcher="matmul_tma")


# ---------------------------------------------------------------- (d) attention

def attention64(q, k, v, causal):
    """float64 O, P|V| (the weights applied to |V|) and the largest
    |q|.|k| / sqrt(D), as code/attention/_ref.py computes them."""
    d = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    size = np.abs(q) @ np.swapaxes(np.abs(k), -1, -2) / math.sqrt(d)
    if causal:
        future = np.triu(np.ones(s.shape[-2:], dtype=bool), 1)
        s = np.where(future, -np.inf, s)
        size = np.where(future, 0.0, size)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v, p @ np.abs(v), float(size.max())


def attention_inputs(b, h, s, d, q_scale=1.0, seed=0):
    g = rng(seed)
    q = bf16(q_scale * torch.randn(b, h, s, d, generator=g))
    k, v = (bf16(torch.randn(b, h, s, d, generator=g)) for _ in range(2))
    return q, k, v


def check_attention(mod, b, h, s, d, causal, config, q_scale=1.0, seed=0):
    """_ref.py's bound with O and P rounded to bf16: |O - ref| <= (u_fp32
    (S + 16 + 2 D smax) + 2 u_bf16) (|ref| + P|V|)."""
    q, k, v = attention_inputs(b, h, s, d, q_scale, seed)
    ref, mag, smax = attention64(f64(q), f64(k), f64(v), causal)
    o = poisoned((b, h, s, d), torch.bfloat16)
    mod.attention(q, k, v, causal, out=o, config=config)
    ku = U_FP32 * (s + 16 + 2 * d * smax) + 2 * U_BF16
    assert_within(f"attention {b}x{h}x{s}x{d} causal={causal}", o, ref, ku * (np.abs(ref) + mag))


ATT_CONFIGS = {"32x16": {"BLOCK_M": 32, "BLOCK_N": 16}, "16x16": {"BLOCK_M": 16, "BLOCK_N": 16},
               "64x32": {"BLOCK_M": 64, "BLOCK_N": 32}}


@pytest.mark.parametrize("config", list(ATT_CONFIGS), ids=list(ATT_CONFIGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("b,h,s,d,q_scale", [(1, 1, 1, 64, 1), (2, 3, 77, 64, 1), (1, 2, 77, 128, 1),
                                             (1, 1, 130, 64, 16), (1, 1, 64, 128, 1)])
def test_attention(b, h, s, d, q_scale, causal, config):
    check_attention(tk, b, h, s, d, causal, ATT_CONFIGS[config], q_scale)


def test_attention_default():
    """config=None: in the interpreter, the first of ATTENTION_CONFIGS."""
    check_attention(tk, 1, 2, 77, 64, True, None)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("i", range(len(tk.ATTENTION_CONFIGS)))
def test_attention_every_autotune_config(i, causal):
    """Each block shape autotuning may pick, S = 300 (several query and key
    tiles, a partial last one), D = 128."""
    check_attention(tk, 1, 1, 300, 128, causal, tk._config_dict(tk.ATTENTION_CONFIGS[i]))


# ---------------------------------------------------------------- argument checks

def _raises(exc, words, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    for w in words:
        assert w in str(info.value), f"{w!r} not in {str(info.value)!r}"


def test_fusion_argument_checks():
    x, bias, r = fusion_inputs(3, 8)
    _raises(TypeError, ["x:", "bfloat16", "float32"], tk.bias_gelu_residual, x.float(), bias, r)
    _raises(ValueError, ["bias:", "(8,)", "(7,)"], tk.bias_gelu_residual, x, bias[:7], r)
    _raises(ValueError, ["residual:", "shape"], tk.bias_gelu_residual, x, bias, r[:2])
    _raises(ValueError, ["x:", "contiguous"], tk.bias_gelu_residual,
            bf16(torch.randn(8, 3)).t(), bias[:3], r[:, :3].contiguous())
    _raises(ValueError, ["x:", "2-D"], tk.bias_gelu_residual, x.reshape(-1), bias, r)
    _raises(ValueError, ["out:", "shares memory with x"], tk.bias_gelu_residual, x, bias, r, out=x)
    _raises(ValueError, ["bias:", "meta"], tk.bias_gelu_residual, x, bias.to("meta"), r)
    _raises(TypeError, ["residual:", "torch.Tensor"], tk.bias_gelu_residual, x, bias, f64(r))


def test_cuda_required_outside_the_interpreter(monkeypatch):
    monkeypatch.setattr(tk, "interpreting", lambda: False)
    x, bias, r = fusion_inputs(3, 8)
    _raises(ValueError, ["x:", "CUDA device", "cpu"], tk.bias_gelu_residual, x, bias, r)


def test_softmax_argument_checks():
    x = softmax_inputs(3, 7, torch.float32)
    _raises(TypeError, ["x:", "float32 or bfloat16", "float16"], tk.softmax, x.half())
    _raises(ValueError, ["x:", "2-D"], tk.softmax, x[0])
    _raises(TypeError, ["out:", "bfloat16"], tk.softmax, x, out=bf16(x))
    _raises(ValueError, ["out:", "shape"], tk.softmax, x, out=torch.empty(3, 8))
    _raises(ValueError, ["x:", "contiguous"], tk.softmax, torch.randn(7, 3).t())
    _raises(ValueError, ["x:", "empty"], tk.softmax, torch.empty(3, 0))
    _raises(ValueError, ["plan:", "BLOCK 4", "7"], tk.softmax, x,
            plan={"kernel": "rows", "BLOCK": 4, "ROWS": 1, "num_warps": 4})


def test_matmul_argument_checks():
    a, b = bf16(torch.randn(5, 7)), bf16(torch.randn(7, 3))
    _raises(TypeError, ["a:", "bfloat16"], tk.matmul, a.float(), b)
    _raises(TypeError, ["b:", "bfloat16"], tk.matmul, a, b.half())
    _raises(ValueError, ["b:", "7 rows", "(6, 3)"], tk.matmul, a, bf16(torch.randn(6, 3)))
    _raises(ValueError, ["b:", "contiguous"], tk.matmul, a, bf16(torch.randn(3, 7)).t())
    _raises(ValueError, ["out:", "(5, 3)"], tk.matmul, a, b, out=bf16(torch.empty(3, 5)))
    _raises(ValueError, ["b:", "meta"], tk.matmul, a, b.to("meta"))


def test_matmul_tma_argument_checks():
    a, b = bf16(torch.randn(5, 16)), bf16(torch.randn(16, 8))
    _raises(ValueError, ["a.shape[1] (K)", "multiple of 8", "12"], tk.matmul_tma, a[:, :12].contiguous(),
            b[:12].contiguous())
    _raises(ValueError, ["b.shape[1] (N)", "multiple of 8", "6"], tk.matmul_tma, a, b[:, :6].contiguous())
    _raises(ValueError, ["out:", "16-byte aligned"], tk.matmul_tma, a, b,
            out=bf16(torch.empty(5 * 8 + 1)).narrow(0, 1, 40).view(5, 8))
    _raises(ValueError, ["b:", "7 rows"], tk.matmul_tma, bf16(torch.randn(5, 7)), b)


def test_attention_argument_checks():
    q, k, v = attention_inputs(1, 2, 9, 64)
    _raises(ValueError, ["q:", "head dimension", "32"], tk.attention, *attention_inputs(1, 2, 9, 32))
    _raises(TypeError, ["k:", "bfloat16"], tk.attention, q, k.float(), v)
    _raises(ValueError, ["v:", "shape"], tk.attention, q, k, v[:, :1].contiguous())
    _raises(ValueError, ["q:", "4-D"], tk.attention, q[0], k[0], v[0])
    _raises(ValueError, ["k:", "contiguous"], tk.attention, q, k.transpose(1, 2).contiguous().transpose(1, 2), v)
    _raises(TypeError, ["causal:", "True or False"], tk.attention, q, k, v, 1)
    _raises(ValueError, ["out:", "shares memory with v"], tk.attention, q, k, v, out=v)
    _raises(ValueError, ["config:", "multiple"], tk.attention, q, k, v,
            config={"BLOCK_M": 32, "BLOCK_N": 64})


# ---------------------------------------------------------------- teeth

def mutant(tmp_path, old: str, new: str):
    """triton_kernels with one line changed, imported under another name."""
    import importlib.util

    src = (HERE / "triton_kernels.py").read_text()
    assert src.count(old) == 1, f"{old!r} must occur exactly once"
    path = tmp_path / f"mutant_{abs(hash(old)) % 10**8}.py"
    path.write_text(src.replace(old, new))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_teeth_attention_without_rescale(tmp_path):
    """The online softmax without its rescale of acc: several key tiles, a
    maximum that grows, and the same check fails."""
    mod = mutant(tmp_path, "acc = acc * alpha[:, None]", "acc = acc")
    check_attention(tk, 2, 3, 77, 64, False, ATT_CONFIGS["32x16"])     # the real one passes
    with pytest.raises(AssertionError, match="outside the bound"):
        check_attention(mod, 2, 3, 77, 64, False, ATT_CONFIGS["32x16"])


def test_teeth_attention_causal_without_mask(tmp_path):
    mod = mutant(tmp_path, "keep = keep & (kv[None, :] <= q_idx[:, None])", "keep = keep")
    with pytest.raises(AssertionError, match="outside the bound"):
        check_attention(mod, 1, 2, 77, 64, True, ATT_CONFIGS["32x16"])


def test_teeth_softmax_zero_padding(tmp_path):
    """Padding lanes loaded as 0 instead of -inf add exp(0 - m) to the sum."""
    old = 'x = tl.load(x_ptr + at, mask=inside, other=-float("inf")).to(tl.float32)'
    mod = mutant(tmp_path, old, old.replace('-float("inf")', "0.0"))
    with pytest.raises(AssertionError, match="outside the bound"):
        check_softmax(mod, 17, 33, torch.float32)


def test_teeth_matmul_without_accumulation(tmp_path):
    """tl.dot(a, b) instead of tl.dot(a, b, acc): only the last K tile counts."""
    mod = mutant(tmp_path, "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)")
    with pytest.raises(AssertionError, match="outside the bound"):
        check_matmul(mod, 65, 33, 47, SMALL)


def test_teeth_matmul_tma_wrong_corner(tmp_path):
    """B's tile loaded at the wrong corner (rows and columns swapped)."""
    mod = mutant(tmp_path, "b_desc.load([k0, n0])", "b_desc.load([n0, k0])")
    with pytest.raises(AssertionError, match="outside the bound"):
        check_matmul(mod, 65, 40, 48, SMALL, launcher="matmul_tma")


def test_teeth_gelu_without_sign(tmp_path):
    """tanh without its sign: GELU of a negative argument goes wrong."""
    mod = mutant(tmp_path, "return tl.where(z >= 0, t, -t)", "return t")
    with pytest.raises(AssertionError, match="outside the bound"):
        check_fusion(mod, 31, 33, 64)


# ---------------------------------------------------------------- ahead-of-time compilation for sm_90

def test_compiles_for_sm90():
    """Every kernel compiles for sm_90 (Hopper) with Triton's own ptxas, in a
    subprocess without the interpreter: the GEMM and attention use wgmma,
    and nothing spills. (compiler_report.py prints the whole report.)"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    out = subprocess.run([sys.executable, str(HERE / "compiler_report.py"), "--aot", "--json"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    report = json.loads(out.stdout.strip().splitlines()[-1])
    for name in ("bias_gelu_residual", "softmax_rows", "softmax_online", "matmul", "matmul_tma",
                 "attention_d64", "attention_d128_causal"):
        assert name in report, sorted(report)
        assert report[name]["spill_bytes"] == 0, (name, report[name])
    for name in ("matmul", "matmul_tma", "attention_d64", "attention_d128_causal"):
        assert report[name]["ptx"]["wgmma"] > 0, (name, report[name]["ptx"])
    assert report["matmul_tma"]["ptx"]["tma_load"] > 0 and report["matmul"]["ptx"]["cp_async"] > 0


# ---------------------------------------------------------------- gpu_bench.py's checks, on the CPU

def test_gpu_bench_checks_smoke(monkeypatch):
    """gpu_bench.py's check paths (no timing), with the book's references,
    bounds and peer checks, on the CPU: small stand-ins for the benchmark
    shapes, tensors on the CPU, the book's .cuda() calls kept there. Every
    check it reports must pass; the book's own kernels report themselves
    unavailable (no PyCUDA here)."""
    import argparse
    import types

    import gpu_bench
    from attention import flash_bf16
    from cudabook import listing_cli
    from fusion import bias_gelu_residual as book_fusion
    from matmul_tc import wgmma_gemm
    from softmax_norm import softmax as book_softmax

    monkeypatch.setattr(gpu_bench, "DEVICE", "cpu")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    for mod, name, value in [
            (gpu_bench, "FUSION_SHAPES", [(3, 5), (31, 33)]),
            (book_fusion, "BENCH_SHAPES", {"tiny": (5, 24)}),
            (gpu_bench, "SOFTMAX_SHAPES", [(1, 1), (3, 7), (2, 100)]),
            (gpu_bench, "SOFTMAX_MASKED", [(3, 70)]),
            (book_softmax, "BENCH_SHAPE", (3, 50)),
            (gpu_bench, "GEMM_SHAPES", [(33, 40, 24)]),
            (gpu_bench, "GEMM_ODD_SHAPES", [(65, 33, 47)]),
            (wgmma_gemm, "BENCH_SHAPES", [(40, 48, 32)]),
            (gpu_bench, "ATT_SHAPES", [(1, 2, 77, 64, 1)]),
            (flash_bf16, "BENCH_SHAPES", [(1, 2, 77, 64, False), (1, 1, 70, 128, True)])]:
        monkeypatch.setattr(mod, name, value)
    listing_cli._report.clear()
    args = argparse.Namespace(seed=0, bench=False, dump=None, budget_ms=100.0)
    gpu = types.SimpleNamespace(compute_capability=(0, 0), name="CPU", arch="none")
    facts = {}
    facts.update(gpu_bench.fusion_part(torch, tk, args, {}))
    facts.update(gpu_bench.softmax_part(torch, tk, args, {}))
    facts.update(gpu_bench.gemm_part(torch, tk, args, {}, gpu))
    facts.update(gpu_bench.attention_part(torch, tk, args, {}))
    checks = listing_cli._report.get("checks", [])
    failed = [c["name"] for c in checks if not c["passed"]]
    assert len(checks) >= 30 and not failed, (len(checks), failed)
    assert any(k.startswith("attention_err_") for k in facts), sorted(facts)


def test_gpu_bench_lines_of_code():
    import gpu_bench

    rows = {name: (ours, book) for name, _, ours, _, book in gpu_bench.loc_table(tk)}
    assert 0 < rows["GEMM (pointers)"][0] < rows["GEMM (pointers)"][1]
    assert 0 < rows["attention"][0] < rows["attention"][1]
