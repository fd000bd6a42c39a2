"""Solution to exercise 3: short sequences.

At B = 8, H = 16 and D = 128, the fused bf16 kernel has one block per 128
query rows of each of the 128 heads: S / 128 * 128 blocks. This listing
sweeps S from 256 to 8192 and times the chapter's best D = 128 variant
beside F.scaled_dot_product_attention (SDPA), as PyTorch dispatches it and
with its flash backend, in the same run.

Run:    python code/attention/ex3_short_sequences.py [--seed S] [--bench]
Checks: the variant against float64 attention (flash_bf16.py's bound) at
        B = 2, H = 2, S = 300 (under compute-sanitizer S = 70), and under
        --bench at every S timed.
Bench:  S = 256, 512, 1024, 2048, 4096, 8192, not causal: ms, TFLOP/s,
        blocks, and the same for SDPA.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from attention import _ref, flash_bf16  # noqa: E402

NAME = "flash_d128_m2_n64"
B, H, D = 8, 16, 128
LENGTHS = (256, 512, 1024, 2048, 4096, 8192)


# --8<-- [start:solution]
def sweep(kernels, seed: int, budget_ms: float) -> dict:
    from pycuda import gpuarray

    torch = cb.torch_cuda()
    facts = {}
    for s in LENGTHS:
        q, k, v = _ref.random_qkv(B, H, s, D, 1, np.random.default_rng(seed), bf16=True)
        flash_bf16.check(kernels, q, k, v, False, torch)
        qg, kg, vg = (gpuarray.to_gpu(x) for x in (q, k, v))
        og = gpuarray.empty(q.shape, np.uint16)
        ws, work = 4 * q.nbytes, _ref.flops(B, H, s, D, False)
        t = cb.bench(lambda: flash_bf16.attention(kernels, NAME, qg, kg, vg, og), working_set_bytes=ws,
                     budget_ms=budget_ms).median_ms
        blocks = cb.ceil_div(s, 128) * B * H
        line = f"S = {s:5d}: {blocks:5d} blocks, {work / (t * 1e-3) / 1e12:6.1f} TFLOP/s"
        facts.update({f"tflops_s{s}": work / (t * 1e-3) / 1e12, f"blocks_s{s}": blocks})
        if torch is not None:
            for backend, ms in flash_bf16.sdpa_times(torch, q, k, v, False, ws, budget_ms).items():
                facts[f"sdpa_{backend}_tflops_s{s}"] = work / (ms * 1e-3) / 1e12
                line += f"; SDPA {backend} {facts[f'sdpa_{backend}_tflops_s{s}']:6.1f}"
        print(line)
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = flash_bf16.load_kernels()
    s = 70 if os.environ.get("CUDABOOK_SANITIZER") else 300
    q, k, v = _ref.random_qkv(2, 2, s, D, 1, np.random.default_rng(args.seed), bf16=True)
    flash_bf16.check(kernels, q, k, v, False)
    if args.bench:
        cb.report_facts(baseline=flash_bf16.BASELINE, **sweep(kernels, args.seed, args.budget_ms))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
