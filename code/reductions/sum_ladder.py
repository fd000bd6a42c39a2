"""Summing n floats: a ladder of five kernels, from atomics to one pass.

Part I's warp_sum.py reached about 0.6x torch.sum. Here each rung adds one
idea: sum_atomic (every thread atomicAdd's its element into one float: n
additions to one address, one at a time, in whatever order they arrive);
sum_tree (each block adds its 256 elements in shared memory, halving the
threads at work each step, then one atomicAdd per block); sum_shuffle (the
same tree in registers: warp shuffles, then one warp adds the warp totals);
sum_vectorized (one wave of blocks, each thread reading float4s in a
grid-stride loop into four independent accumulators: the fast one); and
sum_one_pass (the same, but each block writes its partial sum and the last
block to finish, told by a fence and an atomic counter, adds the partials
in block order: the same bits on every run). Beside the ladder,
sum_tree_store is sum_tree with its one atomicAdd a block replaced by a
store of the block's sum to partials[block], nothing else changed: the
control that tells what the chain of atomics costs.

Run:    python code/reductions/sum_ladder.py [--n N] [--seed S] [--bench]
Checks: each rung twice, at size n. First exactly (k = 0), against a float64
        NumPy sum, on whole numbers uniform over {-2, ..., 2} stored as
        float32. A sum of whole numbers is a whole number, and float32 holds
        every whole number up to 2^24, so no addition rounds while every
        partial sum stays within 2^24 (and the float64 sum is exact). A
        partial sum of m terms is at most 2m: within 2^24 for certain while
        m <= 2^23, so at every n up to 2^23. Beyond that, no rung chooses
        which terms to add, or in what order, by their values (the atomics'
        order is the hardware's timing), so a partial sum of m terms is a
        sum of m independent terms in [-2, 2] of mean 0, and by Hoeffding's
        inequality it passes 2^24 with probability below 2 exp(-2^48 / 8m):
        2 exp(-2^17) at n = 2^28, 2 exp(-2^14) at the largest n an int index
        allows. A rounding could only fail the check, never pass it. A
        block, trip or partial lost or added twice moves the sum by its
        total, a whole number that is 0 only if its terms cancel (for 256
        terms, 1 time in 57), so it fails at every n, where a bound scaled
        by sum |x_i| lets it through at large n. Then on floats uniform in
        [-1, 1) (exactly, no rounding), the data --bench times and the
        chapter's lesson on rounding uses, against a float64 NumPy sum,
        with scale = sum |x_i| (the terms cancel). A summation tree of
        height h (the longest chain of roundings any element goes through)
        is off by at most h u sum |x_i|; on random data the roundings fall
        on both sides and the error grows like sqrt(h) u: the bound is
        k = 6 sqrt(h), as in warp_sum.py. h is n for sum_atomic;
        log2(256) + blocks for sum_tree and sum_shuffle (the atomics of
        the block sums form one chain); for sum_vectorized trips + 5 +
        log2(256) + blocks (an accumulator gets one float4 a trip; 2 adds
        inside a float4, the tail, 2 to join the four accumulators); for
        sum_one_pass the same, with the blocks' atomics replaced by the
        last block's ceil(blocks / 256) + log2(256). On the floats too,
        sum_one_pass run 5 times gives bit-identical results; how many
        values 5 runs of sum_atomic give is reported, not checked. Also
        reported: the relative error of float32 sums of |x| (positive, so
        nothing cancels) added one by one on the host, by sum_tree and
        sum_one_pass, and pairwise by np.sum, against float64.
        sum_tree_store, on the whole numbers: every block's stored sum
        equals its block's float64 sum exactly (k = 0, every block; the
        buffer is poisoned first, so a block that stores nothing fails).
Bench:  at n = 2^28, GB/s (4n bytes read) of each rung and of
        sum_tree_store against the copy bandwidth and torch.sum on the
        same data. Target on an H200: the
        best rung (sum_vectorized or sum_one_pass) >= 95% of torch.sum.
"""

import math
import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256                  # threads per block: the .cu's BLOCK (load_kernels checks)
UNROLL = 4                   # float4s per thread per trip of the one-wave kernels: the .cu's UNROLL
KERNELS = {"sum_atomic": "PPi", "sum_tree": "PPi", "sum_shuffle": "PPi",
           "sum_vectorized": "PPi", "sum_one_pass": "PPPPi"}
CONTROL = {"sum_tree_store": "PPi"}              # sum_tree with a store in place of its atomic
ONE_WAVE = ("sum_vectorized", "sum_one_pass")   # grid-stride, float4 loads, one wave of blocks
RUNS = 5                     # launches compared for (non-)determinism
REG_ALLOC_UNIT = 256         # registers go to a warp in chunks of 256 (cc 7.0 to 12.x)
WHOLE = 2                    # the exact checks' inputs: whole numbers from -WHOLE to WHOLE (see Checks)


def reference(x):
    return np.sum(x, dtype=np.float64)


def whole_numbers(n: int, rng) -> np.ndarray:
    """n whole numbers drawn uniformly from {-WHOLE, ..., WHOLE}, as float32:
    every partial sum of them is exact in float32 (see Checks), and so is
    their float64 reference."""
    return rng.integers(-WHOLE, WHOLE + 1, size=n, dtype=np.int8).astype(np.float32)


def load_kernels() -> dict:
    src = KERNEL_FILE.read_text()
    for name, value in (("BLOCK", BLOCK), ("UNROLL", UNROLL)):
        found = re.search(rf"#define {name} (\d+)", src)
        if found is None or int(found.group(1)) != value:
            raise RuntimeError(f"{KERNEL_FILE.name} must #define {name} {value}, as this program assumes")
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name).prepare(sig) for name, sig in {**KERNELS, **CONTROL}.items()}


def one_wave(gpu, kernel) -> int:
    """Blocks of BLOCK threads that fit on the GPU at once: what an SM's
    thread, block and register limits allow this kernel, times the SMs.
    (The kernels' shared memory, at most 1 KB a block, never binds.)"""
    import pycuda.driver as cuda

    a = cuda.device_attribute
    get = gpu.device.get_attribute
    warp = get(a.WARP_SIZE)
    regs_per_block = cb.ceil_div(kernel.num_regs * warp, REG_ALLOC_UNIT) * REG_ALLOC_UNIT * (BLOCK // warp)
    per_sm = min(get(a.MAX_THREADS_PER_MULTIPROCESSOR) // BLOCK, get(a.MAX_BLOCKS_PER_MULTIPROCESSOR),
                 get(a.MAX_REGISTERS_PER_MULTIPROCESSOR) // regs_per_block)
    return max(per_sm, 1) * gpu.sm_count


def grid_for(name: str, n: int, wave: int) -> int:
    """One thread per element; for the one-wave kernels, one trip's worth of
    float4s per block (at least one block, for the n % 4 tail) up to one wave."""
    if name in ONE_WAVE:
        return min(max(cb.ceil_div(n // 4, UNROLL * BLOCK), 1), wave)
    return cb.ceil_div(n, BLOCK)


# --8<-- [start:launch]
def total(kernels: dict, name: str, x, out, waves: dict, partials=None, count=None) -> None:
    """out[0] = sum of x, with kernel `name`. x: 1-D float32 GPUArray (16-byte
    aligned for the float4 kernels); out: float32 GPUArray of one element;
    waves: {name: blocks in one wave}. sum_one_pass also needs `partials`
    (float32, one per block of the grid) and `count` (one uint32)."""
    import pycuda.driver as cuda

    if name not in kernels:
        raise ValueError(f"name: expected one of {sorted(kernels)}, got {name!r}")
    vectorized = name in ONE_WAVE
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True, alignment=16 if vectorized else None)
    n = cb.check_size("x.size", x.size)
    cb.check_array("out", out, dtype=np.float32, shape=(1,), on_device=True)
    grid = grid_for(name, n, waves.get(name, 1))
    if name == "sum_one_pass":
        cb.check_array("partials", partials, dtype=np.float32, ndim=1, on_device=True)
        if partials.size < grid:
            raise ValueError(f"partials: expected at least {grid} elements (one per block), got {partials.size}")
        cb.check_array("count", count, dtype=np.uint32, shape=(1,), on_device=True)
        # The counter must start at 0 on every launch. The partials need no
        # reset: each block writes its own before it counts itself done.
        cuda.memset_d32(count.gpudata, 0, 1)
        args = (x.gpudata, partials.gpudata, count.gpudata, out.gpudata, np.int32(n))
    else:
        cuda.memset_d32(out.gpudata, 0, 1)          # the atomics add to 0.0f
        args = (x.gpudata, out.gpudata, np.int32(n))
    kernels[name].prepared_call((grid, 1, 1), (BLOCK, 1, 1), *args)
# --8<-- [end:launch]


def tree_store(kernels: dict, x, block_sums) -> None:
    """block_sums[b] = the sum of x's block b of BLOCK elements, by
    sum_tree_store (the control: sum_tree with a store, no atomic).
    x: 1-D float32 GPUArray; block_sums: float32, one per block at least."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    grid = cb.ceil_div(n, BLOCK)
    cb.check_array("block_sums", block_sums, dtype=np.float32, ndim=1, on_device=True)
    if block_sums.size < grid:
        raise ValueError(f"block_sums: expected at least {grid:,} elements (one per block), got {block_sums.size:,}")
    kernels["sum_tree_store"].prepared_call((grid, 1, 1), (BLOCK, 1, 1), x.gpudata, block_sums.gpudata, np.int32(n))


def check_tree_store(kernels, x_gpu, x, block_sums) -> None:
    """Every block's stored sum against its float64 sum: exact on whole numbers."""
    n = x.size
    grid = cb.ceil_div(n, BLOCK)
    padded = np.zeros(grid * BLOCK, np.float64)
    padded[:n] = x
    cb.poison(block_sums)
    tree_store(kernels, x_gpu, block_sums)
    got = block_sums.get()[:grid]
    cb.report_check(cb.compare("sum_tree_store, whole numbers, every block", got,
                               padded.reshape(grid, BLOCK).sum(axis=1), k=0, n=n))


def chain_length(name: str, n: int, wave: int) -> int:
    """The height of the summation tree: the most roundings any element
    goes through on its way to the result (see Checks)."""
    blocks = grid_for(name, n, wave)
    levels = int(math.log2(BLOCK))                  # warp shuffles + warp totals, or the shared tree
    if name == "sum_atomic":
        return n
    if name in ("sum_tree", "sum_shuffle"):
        return levels + blocks
    own = cb.ceil_div(n // 4, blocks * UNROLL * BLOCK) + 5   # trips, inside a float4, tail, 4 accumulators
    if name == "sum_vectorized":
        return own + levels + blocks
    return own + levels + cb.ceil_div(blocks, BLOCK) + levels


def sequential_sum(x, chunk: int = 1 << 22) -> np.float32:
    """x[0] + x[1] + ... one at a time in float32, as a plain loop would
    (np.cumsum adds in order; chunked so it needs little extra memory)."""
    s = np.float32(0)
    for lo in range(0, x.size, chunk):
        part = x[lo:lo + chunk].copy()
        part[0] += s                                # carry the running sum into the chunk
        s = np.cumsum(part, dtype=np.float32)[-1]
    return s


def torch_baseline(x):
    torch = cb.torch_cuda()
    if torch is None:
        return None
    tx = torch.from_numpy(x).cuda()
    return "torch.sum", lambda: torch.sum(tx)


def bits(out) -> int:
    return int(out.get().view(np.uint32)[0])


def error_demo(kernels, waves, x_abs, x_abs_gpu, out, partials, count) -> dict:
    """Relative errors of float32 sums of positive terms against float64."""
    exact = reference(x_abs)

    def rel(s):
        return abs(float(s) - exact) / exact

    errs = {"sequential": rel(sequential_sum(x_abs))}
    for name in ("sum_tree", "sum_one_pass"):
        total(kernels, name, x_abs_gpu, out, waves, partials, count)
        errs[name] = rel(out.get()[0])
    errs["pairwise"] = rel(np.sum(x_abs))           # NumPy adds float32 pairwise
    print(f"float32 sums of |x| (n = {x_abs.size:,}), relative error:")
    print(f"  one by one on the host (np.cumsum)  {errs['sequential']:.1e}")
    print(f"  sum_tree on the GPU                 {errs['sum_tree']:.1e}")
    print(f"  sum_one_pass on the GPU             {errs['sum_one_pass']:.1e}")
    print(f"  pairwise on the host (np.sum)       {errs['pairwise']:.1e}")
    return errs


#: Under compute-sanitizer the suite's size (1,027) is one block; there the
#: rungs are also checked at this size, which takes many blocks.
SANITIZER_BLOCKS_N = 12 * 1024 + 3


def check_every_rung(kernels, waves, x_gpu, x, out, partials, count, exact: bool = False) -> None:
    """Each rung's sum of x against float64: exactly (k = 0) when x holds
    whole numbers (exact=True, see whole_numbers), else within its k."""
    n = x.size
    expected = np.array([reference(x)])
    scale = None if exact else np.sum(np.abs(x), dtype=np.float64)
    for name in KERNELS:
        cb.poison(out)
        cb.poison(partials)                         # a partial a block forgot to write is NaN
        total(kernels, name, x_gpu, out, waves, partials, count)
        if exact:
            check = cb.compare(f"{name}, whole numbers", out.get(), expected, k=0, n=n)
        else:
            k = 6 * math.sqrt(chain_length(name, n, waves.get(name, 1)))
            check = cb.compare(f"{name}, random floats", out.get(), expected, k=k, scale=scale, n=n)
        cb.report_check(check)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=2**28)
    rng = np.random.default_rng(args.seed)
    x = rng.random(args.n, dtype=np.float32)
    x *= 2
    x -= 1                                          # uniform in [-1, 1), exactly (no rounding)
    whole = whole_numbers(args.n, rng)              # drawn after x, so x is what it always was

    gpu = cb.init()
    from pycuda import gpuarray
    kernels = load_kernels()
    waves = {name: one_wave(gpu, kernels[name]) for name in ONE_WAVE}
    x_gpu = gpuarray.to_gpu(whole)
    out = gpuarray.empty(1, np.float32)
    partials = gpuarray.empty(waves["sum_one_pass"], np.float32)
    count = gpuarray.empty(1, np.uint32)
    block_sums = gpuarray.empty(cb.ceil_div(max(args.n, SANITIZER_BLOCKS_N), BLOCK), np.float32)

    if os.environ.get("CUDABOOK_SANITIZER") and args.n < SANITIZER_BLOCKS_N:
        # The suite's sanitizer size fits in one block: check the many-block
        # paths (atomics across blocks, the last block's finish) too.
        rng_many = np.random.default_rng(args.seed + 1)
        y = rng_many.random(SANITIZER_BLOCKS_N, dtype=np.float32) * 2 - 1
        y_whole = whole_numbers(SANITIZER_BLOCKS_N, rng_many)
        check_every_rung(kernels, waves, gpuarray.to_gpu(y_whole), y_whole, out, partials, count,
                         exact=True)
        check_tree_store(kernels, gpuarray.to_gpu(y_whole), y_whole, block_sums)
        check_every_rung(kernels, waves, gpuarray.to_gpu(y), y, out, partials, count)
    check_every_rung(kernels, waves, x_gpu, whole, out, partials, count, exact=True)
    check_tree_store(kernels, x_gpu, whole, block_sums)
    del whole
    x_gpu.set(x)                                    # the floats: checked, run 5 times, timed
    check_every_rung(kernels, waves, x_gpu, x, out, partials, count)

    runs = {}
    for name in ("sum_one_pass", "sum_atomic"):
        runs[name] = set()
        for _ in range(RUNS):
            total(kernels, name, x_gpu, out, waves, partials, count)
            runs[name].add(bits(out))
    same = len(runs["sum_one_pass"]) == 1
    cb.report_check(cb.expect(f"sum_one_pass: {RUNS} runs bit-identical", same,
                              f"{len(runs['sum_one_pass'])} distinct value(s) in {RUNS} runs", n=x.size))
    print(f"sum_atomic: {len(runs['sum_atomic'])} distinct value(s) in {RUNS} runs")

    x_abs = np.abs(x)
    x_gpu.set(x_abs)                                # reuse the device buffer for the demonstration
    errs = error_demo(kernels, waves, x_abs, x_gpu, out, partials, count)
    cb.report_facts(atomic_distinct=len(runs["sum_atomic"]), one_pass_distinct=len(runs["sum_one_pass"]),
                    waves=waves, rel_err=errs)
    x_gpu.set(x)
    del x_abs

    if args.bench:
        base = torch_baseline(x)
        for name in KERNELS:
            cb.benchmark(name, lambda nm=name: total(kernels, nm, x_gpu, out, waves, partials, count),
                         bytes_moved=4 * args.n, baseline=base,
                         targets={"baseline": 0.95} if name in ONE_WAVE else None)
            if name == "sum_tree":                  # the control, beside the rung it controls
                cb.benchmark("sum_tree_store", lambda: tree_store(kernels, x_gpu, block_sums),
                             bytes_moved=4 * args.n, baseline=base)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
