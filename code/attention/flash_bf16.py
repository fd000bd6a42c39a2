"""Attention forward on tensor cores, FlashAttention-style, in bf16.

O = softmax(Q K^T / sqrt(D)) V for every (batch, head), Q, K, V, O of
B x H x S x D in bf16, optionally causal (see flash_bf16.cu). One kernel:
a block owns 64 or 128 query rows, walks over the keys a tile at a time,
and keeps the running maximum and sum of each row (the online softmax)
so that the S x S scores never reach memory. Variants (VARIANTS): the
head dimension D (64 or 128), the query rows a warp owns (16 or 32:
MT = 1 or 2 m16 tiles) and the keys a tile (BK).

PyCUDA has no bfloat16 dtype: bf16 arrays are their bit patterns, uint16.

Run:    python code/attention/flash_bf16.py [--seed S] [--bench]
Checks: every variant against float64 attention of the same bf16 inputs,
        element by element, causal and not, at the shapes in SHAPES
        (S = 1, S not a multiple of any tile, one and many heads; two
        shapes with scores 16 times larger, so that the maximum matters;
        under compute-sanitizer, SANITIZER_SHAPES), and under --bench at
        each benchmark shape. Bound: _ref.py's, with O and P rounded to
        bf16: |O - ref| <= k u_bf16 (|ref| + P|V|), k = 2 + (S + 16 +
        2 D smax) 2^-24 / 2^-8.
Bench:  B = 8, H = 16, S = 4096 at D = 64 and 128, causal and not, and
        S = 4000 (not a multiple of the tiles) at D = 128: ms and TFLOP/s
        (_ref.flops: 4 B H S S D; causal, the S (S + 1) / 2 scores that
        count) of every variant, and of F.scaled_dot_product_attention
        (SDPA) on the same data in the same run: as a user calls it
        (PyTorch picks the backend) and with its flash (FlashAttention-2)
        and cuDNN backends forced. Target: the best variant >= 50% of the
        fastest SDPA at S = 4096, D = 64 and 128, not causal (printed as
        met or MISSED, and beside it the same ratio against the flash
        backend).
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16  # noqa: E402
from attention import _ref  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
#: variant: (D, MT, BK): head dimension, m16 tiles of query rows a warp, keys a tile
VARIANTS = {
    "flash_d64_m1_n64": (64, 1, 64),
    "flash_d64_m2_n64": (64, 2, 64),
    "flash_d128_m1_n64": (128, 1, 64),
    "flash_d128_m2_n32": (128, 2, 32),
    "flash_d128_m2_n64": (128, 2, 64),
}
THREADS = 128                     # 4 warps
HEAD_DIMS = (64, 128)
MAX_GRID_Y = 65_535
MAX_S = 2**31 - 1 - 128           # query and key indices are int in the kernel
#: (B, H, S, D, scale of Q)
SHAPES = [(1, 1, 1, 64, 1), (1, 1, 1, 128, 1), (2, 3, 77, 64, 1), (1, 2, 130, 128, 1),
          (2, 2, 257, 64, 16), (1, 1, 1000, 128, 1), (1, 3, 64, 64, 1), (1, 1, 513, 128, 16)]
SANITIZER_SHAPES = [(1, 1, 1, 64, 1), (1, 2, 70, 64, 1), (1, 1, 130, 128, 1)]
BENCH_SHAPES = [(8, 16, 4096, 64, False), (8, 16, 4096, 128, False), (8, 16, 4096, 64, True),
                (8, 16, 4096, 128, True), (8, 16, 4000, 128, False)]
TARGET = 0.50
BASELINE = "F.scaled_dot_product_attention (SDPA), bf16"
LOG2E = 1.4426950408889634


def shared_bytes(name: str) -> int:
    d, mt, bk = VARIANTS[name]
    return (16 * mt * 4 + 4 * bk) * d * 2        # Q tile, and two stages of K and V


def load_kernels() -> dict:
    import pycuda.driver as cuda

    module = cb.compile(KERNEL_FILE)
    kernels = {}
    for name in VARIANTS:
        f = module.get_function(name)
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes(name))
        kernels[name] = f.prepare("PPPPifi")
    return kernels


# --8<-- [start:launch]
def attention(kernels, name: str, q, k, v, o, causal: bool = False) -> None:
    """o = softmax(q k^T / sqrt(D)) v by the variant `name`. q, k, v, o:
    B x H x S x D C-contiguous GPUArrays of bf16 bit patterns (uint16) on
    16-byte boundaries, D the variant's; o must not overlap q, k or v."""
    if name not in VARIANTS:
        raise ValueError(f"name: expected one of {', '.join(VARIANTS)}, got {name!r}")
    d_var, mt, _ = VARIANTS[name]
    for arg, x in (("q", q), ("k", k), ("v", v)):
        cb.check_array(arg, x, dtype=np.uint16, ndim=4, on_device=True, alignment=16)
    b, h, s, d = (cb.check_size(f"q.shape[{i}] ({n})", q.shape[i]) for i, n in enumerate("BHSD"))
    if d != d_var:
        raise ValueError(f"q: {name} is for head dimension {d_var}, got D = {d} "
                         f"(shape {tuple(q.shape)})")
    cb.check_size("q.shape[2] (S)", s, high=MAX_S)
    for arg, x in (("k", k), ("v", v), ("o", o)):
        cb.check_array(arg, x, dtype=np.uint16, shape=(b, h, s, d), on_device=True, alignment=16)
    cb.check_separate("o", o, q=q, k=k, v=v)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    if b * h > MAX_GRID_Y:
        raise ValueError(f"q: B x H = {b * h:,} heads need one block row each, more than "
                         f"the {MAX_GRID_Y:,} a grid allows in y")
    bq = 16 * mt * 4
    grid = (cb.ceil_div(s, bq), b * h, 1)
    kernels[name].prepared_call(grid, (THREADS, 1, 1), q.gpudata, k.gpudata, v.gpudata,
                                o.gpudata, np.int32(s), np.float32(LOG2E / math.sqrt(d)),
                                np.int32(bool(causal)), shared_size=shared_bytes(name))
# --8<-- [end:launch]


def variants_for(d: int) -> list[str]:
    return [name for name, (dv, _, _) in VARIANTS.items() if dv == d]


def check(kernels, q16, k16, v16, causal: bool, torch=None) -> None:
    """Each variant for this D against float64 attention (_ref's bound:
    O and P rounded to bf16)."""
    from pycuda import gpuarray

    b, h, s, d = q16.shape
    ref, mag, smax = _ref.reference(q16, k16, v16, causal, torch)
    k = _ref.bound_k(s, d, smax, u_out=_ref.U_BF16, u_p=_ref.U_BF16)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    for name in variants_for(d):
        cb.poison(og)
        attention(kernels, name, qg, kg, vg, og, causal)
        got = from_bf16(og.get())             # compare in float32 units: k u = u_bf16
        cb.report_check(cb.compare(f"{name} {b}x{h}x{s}x{d}{' causal' if causal else ''}", got,
                                   ref, k=k * _ref.U_BF16 / _ref.U_FP32, scale=mag))


def sdpa_times(torch, q16, k16, v16, causal: bool, ws: int, budget_ms: float) -> dict:
    """F.scaled_dot_product_attention on the same data, ms: as a user calls
    it (PyTorch picks the backend), and with each fused backend forced
    (flash: FlashAttention-2; cudnn: cuDNN's fused attention), where this
    PyTorch and GPU have it."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tq, tk, tv = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
                  for x in (q16, k16, v16))
    out = {}
    for name, backend in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def fn():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

        try:
            if backend is None:
                out[name] = cb.bench(fn, working_set_bytes=ws, budget_ms=budget_ms).median_ms
            else:
                with sdpa_kernel(backend):
                    out[name] = cb.bench(fn, working_set_bytes=ws, budget_ms=budget_ms).median_ms
        except RuntimeError as e:                   # this backend does not take these inputs
            print(f"  SDPA {name}: not available ({str(e).splitlines()[0][:80]})")
    return out


def bench_shape(kernels, b, h, s, d, causal, seed, budget_ms) -> dict:
    from pycuda import gpuarray

    q16, k16, v16 = _ref.random_qkv(b, h, s, d, 1, np.random.default_rng(seed), bf16=True)
    torch = cb.torch_cuda()
    check(kernels, q16, k16, v16, causal, torch)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    work = _ref.flops(b, h, s, d, causal)
    ws = 4 * q16.nbytes
    tag = f"s{s}_d{d}{'_causal' if causal else ''}"
    rows = {}
    for name in variants_for(d):
        t = cb.bench(lambda name=name: attention(kernels, name, qg, kg, vg, og, causal),
                     working_set_bytes=ws, budget_ms=budget_ms)
        rows[name] = t.median_ms
    sdpa = sdpa_times(torch, q16, k16, v16, causal, ws, budget_ms) if torch is not None else {}
    base = min(sdpa.values()) if sdpa else None
    print(f"B={b} H={h} S={s} D={d}{' causal' if causal else ''}: {work / 1e9:,.1f} GFLOP")
    facts = {}
    for name, ms in rows.items():
        rate = work / (ms * 1e-3) / 1e12
        share = f"{100 * base / ms:6.1f}% of SDPA" if base else ""
        print(f"  {name:20s} {ms:8.3f} ms {rate:7.1f} TFLOP/s {share}")
        facts[f"{name}_{tag}_ms"] = ms
        facts[f"{name}_{tag}_tflops"] = rate
        if base:
            facts[f"{name}_{tag}_of_sdpa"] = base / ms
    best = min(rows, key=rows.get)
    facts[f"best_{tag}"] = best
    facts[f"best_{tag}_tflops"] = work / (rows[best] * 1e-3) / 1e12
    for backend, ms in sdpa.items():
        rate = work / (ms * 1e-3) / 1e12
        print(f"  {'SDPA ' + backend:20s} {ms:8.3f} ms {rate:7.1f} TFLOP/s")
        facts.update({f"sdpa_{backend}_{tag}_ms": ms, f"sdpa_{backend}_{tag}_tflops": rate,
                      f"best_{tag}_of_sdpa_{backend}": ms / rows[best]})
    if base:
        fastest = min(sdpa, key=sdpa.get)
        print(f"  SDPA: {BASELINE}; the fastest backend here: {fastest}")
        facts.update({f"sdpa_{tag}_ms": base, f"sdpa_{tag}_tflops": work / (base * 1e-3) / 1e12,
                      f"sdpa_{tag}_backend": fastest, f"best_{tag}_of_sdpa": base / rows[best]})
        if s == 4096 and not causal:
            for what, ms in (("the fastest SDPA backend", base), ("SDPA's flash backend",
                                                                 sdpa.get("flash"))):
                if ms is None:
                    continue
                met = ms / rows[best] >= TARGET
                print(f"  target: best ({best}) >= {100 * TARGET:.0f}% of {what}: "
                      f"{'met' if met else 'MISSED'} ({100 * ms / rows[best]:.1f}%)")
            facts[f"target_met_d{d}"] = base / rows[best] >= TARGET
            if "flash" in sdpa:
                facts[f"target_met_flash_d{d}"] = sdpa["flash"] / rows[best] >= TARGET
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for b, h, s, d, q_scale in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        q16, k16, v16 = _ref.random_qkv(b, h, s, d, q_scale, rng, bf16=True)
        for causal in (False, True):
            check(kernels, q16, k16, v16, causal)
    if args.bench:
        print(f"{gpu.name}: {gpu.sm_count} SMs")
        facts = {"baseline": BASELINE, "target": TARGET}
        for b, h, s, d, causal in BENCH_SHAPES:
            facts.update(bench_shape(kernels, b, h, s, d, causal, args.seed, args.budget_ms))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
