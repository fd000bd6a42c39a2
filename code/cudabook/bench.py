"""Timing GPU work with CUDA events.

Each repetition is bracketed by its own pair of events, so the spread over
repetitions is known, not only the mean. Warm-up runs come first (module
load, clocks ramping up). When the working set would fit in L2, the L2 is
flushed between repetitions by writing a buffer twice its size, outside the
timed region, so we time device memory rather than the cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np


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


def bench(fn: Callable[[], None], *, working_set_bytes: int, warmup: int = 5,
          reps: int = 50) -> Timing:
    """Time `fn` (which launches GPU work on the default stream).

    `working_set_bytes`: bytes `fn` touches; below 4x the L2 size the L2 is
    flushed before each repetition.
    """
    import pycuda.driver as cuda

    from .gpu import init

    gpu = init()
    flush = None
    if working_set_bytes < 4 * gpu.l2_bytes:
        flush = cuda.mem_alloc(2 * gpu.l2_bytes)
    for _ in range(warmup):
        fn()
    cuda.Context.synchronize()
    events = [(cuda.Event(), cuda.Event()) for _ in range(reps)]
    for start, end in events:
        if flush is not None:
            cuda.memset_d8(flush, 0, 2 * gpu.l2_bytes)
        start.record()
        fn()
        end.record()
    events[-1][1].synchronize()
    ms = np.array([start.time_till(end) for start, end in events])
    return Timing(
        median_ms=float(np.median(ms)),
        p20_ms=float(np.percentile(ms, 20)),
        p80_ms=float(np.percentile(ms, 80)),
        min_ms=float(ms.min()),
        reps=reps,
        l2_flushed=flush is not None,
    )


def copy_bandwidth(nbytes: int = 1 << 30, reps: int = 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus
    bytes written (2 * nbytes per copy). This is the practical ceiling for
    any kernel that streams through memory."""
    import pycuda.driver as cuda

    src = cuda.mem_alloc(nbytes)
    dst = cuda.mem_alloc(nbytes)
    cuda.memset_d8(src, 0x3C, nbytes)
    t = bench(lambda: cuda.memcpy_dtod(dst, src, nbytes), working_set_bytes=2 * nbytes,
              reps=reps)
    src.free()
    dst.free()
    return 2 * nbytes / (t.median_ms * 1e-3)


def torch_cuda():
    """The torch module if it is installed and sees the GPU, else None.
    Used for library baselines: what a user would call instead."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None
