"""Layer normalisation: a forward pass that reads each row once, and the backward pass.

Each row of x (rows, cols) is shifted by its mean and scaled by 1 /
sqrt(var + eps), then by gamma, plus beta (one per column). The forward
kernel reads the row once, keeps it in registers (a warp per row up to 1024
elements, a block per row up to 8192: 256 threads for float32, 128 for
bf16, 16 bytes of each 1024 elements a thread), gathers the row's mean and
variance, and writes y, the mean and rstd. It gathers the statistics in
one of two ways: "welford", each thread's count, mean and sum of squared
deviations, merged across threads by Chan's rule (the parallel form of
Welford's algorithm); or "twopass" (the default), the row's mean by one
sum, then the squared deviations from it by a second, both over the
values in registers, so the row is still read from memory once. The
backward kernel (float32) turns dy into dx, and into dgamma and dbeta:
each block adds up its rows' share, and a second kernel adds the blocks'
shares in a fixed order.

Run:    python code/softmax_norm/layernorm.py [--seed S] [--bench]
Checks: forward (float32 and bf16, both ways of gathering the statistics)
        and backward (float32), every element,
        at rows x cols = 1x1, 3x7, 5x32, 33x768, 7x1024, 64x1025, 9x4096 and
        3x8192 (under compute-sanitizer 1x1, 3x7, 5x33 and 2x1030), and the
        forward under --bench at the benchmark shape, against float64; the
        backward also against torch.autograd of torch's layer_norm in float64.
        Bound, forward: u (|y| + h |gamma| rstd (|x - mean| + max |x|) +
        |beta|): every rounded quantity behind y is at most that big, and
        h counts the roundings on the longest path (4 per element of the
        thread's own sums, 8 per level of a merge or a sum across threads,
        10 for the rest);
        bf16 adds one rounding of y (u_bf16 = 2^-8). Backward, with xhat =
        (x - mean) rstd and g = dy gamma: dx within (h + 10) u rstd (|g| +
        (1 + |xhat|) mean|g| (1 + max|xhat|)); dgamma within (c + h + 2) u
        sum |dy| (1 + |xhat|) and dbeta within (c + 1) u sum |dy|, c the
        longest chain of additions over rows (rows per block + blocks).
Bench:  at 32768 x 4096, float32 then bf16: the forward's time and GB/s (x
        read, y written, the row statistics ignored), both ways, against the
        copy bandwidth and torch.nn.functional.layer_norm on the same data; the
        float32 backward against torch's own backward kernel
        (torch.ops.aten.native_layer_norm_backward) given the same saved
        mean and rstd, counting dy and x read and dx written.
        Target: the (two-pass) forward >= 1.1x F.layer_norm in both dtypes
        (printed as met or MISSED).
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
from softmax_norm import _rows  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BWD_THREADS = 512                           # the .cu's BWD_THREADS
DTYPES, VEC = _rows.DTYPES, _rows.VEC
EPS = 1e-5
#: How the forward kernel gathers a row's statistics (layernorm.cu): the
#: row's mean, then its squared deviations (two sums), or each thread's
#: Welford statistics merged by Chan's rule.
STATS = ("twopass", "welford")
SHAPES = [(1, 1), (3, 7), (5, 32), (33, 768), (7, 1024), (64, 1025), (9, 4096), (3, 8192)]
SANITIZER_SHAPES = [(1, 1), (3, 7), (5, 33), (2, 1030)]
BENCH_SHAPE = (32_768, 4096)
TARGET = 1.1
BASELINE = "F.layer_norm"
U_FP32, U_BF16 = _rows.U_FP32, _rows.U_BF16


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    out = {(stats, kind, dt, c): module.get_function(f"layernorm_{stats}_{kind}{c}_{dt}").prepare("PPPPPPiifi")
           for stats in STATS for kind, dt, c in _rows.register_kernels()}
    out["bwd"] = module.get_function("layernorm_bwd_f32").prepare("PPPPPPPPiii")
    out["column_sum"] = module.get_function("column_sum_f32").prepare("PPii")
    return out


# --8<-- [start:launch]
def layernorm(kernels, x, gamma, beta, y, mean, rstd, eps: float = EPS, stats: str = "twopass") -> None:
    """y = layer_norm(x) * gamma + beta over each row; mean and rstd (float32,
    one per row) kept for the backward pass. x, y: (rows, cols) float32 or
    bf16 bit patterns (np.uint16), cols <= 8192; gamma, beta: (cols,) of
    x's dtype. stats: "twopass" or "welford" (see STATS)."""
    if stats not in STATS:
        raise ValueError(f"stats: expected one of {STATS}, got {stats!r}")
    rows, cols = _rows.rows_cols(x, high=_rows.BLOCK_ROW_MAX)
    dt = _rows.dtype_key("x", x)
    cb.check_array("gamma", gamma, dtype=x.dtype, shape=(cols,), on_device=True)
    cb.check_array("beta", beta, dtype=x.dtype, shape=(cols,), on_device=True)
    cb.check_array("y", y, dtype=x.dtype, shape=(rows, cols), on_device=True)
    cb.check_array("mean", mean, dtype=np.float32, shape=(rows,), on_device=True)
    cb.check_array("rstd", rstd, dtype=np.float32, shape=(rows,), on_device=True)
    if not eps > 0:
        raise ValueError(f"eps: expected a positive number, got {eps}")
    kind = _rows.kind_for(cols)
    blocks, threads = _rows.launch_shape(kind, dt, rows)
    kernels[stats, kind, dt, _rows.chunks_for(kind, dt, cols)].prepared_call(
        (blocks, 1, 1), (threads, 1, 1), x.gpudata, gamma.gpudata, beta.gpudata, y.gpudata,
        mean.gpudata, rstd.gpudata, np.int32(rows), np.int32(cols), np.float32(eps),
        np.int32(_rows.vec_ok(cols, dt, x, gamma, beta, y)))


def bwd_blocks(rows: int, sm_count: int) -> int:
    """Backward blocks: one per SM (a 512-thread block of 124 registers a
    thread fills one), never more than there are rows."""
    return min(rows, sm_count)


def layernorm_backward(kernels, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partials) -> None:
    """dx, dgamma, dbeta from dy and the forward's x, gamma, mean, rstd,
    all float32. partials: float32 (2, blocks, cols) scratch, blocks from
    bwd_blocks()."""
    rows, cols = _rows.rows_cols(x, high=_rows.BLOCK_ROW_MAX)
    for name, arr in (("dy", dy), ("x", x), ("dx", dx)):
        cb.check_array(name, arr, dtype=np.float32, shape=(rows, cols), on_device=True)
    for name, arr in (("gamma", gamma), ("dgamma", dgamma), ("dbeta", dbeta)):
        cb.check_array(name, arr, dtype=np.float32, shape=(cols,), on_device=True)
    for name, arr in (("mean", mean), ("rstd", rstd)):
        cb.check_array(name, arr, dtype=np.float32, shape=(rows,), on_device=True)
    cb.check_array("partials", partials, dtype=np.float32, ndim=3, on_device=True)
    blocks = partials.shape[1]
    if partials.shape != (2, blocks, cols) or not 1 <= blocks <= rows:
        raise ValueError(f"partials: expected shape (2, blocks, {cols}) with 1 <= blocks <= {rows}, "
                         f"got {tuple(partials.shape)}")
    part_g, part_b = int(partials.gpudata), int(partials.gpudata) + 4 * blocks * cols
    vec = _rows.vec_ok(cols, "f32", dy, x, gamma, dx) and (4 * blocks * cols) % 16 == 0 and int(partials.gpudata) % 16 == 0
    kernels["bwd"].prepared_call((blocks, 1, 1), (BWD_THREADS, 1, 1), dy.gpudata, x.gpudata,
                                 gamma.gpudata, mean.gpudata, rstd.gpudata, dx.gpudata, part_g, part_b,
                                 np.int32(rows), np.int32(cols), np.int32(vec))
    grid = (cb.ceil_div(cols, 256), 1, 1)
    for part, out in ((part_g, dgamma), (part_b, dbeta)):
        kernels["column_sum"].prepared_call(grid, (256, 1, 1), part, out.gpudata,
                                            np.int32(blocks), np.int32(cols))
# --8<-- [end:launch]


def forward_reference(x64, g64, b64):
    mean = x64.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(axis=1, keepdims=True) + EPS)
    return (x64 - mean) * rstd * g64 + b64, mean, rstd


def backward_reference(dy, x64, g64, mean, rstd):
    """Closed form, float64: dx, dgamma, dbeta, and xhat."""
    xhat = (x64 - mean) * rstd
    g = dy * g64
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0), xhat


def autograd_reference(x64, g64, b64, dy):
    """torch.autograd of F.layer_norm in float64 on the CPU, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    tx, tg, tb = (torch.from_numpy(a).requires_grad_() for a in (x64, g64, b64))
    out = torch.nn.functional.layer_norm(tx, (x64.shape[1],), tg, tb, EPS)
    out.backward(torch.from_numpy(dy))
    return tx.grad.numpy(), tg.grad.numpy(), tb.grad.numpy()


def check_forward(name, y, mean, rstd, x64, g64, b64, dt) -> None:
    ref, m_ref, r_ref = forward_reference(x64, g64, b64)
    cols = x64.shape[1]
    threads = _rows.group(_rows.kind_for(cols), dt)
    h = 4 * math.ceil(cols / threads) + 8 * int(math.log2(threads)) + 10
    scale = h * np.abs(g64) * r_ref * (np.abs(x64 - m_ref) + np.abs(x64).max(axis=1, keepdims=True)) \
        + np.abs(b64)
    if dt == "f32":
        cb.report_check(cb.compare(name, y, ref, k=1, scale=scale))
    else:
        cb.report_check(cb.compare(name, from_bf16(y), ref, k=U_BF16 / U_FP32 + 1, scale=scale / (U_BF16 / U_FP32 + 1)))
    cb.report_check(cb.compare(f"{name} mean", mean, m_ref.ravel(), k=h,
                               scale=np.abs(x64).max(axis=1)))
    cb.report_check(cb.compare(f"{name} rstd", rstd, r_ref.ravel(), k=h + 4))


def inputs(rows, cols, dt, rng):
    """x ~ 1 + 2 N(0, 1) (a mean to remove), gamma ~ 1 + N(0, 0.1^2),
    beta ~ N(0, 0.1^2): host arrays in the kernel's dtype, and float64 values."""
    x = 1 + 2 * rng.standard_normal((rows, cols), dtype=np.float32)
    g = 1 + 0.1 * rng.standard_normal(cols, dtype=np.float32)
    b = 0.1 * rng.standard_normal(cols, dtype=np.float32)
    if dt == "bf16":
        host = [to_bf16(a) for a in (x, g, b)]
        return host, [from_bf16(a).astype(np.float64) for a in host]
    return [x, g, b], [a.astype(np.float64) for a in (x, g, b)]


def forward_all(kernels, dev, host64, dt) -> None:
    """Run and check the forward both ways, two-pass last: the backward uses
    its mean and rstd. dev: (x, gamma, beta, y, mean, rstd) on the GPU;
    host64: (x, gamma, beta) in float64."""
    xg, gg, bg, y, mean, rstd = dev
    rows, cols = xg.shape
    for stats in reversed(STATS):
        for a in (y, mean, rstd):
            cb.poison(a)
        layernorm(kernels, xg, gg, bg, y, mean, rstd, stats=stats)
        check_forward(f"forward {stats} {dt} {rows}x{cols}", y.get(), mean.get(), rstd.get(), *host64, dt)


def check_shape(kernels, rows, cols, rng, sm_count) -> None:
    from pycuda import gpuarray

    for dt in DTYPES:
        (x, g, b), (x64, g64, b64) = inputs(rows, cols, dt, rng)
        xg, gg, bg = gpuarray.to_gpu(x), gpuarray.to_gpu(g), gpuarray.to_gpu(b)
        y, mean, rstd = gpuarray.empty_like(xg), gpuarray.empty(rows, np.float32), gpuarray.empty(rows, np.float32)
        forward_all(kernels, (xg, gg, bg, y, mean, rstd), (x64, g64, b64), dt)
        if dt == "f32":
            check_backward(kernels, xg, gg, mean, rstd, x64, g64, b64, rng, sm_count)


def check_backward(kernels, xg, gg, mean, rstd, x64, g64, b64, rng, sm_count) -> None:
    from pycuda import gpuarray

    rows, cols = x64.shape
    dy = rng.standard_normal((rows, cols), dtype=np.float32)
    blocks = bwd_blocks(rows, sm_count)
    dx, dgamma, dbeta = gpuarray.empty_like(xg), gpuarray.empty(cols, np.float32), gpuarray.empty(cols, np.float32)
    partials = gpuarray.empty((2, blocks, cols), np.float32)
    for a in (dx, dgamma, dbeta, partials):
        cb.poison(a)
    layernorm_backward(kernels, gpuarray.to_gpu(dy), xg, gg, mean, rstd, dx, dgamma, dbeta, partials)
    dy64 = dy.astype(np.float64)
    _, m64, r64 = forward_reference(x64, g64, b64)
    ref_dx, ref_dg, ref_db, xhat = backward_reference(dy64, x64, g64, m64, r64)
    h = 4 * math.ceil(cols / BWD_THREADS) + 8 * int(math.log2(BWD_THREADS)) + 10
    chain = math.ceil(rows / blocks) + blocks
    gabs = np.abs(dy64 * g64)
    big = gabs.mean(axis=1, keepdims=True) * (1 + np.abs(xhat).max(axis=1, keepdims=True))
    dx_scale = r64 * (gabs + (1 + np.abs(xhat)) * big)
    dg_scale = (np.abs(dy64) * (1 + np.abs(xhat))).sum(axis=0)
    db_scale = np.abs(dy64).sum(axis=0)
    tag = f"{rows}x{cols}"
    got = (dx.get(), dgamma.get(), dbeta.get())
    refs = {"float64": (ref_dx, ref_dg, ref_db)}
    auto = autograd_reference(x64, g64, b64, dy64)
    if auto is not None:
        refs["torch.autograd float64"] = auto
    for label, (rdx, rdg, rdb) in refs.items():
        cb.report_check(cb.compare(f"backward dx {tag} vs {label}", got[0], rdx, k=h + 10, scale=dx_scale))
        cb.report_check(cb.compare(f"backward dgamma {tag} vs {label}", got[1], rdg, k=chain + h + 2,
                                   scale=dg_scale))
        cb.report_check(cb.compare(f"backward dbeta {tag} vs {label}", got[2], rdb, k=chain + 1,
                                   scale=db_scale))


def bench(kernels, seed: int, sm_count: int) -> dict:
    from pycuda import gpuarray

    rows, cols = BENCH_SHAPE
    facts = {}
    torch = cb.torch_cuda()
    for dt in DTYPES:
        (x, g, b), (x64, g64, b64) = inputs(rows, cols, dt, np.random.default_rng(seed))
        xg, gg, bg = gpuarray.to_gpu(x), gpuarray.to_gpu(g), gpuarray.to_gpu(b)
        y, mean, rstd = gpuarray.empty_like(xg), gpuarray.empty(rows, np.float32), gpuarray.empty(rows, np.float32)
        forward_all(kernels, (xg, gg, bg, y, mean, rstd), (x64, g64, b64), dt)
        del x64
        base = None
        if torch is not None:
            tx, tg, tb = (_rows.to_torch(torch, a) for a in (x, g, b))
            base = (BASELINE, lambda: torch.nn.functional.layer_norm(tx, (cols,), tg, tb, EPS))
        print(f"{rows} x {cols} {dt}, forward:")
        wb = cb.benchmark(f"layernorm forward, Welford {dt}",
                          lambda: layernorm(kernels, xg, gg, bg, y, mean, rstd, stats="welford"),
                          bytes_moved=2 * x.nbytes)
        facts[f"welford_{dt}_ms"] = wb.timing.median_ms
        facts[f"welford_{dt}_of_copy"] = wb.fraction_of_ceiling
        fb = cb.benchmark(f"layernorm forward {dt}", lambda: layernorm(kernels, xg, gg, bg, y, mean, rstd),
                          bytes_moved=2 * x.nbytes, baseline=base, targets={"baseline": TARGET})
        facts[f"twopass_over_welford_{dt}"] = wb.timing.median_ms / fb.timing.median_ms
        facts[f"fwd_{dt}_ms"] = fb.timing.median_ms
        facts[f"fwd_{dt}_of_copy"] = fb.fraction_of_ceiling
        if fb.baseline is not None:
            facts[f"torch_fwd_{dt}_ms"] = fb.baseline.timing.median_ms
            facts[f"torch_fwd_{dt}_of_copy"] = fb.baseline.bytes_per_s / fb.ceiling_bytes_per_s
            facts[f"fwd_{dt}_over_torch"] = fb.baseline.ratio
            facts[f"fwd_{dt}_target_met"] = bool(fb.targets.met["baseline"])
        if dt == "f32":
            facts.update(bench_backward(kernels, xg, gg, mean, rstd, x, g, seed, sm_count, torch))
    return facts


def bench_backward(kernels, xg, gg, mean, rstd, x, g, seed, sm_count, torch) -> dict:
    from pycuda import gpuarray

    rows, cols = x.shape
    dy = np.random.default_rng(seed + 1).standard_normal((rows, cols), dtype=np.float32)
    dyg = gpuarray.to_gpu(dy)
    blocks = bwd_blocks(rows, sm_count)
    dx, dgamma, dbeta = gpuarray.empty_like(xg), gpuarray.empty(cols, np.float32), gpuarray.empty(cols, np.float32)
    partials = gpuarray.empty((2, blocks, cols), np.float32)
    base = None
    if torch is not None:
        tdy, tx, tg = (torch.from_numpy(a).cuda() for a in (dy, x, g))
        tmean = torch.as_tensor(mean.get()).cuda().view(rows, 1)
        trstd = torch.as_tensor(rstd.get()).cuda().view(rows, 1)
        base = ("torch layer_norm backward",
                lambda: torch.ops.aten.native_layer_norm_backward(tdy, tx, [cols], tmean, trstd, tg, tg,
                                                                  [True, True, True]))
    print(f"{rows} x {cols} f32, backward ({blocks} blocks):")
    bb = cb.benchmark("layernorm backward f32",
                      lambda: layernorm_backward(kernels, dyg, xg, gg, mean, rstd, dx, dgamma, dbeta, partials),
                      bytes_moved=3 * x.nbytes, baseline=base)
    facts = {"bwd_f32_ms": bb.timing.median_ms, "bwd_f32_of_copy": bb.fraction_of_ceiling}
    if bb.baseline is not None:
        facts.update(torch_bwd_f32_ms=bb.baseline.timing.median_ms, bwd_f32_over_torch=bb.baseline.ratio)
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for rows, cols in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        check_shape(kernels, rows, cols, rng, gpu.sm_count)
    facts = {}
    if args.bench:
        facts.update(baseline=BASELINE)
        facts.update(bench(kernels, args.seed, gpu.sm_count))
        met = all(facts.get(f"fwd_{dt}_target_met", False) for dt in DTYPES)
        facts.update(target=TARGET, target_met=met)
        print(f"target: forward >= {TARGET}x {BASELINE} in float32 and bf16: {'met' if met else 'MISSED'}")
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
