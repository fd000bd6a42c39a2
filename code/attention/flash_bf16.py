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
        2 D smax) 2^-24 / 2^-8. And at each benchmark shape, against a
        same-precision peer: every variant's norm-wise relative error
        against the float64 reference (the whole of it, computed on the GPU
        in float64, a head at a time) at most PEER times that of PyTorch's
        bf16 SDPA, as a user calls it, on the same inputs.
Bench:  B = 8, H = 16, S = 4096 at D = 64 and 128, causal and not, and
        S = 4000 (not a multiple of the tiles) at D = 128: each variant a
        typed entry (cudabook.evidence): ms and TFLOP/s (_ref.flops: 4 B H
        S S D; causal, the S (S + 1) / 2 scores that count) against
        chapter 12's tensor-core ceiling (tc_gemm.tensor_core_ceiling:
        cuBLAS bf16 at 8192^3 through torch.matmul, timed once in this
        run), the kernels the profiler saw and the GPU's state. The best
        variant (a short timing of each picks it) is timed in alternation
        (ABBA rounds) with F.scaled_dot_product_attention (SDPA) on the same
        data as a user calls it (PyTorch picks the backend; which one,
        torch._fused_sdp_choice says, where this PyTorch has it); SDPA
        with its flash (FlashAttention-2) and cuDNN backends forced are
        entries of their own. Target: the best variant >= 50% of SDPA as
        a user calls it at S = 4096, D = 64 and 128, not causal (judged by
        the entry, on the median of the rounds' ratios); beside it the
        same ratio against the flash backend, the issue's reading.
"""

import functools
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16  # noqa: E402
from attention import _ref  # noqa: E402
from matmul_tc.tc_gemm import tensor_core_ceiling  # noqa: E402

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
SDPA_AS_CALLED = "SDPA as called (PyTorch picks the backend)"
#: Same-precision peer: our error against float64 at most PEER times SDPA's.
PEER = 2.0
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


def check(kernels, q16, k16, v16, causal: bool, torch=None, peer: bool = False) -> dict:
    """Each variant for this D against float64 attention (_ref's bound:
    O and P rounded to bf16). peer (with torch): also each variant's
    norm-wise error against PEER times that of SDPA in bf16 on the same
    inputs and reference; returns those errors as facts."""
    from pycuda import gpuarray

    b, h, s, d = q16.shape
    ref, mag, smax = _ref.reference(q16, k16, v16, causal, torch)
    k = _ref.bound_k(s, d, smax, u_out=_ref.U_BF16, u_p=_ref.U_BF16)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    shape = f"{b}x{h}x{s}x{d}{' causal' if causal else ''}"
    errors = {}
    for name in variants_for(d):
        cb.poison(og)
        attention(kernels, name, qg, kg, vg, og, causal)
        got = from_bf16(og.get())             # compare in float32 units: k u = u_bf16
        r = cb.compare(f"{name} {shape}", got, ref, k=k * _ref.U_BF16 / _ref.U_FP32, scale=mag)
        cb.report_check(r)
        errors[name] = r.norm_rel_err
    if not (peer and torch is not None):
        return {}
    return peer_check(torch, q16, k16, v16, causal, ref, errors, shape)


def peer_check(torch, q16, k16, v16, causal: bool, ref, errors: dict, shape: str) -> dict:
    """The same-precision peer: SDPA in bf16, as a user calls it, on the
    same inputs, its norm-wise error against the same float64 reference;
    each variant's error may be at most PEER times it."""
    import torch.nn.functional as F

    tq, tk, tv = to_torch(torch, q16, k16, v16)
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).float().cpu().numpy()
    theirs = cb.compare(f"SDPA bf16 {shape}", out, ref).norm_rel_err    # only its norm-wise error is used
    worst = max(errors, key=errors.get)
    ratio = errors[worst] / theirs
    cb.report_check(cb.expect(
        f"{shape} error within {PEER:g}x SDPA bf16's", ratio <= PEER,
        f"norm-wise error against float64: {worst} (our worst) {errors[worst]:.2e}, "
        f"SDPA bf16 {theirs:.2e}, {ratio:.2f} times"))
    tag = tag_of(q16.shape[2], q16.shape[3], causal)
    return {f"err_{tag}": errors[worst], f"sdpa_err_{tag}": theirs, f"err_{tag}_of_sdpa": ratio}


def to_torch(torch, *arrays):
    """bf16 bit patterns (uint16) as bf16 tensors on the GPU."""
    return tuple(torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16) for x in arrays)


def sdpa_times(torch, q16, k16, v16, causal: bool, ws: int, budget_ms: float) -> dict:
    """F.scaled_dot_product_attention on the same data, ms: as a user calls
    it (PyTorch picks the backend), and with each fused backend forced
    (flash: FlashAttention-2; cudnn: cuDNN's fused attention), where this
    PyTorch and GPU have it."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tq, tk, tv = to_torch(torch, q16, k16, v16)
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


def tag_of(s: int, d: int, causal: bool) -> str:
    return f"s{s}_d{d}{'_causal' if causal else ''}"


def sdpa_choice(torch, tq, tk, tv, causal: bool) -> str:
    """The backend SDPA picks for these inputs, by PyTorch's own dispatcher
    (torch._fused_sdp_choice, a private function: "unknown" where this
    PyTorch lacks it)."""
    from torch.nn.attention import SDPBackend

    try:
        return SDPBackend(torch._fused_sdp_choice(tq, tk, tv, None, 0.0, causal)).name
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return "unknown"


def bench_shape(kernels, b, h, s, d, causal, seed, budget_ms, ceiling: tuple) -> dict:
    """Check, then time every variant (typed entries), the best against SDPA
    in alternation, and SDPA's forced backends. ceiling: (name, FLOP/s)."""
    from pycuda import gpuarray

    q16, k16, v16 = _ref.random_qkv(b, h, s, d, 1, np.random.default_rng(seed), bf16=True)
    torch = cb.torch_cuda()
    facts = check(kernels, q16, k16, v16, causal, torch, peer=True)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    work = int(_ref.flops(b, h, s, d, causal))
    ws = 4 * q16.nbytes
    tag = tag_of(s, d, causal)
    label = f"B={b} H={h} S={s} D={d}{' causal' if causal else ''}"
    print(f"{label}: {work / 1e9:,.1f} GFLOP")

    def ours(name):
        return lambda: attention(kernels, name, qg, kg, vg, og, causal)

    # which variant is timed against SDPA: a short timing of each picks it
    quick = {name: cb.bench(ours(name), working_set_bytes=ws, budget_ms=budget_ms / 4).median_ms
             for name in variants_for(d)}
    best = min(quick, key=quick.get)
    sdpa = None
    if torch is not None:
        import torch.nn.functional as F

        tq, tk, tv = to_torch(torch, q16, k16, v16)
        sdpa = functools.partial(F.scaled_dot_product_attention, tq, tk, tv, is_causal=causal)
        facts[f"sdpa_{tag}_choice"] = sdpa_choice(torch, tq, tk, tv, causal)
    target_shape = s == 4096 and not causal
    entries = {}
    for name in variants_for(d):
        extra = {}
        if name == best and sdpa is not None:
            extra["baseline"] = (SDPA_AS_CALLED, sdpa)
            if target_shape:
                extra["targets"] = {"baseline": TARGET}
        entries[name] = evidence.benchmark(f"{name} {label}", ours(name), flops=work, working_set_bytes=ws,
                                           ceiling=ceiling, **extra)
    m = entries[best]
    sdpa_ms = {}
    if m.baseline is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        sdpa_ms["default"] = m.baseline.timing.median_ms
        for backend, which in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(which):
                    e = evidence.benchmark(f"SDPA {backend} backend (forced) {label}", sdpa, flops=work,
                                           working_set_bytes=ws, ceiling=ceiling)
            except RuntimeError as err:             # this backend does not take these inputs
                print(f"  SDPA {backend}: not available ({str(err).splitlines()[0][:80]})")
                continue
            sdpa_ms[backend] = e.timing.median_ms
    fastest = min(sdpa_ms, key=sdpa_ms.get) if sdpa_ms else None
    base = sdpa_ms[fastest] if fastest else None
    print(f"{label}, the entries above in one table:")
    for name, e in entries.items():
        ms = e.timing.median_ms
        share = f"{100 * base / ms:6.1f}% of the fastest SDPA" if base else ""
        print(f"  {name:20s} {ms:8.3f} ms {e.flops_per_s / 1e12:7.1f} TFLOP/s {share}")
        facts[f"{name}_{tag}_ms"] = ms
        facts[f"{name}_{tag}_tflops"] = e.flops_per_s / 1e12
        if base:
            facts[f"{name}_{tag}_of_sdpa"] = base / ms
    facts[f"best_{tag}"] = best
    facts[f"best_{tag}_tflops"] = m.flops_per_s / 1e12
    best_ms = m.timing.median_ms
    for backend, ms in sdpa_ms.items():
        rate = work / (ms * 1e-3) / 1e12
        print(f"  {'SDPA ' + backend:20s} {ms:8.3f} ms {rate:7.1f} TFLOP/s")
        # against the alternated SDPA, the rounds' median; the forced backends, by pooled times
        of = m.baseline.ratio if backend == "default" else ms / best_ms
        facts.update({f"sdpa_{backend}_{tag}_ms": ms, f"sdpa_{backend}_{tag}_tflops": rate,
                      f"best_{tag}_of_sdpa_{backend}": of})
    if fastest:
        print(f"  SDPA: {BASELINE}; PyTorch's choice (torch._fused_sdp_choice): "
              f"{facts[f'sdpa_{tag}_choice']}; the fastest of the three here: {fastest}")
        facts.update({f"sdpa_{tag}_ms": base, f"sdpa_{tag}_tflops": work / (base * 1e-3) / 1e12,
                      f"sdpa_{tag}_backend": fastest,
                      f"best_{tag}_of_sdpa": facts[f"best_{tag}_of_sdpa_{fastest}"]})
        if target_shape:
            facts[f"target_met_d{d}"] = bool(m.targets.met["baseline"])
            if "flash" in sdpa_ms:
                of = sdpa_ms["flash"] / best_ms
                print(f"  {best} / SDPA's flash backend (the issue's reading of the target): {100 * of:.1f}%")
                facts[f"target_met_flash_d{d}"] = of >= TARGET
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
        ceiling = tensor_core_ceiling(None, args.seed, args.budget_ms)
        facts = {"baseline": BASELINE, "target": TARGET, "ceiling": ceiling[0],
                 "ceiling_tflops": ceiling[1] / 1e12}
        for b, h, s, d, causal in BENCH_SHAPES:
            facts.update(bench_shape(kernels, b, h, s, d, causal, args.seed, args.budget_ms, ceiling))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
