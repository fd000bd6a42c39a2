"""What the Part VI chapter 1 draft must show on a GPU (torch_op.py's operators).

DRAFT (issue #42); written on a machine without a GPU, never run yet.
Each check prints one line, ok or FAIL, as a listing's do; exit 0 when all
pass, 1 when one fails, 77 without a GPU, PyCUDA or torch with CUDA.

Checks:
  1. Shared context: a tensor's memory belongs to PyCUDA's context
     (cuPointerGetAttribute), the device's primary context, so the
     pointers the operators pass mean the same thing to both.
  2. The operators against the book's own launchers (layernorm.layernorm
     and layernorm_backward on GPUArray views of the same tensors), every
     element, bit for bit: the same kernels on the same inputs. Forward in
     float32 and bf16, backward in float32, at chapter 14's shapes; the
     forward also against float64 with chapter 14's bound
     (layernorm.check_forward). Then autograd: x.grad, gamma.grad,
     beta.grad from y.backward(dy), which runs the backward operator on
     autograd's own thread, bit for bit against the backward operator
     called directly (bf16: against the float32 kernel on the widened
     inputs, rounded). The operator runs first, into memory from PyTorch's
     allocator; the book's launchers write into poisoned buffers.
  3. torch.library.opcheck on CUDA tensors: the forward in float32 and
     bf16 with requires_grad, the backward in float32.
  4. torch.compile: torch._dynamo.explain of Linear, LayerNorm (ours),
     GELU finds one graph and no break; fullgraph=True with Inductor
     matches eager, forward and gradients (rtol 1e-4: Inductor fuses the
     GELU); mode="reduce-overhead" (CUDA graphs) matches eager on three
     calls, with no CUDA-graph skip counted.
  5. CUDA graphs by hand: one call captured with torch.cuda.graph, the
     input changed in place and the output poisoned, replayed: bit for
     bit the eager answer on the new input. Then training:
     torch.cuda.make_graphed_callables of the LayerNorm module, forward
     and backward replayed, against eager, bit for bit.
  6. The stream race of broken_streams.py: its two unsynchronised cases
     must come out wrong and its two fixes right.
Bench (--bench): what the operator's wrapping costs. At 1 x 1024 float32
  (x 4 KiB) and 4096 x 4096 (x 64 MiB), per call, in rounds that rotate
  the order: a bare prepared_async_call of the kernel (arguments made
  once, outputs allocated once), the operator (checks, three allocations,
  two events and two waits, the dispatcher), F.layer_norm, and the
  operator's calls captured in one CUDA graph. Each is a block of CALLS
  calls back to back, timed with CUDA events on the stream it runs on
  (GPU time per call) and with the host's clock (issue time per call).
  Here the host's speed is the quantity measured, so it is not taken out
  (no graphs for the first three, no L2 flush: a 4 KiB LayerNorm lives in
  L2 in a real model too). Facts: the medians, with p20 and p80, and the
  operator's time over the bare launch, a median of the rounds' ratios.

Run:    python docs/assets/experiments/part6_draft/gpu_checks.py [--bench] [--seed S]
"""

import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "code"))
sys.path.insert(0, str(HERE))
import cudabook as cb  # noqa: E402
from softmax_norm import _rows, layernorm  # noqa: E402

EPS = layernorm.EPS
CU_POINTER_ATTRIBUTE_CONTEXT = 1
BENCH_SIZES = {"4 KiB": (1, 1024), "64 MiB": (4096, 4096)}
CALLS, ROUNDS = 200, 21


def _int_view(torch, t):
    """A float tensor's bits, for exact comparison (NaN equals itself)."""
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16}[t.dtype])


def same_bits(torch, name: str, got, want) -> bool:
    """Report whether two tensors hold the same bits, element for element."""
    if got.shape != want.shape or got.dtype != want.dtype:
        ok, seen = False, f"{tuple(got.shape)} {got.dtype} against {tuple(want.shape)} {want.dtype}"
    else:
        differ = int((_int_view(torch, got) != _int_view(torch, want)).sum())
        ok, seen = differ == 0, "the same bits" if differ == 0 else f"{differ:,} elements differ"
    return cb.report_check(cb.expect(name, ok, seen, n=got.numel()))


def _poisoned(torch, shape, dtype, device):
    t = torch.empty(shape, dtype=dtype, device=device)
    t.view(torch.uint8).fill_(0xFF)                 # NaN for float32 and bf16
    return t


# ---------------------------------------------------------------- 1. context

def check_context(torch, state) -> None:
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.cuPointerGetAttribute.restype = ctypes.c_int
    t = torch.empty(1, device=state.device)
    ctx = ctypes.c_void_p()
    rc = lib.cuPointerGetAttribute(ctypes.byref(ctx), CU_POINTER_ATTRIBUTE_CONTEXT, t.data_ptr())
    ours = state.gpu.context.handle
    same = rc == 0 and (ctx.value or 0) == ours
    cb.report_check(cb.expect("a tensor's memory is in PyCUDA's (primary) context", same,
                              f"cuPointerGetAttribute returned {rc}, context {ctx.value or 0:#x}; "
                              f"PyCUDA's {ours:#x}"))


# ---------------------------------------------------------------- 2. against the book's launchers

def check_shape(torch, state, rows: int, cols: int, rng) -> None:
    import torch_op

    dev = state.device
    tag = f"{rows}x{cols}"
    for dt in _rows.DTYPES:
        (x, g, b), host64 = layernorm.inputs(rows, cols, dt, rng)
        tx, tg, tb = (_rows.to_torch(torch, a) for a in (x, g, b))
        y, mean, rstd = torch.ops.cudabook.layer_norm(tx, tg, tb, EPS)       # first: see the docstring
        torch.cuda.synchronize()
        book = [_poisoned(torch, t.shape, t.dtype, dev) for t in (y, mean, rstd)]
        layernorm.layernorm(state.kernels, *(torch_op.gpuarray_view(t) for t in (tx, tg, tb, *book)))
        torch.cuda.synchronize()
        for name, got, want in zip(("y", "mean", "rstd"), (y, mean, rstd), book):
            same_bits(torch, f"forward {dt} {tag} {name}: operator = book's launcher", got, want)
        y_host = _int_view(torch, y).cpu().numpy().view(np.uint16) if dt == "bf16" else y.cpu().numpy()
        layernorm.check_forward(f"operator forward {dt} {tag}", y_host, mean.cpu().numpy(), rstd.cpu().numpy(),
                                *host64, dt)
        check_backward(torch, state, tx, tg, tb, mean, rstd, rng, f"{dt} {tag}")


def check_backward(torch, state, x, gamma, beta, mean, rstd, rng, tag: str) -> None:
    import torch_op

    dev = state.device
    rows, cols = x.shape
    dy = torch.from_numpy(rng.standard_normal((rows, cols), dtype=np.float32)).to(dev)
    if x.dtype == torch.float32:
        dx, dgamma, dbeta = torch.ops.cudabook.layer_norm_backward(dy, x, gamma, mean, rstd)
        torch.cuda.synchronize()
        blocks = layernorm.bwd_blocks(rows, state.gpu.sm_count)
        shapes = ((rows, cols), (cols,), (cols,), (2, blocks, cols))   # dx, dgamma, dbeta, partials
        book = [_poisoned(torch, s, torch.float32, dev) for s in shapes]
        views = (torch_op.gpuarray_view(t) for t in (dy, x, gamma, mean, rstd, *book))
        layernorm.layernorm_backward(state.kernels, *views)
        torch.cuda.synchronize()
        for name, got, want in zip(("dx", "dgamma", "dbeta"), (dx, dgamma, dbeta), book):
            same_bits(torch, f"backward {tag} {name}: operator = book's launcher", got, want)
    else:                       # what _backward does for bf16: the float32 kernel, narrowed after
        dy = dy.to(torch.bfloat16)
        wide = torch.ops.cudabook.layer_norm_backward(dy.float(), x.float(), gamma.float(), mean, rstd)
        dx, dgamma, dbeta = (t.to(torch.bfloat16) for t in wide)
    leaves = [t.detach().clone().requires_grad_() for t in (x, gamma, beta)]
    torch_op.layer_norm(*leaves).backward(dy)       # runs on autograd's thread for this device
    torch.cuda.synchronize()
    for name, leaf, want in zip(("x", "gamma", "beta"), leaves, (dx, dgamma, dbeta)):
        same_bits(torch, f"autograd {tag} {name}.grad = backward operator", leaf.grad, want)


# ---------------------------------------------------------------- 3. opcheck

def check_opcheck(torch, state) -> None:
    dev = state.device
    cases = []
    for dtype in (torch.float32, torch.bfloat16):
        args = [torch.randn(s, device=dev, dtype=dtype, requires_grad=True) for s in ((33, 768), (768,), (768,))]
        cases.append((f"forward {dtype}", torch.ops.cudabook.layer_norm.default, (*args, EPS)))
    x, g, b = (torch.randn(s, device=dev) for s in ((33, 768), (768,), (768,)))
    _, mean, rstd = torch.ops.cudabook.layer_norm(x, g, b, EPS)
    cases.append(("backward float32", torch.ops.cudabook.layer_norm_backward.default,
                  (torch.randn_like(x), x, g, mean, rstd)))
    for name, op, args in cases:
        try:
            result = torch.library.opcheck(op, args)
            ok, seen = set(result.values()) == {"SUCCESS"}, ", ".join(f"{k} {v}" for k, v in result.items())
        except Exception as e:                      # opcheck raises on the first failure
            ok, seen = False, f"{type(e).__name__}: {str(e)[:300]}"
        cb.report_check(cb.expect(f"opcheck on CUDA, {name}", ok, seen))


# ---------------------------------------------------------------- 4. torch.compile

def _block(torch, dev):
    import torch_op

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(768, 768), torch_op.LayerNorm(768), torch.nn.GELU()).to(dev)


def _close(torch, name: str, got, want, rtol=1e-4, atol=1e-5) -> None:
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
        ok, seen = True, f"within rtol {rtol:g}, atol {atol:g}"
    except AssertionError as e:
        ok, seen = False, " ".join(str(e).split())[:300]
    cb.report_check(cb.expect(name, ok, seen))


def check_compile(torch, state) -> None:
    from torch._dynamo.utils import counters

    dev = state.device
    model = _block(torch, dev)
    x = torch.randn(8, 129, 768, device=dev)
    torch._dynamo.reset()
    ex = torch._dynamo.explain(model)(x)
    one = (ex.graph_count, ex.graph_break_count) == (1, 0)
    cb.report_check(cb.expect("explain: one graph, no graph break", one,
                              f"{ex.graph_count} graph(s), {ex.graph_break_count} break(s) {ex.break_reasons}"))

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    runs = []
    for fn in (compiled, model):
        xr = x.clone().requires_grad_()
        out = fn(xr)
        out.square().mean().backward()
        runs.append([out.detach(), xr.grad] + [p.grad.clone() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    names = ["output", "x.grad"] + [f"{n}.grad" for n, _ in model.named_parameters()]
    for name, got, want in zip(names, *runs):
        _close(torch, f"compile fullgraph, {name} = eager", got, want)

    torch._dynamo.reset()
    counters.clear()
    graphed = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    with torch.no_grad():
        want = model(x)
        outs = [graphed(x).clone() for _ in range(3)]  # recorded, then replayed
    for i, got in enumerate(outs):
        _close(torch, f"compile reduce-overhead, call {i + 1} = eager", got, want)
    skips = dict(counters["inductor"]).get("cudagraph_skips", 0)
    cb.report_check(cb.expect("reduce-overhead ran as a CUDA graph", skips == 0, f"{skips} cudagraph skip(s)"))


# ---------------------------------------------------------------- 5. CUDA graphs by hand

def check_graphs(torch, state) -> None:
    import torch_op

    dev = state.device
    x, g, b = (torch.randn(s, device=dev) for s in ((1031, 772), (772,), (772,)))
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):                   # warm up off the default stream, as torch's docs do
        for _ in range(3):
            torch_op.layer_norm(x, g, b)
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            y = torch_op.layer_norm(x, g, b)
    except Exception as e:
        cb.report_check(cb.expect("capture of one operator call", False, f"{type(e).__name__}: {e}"))
        return
    x.copy_(torch.randn_like(x))
    y.view(torch.uint8).fill_(0xFF)
    graph.replay()
    torch.cuda.synchronize()
    same_bits(torch, "graph replay on a new x = eager", y, torch_op.layer_norm(x, g, b))

    torch.manual_seed(1)
    module = torch_op.LayerNorm(772, device=dev)
    with torch.no_grad():
        module.weight.normal_(1, 0.1)
        module.bias.normal_(0, 0.1)
    sample = torch.randn(64, 772, device=dev, requires_grad=True)
    try:
        trained = torch.cuda.make_graphed_callables(module, (sample,))
    except Exception as e:
        cb.report_check(cb.expect("make_graphed_callables (forward and backward)", False,
                                  f"{type(e).__name__}: {e}"))
        return
    runs = []
    for fn in (trained, module):
        xr = torch.randn(64, 772, device=dev, generator=torch.Generator(dev).manual_seed(2)).requires_grad_()
        out = fn(xr)
        out.backward(torch.full_like(out, 0.5))
        runs.append([out.detach().clone(), xr.grad.clone(), module.weight.grad.clone(), module.bias.grad.clone()])
        module.zero_grad(set_to_none=True)
    for name, got, want in zip(("y", "x.grad", "weight.grad", "bias.grad"), *runs):
        same_bits(torch, f"graphed training step {name} = eager", got, want)


# ---------------------------------------------------------------- 6. the race

def check_race(state, seed: int) -> None:
    import broken_streams

    for result, should_pass in broken_streams.run_cases(state, seed):
        seen = result.line().splitlines()[0]
        cb.report_check(cb.expect(f"{result.name}: {'right' if should_pass else 'wrong'}, as expected",
                                  result.passed == should_pass, seen))


# ---------------------------------------------------------------- bench

def _time_block(torch, block, stream, calls: int) -> tuple[float, float]:
    """(GPU us, host us) a call: one block of `calls` calls between two events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record(stream)
    t0 = time.perf_counter()
    block()
    t1 = time.perf_counter()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls, (t1 - t0) * 1e6 / calls


def bench_size(torch, state, label: str, rows: int, cols: int) -> dict:
    dev = state.device
    x, g, b = (torch.randn(s, device=dev) for s in ((rows, cols), (cols,), (cols,)))
    y = torch.empty_like(x)
    mean, rstd = torch.empty(rows, device=dev), torch.empty(rows, device=dev)
    kind = _rows.kind_for(cols)
    blocks, threads = _rows.launch_shape(kind, "f32", rows)
    kernel = state.kernels["twopass", kind, "f32", _rows.chunks_for(kind, "f32", cols)]
    ptrs = [t.data_ptr() for t in (x, g, b, y, mean, rstd)]
    vec = cols % _rows.VEC["f32"] == 0 and all(p % 16 == 0 for p in ptrs[:4])
    args = ptrs + [np.int32(rows), np.int32(cols), np.float32(EPS), np.int32(vec)]   # made once
    grid, block, stream = (blocks, 1, 1), (threads, 1, 1), state.stream
    current = torch.cuda.current_stream(dev)
    op, flayer = torch.ops.cudabook.layer_norm, torch.nn.functional.layer_norm

    def bare():
        for _ in range(CALLS):
            kernel.prepared_async_call(grid, block, stream, *args)

    def operator():
        for _ in range(CALLS):
            op(x, g, b, EPS)

    def plain_torch():
        for _ in range(CALLS):
            flayer(x, (cols,), g, b, EPS)

    for fn in (bare, operator, plain_torch):        # warm up: modules, events, the allocator's blocks
        fn()
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        operator()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        operator()
    variants = {"bare launch": (bare, state.side), "operator": (operator, current),
                "F.layer_norm": (plain_torch, current), "operator in a CUDA graph": (graph.replay, current)}
    names = list(variants)
    gpu = {n: [] for n in names}
    host = {n: [] for n in names}
    for r in range(ROUNDS):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn, s = variants[n]
            g_us, h_us = _time_block(torch, fn, s, CALLS)
            gpu[n].append(g_us)
            host[n].append(h_us)
    facts = {}
    key = label.replace(" ", "")
    print(f"{label}: x is {rows} x {cols} float32; {CALLS} calls a block, {ROUNDS} rounds; us a call, "
          "median [p20, p80]")
    print(f"  {'':26s} {'GPU':>24s} {'host':>24s}")
    for n in names:
        gq, hq = (np.percentile(v, (50, 20, 80)) for v in (gpu[n], host[n]))
        print(f"  {n:26s} {gq[0]:8.2f} [{gq[1]:6.2f}, {gq[2]:6.2f}] {hq[0]:8.2f} [{hq[1]:6.2f}, {hq[2]:6.2f}]")
        slug = n.replace(" ", "_").replace(".", "")
        facts.update({f"{key}_{slug}_gpu_us": float(gq[0]),
                      f"{key}_{slug}_gpu_us_p20_p80": [float(gq[1]), float(gq[2])],
                      f"{key}_{slug}_host_us": float(hq[0])})
    ratio = np.array(gpu["operator"]) / np.array(gpu["bare launch"])
    rq = np.percentile(ratio, (50, 20, 80))
    print(f"  operator / bare launch (GPU time a call): {rq[0]:.2f}x [{rq[1]:.2f}, {rq[2]:.2f}]")
    facts[f"{key}_operator_over_bare"] = float(rq[0])
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    torch = cb.torch_cuda()
    if torch is None:
        raise cb.Unavailable("torch with CUDA is not available (pip install torch)")
    import torch_op

    state = torch_op.gpu_setup()
    rng = np.random.default_rng(args.seed)
    check_context(torch, state)
    for rows, cols in layernorm.SHAPES:
        check_shape(torch, state, rows, cols, rng)
    check_opcheck(torch, state)
    check_compile(torch, state)
    check_graphs(torch, state)
    check_race(state, args.seed)
    if args.bench:
        cb.gpu_alone()
        facts = {}
        for label, (rows, cols) in BENCH_SIZES.items():
            facts.update(bench_size(torch, state, label, rows, cols))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
