"""Bank conflicts, measured: a warp's shared-memory reads at a stride.

Each thread of a full GPU's worth of blocks reads shared memory `iters`
times, lane l reading word l * s + (i % 32) on iteration i, and writes the
sum. With 32 banks of 4-byte words, a stride of s puts the 32 lanes in
32 / gcd(s, 32) banks, gcd(s, 32) different words in each: a
gcd(s, 32)-way conflict, served in that many passes (wavefronts). s = 33
is the padded stride: gcd(33, 32) = 1, no conflict.

Run:    python code/shared_memory/bank_conflicts.py [--seed S] [--bench]
Checks: each thread's sum equals the host's (k = 0: integer words below
        2^16, sums below 2^32) for strides 1, 2, 4, 8, 16, 32 and 33.
        Under --bench, from Nsight Compute: one shared load instruction
        per warp per iteration (exactly warps * iters), and
        wavefronts (passes through the banks) per instruction =
        gcd(s, 32) within 1%; the bank-conflict counter, printed
        beside, should read one less.
Bench:  time per launch for each stride, as ns per warp read per SM,
        and the slowdown against stride 1 beside the predicted degree.
"""

import sys
from math import gcd
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
STRIDES = (1, 2, 4, 8, 16, 32, 33)
BANKS = 32                      # 4-byte banks, the same on every GPU since compute capability 5.0
WORDS = 32 * 33                 # as in bank_conflicts.cu
BLOCK = 256
BLOCKS_PER_SM = 8               # 2048 threads per SM: enough warps to keep the banks busy
CHECK_BLOCKS, CHECK_ITERS = 5, 1003     # awkward: a partial unrolled round, 31 spare offsets
ITERS = 4096


def degree(stride: int) -> int:
    """Distinct words the busiest bank must serve for one warp's read."""
    return gcd(stride, BANKS)


def hashed(w, seed: int) -> np.ndarray:
    """The word the kernel stores at index w, computed on the host."""
    h = np.asarray(w, dtype=np.uint32) * np.uint32(2654435761)
    return (h ^ np.uint32(seed & 0xFFFFFFFF)) >> np.uint32(16)


def reference(stride: int, iters: int, seed: int, threads: int) -> np.ndarray:
    """Each thread's sum: lane l adds words l*s + (i % 32), i < iters, so
    every word of l*s .. l*s + 31 iters // 32 times, then the first
    iters % 32 of them once more."""
    words = hashed(np.arange(WORDS), seed).astype(np.int64)
    lanes = np.arange(threads) % 32
    per = words[lanes[:, None] * stride + np.arange(32)[None, :]]
    full, rest = divmod(iters, 32)
    return (full * per.sum(axis=1) + per[:, :rest].sum(axis=1)).astype(np.float64)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("strided_shared_reads").prepare("PiiI")


# --8<-- [start:launch]
def strided_reads(kernel, out, stride: int, iters: int, seed: int) -> None:
    """out[t] = thread t's sum of `iters` shared reads at `stride` words;
    one thread per element of out, in blocks of BLOCK."""
    cb.check_array("out", out, dtype=np.uint32, ndim=1, on_device=True)
    n = cb.check_size("out.size", out.size)
    if n % BLOCK:
        raise ValueError(f"out.size: expected a multiple of {BLOCK} (whole blocks), got {n:,}")
    cb.check_size("stride", stride, high=(WORDS - 32) // 31)   # lane 31's words stay inside
    cb.check_size("iters", iters)
    kernel.prepared_call((n // BLOCK, 1, 1), (BLOCK, 1, 1), out.gpudata, np.int32(stride),
                         np.int32(iters), np.uint32(seed & 0xFFFFFFFF))
# --8<-- [end:launch]


def check_all(kernel, seed: int) -> None:
    from pycuda import gpuarray

    out = gpuarray.empty(CHECK_BLOCKS * BLOCK, np.uint32)
    for s in STRIDES:
        cb.poison(out)
        strided_reads(kernel, out, s, CHECK_ITERS, seed)
        ref = reference(s, CHECK_ITERS, seed, out.size)
        cb.report_check(cb.compare(f"sums at stride {s}", out.get(), ref, k=0))


def ncu_child(blocks: int, seed: int) -> int:
    """Under Nsight Compute: each stride of STRIDES once."""
    from pycuda import gpuarray

    cb.init()
    kernel = load_kernel()
    out = gpuarray.empty(blocks * BLOCK, np.uint32)
    for s in STRIDES:
        strided_reads(kernel, out, s, ITERS, seed)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
INSTRUCTIONS = "smsp__inst_executed_op_shared_ld.sum"      # warp-level shared loads


def measure(kernel, gpu, seed: int) -> list[dict]:
    from cudabook import ncu
    from pycuda import gpuarray

    blocks = gpu.sm_count * BLOCKS_PER_SM
    out = gpuarray.empty(blocks * BLOCK, np.uint32)
    reads_per_sm = blocks * BLOCK // 32 * ITERS / gpu.sm_count      # warp-wide reads
    rows = []
    for s in STRIDES:
        t = cb.bench(lambda s=s: strided_reads(kernel, out, s, ITERS, seed),
                     working_set_bytes=out.nbytes)
        rows.append({"stride": s, "degree": degree(s), "ms": t.median_ms,
                     "ns_per_read_per_sm": t.median_ms * 1e6 / reads_per_sm})
    cb.report_check(cb.compare(f"sums at stride {STRIDES[-1]}, {blocks} blocks", out.get(),
                               reference(STRIDES[-1], ITERS, seed, out.size), k=0))
    for r in rows:
        r["slowdown"] = r["ms"] / rows[0]["ms"]
    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(blocks), str(seed)],
                                  kernel="strided_shared_reads",
                                  metrics=(CONFLICTS, WAVEFRONTS, INSTRUCTIONS))
    if counted is None:
        return rows
    if len(counted) != len(rows):
        raise RuntimeError(f"ncu profiled {len(counted)} launches, expected {len(rows)}")
    for r, c in zip(rows, counted):
        r["instructions"] = c[INSTRUCTIONS]
        r["conflicts_per_inst"] = ncu.ratio(c, CONFLICTS, INSTRUCTIONS)
        r["wavefronts_per_inst"] = ncu.ratio(c, WAVEFRONTS, INSTRUCTIONS)
    expected = blocks * BLOCK // 32 * ITERS
    cb.report_check(cb.expect("one shared load per warp per iteration",
                              all(r["instructions"] == expected for r in rows),
                              f"expected {expected:,}; counted "
                              f"{sorted({int(r['instructions']) for r in rows})}"))
    # Checked on wavefronts (passes through the banks), which count only the
    # shared-memory work; the conflict counter is printed beside them.
    off = max(abs(r["wavefronts_per_inst"] - r["degree"]) / r["degree"] for r in rows)
    cb.report_check(cb.expect("passes per shared load = gcd(s, 32)", off <= 0.01,
                              f"largest difference {100 * off:.2f}% over {len(rows)} strides"))
    return rows


def report(rows: list[dict], gpu) -> None:
    print(f"{gpu.name}, {gpu.sm_count} SMs; {ITERS} reads per thread")
    counted = all("conflicts_per_inst" in r for r in rows)
    head = "stride  ways       ms  ns/read/SM  vs s=1"
    print(head + ("  conflicts/inst  wavefronts/inst" if counted else ""))
    for r in rows:
        line = (f"{r['stride']:6d} {r['degree']:5d} {r['ms']:8.3f} {r['ns_per_read_per_sm']:11.3f}"
                f" {r['slowdown']:7.2f}")
        if counted:
            line += f"  {r['conflicts_per_inst']:14.2f}  {r['wavefronts_per_inst']:15.2f}"
        print(line)
    cb.report_facts(rows=rows, counted=counted,
                    **{f"slowdown_stride{r['stride']}": r["slowdown"] for r in rows})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 3 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]), int(argv[2]))
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernel = load_kernel()
    check_all(kernel, args.seed)
    if args.bench:
        report(measure(kernel, gpu, args.seed), gpu)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
