"""Solution to exercise 1: what the S x S matrices cost as S grows.

The three-kernel attention writes two S x S float32 matrices a head (the
scores and the weights) and reads each back; the fused kernel writes none.
This listing runs both at B = 1, H = 16, D = 64 for S from 512 to 8192,
and prints the bytes of S x S that the three kernels move, their time
against the fused kernel's, and the S at which the two matrices alone
would fill this GPU's memory at B = 8.

Run:    python code/attention/ex1_memory.py [--seed S] [--bench]
Checks: both ways against float64 attention (attention_fp32.py's bound) at
        S = 512 (under compute-sanitizer S = 70), and under --bench at every
        S timed.
Bench:  S = 512, 1024, 2048, 4096, 8192: ms of each way, GB of S x S
        written and read by the three kernels, and their ratio.
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from attention import _ref, attention_fp32  # noqa: E402

B, H, D = 1, 16, 64
LENGTHS, CHECK_S, SANITIZER_S = (512, 1024, 2048, 4096, 8192), 512, 70


# --8<-- [start:solution]
def sweep(kernels, gpu, seed: int, budget_ms: float) -> dict:
    torch = cb.torch_cuda()
    facts = {}
    print(f"{'S':>6s} {'S x S moved':>12s} {'three kernels':>14s} {'fused':>9s} {'ratio':>6s}")
    for s in LENGTHS:
        q, k, v = _ref.random_qkv(B, H, s, D, 1, np.random.default_rng(seed), bf16=False)
        prob = attention_fp32.Problem(q, k, v)
        attention_fp32.check(kernels, prob, False, torch)
        ws = 4 * q.nbytes
        t = {way: cb.bench(lambda way=way: prob.run(kernels, way, False), budget_ms=budget_ms,
                           working_set_bytes=ws + (2 * prob.work[0].nbytes if way == "three_kernel" else 0)
                           ).median_ms for way in attention_fp32.WAYS}
        moved = 4 * prob.work[0].nbytes           # scores written, read; weights written, read
        ratio = t["three_kernel"] / t["flash_fp32"]
        print(f"{s:6d} {moved / 1e9:9.2f} GB {t['three_kernel']:11.3f} ms {t['flash_fp32']:6.3f} ms "
              f"{ratio:6.2f}")
        facts.update({f"three_ms_s{s}": t["three_kernel"], f"fused_ms_s{s}": t["flash_fp32"],
                      f"moved_gb_s{s}": moved / 1e9, f"ratio_s{s}": ratio})
    # the S at which two S x S float32 matrices for B = 8, H = 16 fill the GPU
    heads, total = 8 * H, gpu.total_memory
    s_max = math.isqrt(total // (2 * 4 * heads))
    print(f"at B = 8, H = 16 the two S x S matrices alone fill this GPU's "
          f"{total / 2**30:.0f} GiB at S = {s_max:,}")
    facts["s_max_b8"] = s_max
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = attention_fp32.load_kernels()
    s = SANITIZER_S if os.environ.get("CUDABOOK_SANITIZER") else CHECK_S
    prob = attention_fp32.Problem(*_ref.random_qkv(B, 2, s, D, 1, np.random.default_rng(args.seed),
                                                   bf16=False))
    for causal in (False, True):
        attention_fp32.check(kernels, prob, causal)
    if args.bench:
        cb.report_facts(**sweep(kernels, gpu, args.seed, args.budget_ms))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
