"""Solution to exercise 1: what fusing the tail into the product saves.

The MLP's first product of a GPT-2 small block, gelu(a @ W^T + b) with
a (B T) x C and W^T C x 4C, two ways: gemm_gelu (the chapter's kernel, the
tail in the store) and chapter 12's tc_mma_pipelined writing the fp32
product, then bias_gelu_f32 (ex1_unfused_tail.cu) reading it back for the
tail. Same arithmetic, same roundings: the second way only moves the fp32
product through memory, 4 bytes written and 4 read per element.

Run:    python code/transformer/ex1_unfused_tail.py [--seed S] [--bench]
Checks: both ways, every element, against float64 of the same bf16
        inputs with the chapter's bound for a product with a GELU tail,
        and the two ways against each other bit for bit (the same
        arithmetic in the same order),
        at M x K x N = 1x64x8, 33x64x40, 300x128x512 (under
        compute-sanitizer the first two), and under --bench at 8192 x 768
        x 3072.
Bench:  at 8192 x 768 x 3072 (B = 8, T = 1024, GPT-2 small's c_fc): the
        fused kernel; the product and the tail launched apart, each timed,
        and together; the extra bytes (8 per element of the product) over
        the copy bandwidth measured in the same run, as the time the
        fusion should save; and PyTorch's F.linear then F.gelu (cuBLAS
        writes the product in bf16, so its round trip is 4 bytes an
        element, not 8).
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import to_bf16  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402
from transformer import gpt2_block as gb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
SHAPES = [(1, 64, 8), (33, 64, 40), (300, 128, 512)]          # M, K, N
SANITIZER_SHAPES = SHAPES[:2]
BENCH_SHAPE = (8 * 1024, 768, 3072)
# gpt2_block's eager block waits on Python (its HOST_BOUND_TIMINGS), but
# this listing uses only its products: PyTorch's baseline here is two large
# operations, which the host issues far faster than the GPU runs them.
HOST_BOUND_TIMINGS = False


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {"gemm_gelu": module.get_function("gemm_gelu").prepare("PPPPPiiiii"),
            "tc_mma_pipelined": module.get_function("tc_mma_pipelined").prepare("PPPiii"),
            "bias_gelu_f32": module.get_function("bias_gelu_f32").prepare("PPPii")}


# --8<-- [start:launch]
def unfused(kernels, a, w_t, bias, c32, out) -> None:
    """out = gelu(a @ w_t + bias) in two launches: the fp32 product into c32
    (M, N), then the tail. Arguments as gpt2_block.linear's; N even."""
    m, n, _ = gb._check_product(a, w_t, bias)
    cb.check_array("out", out, dtype=np.uint16, shape=(m, n), on_device=True, alignment=16)
    tc_gemm.tc_gemm(kernels, "tc_mma_pipelined", a, w_t, c32)       # checks c32
    pairs = m * n // 2
    kernels["bias_gelu_f32"].prepared_call((min(cb.ceil_div(pairs, 256), 2**31 - 1), 1, 1), (256, 1, 1),
                                           c32.gpudata, bias.gpudata, out.gpudata, np.int32(m), np.int32(n))
# --8<-- [end:launch]


def operands(m, k, n, rng):
    from pycuda import gpuarray

    host = (to_bf16(rng.standard_normal((m, k), dtype=np.float32)),
            to_bf16(0.02 * rng.standard_normal((k, n), dtype=np.float32)),
            to_bf16(0.02 * rng.standard_normal(n, dtype=np.float32)))
    dev = [gpuarray.to_gpu(x) for x in host]
    return host, dev, gpuarray.empty((m, n), np.float32), gpuarray.empty((m, n), np.uint16)


def check_shape(kernels, m, k, n, rng, torch=None):
    host, (a, w, b), c32, out = operands(m, k, n, rng)
    got = {}
    for name in ("fused", "unfused"):
        cb.poison(out)
        if name == "fused":
            gb.linear(kernels, "gelu", a, w, b, out)
        else:
            cb.poison(c32)
            unfused(kernels, a, w, b, c32, out)
        got[name] = out.get()
        gb.check_product(f"{name} {m}x{k}x{n}", got[name], *host, "gelu", torch=torch)
    # Same main loop, same roundings in the same order: the same bits.
    cb.report_check(cb.compare(f"unfused == fused {m}x{k}x{n}", got["unfused"], got["fused"], k=0))
    return host, (a, w, b), c32, out


def bench(kernels, seed: int, budget_ms: float) -> dict:
    m, k, n = BENCH_SHAPE
    torch = cb.torch_cuda()
    host, (a, w, b), c32, out = check_shape(kernels, m, k, n, np.random.default_rng(seed), torch)
    ws = a.nbytes + w.nbytes + out.nbytes
    t = {"fused": cb.bench(lambda: gb.linear(kernels, "gelu", a, w, b, out),
                                       working_set_bytes=ws, budget_ms=budget_ms).median_ms,
         "product": cb.bench(lambda: tc_gemm.tc_gemm(kernels, "tc_mma_pipelined", a, w, c32),
                                       working_set_bytes=ws + c32.nbytes, budget_ms=budget_ms).median_ms,
         "tail": cb.bench(
             lambda: kernels["bias_gelu_f32"].prepared_call(
                 (cb.ceil_div(m * n // 2, 256), 1, 1), (256, 1, 1), c32.gpudata, b.gpudata, out.gpudata,
                 np.int32(m), np.int32(n)),
             working_set_bytes=c32.nbytes + out.nbytes, budget_ms=budget_ms).median_ms,
         "unfused": cb.bench(lambda: unfused(kernels, a, w, b, c32, out),
                                    working_set_bytes=ws + c32.nbytes, budget_ms=budget_ms).median_ms}
    if torch is not None:
        import torch.nn.functional as F

        ta, tw, tb = (gb.to_torch(torch, x) for x in host)
        wn = tw.t().contiguous()              # nn.Linear keeps W as (N, K)

        def eager():
            F.gelu(F.linear(ta, wn, tb), approximate="tanh")

        t["torch"] = cb.bench(eager, working_set_bytes=ws, budget_ms=budget_ms).median_ms
    bw = cb.copy_bandwidth()
    extra = 8 * m * n
    flops = 2 * m * n * k
    print(f"c_fc of GPT-2 small, M={m} K={k} N={n}: {flops / 1e9:.1f} GFLOP; copy bandwidth "
          f"{bw / 1e9:,.0f} GB/s")
    labels = {"fused": "fused (gemm_gelu)", "product": "product, fp32 out", "tail": "tail, fp32 in",
              "unfused": "unfused (both)", "torch": "torch F.linear, F.gelu"}
    tail_bytes = c32.nbytes + out.nbytes + b.nbytes     # the tail does no matrix product
    for name, ms in t.items():
        rate = (f"{tail_bytes / ms / 1e6:7,.0f} GB/s ({tail_bytes / ms * 1e3 / bw:.0%} of copy)"
                if name == "tail" else f"{flops / ms / 1e9:7.1f} TFLOP/s")
        print(f"  {labels[name]:24s} {ms:8.3f} ms {rate}")
    saved = t["unfused"] - t["fused"]
    predicted = extra / bw * 1e3
    print(f"  fusion saved {saved:.3f} ms; the fp32 round trip ({extra / 1e6:.0f} MB) at copy "
          f"bandwidth takes {predicted:.3f} ms ({saved / predicted:.0%} of it saved)")
    facts = {f"{name}_ms": ms for name, ms in t.items()}
    facts.update(saved_ms=saved, predicted_ms=predicted, saved_of_predicted=saved / predicted,
                 extra_bytes=extra, copy_bw=bw,
                 fused_tflops=flops / t["fused"] / 1e9, tail_mb=tail_bytes / 1e6,
                 tail_fraction_of_copy=tail_bytes / t["tail"] * 1e3 / bw)
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for m, k, n in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        check_shape(kernels, m, k, n, rng)
    if args.bench:
        cb.report_facts(**bench(kernels, args.seed, args.budget_ms))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
