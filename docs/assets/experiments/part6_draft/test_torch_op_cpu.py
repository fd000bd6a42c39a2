"""CPU tests of torch_op.py: what can be proved without a GPU.

The operators' CPU and fake implementations, their autograd and their
argument checks, through PyTorch's own tools: torch.library.opcheck,
torch.autograd.gradcheck, torch.compile(fullgraph=True) and
torch._dynamo.explain. Each tool is also shown failing on a deliberately
broken operator (a wrong fake, a wrong backward, no fake at all), so a
pass here means something. Last, the operator's pointer launchers are held
against chapter 14's own launchers, with stand-ins for PyCUDA's kernels:
the same kernel, grid, block and arguments (typed), aligned or not.

Needs torch (CPU build is enough), NumPy and pytest; never PyCUDA.
Run:    python -m pytest docs/assets/experiments/part6_draft/test_torch_op_cpu.py
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd.gradcheck import GradcheckError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_op  # noqa: E402
from softmax_norm import layernorm  # noqa: E402   (torch_op put code/ on the path)

EPS = torch_op.EPS
SHAPES = [(1, 1), (3, 7), (5, 32), (33, 768), (2, 1030), (3, 8192)]


def make(rows, cols, dtype=torch.float64, requires_grad=False, seed=0):
    """x ~ 1 + 2 N(0, 1), gamma ~ 1 + 0.1 N, beta ~ 0.1 N, as layernorm.inputs draws them."""
    g = torch.Generator().manual_seed(seed)
    x = 1 + 2 * torch.randn(rows, cols, generator=g, dtype=torch.float64)
    gamma = 1 + 0.1 * torch.randn(cols, generator=g, dtype=torch.float64)
    beta = 0.1 * torch.randn(cols, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype).requires_grad_(requires_grad) for t in (x, gamma, beta))


def test_no_pycuda_needed():
    assert "pycuda" not in sys.modules


# ---------------------------------------------------------------- the CPU reference is right

@pytest.mark.parametrize("rows,cols", SHAPES)
def test_cpu_forward_matches_the_book(rows, cols):
    x, g, b = make(rows, cols)
    y, mean, rstd = torch.ops.cudabook.layer_norm(x, g, b, EPS)
    ref, m_ref, r_ref = layernorm.forward_reference(x.numpy(), g.numpy(), b.numpy())
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mean.numpy(), m_ref.ravel(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(rstd.numpy(), r_ref.ravel(), rtol=1e-12)


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_cpu_backward_matches_the_book(rows, cols):
    x, g, b = make(rows, cols)
    dy = torch.randn(rows, cols, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    _, mean, rstd = torch.ops.cudabook.layer_norm(x, g, b, EPS)
    got = torch.ops.cudabook.layer_norm_backward(dy, x, g, mean, rstd)
    m64 = x.numpy().mean(axis=1, keepdims=True)
    r64 = 1 / np.sqrt(((x.numpy() - m64) ** 2).mean(axis=1, keepdims=True) + EPS)
    ref = layernorm.backward_reference(dy.numpy(), x.numpy(), g.numpy(), m64, r64)[:3]
    auto = layernorm.autograd_reference(x.numpy(), g.numpy(), b.numpy(), dy.numpy())
    for name, t, r, a in zip(("dx", "dgamma", "dbeta"), got, ref, auto):
        np.testing.assert_allclose(t.numpy(), r, rtol=1e-10, atol=1e-10, err_msg=name)
        np.testing.assert_allclose(t.numpy(), a, rtol=1e-10, atol=1e-10, err_msg=name)


def test_float32_and_bf16_close_to_float64():
    """The dtypes the kernels take: float32 within 1e-5, bf16 within its 2^-8."""
    x, g, b = make(33, 768)
    ref = torch_op.layer_norm(x, g, b)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2.0**-7)):
        y, mean, rstd = torch.ops.cudabook.layer_norm(x.to(dtype), g.to(dtype), b.to(dtype), EPS)
        assert y.dtype == dtype and mean.dtype == rstd.dtype == torch.float32
        xd, gd, bd = (t.to(dtype).double() for t in (x, g, b))  # the rounded inputs' exact answer
        exact = torch.nn.functional.layer_norm(xd, (768,), gd, bd, EPS)
        assert (y.double() - exact).abs().max() <= tol * exact.abs().max()
        assert (y.double() - ref).abs().max() < 0.1                # and the same function


# ---------------------------------------------------------------- opcheck, gradcheck

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (33, 768)])
def test_opcheck_forward(rows, cols, dtype):
    args = (*make(rows, cols, dtype, requires_grad=True), EPS)
    result = torch.library.opcheck(torch.ops.cudabook.layer_norm.default, args)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_opcheck_backward(dtype):
    x, g, b = make(5, 32, dtype)
    _, mean, rstd = torch.ops.cudabook.layer_norm(x, g, b, EPS)
    dy = torch.randn(5, 32, dtype=dtype)
    result = torch.library.opcheck(torch.ops.cudabook.layer_norm_backward.default, (dy, x, g, mean, rstd))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (4, 33)])
def test_gradcheck(rows, cols):
    x, g, b = make(rows, cols, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: torch_op.layer_norm(*a), (x, g, b))


def test_backward_with_an_expanded_dy():
    """y.sum().backward() hands the backward a dy of stride 0."""
    x, g, b = make(3, 7, requires_grad=True)
    torch_op.layer_norm(x, g, b).sum().backward()
    x2, g2, b2 = (t.detach().clone().requires_grad_() for t in (x, g, b))
    torch.nn.functional.layer_norm(x2, (7,), g2, b2, EPS).sum().backward()
    for got, ref in ((x.grad, x2.grad), (g.grad, g2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- the checks have teeth

def _forward_cpu(x, gamma, beta, eps):
    y, mean, rstd = torch.ops.cudabook.layer_norm(x, gamma, beta, eps)
    return y, mean, rstd


@torch.library.custom_op("cudabook_test::ln_wrong_fake", mutates_args=())
def ln_wrong_fake(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward_cpu(x, gamma, beta, eps)


@ln_wrong_fake.register_fake
def _(x, gamma, beta, eps):
    rows = x.shape[0]
    return torch.empty_like(x), x.new_empty((rows, 1)), x.new_empty((rows, 1))   # mean: (rows, 1), wrongly


def test_opcheck_catches_a_wrong_fake():
    x, g, b = make(3, 7)
    with pytest.raises(Exception, match=r"test_faketensor failed.*output\[1\]"):
        torch.library.opcheck(ln_wrong_fake, (x, g, b, EPS))


@torch.library.custom_op("cudabook_test::ln_wrong_backward", mutates_args=())
def ln_wrong_backward(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward_cpu(x, gamma, beta, eps)


@ln_wrong_backward.register_fake
def _(x, gamma, beta, eps):
    return torch.ops.cudabook.layer_norm(x, gamma, beta, eps)     # the right fake, through ours


def _wrong_backward(ctx, dy, _dmean, _drstd):
    """The closed form without its last term, - xhat mean(g xhat): a
    mistake that keeps every shape right."""
    x, gamma, mean, rstd = ctx.saved_tensors
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dy * gamma
    dx = rstd[:, None] * (g - g.mean(dim=1, keepdim=True))
    return dx, (dy * xhat).sum(0), dy.sum(0), None


ln_wrong_backward.register_autograd(_wrong_backward, setup_context=torch_op._setup_context)


def test_gradcheck_catches_a_wrong_backward():
    x, g, b = make(3, 7, requires_grad=True)
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        torch.autograd.gradcheck(lambda *a: ln_wrong_backward(*a, EPS)[0], (x, g, b))


@torch.library.custom_op("cudabook_test::ln_no_fake", mutates_args=())
def ln_no_fake(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
               eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward_cpu(x, gamma, beta, eps)


def test_fullgraph_needs_the_fake():
    """Without a fake implementation torch.compile cannot trace past the
    op, and fullgraph=True turns that into an error."""
    x, g, b = make(3, 7, torch.float32)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="no fake impl registered"):
        torch.compile(lambda x: ln_no_fake(x, g, b, EPS)[0] * 2, fullgraph=True)(x)


# ---------------------------------------------------------------- torch.compile

def _block(cols=24, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, cols), torch_op.LayerNorm(cols), torch.nn.GELU()).to(dtype)


def test_explain_one_graph_no_breaks():
    torch._dynamo.reset()
    model, x = _block(), torch.randn(2, 3, 16)
    out = torch._dynamo.explain(model)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0), out.break_reasons
    targets = [n.target for gm in out.graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.cudabook.layer_norm.default in targets


def _compiled_matches(backend):
    torch._dynamo.reset()
    model = _block()
    x = torch.randn(2, 3, 16, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y = compiled(x)
    y.square().sum().backward()
    grads = [p.grad.clone() for p in (x, *model.parameters())]
    for p in (x, *model.parameters()):
        p.grad = None
    ref = model(x)
    ref.square().sum().backward()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    for got, p in zip(grads, (x, *model.parameters())):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-6)


def test_compile_fullgraph_aot_eager():
    _compiled_matches("aot_eager")


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="Inductor's CPU code needs a C++ compiler")
def test_compile_fullgraph_inductor():
    _compiled_matches("inductor")


def test_module_matches_nn_layernorm_on_a_strided_input():
    torch.manual_seed(0)
    ours, ref = torch_op.LayerNorm(24, dtype=torch.float64), torch.nn.LayerNorm(24, dtype=torch.float64)
    with torch.no_grad():
        for p, q in zip(ours.parameters(), ref.parameters()):
            p.copy_(torch.randn_like(p))
            q.copy_(p)
    x = torch.randn(24, 5, 3, dtype=torch.float64).permute(1, 2, 0).requires_grad_()  # not contiguous
    y, r = ours(x), ref(x)
    torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad(y.square().sum(), (x, *ours.parameters()))
    refs = torch.autograd.grad(r.square().sum(), (x, *ref.parameters()))
    for got, want in zip(grads, refs):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- argument checks name the argument

def _fwd(**change):
    x, g, b = make(3, 7, torch.float32)
    args = {"x": x, "gamma": g, "beta": b, "eps": EPS, **change}
    return lambda: torch.ops.cudabook.layer_norm(args["x"], args["gamma"], args["beta"], args["eps"])


BAD_FORWARD = [
    ("x int32", _fwd(x=torch.ones(3, 7, dtype=torch.int32)), TypeError, "x"),
    ("x float16", _fwd(x=torch.ones(3, 7, dtype=torch.float16)), TypeError, "x"),
    ("x 3-D", _fwd(x=torch.ones(1, 3, 7)), ValueError, "x"),
    ("x no rows", _fwd(x=torch.ones(0, 7)), ValueError, "x"),
    ("x too wide", _fwd(x=torch.ones(1, 8193), gamma=torch.ones(8193), beta=torch.ones(8193)), ValueError, "x"),
    ("x transposed", _fwd(x=torch.ones(7, 3).t()), ValueError, "x"),
    ("gamma float64", _fwd(gamma=torch.ones(7, dtype=torch.float64)), TypeError, "gamma"),
    ("gamma short", _fwd(gamma=torch.ones(6)), ValueError, "gamma"),
    ("beta strided", _fwd(beta=torch.ones(14)[::2]), ValueError, "beta"),
    ("beta on meta", _fwd(beta=torch.ones(7, device="meta")), ValueError, "beta"),
    ("eps zero", _fwd(eps=0.0), ValueError, "eps"),
]


@pytest.mark.parametrize("case,call,error,arg", BAD_FORWARD, ids=[c[0] for c in BAD_FORWARD])
def test_forward_errors_name_the_argument(case, call, error, arg):
    with pytest.raises(error) as e:
        call()
    assert str(e.value).startswith(f"{arg}: "), str(e.value)


def test_backward_errors_name_the_argument():
    x, g, b = make(3, 7, torch.float32)
    _, mean, rstd = torch.ops.cudabook.layer_norm(x, g, b, EPS)
    bwd = torch.ops.cudabook.layer_norm_backward
    cases = [((torch.ones(3, 8), x, g, mean, rstd), ValueError, "dy"),
             ((x, x, g, mean.double(), rstd), TypeError, "mean"),
             ((x, x, g, mean, rstd[:2]), ValueError, "rstd"),
             ((x.bfloat16(), x.bfloat16(), g.bfloat16(), mean, rstd), TypeError, "x")]
    for args, error, arg in cases:
        with pytest.raises(error) as e:
            bwd(*args)
        assert str(e.value).startswith(f"{arg}: "), str(e.value)


def test_errors_under_compile_name_the_argument():
    """The fake implementation checks too, so torch.compile reports the
    mistake while tracing, in the same words."""
    torch._dynamo.reset()
    x, g, b = make(3, 7, torch.float32)
    f = torch.compile(lambda x: torch_op.layer_norm(x, g, b) + 1, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="gamma: expected dtype torch.bfloat16, got torch.float32"):
        f(x.bfloat16())


def test_fake_cuda_tensors():
    """Without a GPU, fake tensors can still claim to be on one: the shapes
    the CUDA path will produce, and its narrower dtypes."""
    with FakeTensorMode():
        x, g = torch.empty(4, 8, device="cuda"), torch.empty(8, device="cuda")
        y, mean, rstd = torch.ops.cudabook.layer_norm(x, g, g, EPS)
        assert (y.shape, y.dtype, y.device.type) == ((4, 8), torch.float32, "cuda")
        assert mean.shape == rstd.shape == (4,) and mean.dtype == torch.float32
        x64, g64 = torch.empty(4, 8, device="cuda", dtype=torch.float64), torch.empty(8, device="cuda",
                                                                                         dtype=torch.float64)
        with pytest.raises(TypeError, match="^x: expected dtype torch.float32 or torch.bfloat16"):
            torch.ops.cudabook.layer_norm(x64, g64, g64, EPS)
        xb, gb = x.bfloat16(), g.bfloat16()
        with pytest.raises(TypeError, match="^x: expected dtype torch.float32, got torch.bfloat16"):
            torch.ops.cudabook.layer_norm_backward(xb, xb, gb, mean, rstd)


def test_statistics_are_not_differentiable():
    x, g, b = make(3, 7, requires_grad=True)
    y, mean, rstd = torch.ops.cudabook.layer_norm(x, g, b, EPS)
    assert y.requires_grad and not mean.requires_grad and not rstd.requires_grad


# ---------------------------------------------------------------- the pointer launchers

class _Recorder:
    """A stand-in for a prepared PyCUDA kernel: notes each launch."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def prepared_call(self, grid, block, *args):
        self.log.append((self.name, grid, block, None, _typed(args)))

    def prepared_async_call(self, grid, block, stream, *args):
        self.log.append((self.name, grid, block, stream, _typed(args)))


def _typed(args):
    """Each argument with its type: np.int32 and np.float32 pack differently."""
    return [(type(a).__name__, int(a) if isinstance(a, (int, np.integer)) else float(a)) for a in args]


class _Kernels(dict):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def __missing__(self, key):
        return _Recorder(key, self.log)


class _DeviceArray:
    """What the book's launchers read of a GPUArray, on a CPU tensor's memory."""

    def __init__(self, t):
        self.dtype = np.dtype(np.uint16 if t.dtype == torch.bfloat16 else np.float32)
        self.shape, self.size, self.gpudata = tuple(t.shape), t.numel(), t.data_ptr()
        self.strides = tuple(s * t.element_size() for s in t.stride())
        self.flags = type("Flags", (), {"c_contiguous": t.is_contiguous()})()


def _tensor(shape, dtype, offset):
    """A tensor `offset` elements into its buffer: offset 1 spoils 16-byte alignment."""
    n = int(np.prod(shape))
    return torch.zeros(n + offset, dtype=dtype)[offset:].view(shape)


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("rows,cols", layernorm.SHAPES)
def test_pointer_launchers_launch_what_the_book_launches(rows, cols, offset):
    """torch_op's launch_forward and launch_backward (pointers, a stream)
    against chapter 14's layernorm() and layernorm_backward() (GPUArrays,
    the default stream): the same kernel, grid, block and arguments."""
    for dtype in (torch.float32, torch.bfloat16):
        fwd = [_tensor(s, dtype, offset) for s in ((rows, cols), (cols,), (cols,), (rows, cols))]
        stats = [_tensor((rows,), torch.float32, offset) for _ in range(2)]
        book, ours = [], []
        layernorm.layernorm(_Kernels(book), *(_DeviceArray(t) for t in fwd + stats))
        torch_op.launch_forward(_Kernels(ours), "stream", *fwd[:3], fwd[3], *stats, EPS)
        assert len(book) == len(ours) == 1
        assert [e[:3] + e[4:] for e in ours] == [e[:3] + e[4:] for e in book]
        assert ours[0][3] == "stream"
    blocks = layernorm.bwd_blocks(rows, 132)
    bwd = [_tensor(s, torch.float32, offset) for s in
           ((rows, cols), (rows, cols), (cols,), (rows,), (rows,), (rows, cols), (cols,), (cols,), (2, blocks, cols))]
    book, ours = [], []
    layernorm.layernorm_backward(_Kernels(book), *(_DeviceArray(t) for t in bwd))
    torch_op.launch_backward(_Kernels(ours), "stream", *bwd)
    assert len(book) == len(ours) == 3
    assert [e[:3] + e[4:] for e in ours] == [e[:3] + e[4:] for e in book]
    assert {e[3] for e in ours} == {"stream"}
