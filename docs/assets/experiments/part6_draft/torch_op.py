"""A kernel as a PyTorch operator: the book's LayerNorm as torch.ops.cudabook.layer_norm.

DRAFT for Part VI, chapter 1 (issue #42); not a listing: it has no GPU
record yet, and lives outside code/ until it has one.

Chapter 14's LayerNorm kernels (code/softmax_norm/layernorm.cu: the
two-pass forward in float32 and bf16, the float32 backward and its column
sums) become two PyTorch operators, so that a model can call them like
any other op, train through them, and compile them:

    torch.ops.cudabook.layer_norm(x, gamma, beta, eps) -> (y, mean, rstd)
    torch.ops.cudabook.layer_norm_backward(dy, x, gamma, mean, rstd) -> (dx, dgamma, dbeta)

x is (rows, cols), 1 <= cols <= 8192 (the longest row the kernels hold in
registers), row-major and contiguous; gamma and beta (cols,) of x's dtype;
mean and rstd float32 (float64 for a float64 x, CPU only). Each operator
has four parts, as torch.library asks:

  - a CUDA implementation: the book's kernels, launched through PyCUDA on
    pointers from tensor.data_ptr(), ordered with PyTorch's current stream
    (below);
  - a CPU implementation: the same arithmetic in plain torch ops, the
    reference the GPU answers are held against, and what lets the tests
    run on a machine without a GPU;
  - a fake implementation: shapes, dtypes and devices only, no data, so
    that torch.compile, torch.export and opcheck can trace through the
    operator without running it;
  - autograd (register_autograd): the forward keeps x, gamma, mean and
    rstd; the backward calls layer_norm_backward, which on the GPU is the
    book's backward kernel (float32; a bf16 x is widened to float32 for
    it, and its gradients narrowed back).

Every implementation checks its arguments first, with an error that names
the argument at fault (the convention of cudabook.check_array): the fake
implementation too, so a mistake is caught when torch.compile traces, not
later on the GPU.

Streams. PyTorch runs every op on its *current stream*, and a user may make
any stream current (torch.cuda.stream(s)); CUDA-graph capture makes its own
capture stream current. A kernel that ignores this races with the op that
produced its input (broken_streams.py shows it). PyCUDA cannot launch on a
stream it did not create: Function.prepared_async_call takes a
pycuda.driver.Stream, and there is no way to build one from a raw handle.
So the operator owns one PyCUDA stream (non-blocking, so nothing but our
events orders it: a blocking stream would also wait for, and be waited on
by, the legacy default stream, behind the user's back) and shows it to
PyTorch as torch.cuda.ExternalStream. Each call

    1. records an event on the current stream; our stream waits for it
       (the inputs are ready);
    2. launches the kernels on our stream;
    3. records an event on our stream; the current stream waits for it
       (whatever PyTorch does next, with the outputs, or with the inputs'
       memory once the caching allocator hands it out again, comes after
       our kernels).

The outputs are allocated on the current stream, and step 3 joins our
stream back before anything else is queued there, so no record_stream is
needed. Inside a CUDA-graph capture, steps 1 and 3 are the fork and join
of a captured second stream, which stream capture follows: the kernels
become nodes of the graph with the right edges.

PyTorch and PyCUDA must also share a context, or the pointers mean
nothing: cb.init() retains the device's *primary* context
(code/cudabook/gpu.py), the one the CUDA runtime, and so PyTorch, uses.
The backward pass runs on autograd's own thread for the device, where
PyCUDA never pushed a context: there the runtime calls of step 1 (an
event record, a wait) bind the primary context to the thread before our
launch (gpu_checks.py checks a backward on that thread).

The alternative, considered and not taken: launch through the driver API
directly on torch.cuda.current_stream() (ctypes' cuLaunchKernel on
stream.cuda_stream, or cuda-python's cuda.core.launch, which takes a torch
stream as is through its __cuda_stream__ protocol). That saves the two
events and two waits a call, and is what a C++ extension does (it launches
on at::cuda::getCurrentCUDAStream()). But PyCUDA exposes no CUfunction
handle (nor its module's), so the kernel would be loaded a second time,
from a cubin, and its arguments packed by hand (ctypes) or by a second
library (cuda-python): a second way of launching in a book built on one.
The events cost host time, a few microseconds a call, which gpu_checks.py
measures against a bare launch; if that cost matters to a reader, the
measurement is the argument for the driver-API route.

Run:    tests on the CPU: python -m pytest docs/assets/experiments/part6_draft
        on a GPU: python docs/assets/experiments/part6_draft/gpu_checks.py [--bench]
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import torch

CODE = Path(__file__).resolve().parents[4] / "code"
sys.path.insert(0, str(CODE))           # the book's helper package and chapter 14's listing
import cudabook as cb  # noqa: E402     (NumPy only until a GPU is asked for)
from softmax_norm import _rows, layernorm  # noqa: E402

EPS = layernorm.EPS
COLS_MAX = _rows.BLOCK_ROW_MAX          # 8192: a row in one block's registers
MAX_ELEMENTS = _rows.MAX_ELEMENTS       # the kernels index with 32-bit ints
#: dtypes of x each device takes: the kernels' float32 and bf16; float64
#: only where the CPU reference computes it (gradcheck wants float64).
DTYPES = {"cuda": (torch.float32, torch.bfloat16),
          "cpu": (torch.float32, torch.bfloat16, torch.float64)}
BACKWARD_DTYPES = {"cuda": (torch.float32,), "cpu": (torch.float32, torch.float64)}
CU_STREAM_NON_BLOCKING = 1              # cuStreamCreate's flag; PyCUDA has no name for it


# --8<-- [start:checks]
def _dtypes(table: dict, device: torch.device) -> tuple:
    return table.get(device.type, table["cpu"])     # meta, fake: the widest list


def _check_tensor(name: str, t: torch.Tensor, *, dtypes, shape: tuple, device: torch.device) -> None:
    """Raise naming `name` unless t has one of `dtypes`, this shape, is
    contiguous (the kernels assume rows of stride cols) and is on `device`."""
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor, got strides {tuple(t.stride())}; "
                         "call .contiguous() first")
    if t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (x's device), got {t.device}")


def _check_x(x: torch.Tensor, dtypes) -> tuple[int, int]:
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D tensor (rows, cols), got shape {tuple(x.shape)}")
    rows, cols = x.shape
    if rows < 1 or not 1 <= cols <= COLS_MAX:
        raise ValueError(f"x: expected rows >= 1 and 1 <= cols <= {COLS_MAX}, got shape {tuple(x.shape)}")
    if rows * cols > MAX_ELEMENTS:
        raise ValueError(f"x: expected at most {MAX_ELEMENTS} elements, got {rows * cols}")
    _check_tensor("x", x, dtypes=dtypes, shape=(rows, cols), device=x.device)
    return rows, cols


def check_forward(x, gamma, beta, eps) -> tuple[int, int]:
    """The forward's arguments, for every implementation: (rows, cols)."""
    rows, cols = _check_x(x, _dtypes(DTYPES, x.device))
    for name, t in (("gamma", gamma), ("beta", beta)):
        _check_tensor(name, t, dtypes=(x.dtype,), shape=(cols,), device=x.device)
    if not eps > 0:
        raise ValueError(f"eps: expected a positive number, got {eps}")
    return rows, cols


def check_backward(dy, x, gamma, mean, rstd) -> tuple[int, int]:
    """The backward's arguments: all of x's dtype, float32 on the GPU."""
    rows, cols = _check_x(x, _dtypes(BACKWARD_DTYPES, x.device))
    _check_tensor("dy", dy, dtypes=(x.dtype,), shape=(rows, cols), device=x.device)
    _check_tensor("gamma", gamma, dtypes=(x.dtype,), shape=(cols,), device=x.device)
    for name, t in (("mean", mean), ("rstd", rstd)):
        _check_tensor(name, t, dtypes=(stats_dtype(x.dtype),), shape=(rows,), device=x.device)
    return rows, cols
# --8<-- [end:checks]


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """mean and rstd: float32, as the kernels keep them; float64 for float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------- the GPU side

class GpuState:
    """What the CUDA implementations share, made once a process: the GPU
    (cb.init(): the primary context), chapter 14's kernels, our PyCUDA
    stream and the same stream as PyTorch sees it."""

    def __init__(self):
        self.gpu = cb.init()                # a missing GPU, driver or PyCUDA: cb.Unavailable, said plainly
        import pycuda.driver as cuda

        self.kernels = layernorm.load_kernels()
        self.device = torch.device("cuda", self.gpu.index)
        self.stream = cuda.Stream(flags=CU_STREAM_NON_BLOCKING)
        self.side = torch.cuda.ExternalStream(self.stream.handle, device=self.device)
        self.local = threading.local()      # each thread's two events (autograd has its own thread)

    def events(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        ev = getattr(self.local, "events", None)
        if ev is None:
            ev = self.local.events = (torch.cuda.Event(), torch.cuda.Event())
        return ev


_STATE: GpuState | None = None
_STATE_LOCK = threading.Lock()


def gpu_setup() -> GpuState:
    """The GPU state, made on first use. Call it once from the main thread
    before the first CUDA call of the operators (gpu_checks.py does), so
    that PyCUDA's context is pushed there, not on autograd's thread."""
    global _STATE
    if _STATE is not None:
        return _STATE
    with _STATE_LOCK:
        if _STATE is None:
            _STATE = GpuState()
        return _STATE


def _gpu_for(x: torch.Tensor) -> GpuState:
    state = gpu_setup()
    if x.device != state.device:
        raise ValueError(f"x: expected a tensor on {state.device}, where the book's kernels are loaded, "
                         f"got {x.device}")
    return state


# --8<-- [start:streams]
def on_torch_stream(state: GpuState, launch) -> None:
    """Run launch(pycuda_stream) ordered after everything queued on PyTorch's
    current stream, and everything queued there afterwards after it."""
    current = torch.cuda.current_stream(state.device)
    ready, done = state.events()
    ready.record(current)           # 1. the inputs are ready ...
    state.side.wait_event(ready)    #    ... before our stream goes on
    launch(state.stream)            # 2. the book's kernels, on our stream
    done.record(state.side)         # 3. PyTorch's stream goes on only after them
    current.wait_event(done)
# --8<-- [end:streams]


# --8<-- [start:launch]
def launch_forward(kernels, stream, x, gamma, beta, y, mean, rstd, eps: float) -> None:
    """Chapter 14's layernorm() launch on pointers and a stream: the same
    kernel choice (warp or block a row, 16-byte chunks a thread), the same
    arguments, no checks (the operator made them)."""
    import numpy as np

    rows, cols = x.shape
    dt = "bf16" if x.dtype == torch.bfloat16 else "f32"
    kind = _rows.kind_for(cols)
    blocks, threads = _rows.launch_shape(kind, dt, rows)
    ptrs = [t.data_ptr() for t in (x, gamma, beta, y, mean, rstd)]
    vec = int(cols % _rows.VEC[dt] == 0 and all(p % 16 == 0 for p in ptrs[:4]))
    kernels["twopass", kind, dt, _rows.chunks_for(kind, dt, cols)].prepared_async_call(
        (blocks, 1, 1), (threads, 1, 1), stream, *ptrs,
        np.int32(rows), np.int32(cols), np.float32(eps), np.int32(vec))


def launch_backward(kernels, stream, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partials) -> None:
    """Chapter 14's layernorm_backward() on pointers and a stream: the
    backward kernel, a block an SM, then the column sums of its partials
    (float32 (2, blocks, cols))."""
    import numpy as np

    rows, cols = x.shape
    blocks = partials.shape[1]
    part_g = partials.data_ptr()
    part_b = part_g + 4 * blocks * cols
    ptrs = [t.data_ptr() for t in (dy, x, gamma, mean, rstd, dx)]
    vec = int(cols % _rows.VEC["f32"] == 0 and all(p % 16 == 0 for p in ptrs[:3] + ptrs[5:])
              and (4 * blocks * cols) % 16 == 0 and part_g % 16 == 0)
    kernels["bwd"].prepared_async_call(
        (blocks, 1, 1), (layernorm.BWD_THREADS, 1, 1), stream, *ptrs, part_g, part_b,
        np.int32(rows), np.int32(cols), np.int32(vec))
    grid = (cb.ceil_div(cols, 256), 1, 1)
    for part, out in ((part_g, dgamma), (part_b, dbeta)):
        kernels["column_sum"].prepared_async_call(grid, (256, 1, 1), stream, part, out.data_ptr(),
                                                  np.int32(blocks), np.int32(cols))
# --8<-- [end:launch]


# ---------------------------------------------------------------- the operators

# --8<-- [start:forward]
@torch.library.custom_op("cudabook::layer_norm", mutates_args=(), device_types="cuda")
def layer_norm_op(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CUDA: the book's two-pass forward kernel."""
    rows, cols = check_forward(x, gamma, beta, eps)
    state = _gpu_for(x)
    y = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    mean, rstd = (torch.empty(rows, dtype=torch.float32, device=x.device) for _ in range(2))
    on_torch_stream(state, lambda s: launch_forward(state.kernels, s, x, gamma, beta, y, mean, rstd, eps))
    return y, mean, rstd


@layer_norm_op.register_kernel("cpu")
def _(x, gamma, beta, eps):
    """CPU: the same two-pass arithmetic in torch ops, float32 (float64
    for float64), the reference the kernels are held against."""
    check_forward(x, gamma, beta, eps)
    wide = stats_dtype(x.dtype)
    xw = x.to(wide)
    mean = xw.mean(dim=1)
    centred = xw - mean[:, None]
    rstd = torch.rsqrt((centred * centred).mean(dim=1) + eps)     # biased variance, as the kernel
    y = centred * rstd[:, None] * gamma.to(wide) + beta.to(wide)
    return y.to(x.dtype), mean, rstd


@layer_norm_op.register_fake
def _(x, gamma, beta, eps):
    """Shapes, dtypes, devices: what torch.compile needs to trace past the op."""
    rows, cols = check_forward(x, gamma, beta, eps)
    stats = stats_dtype(x.dtype)
    return x.new_empty((rows, cols)), x.new_empty((rows,), dtype=stats), x.new_empty((rows,), dtype=stats)
# --8<-- [end:forward]


@torch.library.custom_op("cudabook::layer_norm_backward", mutates_args=(), device_types="cuda")
def layer_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor, mean: torch.Tensor,
                           rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CUDA: the book's backward kernel and its column sums (float32)."""
    rows, cols = check_backward(dy, x, gamma, mean, rstd)
    state = _gpu_for(x)
    dx = torch.empty_like(x)
    dgamma, dbeta = torch.empty_like(gamma), torch.empty_like(gamma)
    blocks = layernorm.bwd_blocks(rows, state.gpu.sm_count)
    partials = torch.empty((2, blocks, cols), dtype=torch.float32, device=x.device)
    on_torch_stream(state, lambda s: launch_backward(state.kernels, s, dy, x, gamma, mean, rstd,
                                                     dx, dgamma, dbeta, partials))
    return dx, dgamma, dbeta


@layer_norm_backward_op.register_kernel("cpu")
def _(dy, x, gamma, mean, rstd):
    """CPU: the closed form (chapter 14): with xhat = (x - mean) rstd and
    g = dy gamma, dx = rstd (g - mean(g) - xhat mean(g xhat)),
    dgamma = sum over rows of dy xhat, dbeta = sum of dy."""
    check_backward(dy, x, gamma, mean, rstd)
    xhat = (x - mean[:, None]) * rstd[:, None]
    g = dy * gamma
    dx = rstd[:, None] * (g - g.mean(dim=1, keepdim=True) - xhat * (g * xhat).mean(dim=1, keepdim=True))
    return dx, (dy * xhat).sum(dim=0), dy.sum(dim=0)


@layer_norm_backward_op.register_fake
def _(dy, x, gamma, mean, rstd):
    check_backward(dy, x, gamma, mean, rstd)
    return torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(gamma)


# --8<-- [start:autograd]
def _setup_context(ctx, inputs, output):
    x, gamma, _beta, _eps = inputs
    _y, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)     # statistics for the backward, not results to train on
    ctx.save_for_backward(x, gamma, mean, rstd)


def _backward(ctx, dy, _dmean, _drstd):
    """Traceable torch code around the backward operator: dy made
    contiguous (y.sum().backward() hands in an expanded tensor of stride
    0), and a bf16 x widened to float32, the dtype of the backward kernel."""
    x, gamma, mean, rstd = ctx.saved_tensors
    wide = torch.float32 if x.dtype == torch.bfloat16 else x.dtype
    dx, dgamma, dbeta = layer_norm_backward_op(dy.to(wide).contiguous(), x.to(wide), gamma.to(wide),
                                               mean, rstd)
    return dx.to(x.dtype), dgamma.to(gamma.dtype), dbeta.to(gamma.dtype), None


layer_norm_op.register_autograd(_backward, setup_context=_setup_context)
# --8<-- [end:autograd]


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """y alone, as torch.nn.functional.layer_norm returns it."""
    return layer_norm_op(x, gamma, beta, eps)[0]


# --8<-- [start:module]
class LayerNorm(torch.nn.Module):
    """torch.nn.LayerNorm over the last dimension, on the book's kernels.
    The leading dimensions are flattened into rows; the operator takes a
    contiguous 2-D tensor, so a strided input is copied first."""

    def __init__(self, cols: int, eps: float = EPS, *, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(cols, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(cols, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        return layer_norm(rows, self.weight, self.bias, self.eps).reshape(x.shape)
# --8<-- [end:module]


def gpuarray_view(t: torch.Tensor):
    """A PyCUDA GPUArray on a contiguous tensor's memory (no copy), for the
    book's own launchers (float32 as float32, bf16 as its uint16 bits)."""
    import numpy as np
    from pycuda import gpuarray

    if not t.is_contiguous():
        raise ValueError(f"t: expected a contiguous tensor, got strides {tuple(t.stride())}")
    dtype = {torch.float32: np.float32, torch.bfloat16: np.uint16}[t.dtype]
    return gpuarray.GPUArray(tuple(t.shape), dtype, gpudata=t.data_ptr())
