"""cudabook: the small helper package behind every listing of the book.

One function per job, each usable from a listing in one line:

    init()            the GPU and its primary context          (gpu.py)
    gpu_alone()       this listing measures the hardware        (gpu.py, lock.py)
    compile(path)     a .cu file, built for this GPU            (compile.py)
    check_array(...)  host-side argument checks                 (check.py)
    check_separate(...)  an output sharing memory with an input (check.py)
    poison, compare   output poisoning and the element check    (check.py)
    expect(...)       a yes/no check of an observed behaviour    (check.py)
    bench(...)        CUDA-event timing, time-budgeted          (bench.py)
    time_cpu(...)     wall-clock timing of CPU code             (bench.py)
    parse_args, report_check, report_facts, benchmark, finish, run
                      each listing's command line and report    (listing_cli.py)
    ceiling()         the copy bandwidth of this run, measured once (listing_cli.py)

Nothing here is specific to a chapter. Importing the package needs only
NumPy: PyCUDA is imported when a GPU is first asked for. The modules that
build the book and run its tests (listings, hashing, record, suite,
mkdocs_hooks, plots, notebooks, book_cli) are not imported here.
"""

from .bench import Benchmark, Timing, bench, copy_bandwidth, time_cpu, torch_cuda
from .check import (CheckResult, check_array, check_separate, check_size, compare, expect, overlaps,
                    poison, unit_roundoff)
from .compile import NVCC_FLAGS, KernelCompileError, compile
from .gpu import EXIT_SKIPPED, Gpu, Unavailable, ceil_div, find_nvcc, gpu_alone, host_cpu, init
from .listing_cli import benchmark, ceiling, finish, parse_args, report_check, report_facts, run

__all__ = [
    "EXIT_SKIPPED", "NVCC_FLAGS", "Benchmark", "CheckResult", "Gpu", "KernelCompileError", "Timing",
    "Unavailable", "bench", "benchmark", "ceil_div", "ceiling", "check_array", "check_separate",
    "check_size", "compare", "compile", "copy_bandwidth", "expect", "find_nvcc", "finish",
    "gpu_alone", "host_cpu", "init", "overlaps", "parse_args", "poison", "report_check",
    "report_facts", "run", "time_cpu", "torch_cuda", "unit_roundoff",
]
