"""What the GPU suite runs for each listing, and so what its record must hold.

One definition, used by the suite that writes records (tests/test_gpu.py)
and by the CPU check that a record is complete (record.py):

- a listing with a size runs at every size in SIZES, a listing without one
  runs once ("run"); the sizes of one group in SIZE_GROUPS run in one process
  (tests/run_sizes.py), each with a seed of its own;
- a listing that launches a kernel of the book's (its own .cu, or one it
  imports) also runs under each compute-sanitizer tool, at SANITIZER_N;
- a listing with --bench also runs with --bench ("bench");
- a listing broken on purpose runs only under the tool that must catch it.

SUITE_FILES are the files whose code decides this; their hash is in every
record, so changing the suite makes the records stale, like changing a
listing does.
"""

from __future__ import annotations

#: Warp edges (1, 31, 32, 33), an awkward size, and one much larger than the L2.
SIZES = (1, 31, 32, 33, 1_000_003, 2**27 + 7)
#: The small sizes share a process (a CUDA context costs more than their
#: work); the large one, seconds of work, runs beside them in its own.
SIZE_GROUPS = ((1, 31, 32, 33, 1_000_003), (2**27 + 7,))
SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: Small (instrumented kernels are slow), but more than four blocks of 256
#: with a partial last block, and a float4 tail of 3.
SANITIZER_N = 1027
SUITE_FILES = ("code/cudabook/suite.py", "tests/test_gpu.py", "tests/gpu_harness.py", "tests/run_sizes.py")


def required_runs(*, sized: bool, bench: bool, kernels: bool, broken_tool: str | None) -> set[str]:
    """The keys of the runs a complete record has."""
    if broken_tool:
        return {f"broken:{broken_tool}"}
    keys = {f"n={n}" for n in SIZES} if sized else {"run"}
    if kernels:
        keys |= {f"sanitizer:{t}" for t in SANITIZER_TOOLS}
    if bench:
        keys.add("bench")
    return keys
