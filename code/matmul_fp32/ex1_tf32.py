"""Solution to exercise 1: what TF32 buys cuBLAS, and what it costs.

PyTorch lets cuBLAS compute a float32 product on the tensor cores in TF32,
which keeps 10 of float32's 23 fraction bits in the inputs and still adds
in float32 (torch.backends.cuda.matmul.allow_tf32). This listing runs the
same product both ways, checks each against float64 with its own bound,
and times both. It launches no kernel of the book's, so (unlike sgemm.py)
it has nothing for compute-sanitizer to check.

Run:    python code/matmul_fp32/ex1_tf32.py [--seed S] [--bench]
Needs:  PyTorch with CUDA (the listing is about cuBLAS, called through it).
Checks: at 1024 x 1024 x 1024 (under --bench at 4096^3 too), element by
        element against the float64 product. TF32 off: the FP32 bound of
        sgemm.py, k = K / (1 - K u) + 1. TF32 on: each input may lose up to
        one unit in the last place of TF32's 10 fraction bits, 2^-10
        relative (rounding or truncating), so each product up to
        2^-9 + 2^-20; then K fp32 additions that may truncate (2u each, as
        tc_gemm.py allows). So k = (2^-9 + 2^-20) / u + 2K / (1 - 2K u) + 1,
        scale = |A| @ |B|. Also printed: each error's worst element and
        norm-wise size relative to |A| @ |B|.
Bench:  at 4096^3: ms and TFLOP/s of torch.matmul with TF32 off and on,
        and their ratio, timed in the same run on the same data.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

CHECK_SHAPE, BENCH_SHAPE = (1024, 1024, 1024), (4096, 4096, 4096)
U = 2.0**-24                   # float32 unit roundoff
TF32_PRODUCT = 2.0**-9 + 2.0**-20


def random_pair(m: int, n: int, k: int, rng):
    """A (M x K) and B (K x N), standard normal float32, as sgemm.py draws them."""
    return (rng.standard_normal((m, k), dtype=np.float32),
            rng.standard_normal((k, n), dtype=np.float32))


def reference(a, b):
    """A @ B in float64 (exact products), and |A| @ |B|."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def bound_k_fp32(k_dim: int) -> float:
    """sgemm.py's bound: K roundings of a chain of FMAs, plus the reference's."""
    return k_dim / (1 - k_dim * U) + 1


def bound_k_tf32(k_dim: int) -> float:
    """Inputs cut to TF32, then K float32 additions that may truncate."""
    return TF32_PRODUCT / U + 2 * k_dim / (1 - 2 * k_dim * U) + 1


# --8<-- [start:solution]
def product(torch, ta, tb, tc, tf32: bool) -> None:
    """tc = ta @ tb through cuBLAS, with TF32 allowed or not."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.matmul(ta, tb, out=tc)


def check_and_time(torch, m: int, n: int, k: int, seed: int, timed: bool) -> dict:
    a, b = random_pair(m, n, k, np.random.default_rng(seed))
    ref, scale = reference(a, b)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty((m, n), device="cuda", dtype=torch.float32)
    facts = {}
    for tf32, k_bound in ((False, bound_k_fp32(k)), (True, bound_k_tf32(k))):
        mode = "on" if tf32 else "off"
        tc.fill_(float("nan"))
        product(torch, ta, tb, tc, tf32)
        got = tc.cpu().numpy()
        cb.report_check(cb.compare(f"TF32 {mode}, {m}x{n}x{k}", got, ref, k=k_bound, scale=scale))
        err = np.abs(got.astype(np.float64) - ref)
        worst = float(np.max(err / scale))
        norm = float(np.linalg.norm(err) / np.linalg.norm(scale))
        print(f"  TF32 {mode}: worst |C - A@B| / (|A|@|B|) = {worst:.2e}, norm-wise {norm:.2e}")
        facts[f"{mode}_{m}_worst_rel"], facts[f"{mode}_{m}_norm_rel"] = worst, norm
        if timed:
            t = cb.bench(lambda: product(torch, ta, tb, tc, tf32),
                         working_set_bytes=4 * (m * k + k * n + m * n))
            rate = 2 * m * n * k / (t.median_ms * 1e-3)
            print(f"  TF32 {mode}: {t.median_ms:.3f} ms, {rate / 1e12:.1f} TFLOP/s")
            facts[f"{mode}_tflops"] = rate / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    torch = cb.torch_cuda()
    if torch is None:
        cb.report_check(cb.expect("PyTorch with CUDA is installed", False,
                                  "not found: this exercise times cuBLAS through torch "
                                  "(pip install torch)"))
        return cb.finish()
    facts = check_and_time(torch, *CHECK_SHAPE, args.seed, timed=False)
    if args.bench:
        facts.update(check_and_time(torch, *BENCH_SHAPE, args.seed + 1, timed=True))
        facts["speedup"] = facts["on_tflops"] / facts["off_tflops"]
        print(f"TF32 on / off: {facts['speedup']:.2f} times the rate; worst error "
              f"{facts['on_4096_worst_rel'] / facts['off_4096_worst_rel']:.0f} times as large")
        facts["error_growth"] = facts["on_4096_worst_rel"] / facts["off_4096_worst_rel"]
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
