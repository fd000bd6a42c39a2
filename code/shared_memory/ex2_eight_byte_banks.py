"""Solution to exercise 2: bank conflicts of 8-byte reads (double, float2).

bank_conflicts.py with 8-byte elements: lane l reads element
l * s + (i % 32) of an array of unsigned long long, one 8-byte shared
load per iteration. Element e fills the 4-byte words 2e and 2e + 1. A
warp asks for 256 bytes and a pass delivers at most 128 (32 banks of 4
bytes), so the best an 8-byte read can do is 2 passes. At a stride of s
elements the lanes fall on 16 / gcd(s, 16) pairs of banks, with
2 gcd(s, 16) different words in each bank: 2 gcd(s, 16) passes, which is
gcd(2s, 32), the 4-byte rule applied to the stride in words. s = 17 is the
padded stride: 2 passes, the least there is.

Run:    python code/shared_memory/ex2_eight_byte_banks.py [--seed S] [--bench]
Checks: each thread's sum equals the host's (k = 0: sums below 2^53) for
        strides 1, 2, 4, 8, 16 and 17. Under --bench, from Nsight Compute:
        one shared load instruction per warp per iteration (exactly
        warps * iters), and wavefronts (passes) per instruction =
        2 gcd(s, 16) within 1%; the bank-conflict counter is printed beside
        them, not checked.
Bench:  time per launch for each stride, as ns per warp read per SM,
        beside bank_conflicts' 4-byte read at stride 1 in the same run.
"""

import sys
from math import gcd
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and bank_conflicts
import bank_conflicts as bc  # noqa: E402
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
STRIDES = (1, 2, 4, 8, 16, 17)
ELEMENTS = 32 * 18                  # as in ex2_eight_byte_banks.cu
MAX_ITERS = 2**17                   # elements are below 2^36: sums stay below 2^53


# --8<-- [start:solution]
def passes(stride: int) -> int:
    """Passes one warp's 8-byte read at `stride` elements needs: the most
    distinct 4-byte words any bank must serve (at least 2: 256 bytes)."""
    banks: dict[int, set] = {}
    for lane in range(32):
        for word in (2 * lane * stride, 2 * lane * stride + 1):
            banks.setdefault(word % 32, set()).add(word)
    return max(len(words) for words in banks.values())
# --8<-- [end:solution]


def element_values(seed: int) -> np.ndarray:
    """What the kernel stores in each element: hashes of its two words."""
    e = np.arange(ELEMENTS)
    lo = bc.hashed(2 * e, seed).astype(np.int64)
    hi = bc.hashed(2 * e + 1, seed).astype(np.int64)
    return (hi << 20) | lo


def reference(stride: int, iters: int, seed: int, threads: int) -> np.ndarray:
    """Each thread's sum, as in bank_conflicts.reference."""
    values = element_values(seed)
    lanes = np.arange(threads) % 32
    per = values[lanes[:, None] * stride + np.arange(32)[None, :]]
    full, rest = divmod(iters, 32)
    return (full * per.sum(axis=1) + per[:, :rest].sum(axis=1)).astype(np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("strided_shared_reads64").prepare("PiiI")


def strided_reads64(kernel, out, stride: int, iters: int, seed: int) -> None:
    """out[t] = thread t's sum of `iters` 8-byte shared reads at `stride`
    elements; one thread per element of out, in blocks of bc.BLOCK."""
    cb.check_array("out", out, dtype=np.uint64, ndim=1, on_device=True)
    n = cb.check_size("out.size", out.size)
    if n % bc.BLOCK:
        raise ValueError(f"out.size: expected a multiple of {bc.BLOCK} (whole blocks), got {n:,}")
    cb.check_size("stride", stride, high=(ELEMENTS - 32) // 31)   # lane 31's elements stay inside
    cb.check_size("iters", iters, high=MAX_ITERS)
    kernel.prepared_call((n // bc.BLOCK, 1, 1), (bc.BLOCK, 1, 1), out.gpudata, np.int32(stride),
                         np.int32(iters), np.uint32(seed & 0xFFFFFFFF))


def check_all(kernel, seed: int) -> None:
    from pycuda import gpuarray

    out = gpuarray.empty(bc.CHECK_BLOCKS * bc.BLOCK, np.uint64)
    for s in STRIDES:
        cb.poison(out)
        strided_reads64(kernel, out, s, bc.CHECK_ITERS, seed)
        cb.report_check(cb.compare(f"8-byte sums at stride {s}", out.get(),
                                   reference(s, bc.CHECK_ITERS, seed, out.size), k=0))


def ncu_child(blocks: int, seed: int) -> int:
    """Under Nsight Compute: each stride of STRIDES once."""
    from pycuda import gpuarray

    cb.init()
    kernel = load_kernel()
    out = gpuarray.empty(blocks * bc.BLOCK, np.uint64)
    for s in STRIDES:
        strided_reads64(kernel, out, s, bc.ITERS, seed)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def measure(kernel, gpu, seed: int) -> None:
    from cudabook import ncu
    from pycuda import gpuarray

    blocks = gpu.sm_count * bc.BLOCKS_PER_SM
    out = gpuarray.empty(blocks * bc.BLOCK, np.uint64)
    reads_per_sm = blocks * bc.BLOCK // 32 * bc.ITERS / gpu.sm_count      # warp-wide reads
    out4 = gpuarray.empty(blocks * bc.BLOCK, np.uint32)
    kernel4 = bc.load_kernel()
    t4 = cb.bench(lambda: bc.strided_reads(kernel4, out4, 1, bc.ITERS, seed), working_set_bytes=out4.nbytes)
    ns4 = t4.median_ms * 1e6 / reads_per_sm
    rows = []
    for s in STRIDES:
        t = cb.bench(lambda s=s: strided_reads64(kernel, out, s, bc.ITERS, seed), working_set_bytes=out.nbytes)
        rows.append({"stride": s, "predicted": passes(s), "ms": t.median_ms,
                     "ns_per_read_per_sm": t.median_ms * 1e6 / reads_per_sm})
    cb.report_check(cb.compare(f"8-byte sums at stride {STRIDES[-1]}, {blocks} blocks", out.get(),
                               reference(STRIDES[-1], bc.ITERS, seed, out.size), k=0))
    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(blocks), str(seed)],
                                  kernel="strided_shared_reads64",
                                  metrics=(bc.CONFLICTS, bc.WAVEFRONTS, bc.INSTRUCTIONS))
    if counted is not None:
        if len(counted) != len(rows):
            raise RuntimeError(f"ncu profiled {len(counted)} launches, expected {len(rows)}")
        for r, c in zip(rows, counted):
            r["instructions"] = c[bc.INSTRUCTIONS]
            r["conflicts_per_inst"] = ncu.ratio(c, bc.CONFLICTS, bc.INSTRUCTIONS)
            r["wavefronts_per_inst"] = ncu.ratio(c, bc.WAVEFRONTS, bc.INSTRUCTIONS)
        expected = blocks * bc.BLOCK // 32 * bc.ITERS
        cb.report_check(cb.expect("one shared load per warp per iteration",
                                  all(r["instructions"] == expected for r in rows),
                                  f"expected {expected:,}; counted "
                                  f"{sorted({int(r['instructions']) for r in rows})}"))
        off = max(abs(r["wavefronts_per_inst"] - r["predicted"]) / r["predicted"] for r in rows)
        cb.report_check(cb.expect("passes per 8-byte shared load = 2 gcd(s, 16)", off <= 0.01,
                                  f"largest difference {100 * off:.2f}% over {len(rows)} strides"))
    print(f"{gpu.name}, {gpu.sm_count} SMs; {bc.ITERS} reads per thread")
    print(f"4-byte reads at stride 1 (bank_conflicts): {t4.median_ms:.3f} ms, {ns4:.3f} ns/read/SM")
    head = "stride  passes       ms  ns/read/SM  vs 4-byte"
    print(head + ("  conflicts/inst  wavefronts/inst" if counted else ""))
    for r in rows:
        line = (f"{r['stride']:6d} {r['predicted']:7d} {r['ms']:8.3f} {r['ns_per_read_per_sm']:11.3f}"
                f" {r['ns_per_read_per_sm'] / ns4:10.2f}")
        if counted:
            line += f"  {r['conflicts_per_inst']:14.2f}  {r['wavefronts_per_inst']:15.2f}"
        print(line)
    cb.report_facts(rows=rows, counted=counted is not None, ns_per_read_4byte=ns4,
                    **{f"vs_4byte_stride{r['stride']}": r["ns_per_read_per_sm"] / ns4 for r in rows})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 3 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]), int(argv[2]))
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernel = load_kernel()
    want = {s: 2 * gcd(s, 16) for s in STRIDES}
    cb.report_check(cb.expect("counted passes = 2 gcd(s, 16)", all(passes(s) == want[s] for s in STRIDES),
                              ", ".join(f"s={s}: {passes(s)}" for s in STRIDES)))
    check_all(kernel, args.seed)
    if args.bench:
        measure(kernel, gpu, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
