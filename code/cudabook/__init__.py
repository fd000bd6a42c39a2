"""cudabook: the small helper package behind every listing of the book.

One function per job, each usable from a listing in one line:

    init()            the GPU and its primary context          (gpu.py)
    compile(path)     a .cu file, built for this GPU            (compile.py)
    check_array(...)  host-side argument checks                 (check.py)
    poison, compare   output poisoning and the float64 check    (check.py)
    expect(...)       a yes/no check of an observed behaviour    (check.py)
    bench(...)        CUDA-event timing                         (bench.py)
    roofline(...)     measured rate against the ceiling         (roofline.py)
    parse_args, report_check, benchmark, finish, run
                      the listing command line and its report   (cli.py)

Nothing here is specific to a chapter. Importing the package needs only
NumPy: PyCUDA is imported when a GPU is first asked for.
"""

from .bench import Timing, bench, copy_bandwidth, torch_cuda
from .check import CheckResult, check_array, check_size, compare, expect, poison
from .cli import benchmark, finish, parse_args, report_check, report_facts, run
from .compile import NVCC_FLAGS, KernelCompileError, compile
from .gpu import EXIT_SKIPPED, Gpu, Unavailable, ceil_div, find_nvcc, init
from .roofline import fp32_peak_flops, roofline

__all__ = [
    "EXIT_SKIPPED", "NVCC_FLAGS", "CheckResult", "Gpu", "KernelCompileError", "Timing",
    "Unavailable", "bench", "benchmark", "ceil_div", "check_array", "check_size", "compare",
    "compile", "copy_bandwidth", "expect", "find_nvcc", "finish", "fp32_peak_flops", "init",
    "parse_args", "poison", "report_check", "report_facts", "roofline", "run", "torch_cuda",
]

