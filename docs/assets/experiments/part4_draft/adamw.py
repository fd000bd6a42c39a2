"""AdamW over a whole model in one launch, with global-norm gradient clipping.

Draft for Part IV ("A training step, end to end"), not yet a listing: run it
from the repository root with PYTHONPATH=code. Every parameter lives in one
flat buffer: bf16 weights and gradients, fp32 master weights and moments.
grad_norm_sq and clip_scale find the gradients' norm without atomics (the
same bits every run) and the clip scale; adamw then updates every parameter,
four a thread, and writes the bf16 weights the next forward pass reads.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/adamw.py [--n N] [--seed S] [--bench]
Checks: at n = 1, 31, 32, 33, 1,000,003 (and the benchmark's size under
        --bench), with clipping active (max_norm half the gradients' norm)
        and, at 1,000,003, off: the squared norm exactly (the gradients are
        multiples of 1/8 up to 2 in size, so every partial sum is exact);
        every m, v, master weight and bf16 weight against float64 from the
        same inputs, within the float32 roundings each step takes (carried
        through the division and the square root) and, for the bf16
        weight, one bf16 rounding on top.
Bench:  at n = 124,439,808 (GPT-2 small's parameters), the three launches'
        time and GB/s, counting the 30 bytes a parameter they move (g 2 for
        the norm; g 2, p 4, m 4, v 4 for the update; p, m, v 4 each and w 2
        written), against the copy bandwidth
        of the same run, in alternation with what a PyTorch user runs for
        the same step: torch.nn.utils.clip_grad_norm_ (foreach), the fused
        torch.optim.AdamW on fp32 weights and gradients, and a copy into
        the bf16 weights.
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS = 256
BENCH_N = 124_439_808
HYPER = dict(lr=6e-4, b1=0.9, b2=0.95, eps=1e-8, wd=0.1)
U32, U_BF16 = 2.0**-24, 2.0**-8
BYTES_PER_PARAM = 30                                # read: g 2 (norm), g 2, p, m, v 4 each; written: p, m, v 4 each, w 2


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    return {"norm": module.get_function("grad_norm_sq").prepare("PqP"),
            "scale": module.get_function("clip_scale").prepare("PifP"),
            "adamw": module.get_function("adamw").prepare("PPPPPqPfffffff")}


def norm_blocks(sm_count: int) -> int:
    return 8 * sm_count                             # one full wave of grad_norm_sq


# --8<-- [start:step]
def step(kernels, g, p, m, v, w, partials, scale, t: int, max_norm: float, sm_count: int) -> None:
    """One AdamW step (the t-th, from 1) over every parameter, the gradients
    clipped to max_norm first (<= 0: no clipping). g, w: bf16 bit patterns
    (uint16); p, m, v: float32; all 1-D GPUArrays of one size, 16-byte
    aligned; partials: float64, norm_blocks(sm_count) of them; scale:
    float32, 2 (the clip scale, then the norm)."""
    n = cb.check_size("g.size", g.size)
    cb.check_array("g", g, dtype=np.uint16, shape=(n,), on_device=True, alignment=16)
    cb.check_array("w", w, dtype=np.uint16, shape=(n,), on_device=True, alignment=16)
    for name, a in (("p", p), ("m", m), ("v", v)):
        cb.check_array(name, a, dtype=np.float32, shape=(n,), on_device=True, alignment=16)
    blocks = norm_blocks(sm_count)
    cb.check_array("partials", partials, dtype=np.float64, shape=(blocks,), on_device=True)
    cb.check_array("scale", scale, dtype=np.float32, shape=(2,), on_device=True)
    if t < 1:
        raise ValueError(f"t: steps count from 1, got {t}")
    h = HYPER
    c1, c2 = 1 - h["b1"] ** t, 1 - h["b2"] ** t
    kernels["norm"].prepared_call((blocks, 1, 1), (THREADS, 1, 1), g.gpudata, np.int64(n), partials.gpudata)
    kernels["scale"].prepared_call((1, 1, 1), (THREADS, 1, 1), partials.gpudata, np.int32(blocks),
                                   np.float32(max_norm), scale.gpudata)
    kernels["adamw"].prepared_call((cb.ceil_div(cb.ceil_div(n, 4), THREADS), 1, 1), (THREADS, 1, 1),
                                   g.gpudata, p.gpudata, m.gpudata, v.gpudata, w.gpudata, np.int64(n),
                                   scale.gpudata, *(np.float32(x) for x in (h["lr"], h["b1"], h["b2"], h["eps"],
                                                                            h["wd"], c1, c2)))
# --8<-- [end:step]


def inputs(n, rng):
    """Gradients k/8 for whole k in [-16, 16] (bf16-exact, squares exact in
    float32 sums); master weights ~ 0.02 N(0,1); moments as after some steps."""
    g = to_bf16((rng.integers(-16, 17, n) / 8).astype(np.float32))
    p = (0.02 * rng.standard_normal(n)).astype(np.float32)
    m = (0.01 * rng.standard_normal(n)).astype(np.float32)
    v = (1e-4 * rng.random(n)).astype(np.float32)
    return g, p, m, v


def reference(g16, p, m, v, t, max_norm):
    """The step in float64 from the same float32 inputs and constants; also
    each output's error bound (in absolute terms)."""
    f = {k: float(np.float32(x)) for k, x in HYPER.items()}
    c1, c2 = float(np.float32(1 - HYPER["b1"] ** t)), float(np.float32(1 - HYPER["b2"] ** t))
    g = from_bf16(g16).astype(np.float64)
    sq = float(np.sum(g * g))
    norm = math.sqrt(sq)
    s = max_norm / norm if max_norm > 0 and norm > max_norm else 1.0
    p, m, v = (a.astype(np.float64) for a in (p, m, v))
    gs = s * g
    b1m, b2v = f["b1"] * m, f["b2"] * v
    m1 = b1m + (1 - f["b1"]) * gs
    v1 = b2v + (1 - f["b2"]) * gs * gs
    den = np.sqrt(v1 / c2) + f["eps"]
    upd = (m1 / c1) / den
    p1 = p - f["lr"] * (upd + f["wd"] * p)
    u = U32
    e_m = 4 * u * (np.abs(b1m) + np.abs((1 - f["b1"]) * gs))
    e_v = 6 * u * (np.abs(b2v) + (1 - f["b2"]) * gs * gs)
    e_den = np.sqrt(e_v / c2) + 3 * u * den
    e_upd = (e_m / c1 + np.abs(m1 / c1) * 4 * u) / den + np.abs(upd) * e_den / den
    e_p = 3 * u * (np.abs(p) + f["lr"] * np.abs(upd + f["wd"] * p)) + f["lr"] * e_upd
    return sq, {"m": (m1, e_m), "v": (v1, e_v), "p": (p1, e_p), "w": (p1, U_BF16 * np.abs(p1) + 1.01 * e_p)}


def check_step(kernels, n, rng, sm_count, clip=True, t=3):
    from pycuda import gpuarray

    g16, p, m, v = inputs(n, rng)
    norm = float(np.sqrt(np.sum(from_bf16(g16).astype(np.float64) ** 2)))
    max_norm = 0.5 * norm if clip and norm > 0 else 0.0
    sq, ref = reference(g16, p, m, v, t, max_norm)
    gg = gpuarray.to_gpu(g16)
    pg, mg, vg = gpuarray.to_gpu(p), gpuarray.to_gpu(m), gpuarray.to_gpu(v)
    wg = gpuarray.empty_like(gg)
    wg.fill(np.uint16(0x7FC0))                      # bf16 NaN: every weight must be written
    partials = gpuarray.empty(norm_blocks(sm_count), np.float64)
    scale = gpuarray.empty(2, np.float32)
    step(kernels, gg, pg, mg, vg, wg, partials, scale, t, max_norm, sm_count)
    tag = f"n={n:,}{'' if max_norm else ', no clipping'}"
    got_sq = float(partials.get().sum())           # the kernel's partials, added in float64 here too
    cb.report_check(cb.expect(f"squared norm {tag}", got_sq == sq, f"{got_sq!r} against {sq!r}"))
    for name, arr in (("m", mg), ("v", vg), ("p", pg), ("w", wg)):
        want, err = ref[name]
        got = from_bf16(arr.get()) if name == "w" else arr.get()
        cb.report_check(cb.compare(f"{name} {tag}", got, want, k=1, scale=np.maximum(err, 0) / U32))
    return gg, pg, mg, vg, wg, partials, scale, max_norm


def bench(kernels, seed, sm_count):
    import torch

    rng = np.random.default_rng(seed)
    n = BENCH_N
    gg, pg, mg, vg, wg, partials, scale, max_norm = check_step(kernels, n, rng, sm_count)
    ours = lambda: step(kernels, gg, pg, mg, vg, wg, partials, scale, 3, max_norm, sm_count)  # noqa: E731
    tp = torch.from_numpy(pg.get()).cuda().requires_grad_()
    tp.grad = torch.from_numpy(from_bf16(gg.get())).cuda()
    tw = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    opt = torch.optim.AdamW([tp], lr=HYPER["lr"], betas=(HYPER["b1"], HYPER["b2"]), eps=HYPER["eps"],
                            weight_decay=HYPER["wd"], fused=True)

    def torch_step():
        torch.nn.utils.clip_grad_norm_([tp], max_norm, foreach=True)
        opt.step()
        with torch.no_grad():
            tw.copy_(tp)
    torch_step()
    evidence.benchmark("adamw step (clip, update, bf16 weights)", ours, bytes_moved=BYTES_PER_PARAM * n,
                       ceiling=("device-to-device copy", cb.ceiling()),
                       baseline=("clip_grad_norm_ + fused torch.optim.AdamW + bf16 copy", torch_step))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=0)
    info = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for n in sorted({1, 31, 32, 33, args.n}):
        check_step(kernels, n, rng, info.sm_count)
    check_step(kernels, args.n, rng, info.sm_count, clip=False)
    if args.bench:
        bench(kernels, args.seed, info.sm_count)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
