"""BROKEN ON PURPOSE: PyTorch writes x on one stream, the kernel reads it on another.

DRAFT for Part VI, chapter 1 (issue #42); written without a GPU, never run.

A PyTorch program often makes data on a stream of its own
(torch.cuda.Stream(): a prefetching loader, communication overlapped with
compute, a CUDA-graph capture). Here that stream first keeps the GPU busy
for about 70 ms (torch.cuda._sleep), then copies the real x over a buffer
of NaN. Straight after, the host launches chapter 14's LayerNorm through
the book's own launcher (layernorm.layernorm on GPUArray views of the
tensors), which queues it on PyCUDA's default stream, the legacy NULL
stream. PyTorch makes its side streams non-blocking, so nothing orders the
two: the kernel runs while the side stream still sleeps, reads NaN and
writes NaN. Nothing raises; the answer is wrong. PyTorch's own
F.layer_norm, queued on the default stream without a wait, goes wrong the
same way: the rule is PyTorch's (an op is ordered after its own current
stream and nothing else), and a kernel that joins PyTorch must keep it.

Two fixes, each checked:
  wait  torch.cuda.current_stream().wait_stream(side) before the book's
        launcher: PyTorch's default stream is the legacy NULL stream
        (handle 0, checked) on which PyCUDA launches when given no stream;
  op    torch_op.layer_norm called with the side stream current (with
        torch.cuda.stream(side)): the operator orders itself after
        the current stream (torch_op.on_torch_stream), as PyTorch's ops do.

Expect: FAIL for "book launcher, no wait" and for "F.layer_norm, no
        wait" (every element NaN, outside its bound); ok for the two fixes.

Run:    python docs/assets/experiments/part6_draft/broken_streams.py [--seed S]
Checks: each case's y against the same computation on the finished x,
        every element, exactly (k = 0: the same kernel on the same input
        gives the same bits), at 4097 x 1000 float32.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))   # find cudabook
sys.path.insert(0, str(Path(__file__).resolve().parent))                # and torch_op
import cudabook as cb  # noqa: E402

ROWS, COLS = 4097, 1000
SLEEP_CYCLES = 2**27        # about 70 ms at 1.98 GHz: far longer than the host takes to launch


def _book_forward(state, x, gamma, beta):
    """The book's launcher (PyCUDA's NULL stream) on tensors' memory."""
    import torch
    import torch_op
    from softmax_norm import layernorm

    rows = x.shape[0]
    y = torch.empty_like(x)
    mean, rstd = (torch.empty(rows, dtype=torch.float32, device=x.device) for _ in range(2))
    layernorm.layernorm(state.kernels, *(torch_op.gpuarray_view(t) for t in (x, gamma, beta, y, mean, rstd)))
    return y


def run_cases(state, seed: int) -> list:
    """[(CheckResult, should_pass)] for the four cases."""
    import torch
    import torch_op

    dev = state.device
    gen = torch.Generator().manual_seed(seed)
    src = (1 + 2 * torch.randn(ROWS, COLS, generator=gen)).to(dev)
    gamma = (1 + 0.1 * torch.randn(COLS, generator=gen)).to(dev)
    beta = (0.1 * torch.randn(COLS, generator=gen)).to(dev)
    flayer = torch.nn.functional.layer_norm
    torch.cuda.synchronize()
    want_book = _book_forward(state, src, gamma, beta).cpu().numpy()        # on the finished x
    want_torch = flayer(src, (COLS,), gamma, beta, torch_op.EPS).cpu().numpy()
    side = torch.cuda.Stream(device=dev)
    default_is_null = torch.cuda.current_stream(dev).cuda_stream == 0

    def book_no_wait(x):
        return _book_forward(state, x, gamma, beta)

    def torch_no_wait(x):
        return flayer(x, (COLS,), gamma, beta, torch_op.EPS)

    def book_after_wait(x):
        torch.cuda.current_stream(dev).wait_stream(side)    # the fix: the NULL stream waits for side
        return _book_forward(state, x, gamma, beta)

    def op_on_side(x):
        with torch.cuda.stream(side):
            y = torch_op.layer_norm(x, gamma, beta)         # ordered after side, like any torch op
        torch.cuda.current_stream(dev).wait_stream(side)
        return y

    cases = [("book launcher, no wait", book_no_wait, want_book, False),
             ("F.layer_norm, no wait", torch_no_wait, want_torch, False),
             ("book launcher after wait_stream", book_after_wait, want_book, True),
             ("operator, side stream current", op_on_side, want_book, True)]
    out = []
    for name, run, want, should_pass in cases:
        x = torch.full_like(src, float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)                 # the producer is still busy ...
            x.copy_(src)                                    # ... when x gets its values
        y = run(x)
        torch.cuda.synchronize()
        out.append((cb.compare(f"y, {name}", y.cpu().numpy(), want.astype(np.float64), k=0), should_pass))
    if not default_is_null:     # the "wait" fix assumes it; say so rather than pass by luck
        out.append((cb.expect("PyTorch's default stream is the legacy NULL stream", False,
                              "it is not (a per-thread default stream?): the wait fix does not apply"), True))
    return out


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    if cb.torch_cuda() is None:
        raise cb.Unavailable("torch with CUDA is not available (pip install torch)")
    import torch_op

    state = torch_op.gpu_setup()
    for result, _ in run_cases(state, args.seed):
        cb.report_check(result)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
