"""Timing GPU work with CUDA events, and CPU work with the wall clock.

Each repetition is bracketed by its own pair of events, so the spread over
repetitions is known, not only the mean. Warm-up runs come first (module
load, clocks ramping up). How many repetitions run is set by a time budget,
as `triton.testing.do_bench` does: a short first estimate, then as many as
fit in `budget_ms` (at least `min_reps`), so a 2 GB launch and a 2 KB one
both cost about the same time to measure. When the working set would fit in
L2, the L2 is flushed between repetitions by reading a buffer twice its size,
outside the timed region, so we time device memory rather than the cache.

Timing takes the GPU alone when a test suite shares it (see lock.py).
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from . import lock

#: Default time budget of one measurement, and its warm-up, in milliseconds.
BUDGET_MS = 100.0
WARMUP_MS = 20.0

# The L2 is emptied of a kernel's data by *reading* a buffer twice its
# size. Writing one (a memset, as many benchmark tools do) would leave the
# L2 full of modified lines, and the timed kernel would pay for writing
# them back to memory as its own data displaced them.
_FLUSH_SOURCE = r"""
extern "C" __global__ void cudabook_read_all(const int4* __restrict__ p, long long n, int* sink)
{
    int4 acc = make_int4(0, 0, 0, 0);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int4 v = p[i];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x7fffffff) *sink = 1;   // the loads must happen
}
"""


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    reps: int
    l2_flushed: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _reps(estimate_ms: float, budget_ms: float, min_reps: int, max_reps: int) -> int:
    return int(min(max_reps, max(min_reps, budget_ms / max(estimate_ms, 1e-3))))


def _timing(ms: list[float], l2_flushed: bool) -> Timing:
    a = np.asarray(ms)
    return Timing(median_ms=float(np.median(a)), p20_ms=float(np.percentile(a, 20)),
                  p80_ms=float(np.percentile(a, 80)), min_ms=float(a.min()), reps=int(a.size),
                  l2_flushed=l2_flushed)


@functools.cache
def _l2_flush(l2_bytes: int, sm_count: int) -> Callable[[], None]:
    """A call that reads a buffer twice the L2's size (made once a process,
    written once, so that its lines are clean from the second read on; the
    call holds the buffer)."""
    import pycuda.driver as cuda

    from .compile import compile_source

    nbytes = 2 * l2_bytes
    buf, sink = cuda.mem_alloc(nbytes), cuda.mem_alloc(4)
    cuda.memset_d8(buf, 0, nbytes)
    kernel = compile_source(_FLUSH_SOURCE, "cudabook.bench's L2 flush").get_function("cudabook_read_all")
    kernel.prepare("PqP")
    grid = (4 * sm_count, 1, 1)                # 2,048 threads an SM

    def flush() -> None:
        kernel.prepared_call(grid, (512, 1, 1), buf, nbytes // 16, sink)

    flush()                                    # writes the memset's lines back, untimed
    return flush


def warm_up(fn: Callable[[], None]) -> None:
    """A first, untimed call of GPU work before the GPU is taken alone:
    loading the kernel's module, a library's handles and workspaces, or a
    compilation happen once, are not what we time, and need not keep the
    other listings waiting. (Once the GPU is ours, the first of bench's
    three estimating runs plays that part, so this does nothing then.)"""
    import pycuda.driver as cuda

    if not lock.alone():
        fn()
        cuda.Context.synchronize()


def bench(fn: Callable[[], None], *, working_set_bytes: int, budget_ms: float = BUDGET_MS,
          warmup_ms: float = WARMUP_MS, min_reps: int = 10, max_reps: int = 1000) -> Timing:
    """Time `fn` (which launches GPU work on the default stream).

    `working_set_bytes`: bytes `fn` touches; below 4x the L2 size the L2 is
    flushed before each repetition. The repetitions are as many as fit in
    `budget_ms`, at least `min_reps`.
    """
    import pycuda.driver as cuda

    from .gpu import init

    gpu = init()
    warm_up(fn)
    flush = _l2_flush(gpu.l2_bytes, gpu.sm_count) if working_set_bytes < 4 * gpu.l2_bytes else None
    lock.exclusive()

    def timed(reps: int) -> list[float]:
        events = [(cuda.Event(), cuda.Event()) for _ in range(reps)]
        for start, end in events:
            if flush is not None:
                flush()
            start.record()
            fn()
            end.record()
        events[-1][1].synchronize()
        return [start.time_till(end) for start, end in events]

    estimate = float(np.median(timed(3)))
    for _ in range(_reps(estimate, warmup_ms, 1, max_reps)):
        fn()
    cuda.Context.synchronize()
    return _timing(timed(_reps(estimate, budget_ms, min_reps, max_reps)), flush is not None)


def time_cpu(fn: Callable[[], None], *, budget_ms: float = BUDGET_MS, min_reps: int = 3,
             max_reps: int = 1000) -> Timing:
    """Time `fn` on the CPU with the wall clock: the median of as many runs
    as fit in `budget_ms` (at least `min_reps`), after one warm-up run. The
    warm-up runs before the machine is taken alone, and its time, an
    overestimate when other work shares the cores, sets the number of runs.
    A short `fn` is run once more once the machine is ours, to bring its data
    back into the caches after the wait; a long one (over 10 ms) streams its
    data through them anyway, and a second run would cost the others time."""
    def once() -> float:
        t0 = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t0)

    estimate = once()
    lock.exclusive(machine=True)   # the CPU cores are the machine's, whatever GPU we run on
    if estimate <= 10.0:
        once()
    return _timing([once() for _ in range(_reps(estimate, budget_ms, min_reps, max_reps))], False)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus
    bytes written (2 * nbytes per copy). This is the practical ceiling for
    any kernel that streams through memory."""
    import pycuda.driver as cuda

    src = cuda.mem_alloc(nbytes)
    dst = cuda.mem_alloc(nbytes)
    cuda.memset_d8(src, 0x3C, nbytes)
    t = bench(lambda: cuda.memcpy_dtod(dst, src, nbytes), working_set_bytes=2 * nbytes)
    src.free()
    dst.free()
    return 2 * nbytes / (t.median_ms * 1e-3)


def torch_cuda():
    """The torch module if it is installed and sees the GPU, else None.
    Used for library baselines: what a user would call instead. Under the
    book's GPU suite (REQUIRE_GPU=1) a missing torch is an error, so a
    same-run comparison is never silently dropped.

    Under compute-sanitizer (CUDABOOK_SANITIZER) it is None: that run
    watches the book's kernels, not PyTorch's, and starting PyTorch's CUDA
    under the sanitizer takes seconds; the same listing runs with its
    baselines at every other size."""
    import os

    from .gpu import Unavailable

    if os.environ.get("CUDABOOK_SANITIZER"):
        return None
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        return torch
    if os.environ.get("REQUIRE_GPU") == "1":
        raise Unavailable("torch with CUDA is not available, and the library baselines need it "
                          "(pip install torch)")
    return None


@dataclass
class Baseline:
    """The library call a user would make instead, timed in the same run."""
    name: str
    timing: Timing
    bytes_per_s: float
    ratio: float          # ours / baseline, by rate


@dataclass
class Targets:
    """What a listing aims for, and whether this run met it."""
    wanted: dict          # {"copy": 0.90, "baseline": 0.95}: fractions to reach
    met: dict             # {"copy": True, ...}


@dataclass
class Benchmark:
    """One timed kernel: its rate against the copy ceiling of the same run,
    and against a library baseline if there is one."""
    name: str
    timing: Timing
    bytes_moved: int
    bytes_per_s: float
    ceiling: str
    ceiling_bytes_per_s: float
    fraction_of_ceiling: float
    baseline: Baseline | None = None
    targets: Targets | None = None

    @classmethod
    def make(cls, name: str, t: Timing, bytes_moved: int, ceiling_bytes_per_s: float,
             baseline: tuple[str, Timing] | None = None, targets: dict | None = None) -> Benchmark:
        """Derive the rates and ratios from the timings (one place, so the
        record's checker recomputes them the same way)."""
        rate = bytes_moved / (t.median_ms * 1e-3)
        b = None
        if baseline is not None:
            bname, bt = baseline
            brate = bytes_moved / (bt.median_ms * 1e-3)
            b = Baseline(bname, bt, brate, rate / brate)
        out = cls(name=name, timing=t, bytes_moved=int(bytes_moved), bytes_per_s=rate,
                  ceiling="device-to-device copy", ceiling_bytes_per_s=ceiling_bytes_per_s,
                  fraction_of_ceiling=rate / ceiling_bytes_per_s, baseline=b)
        if targets:
            out.targets = Targets(dict(targets), out.targets_met(targets))
        return out

    def targets_met(self, wanted: dict) -> dict:
        met = {}
        if "copy" in wanted:
            met["copy"] = self.fraction_of_ceiling >= wanted["copy"]
        if "baseline" in wanted:
            met["baseline"] = self.baseline is not None and self.baseline.ratio >= wanted["baseline"]
        return met

    def lines(self) -> list[str]:
        """What a listing prints for this benchmark (at most 80 characters a
        line); the record's checker finds these lines in the recorded output."""
        t = self.timing
        out = [f"{self.name}: {t.median_ms:.4f} ms (p20 {t.p20_ms:.4f}, p80 {t.p80_ms:.4f}, {t.reps} runs)",
               f"  {self.bytes_per_s / 1e9:,.1f} GB/s = {100 * self.fraction_of_ceiling:.1f}% of copy "
               f"({self.ceiling_bytes_per_s / 1e9:,.1f} GB/s)"]
        if self.baseline is not None:
            b = self.baseline
            out.append(f"  {b.name}: {b.timing.median_ms:.4f} ms, {b.bytes_per_s / 1e9:,.1f} GB/s; "
                       f"ours/{b.name} = {b.ratio:.3f}")
        if self.targets is not None:
            for k, want in self.targets.wanted.items():
                ok = self.targets.met.get(k)
                what = "copy" if k == "copy" else (self.baseline.name if self.baseline else "baseline")
                out.append(f"  target >= {100 * want:.0f}% of {what}: {'met' if ok else 'MISSED'}")
        return out

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Benchmark:
        d = dict(d)
        d["timing"] = Timing(**d["timing"])
        if d.get("baseline"):
            b = dict(d["baseline"])
            b["timing"] = Timing(**b["timing"])
            d["baseline"] = Baseline(**b)
        if d.get("targets"):
            d["targets"] = Targets(**d["targets"])
        return cls(**d)
