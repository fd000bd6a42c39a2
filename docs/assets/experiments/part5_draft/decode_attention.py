"""Decoding's attention: one query a sequence against its KV cache, split along the cache (Flash-Decoding), with grouped heads.

Draft for Part V ("Serving a model"), not yet a listing, and not yet run on
a GPU: run it from the repository root with PYTHONPATH=code. q (B, H, D),
the cache K, V (B, HKV, L, D), all bf16; query head h reads KV head h / G
(G = H / HKV = 1, 4 or 8). decode_split: a block per (chunk of the
cache, KV head, sequence), its G queries together; decode_combine merges
the chunks' maxima, sums and outputs.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part5_draft/decode_attention.py [--seed S] [--bench]
Checks: D = 64 and 128, (B, HKV, G) = (1, 1, 1), (2, 2, 4), (3, 1, 8), L = 1,
        31, 255, 256, 257, 1,000 and 4,096, each split into chunks of 128
        keys and unsplit; q, K, V ~ N(0, 1): every output element against
        float64 from the same bf16 inputs, within one bf16 rounding plus
        float32 units, of sum_j p_j |v_j|, for the scores' dot products (D
        times their largest |c q . k| in units), the chunks' and warps'
        merges (chunks + 8) and 64 more.
Bench:  (B, H, HKV, L, D) = (1, 32, 8, 32768, 128) (a Llama-like model, one
        long sequence) and (8, 12, 12, 1024, 64) (GPT-2 small, a batch of
        8): the cache read in GB/s against the copy bandwidth of the same
        run, split and unsplit, each in alternation with SDPA (q as one
        token, enable_gqa) under each backend that runs.
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
THREADS = 128
GROUPS = (1, 4, 8)
DIMS = (64, 128)
LOG2E = 1.4426950408889634
U32, U_BF16 = 2.0**-24, 2.0**-8
CHECK_L = (1, 31, 255, 256, 257, 1000, 4096)
CHECK_HEADS = ((1, 1, 1), (2, 2, 4), (3, 1, 8))
BENCH = [(1, 32, 8, 32768, 128), (8, 12, 12, 1024, 64)]


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    k = {(d, g): module.get_function(f"decode_split_d{d}_g{g}").prepare("PPPPPiif") for d in DIMS for g in GROUPS}
    k["combine"] = module.get_function("decode_combine").prepare("PPPii")
    return k


def fill_span(b: int, hkv: int, L: int, sm_count: int) -> int:
    """Keys a block: enough chunks for about two blocks an SM, a multiple of
    128 (a block's four warps take 128 keys at a time), at least 128."""
    chunks = max(1, cb.ceil_div(2 * sm_count, b * hkv))
    return max(128, cb.ceil_div(cb.ceil_div(L, chunks), 128) * 128)


# --8<-- [start:launch]
def decode_attention(kernels, q, k, v, o, work, span: int) -> None:
    """o = softmax(q K^T / sqrt(D)) V for one query a (sequence, head):
    q, o (B, H, D); k, v (B, HKV, L, D); bf16 bit patterns (uint16) on the
    GPU; H a multiple of HKV with G = H / HKV in (1, 4, 8); D 64 or 128.
    span: keys a block (a multiple of 128, or >= L for no split); work:
    float32, at least B H chunks (D + 2) with chunks = ceil(L / span)."""
    cb.check_array("q", q, dtype=np.uint16, ndim=3, on_device=True, alignment=16)
    b, h, d = q.shape
    cb.check_array("k", k, dtype=np.uint16, ndim=4, on_device=True, alignment=16)
    kb, hkv, L, kd = k.shape
    if kb != b or kd != d or d not in DIMS:
        raise ValueError(f"k: expected ({b}, HKV, L, {d}) with D in {DIMS}, got {tuple(k.shape)} "
                         f"(q is {tuple(q.shape)})")
    if h % hkv or h // hkv not in GROUPS:
        raise ValueError(f"q: H / HKV must be one of {GROUPS}, got {h} / {hkv}")
    cb.check_size("L", L)
    cb.check_array("v", v, dtype=np.uint16, shape=k.shape, on_device=True, alignment=16)
    cb.check_array("o", o, dtype=np.uint16, shape=q.shape, on_device=True)
    if span < L and span % 128:
        raise ValueError(f"span: a multiple of 128 when the cache is split, got {span}")
    chunks = cb.ceil_div(L, span)
    if chunks > 65_535:
        raise ValueError(f"span: {chunks:,} chunks; at most 65,535")
    cb.check_array("work", work, dtype=np.float32, ndim=1, on_device=True)
    rows = b * h * chunks
    if work.size < rows * (d + 2):
        raise ValueError(f"work: needs {rows * (d + 2):,} float32s, has {work.size:,}")
    ml, po = int(work.gpudata), int(work.gpudata) + 4 * 2 * rows
    kernels[d, h // hkv].prepared_call((chunks, hkv, b), (THREADS, 1, 1), q.gpudata, k.gpudata, v.gpudata, ml, po,
                                       np.int32(L), np.int32(span), np.float32(LOG2E / math.sqrt(d)))
    kernels["combine"].prepared_call((b * h, 1, 1), (d, 1, 1), ml, po, o.gpudata, np.int32(chunks), np.int32(d))
# --8<-- [end:launch]


def reference(q64, k64, v64):
    """Float64 output, and per output element the size of its terms (sum_j
    p_j |v_j|), and the largest |q . k| / sqrt(D) each query saw."""
    b, h, d = q64.shape
    g = h // k64.shape[1]
    kk = np.repeat(k64, g, axis=1)                  # (B, H, L, D): query head h reads KV head h / G
    vv = np.repeat(v64, g, axis=1)
    s = np.einsum("bhd,bhld->bhl", q64, kk) / math.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    sabs = np.einsum("bhd,bhld->bhl", np.abs(q64), np.abs(kk)).max(-1) / math.sqrt(d)
    return np.einsum("bhl,bhld->bhd", p, vv), np.einsum("bhl,bhld->bhd", p, np.abs(vv)), sabs


def run(kernels, b, hkv, g, L, d, span, rng):
    from pycuda import gpuarray

    h = hkv * g
    q16, k16, v16 = (to_bf16(rng.standard_normal(s).astype(np.float32))
                     for s in ((b, h, d), (b, hkv, L, d), (b, hkv, L, d)))
    qg, kg, vg = (gpuarray.to_gpu(a) for a in (q16, k16, v16))
    og = gpuarray.empty((b, h, d), np.uint16)
    og.fill(np.uint16(0x7FC0))                       # bf16 NaN: every output must be written
    chunks = cb.ceil_div(L, span)
    work = gpuarray.empty(b * h * chunks * (d + 2), np.float32)
    decode_attention(kernels, qg, kg, vg, og, work, span)
    want, terms, sabs = reference(*(from_bf16(a).astype(np.float64) for a in (q16, k16, v16)))
    units = d * sabs[..., None] * LOG2E + chunks + 8 + 64
    bound = (units * U32 * terms + U_BF16 * np.abs(want)) / U32
    tag = f"B={b} HKV={hkv} G={g} L={L} D={d} span={span}"
    cb.report_check(cb.compare(tag, from_bf16(og.get()), want, k=1, scale=bound))
    return qg, kg, vg, og, work


def bench(kernels, seed, sm_count) -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rng = np.random.default_rng(seed)
    ceiling = ("device-to-device copy", cb.ceiling())
    for b, h, hkv, L, d in BENCH:
        g = h // hkv
        split = fill_span(b, hkv, L, sm_count)
        nbytes = 2 * (2 * b * hkv * L * d + 2 * b * h * d)        # K and V read; q read, o written
        tq, tk, tv = None, None, None
        for span, how in ((split, "split"), (L, "unsplit")):
            qg, kg, vg, og, work = run(kernels, b, hkv, g, L, d, span, rng)
            if tq is None:
                tq, tk, tv = (torch.from_numpy(from_bf16(a.get())).cuda().to(torch.bfloat16) for a in (qg, kg, vg))
                tq = tq[:, :, None, :]                             # one token a sequence
            ours = lambda qg=qg, kg=kg, vg=vg, og=og, work=work, span=span: decode_attention(  # noqa: E731
                kernels, qg, kg, vg, og, work, span)
            for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                def sdpa(backend=backend):
                    with sdpa_kernel(backend):
                        return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=g > 1)
                try:
                    sdpa()
                    torch.cuda.synchronize()
                except RuntimeError as e:                          # a backend that declines is said, not hidden
                    print(f"SDPA {backend.name} does not run this shape: {str(e).splitlines()[0]}")
                    continue
                evidence.benchmark(f"decode attention ({how}) B={b} H={h} HKV={hkv} L={L} D={d} vs SDPA {backend.name}",
                                   ours, bytes_moved=nbytes, ceiling=ceiling,
                                   baseline=(f"SDPA {backend.name}", sdpa))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    info = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for d in DIMS:
        for b, hkv, g in CHECK_HEADS:
            for L in CHECK_L:
                for span in sorted({128, L}):
                    run(kernels, b, hkv, g, L, d, span, rng)
    if args.bench:
        bench(kernels, args.seed, info.sm_count)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
