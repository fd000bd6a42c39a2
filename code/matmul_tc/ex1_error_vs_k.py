"""Solution to exercise 1: where the error of a bf16 product comes from.

A tensor-core product makes two errors: rounding A and B to bf16 (8
significant bits) before it starts, and rounding each fp32 partial sum as
it adds the K products. This listing separates them. At M = N = 256 and K
from 64 to 16,384 it runs tc_mma_pipelined and measures the output's error
against two float64 references: the product of the bf16-rounded inputs
(the kernel's own error) and the product of the original float32 inputs
(what a user who handed over float32 data gets).

Run:    python code/matmul_tc/ex1_error_vs_k.py [--seed S]
Checks: at each K, element by element, both errors within their bounds,
        scale = |A| @ |B|: against the bf16 inputs tc_gemm.py's bound,
        k = 2K / (1 - 2K u) + 1; against the float32 inputs that plus the
        inputs' rounding, each bf16 value within 2^-8 of its float32, so
        each product within r = 2^-7 + 2^-16, and |A16| @ |B16| within
        (1 + r) |A| @ |B|: k = (1 + r) k_bf16 + r / u.
        (Under compute-sanitizer only M = N = 33, K = 64 and 256.)
        Printed and recorded: each error's worst element and norm-wise
        size, relative to |A| @ |B|.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import to_bf16  # noqa: E402
from matmul_tc import tc_gemm  # noqa: E402

KS = (64, 256, 1024, 4096, 16384)
SIDE = 256
SANITIZER_KS, SANITIZER_SIDE = (64, 256), 33
RUNG = "tc_mma_pipelined"
INPUT_ROUNDING = 2.0**-7 + 2.0**-16    # a product of two bf16-rounded values


# --8<-- [start:solution]
def errors(kernels, side: int, k: int, rng) -> dict:
    """C from the tensor cores at side x side x k, against both references."""
    from pycuda import gpuarray

    a, b = tc_gemm.random_pair(side, side, k, rng)
    a16, b16 = to_bf16(a), to_bf16(b)
    c_gpu = gpuarray.empty((side, side), np.float32)
    cb.poison(c_gpu)
    tc_gemm.tc_gemm(kernels, RUNG, gpuarray.to_gpu(a16), gpuarray.to_gpu(b16), c_gpu)
    c = c_gpu.get()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    references = {
        "own": ("bf16 inputs", *tc_gemm.reference(a16, b16), None),
        "inputs": ("float32 inputs", a64 @ b64, np.abs(a64) @ np.abs(b64), INPUT_ROUNDING),
    }
    row = {"k": k}
    for key, (what, ref, scale, rounding) in references.items():
        bound = tc_gemm.bound_k(k)
        if rounding:   # the kernel's bound holds for |A16| @ |B16| <= (1 + rounding) scale
            bound = bound * (1 + rounding) + rounding / tc_gemm.U
        cb.report_check(cb.compare(f"K = {k}, against the {what}", c, ref, k=bound, scale=scale))
        err = np.abs(c - ref)
        row[f"{key}_worst"] = float(np.max(err / scale))
        row[f"{key}_norm"] = float(np.linalg.norm(err) / np.linalg.norm(scale))
    return row
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    cb.init()
    kernels = tc_gemm.load_kernels()
    rng = np.random.default_rng(args.seed)
    sanitizer = os.environ.get("CUDABOOK_SANITIZER")
    ks, side = (SANITIZER_KS, SANITIZER_SIDE) if sanitizer else (KS, SIDE)
    rows = [errors(kernels, side, k, rng) for k in ks]
    print(f"errors relative to |A| @ |B| at M = N = {side}:")
    print(f"{'K':>6s}  {'kernel: worst':>14s} {'norm-wise':>10s}  {'inputs: worst':>14s} {'norm-wise':>10s}")
    for r in rows:
        print(f"{r['k']:6d}  {r['own_worst']:14.2e} {r['own_norm']:10.2e}  "
              f"{r['inputs_worst']:14.2e} {r['inputs_norm']:10.2e}")
    facts = {"rows": rows, "side": side}
    for r in rows:
        facts.update({f"k{r['k']}_{name}": r[name] for name in r if name != "k"})
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
