"""Attention forward in float32: three kernels, then one fused kernel.

O = softmax(Q K^T / sqrt(D)) V for every (batch, head), Q, K, V, O of
B x H x S x D float32, D = 64 or 128, optionally causal (see
attention_fp32.cu). three_kernel: scores writes the S x S matrix of every
head, chapter 14's softmax turns its rows into weights P (a second S x S
matrix), pv multiplies P by V. flash_fp32: one kernel, a tile of keys at a
time with the online softmax; nothing of size S x S reaches memory.

Run:    python code/attention/attention_fp32.py [--seed S] [--bench]
Checks: both against float64 attention, element by element, causal and
        not, at the shapes in SHAPES (under compute-sanitizer,
        SANITIZER_SHAPES), and under --bench at each benchmark shape.
        Bound: _ref.py's, with O and P in float32:
        |O - ref| <= k u (|ref| + P|V|), k = S + 18 + 2 D smax.
Bench:  B = 8, H = 16, S = 4096, D = 64 and 128, and D = 128 causal: ms,
        TFLOP/s (_ref.flops) and the bytes of S x S matrices each way
        writes, each a typed entry (cudabook.evidence) against the FP32
        FMA peak (chapter 10's FMA chains, timed in this run), on the same
        data in the same run as PyTorch. flash_fp32 is timed in
        alternation (five ABBA rounds; the ratio is their median) with
        F.scaled_dot_product_attention (SDPA) in float32 with its
        memory-efficient backend, the one PyTorch picks for float32 (its
        flash and cuDNN backends take 16-bit inputs only), labelled for
        what it is: CUTLASS's fast-float32 products, 3xTF32 on the tensor
        cores. On their own: the same three steps in PyTorch
        (torch.softmax(Q K^T * scale) V, batched matmuls) and SDPA's math
        backend, both with TF32 off (torch.backends.cuda.matmul.
        fp32_precision = "ieee"), the pure-FP32 references. Each entry
        names the kernels the profiler saw.
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from attention import _ref  # noqa: E402
from softmax_norm import softmax  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
WAYS = ("three_kernel", "flash_fp32")
HEAD_DIMS = (64, 128)
T, THREADS = 64, (256, 1, 1)                 # 64 x 64 tiles, 16 x 16 threads (attention_fp32.cu)
MAX_GRID_YZ = 65_535
SOFTMAX_MAX = softmax._rows.MAX_ELEMENTS      # elements in one call of chapter 14's softmax
#: (B, H, S, D, scale of Q)
SHAPES = [(1, 1, 1, 64, 1), (1, 1, 1, 128, 1), (2, 3, 77, 64, 1), (1, 2, 130, 128, 1),
          (2, 2, 257, 64, 16), (1, 1, 1000, 128, 1), (1, 3, 64, 64, 1)]
SANITIZER_SHAPES = [(1, 1, 1, 64, 1), (1, 2, 70, 64, 1), (1, 1, 130, 128, 1)]
BENCH_SHAPES = [(8, 16, 4096, 64, False), (8, 16, 4096, 128, False), (8, 16, 4096, 128, True)]
FMA_PEAK = "FP32 FMA peak (chapter 10's FMA chains, this run)"
#: ABBA rounds of flash_fp32 and SDPA: the fewest a ratio's spread takes
#: (each side runs tens of ms a call, and each block at least five calls).
ROUNDS = 5
#: PyTorch's float32 attention, timed beside ours: key of the facts, name.
TORCH_WAYS = {"sdpa": "SDPA memory-efficient backend (3xTF32 on tensor cores)",
              "torch": "PyTorch three ops, TF32 off",
              "sdpa_math": "SDPA math backend, TF32 off"}


def flash_shared_bytes(d: int) -> int:
    return (3 * T * (d + 1) + T * (T + 1)) * 4          # Q, K, V tiles and P, rows padded


def load_kernels() -> dict:
    import pycuda.driver as cuda

    module = cb.compile(KERNEL_FILE)
    kernels = {"scores": module.get_function("scores").prepare("PPPiifi"),
               "pv": module.get_function("pv").prepare("PPPiii"),
               "softmax": softmax.load_kernels()}
    for d in HEAD_DIMS:
        f = module.get_function(f"flash_fp32_d{d}")
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, flash_shared_bytes(d))
        kernels[f"flash_fp32_d{d}"] = f.prepare("PPPPifi")
    return kernels


# --8<-- [start:launch]
def attention(kernels, way: str, q, k, v, o, causal: bool = False, work=None) -> None:
    """o = softmax(q k^T / sqrt(D)) v, by `way`. q, k, v, o: B x H x S x D
    C-contiguous float32 GPUArrays, D = 64 or 128; o must not overlap q, k
    or v. three_kernel also needs `work`: two float32 arrays of
    B x H x S x S (the scores and the weights)."""
    if way not in WAYS:
        raise ValueError(f"way: expected one of {', '.join(WAYS)}, got {way!r}")
    for arg, x in (("q", q), ("k", k), ("v", v)):
        cb.check_array(arg, x, dtype=np.float32, ndim=4, on_device=True, alignment=16)
    b, h, s, d = (cb.check_size(f"q.shape[{i}] ({n})", q.shape[i]) for i, n in enumerate("BHSD"))
    if d not in HEAD_DIMS:
        raise ValueError(f"q: head dimension D must be one of {HEAD_DIMS}, got {d}")
    for arg, x in (("k", k), ("v", v), ("o", o)):
        cb.check_array(arg, x, dtype=np.float32, shape=(b, h, s, d), on_device=True, alignment=16)
    cb.check_separate("o", o, q=q, k=k, v=v)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected True or False, got {causal!r}")
    if b * h > MAX_GRID_YZ:
        raise ValueError(f"q: B x H = {b * h:,} heads need a block row each, more than "
                         f"the {MAX_GRID_YZ:,} a grid allows")
    scale = np.float32(1 / math.sqrt(d))
    tiles = cb.ceil_div(s, T)
    if way == "flash_fp32":
        cb.check_size("q.shape[2] (S)", s, high=2**31 - 1 - T)
        kernels[f"flash_fp32_d{d}"].prepared_call(
            (tiles, b * h, 1), THREADS, q.gpudata, k.gpudata, v.gpudata, o.gpudata, np.int32(s),
            scale, np.int32(bool(causal)), shared_size=flash_shared_bytes(d))
        return
    # three kernels: a row of scores is a row of chapter 14's softmax (int rows and columns)
    cb.check_size("B H S (rows of scores)", b * h * s)
    if s * s > SOFTMAX_MAX:
        raise ValueError(f"q: S = {s:,} makes {s * s:,} scores a head, more than the "
                         f"{SOFTMAX_MAX:,} chapter 14's softmax takes in one call")
    if tiles > MAX_GRID_YZ:
        raise ValueError(f"q: S = {s:,} needs {tiles:,} tiles of {T} in y, more than {MAX_GRID_YZ:,}")
    if work is None or len(work) != 2:
        raise ValueError("work: three_kernel needs two B x H x S x S float32 arrays")
    for arg, x in (("work[0]", work[0]), ("work[1]", work[1])):
        cb.check_array(arg, x, dtype=np.float32, shape=(b, h, s, s), on_device=True, alignment=16)
        cb.check_separate(arg, x, q=q, k=k, v=v, o=o)
    if cb.overlaps(work[0], work[1]):
        raise ValueError("work: the scores and the weights need separate arrays")
    sc, p = work
    kernels["scores"].prepared_call((tiles, tiles, b * h), THREADS, q.gpudata, k.gpudata,
                                    sc.gpudata, np.int32(s), np.int32(d), scale,
                                    np.int32(bool(causal)))
    heads = SOFTMAX_MAX // (s * s)                # heads a call of chapter 14's softmax takes
    for h0 in range(0, b * h, heads):
        n = min(heads, b * h - h0)
        softmax.softmax(kernels["softmax"], sc.reshape(b * h * s, s)[h0 * s:(h0 + n) * s],
                        p.reshape(b * h * s, s)[h0 * s:(h0 + n) * s])
    kernels["pv"].prepared_call((d // T, tiles, b * h), THREADS, p.gpudata, v.gpudata, o.gpudata,
                                np.int32(s), np.int32(d), np.int32(bool(causal)))
# --8<-- [end:launch]


class Problem:
    """Q, K, V on the GPU, an output, and the three kernels' work arrays."""

    def __init__(self, q, k, v):
        from pycuda import gpuarray

        self.q, self.k, self.v = q, k, v
        b, h, s, _ = q.shape
        self.gpu = [gpuarray.to_gpu(x) for x in (q, k, v)]
        self.o = gpuarray.empty(q.shape, np.float32)
        self.work = [gpuarray.empty((b, h, s, s), np.float32) for _ in range(2)]

    def run(self, kernels, way: str, causal: bool) -> None:
        attention(kernels, way, *self.gpu, self.o, causal, self.work)


def check(kernels, prob: Problem, causal: bool, torch=None) -> None:
    b, h, s, d = prob.q.shape
    ref, mag, smax = _ref.reference(prob.q, prob.k, prob.v, causal, torch)
    k = _ref.bound_k(s, d, smax, u_out=_ref.U_FP32, u_p=_ref.U_FP32)
    for way in WAYS:
        cb.poison(prob.o)
        prob.run(kernels, way, causal)
        cb.report_check(cb.compare(f"{way} {b}x{h}x{s}x{d}{' causal' if causal else ''}",
                                   prob.o.get(), ref, k=k, scale=mag))


def torch_calls(torch, prob: Problem, causal: bool) -> dict:
    """PyTorch's float32 attention on the same data, with TF32 off, as
    calls (TORCH_WAYS' keys): SDPA forced to its memory-efficient backend
    (what it picks for float32), the three steps as PyTorch operations,
    and SDPA's math backend."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.backends.cuda.matmul.fp32_precision = "ieee"   # cuBLAS in FP32, as ours
    q, k, v = (torch.from_numpy(x).cuda() for x in (prob.q, prob.k, prob.v))
    s, d = q.shape[2], q.shape[3]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device="cuda"), 1) if causal else None

    def eager():
        sc = q @ k.transpose(-2, -1) * (1 / math.sqrt(d))
        if causal:
            sc = sc.masked_fill(mask, -math.inf)
        return torch.softmax(sc, dim=-1) @ v

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return call

    return {"sdpa": sdpa(SDPBackend.EFFICIENT_ATTENTION), "torch": eager,
            "sdpa_math": sdpa(SDPBackend.MATH)}


def bench_shape(kernels, b, h, s, d, causal, seed, budget_ms, peak: float) -> dict:
    q, k, v = _ref.random_qkv(b, h, s, d, 1, np.random.default_rng(seed), bf16=False)
    prob = Problem(q, k, v)
    torch = cb.torch_cuda()
    check(kernels, prob, causal, torch)
    work = int(_ref.flops(b, h, s, d, causal))
    ws = 4 * q.nbytes
    tag = f"s{s}_d{d}{'_causal' if causal else ''}"
    label = f"B={b} H={h} S={s} D={d}{' causal' if causal else ''}"
    square = b * h * s * s * 4
    print(f"{label}: {work / 1e9:,.1f} GFLOP; one S x S float32 matrix a head: {square / 1e9:.2f} GB in all")
    fma = (FMA_PEAK, peak)
    calls = torch_calls(torch, prob, causal) if torch is not None else {}
    entries = {}
    for way in WAYS:
        extra = 2 * prob.work[0].nbytes if way == "three_kernel" else 0
        base = ((TORCH_WAYS["sdpa"], calls["sdpa"]) if way == "flash_fp32" and calls else None)
        entries[way] = evidence.benchmark(f"{way} {label}", lambda way=way: prob.run(kernels, way, causal),
                                          flops=work, working_set_bytes=ws + extra, ceiling=fma,
                                          baseline=base, rounds=ROUNDS)
    times = {way: m.timing.median_ms for way, m in entries.items()}
    if calls:
        times["sdpa"] = entries["flash_fp32"].baseline.timing.median_ms
        for way in ("torch", "sdpa_math"):
            m = evidence.benchmark(f"{TORCH_WAYS[way]} {label}", calls[way], flops=work,
                                   working_set_bytes=ws, ceiling=fma)
            times[way] = m.timing.median_ms
    written = {"three_kernel": 2 * square, "flash_fp32": 0, "torch": 2 * square, "sdpa": None,
               "sdpa_math": None}
    facts = {f"square_{tag}_gb": square / 1e9}
    print(f"{label}, the entries above in one table:")
    for way, ms in times.items():
        rate = work / (ms * 1e-3) / 1e12
        w = written[way]
        note = f"{w / 1e9:6.2f} GB of S x S" if w is not None else "   (its own)"
        print(f"  {way:14s} {ms:9.3f} ms {rate:7.2f} TFLOP/s   {note}")
        facts[f"{way}_{tag}_ms"] = ms
        facts[f"{way}_{tag}_tflops"] = rate
    facts[f"fused_over_three_{tag}"] = times["three_kernel"] / times["flash_fp32"]
    if calls:
        facts[f"flash_fp32_over_torch_{tag}"] = times["torch"] / times["flash_fp32"]
        facts[f"flash_fp32_over_sdpa_{tag}"] = entries["flash_fp32"].baseline.ratio   # the rounds' median
        facts[f"flash_fp32_over_sdpa_math_{tag}"] = times["sdpa_math"] / times["flash_fp32"]
        facts[f"sdpa_over_sdpa_math_{tag}"] = times["sdpa_math"] / times["sdpa"]
        print("  " + "; ".join(f"{way}: {name}" for way, name in TORCH_WAYS.items()))
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for b, h, s, d, q_scale in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        prob = Problem(*_ref.random_qkv(b, h, s, d, q_scale, rng, bf16=False))
        for causal in (False, True):
            check(kernels, prob, causal)
    if args.bench:
        from roofline.intensity_sweep import fp32_roof

        print(f"{gpu.name}: {gpu.sm_count} SMs")
        peak = fp32_roof(gpu)
        print(f"{FMA_PEAK}: {peak / 1e12:.1f} TFLOP/s")
        facts = {"fma_peak_tflops": peak / 1e12}
        for b, h, s, d, causal in BENCH_SHAPES:
            facts.update(bench_shape(kernels, b, h, s, d, causal, args.seed, args.budget_ms, peak))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
