"""What the GPU suite runs for each listing, and so what its record must hold.

One definition, used by the suite that writes records (tests/test_gpu.py)
and by the CPU check that a record is complete (record.py):

- a listing with a size runs at every size in SIZES, a listing without one
  runs once ("run"); the sizes of one group in SIZE_GROUPS run in one process
  (tests/run_sizes.py), each with a seed of its own. A listing whose --bench
  run already checks an awkward size far beyond the L2 (bench_is_large)
  skips the large size: its bench run does that job;
- a listing that launches a kernel of the book's (its own .cu, or one it
  imports) also runs under each compute-sanitizer tool, at SANITIZER_N;
- a listing with --bench also runs with --bench ("bench");
- a listing broken on purpose runs only under the tool that must catch it.

SUITE_FILES are the files whose code decides this; their hash is in every
record, so changing the suite makes the records stale, like changing a
listing does.

On a machine with several GPUs the suite spreads over them: pytest-xdist
worker k runs its listings on GPU k mod G (CUDA_VISIBLE_DEVICES names that
one GPU), with a lock of its own per GPU, so G GPUs work through the suite
side by side. A listing that declares `MIN_GPUS = N` (N > 1) at module
level sees every GPU and holds every GPU's lock; on a machine with fewer
than N GPUs its tests are skipped, saying so (its record must come from a
machine with N or more).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess

#: Warp edges (1, 31, 32, 33), an awkward size, and one much larger than the L2.
SIZES = (1, 31, 32, 33, 1_000_003, 2**27 + 7)
#: The small sizes share a process (a CUDA context costs more than their
#: work); the large one, seconds of work, runs beside them in its own.
SIZE_GROUPS = ((1, 31, 32, 33, 1_000_003), (2**27 + 7,))
LARGE = SIZES[-1]
#: A --bench run checks its answer at its own size (record.py sees to it).
#: At an odd size of at least this many elements (a float32 array of 256
#: MiB, over four times the H200's L2 of 60 MiB) it is awkward and far
#: beyond the L2, as LARGE is, so it does LARGE's job and the listing skips
#: LARGE: the same check twice cost the suite seconds of host memory
#: traffic in every big check beside it.
BENCH_AS_LARGE = 2**26
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: Small (instrumented kernels are slow), but more than four blocks of 256
#: with a partial last block, and a float4 tail of 3.
SANITIZER_N = 1027
SUITE_FILES = ("code/cudabook/suite.py", "tests/test_gpu.py", "tests/gpu_harness.py", "tests/run_sizes.py")


def bench_is_large(bench_n: int | None) -> bool:
    """Does a --bench run at bench_n elements stand in for LARGE: an odd
    size of at least BENCH_AS_LARGE?"""
    return bench_n is not None and bench_n >= BENCH_AS_LARGE and bench_n % 2 == 1


def size_groups(bench_n: int | None) -> tuple[tuple[int, ...], ...]:
    """The groups of sizes a sized listing runs at, given its --bench size
    (None without --bench)."""
    return tuple(g for g in SIZE_GROUPS if not (g == (LARGE,) and bench_is_large(bench_n)))


def required_runs(*, sized: bool, bench: bool, bench_n: int | None, kernels: bool,
                  broken_tool: str | None) -> set[str]:
    """The keys of the runs a complete record has."""
    if broken_tool:
        return {f"broken:{broken_tool}"}
    keys = {f"n={n}" for g in size_groups(bench_n if bench else None) for n in g} if sized else {"run"}
    if kernels:
        keys |= {f"sanitizer:{t}" for t in SANITIZER_TOOLS}
    if bench:
        keys.add("bench")
    return keys


#: Where the test session keeps visible_gpus()'s answer, so that starting a
#: listing does not run nvidia-smi each time (tests/conftest.py sets it).
GPUS_VARIABLE = "CUDABOOK_SUITE_GPUS"


def visible_gpus(environ=None) -> list[str]:
    """The GPUs the suite may use, as CUDA_VISIBLE_DEVICES would name them:
    the session's answer where it has one (GPUS_VARIABLE), else that
    variable's list where it is set, else 0 .. G-1 for the G GPUs
    `nvidia-smi -L` lists (none where there is no nvidia-smi)."""
    environ = os.environ if environ is None else environ
    if GPUS_VARIABLE in environ:
        return [s for s in environ[GPUS_VARIABLE].split(",") if s]
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [s.strip() for s in environ["CUDA_VISIBLE_DEVICES"].split(",") if s.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    count = sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(count)] if r.returncode == 0 else []


def worker_gpu(worker: str | None, gpus: int) -> int:
    """The GPU (0 .. gpus-1) that pytest-xdist worker `worker` ("gw3"; None
    without xdist) runs its one-GPU listings on."""
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    number = int(worker[2:]) if worker and worker.startswith("gw") and worker[2:].isdigit() else 0
    return number % gpus


def module_constant(source: str, name: str):
    """The value of a module-level `NAME = <literal>` (or `NAME: T =
    <literal>`), the last one where there are several, as when Python runs
    the module; None where there is none. A value that is not a literal
    raises ValueError, a source that is not Python SyntaxError."""
    value = None
    for node in ast.parse(source).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            value = ast.literal_eval(node.value)
    return value


def min_gpus(source: str) -> int:
    """The GPUs a listing needs: its module-level `MIN_GPUS = N`, else 1."""
    value = module_constant(source, "MIN_GPUS")
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"MIN_GPUS must be a positive integer, got {value!r}")
    return value


def sanitize_children(source: str) -> bool:
    """True if the listing declares `SANITIZE_CHILDREN = True`: its kernels
    run in processes it starts (one a GPU), so compute-sanitizer must trace
    those (--target-processes all), not only the listing's own process."""
    return module_constant(source, "SANITIZE_CHILDREN") is True
