"""Each listing's command line, and the report it prints and keeps.

    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=100_000_007)
    ...
    cb.report_check(cb.compare("c", c, ref))
    if args.bench:
        cb.benchmark("my kernel", fn, bytes_moved=..., baseline=("torch.add", fn2))
    return cb.finish()

`run(main)` turns a missing GPU, driver, nvcc or PyCUDA into one line on
stderr and exit code 77, which the tests treat as "skipped".
Exit codes: 0 all checks passed, 1 a check failed, 2 bad command line,
77 skipped (something missing on this machine).

(The book's own command line, `python -m cudabook`, is book_cli.py.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

from . import lock
from .bench import BUDGET_MS, Benchmark, bench, copy_bandwidth, warm_up
from .check import CheckResult
from .compile import RESOURCES
from .gpu import EXIT_SKIPPED, Unavailable, environment, init

_report: dict = {}


def parse_args(argv, doc: str | None, *, n: int | None = None, bench_n: int | None = None,
               seed: int = 0) -> argparse.Namespace:
    """Parse a listing's command line and start its report.

    n: default problem size (None: the listing takes no size).
    bench_n: default size under --bench (large enough to fill the GPU and
    overflow its L2).
    """
    lines = (doc or "").strip().splitlines()
    p = argparse.ArgumentParser(description=lines[0] if lines else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if n is not None:
        p.add_argument("--n", type=int, default=None,
                       help=f"problem size (default {n:,}; {bench_n or n:,} with --bench)")
    p.add_argument("--seed", type=int, default=seed, help="seed for the random inputs")
    if bench_n is not None:
        p.add_argument("--bench", action="store_true", help="time the kernel against the copy ceiling "
                       "and the library baseline")
        p.add_argument("--budget-ms", type=float, default=BUDGET_MS,
                       help=f"time budget of each measurement under --bench (default {BUDGET_MS:g} ms)")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--describe", action="store_true",
                   help="print what this listing accepts, as JSON, and exit (used by the tests)")
    args = p.parse_args(argv)
    if args.describe:
        print(json.dumps({"sized": n is not None, "bench": bench_n is not None,
                          "bench_n": bench_n if n is not None else None}))
        raise SystemExit(0)
    if n is not None and args.n is None:
        args.n = bench_n if getattr(args, "bench", False) and bench_n else n
    if n is not None and args.n < 1:
        p.error(f"--n must be >= 1, got {args.n}")
    lock.shared()
    _report.clear()
    shown = list(sys.argv[1:] if argv is None else argv)
    if "--json" in shown:  # where the report goes is not part of the run
        i = shown.index("--json")
        del shown[i:i + 2]
    RESOURCES.clear()
    _report.update(argv=shown, n=getattr(args, "n", None), seed=args.seed, checks=[],
                   benchmarks=[], facts={}, budget_ms=getattr(args, "budget_ms", None),
                   json_path=args.json)
    return args


def report_check(result: CheckResult, *, timing: bool = False) -> bool:
    """Print a check's line and keep it for the report. Returns passed.

    timing=True: the check is about the GPU's scheduling or timing (which
    blocks ran together, how many waves), not about the answer. Under
    compute-sanitizer, which rewrites kernels and slows them down, such a
    check is printed as a note and not enforced."""
    tool = os.environ.get("CUDABOOK_SANITIZER")
    if timing and tool:
        print(f"(not enforced under compute-sanitizer --tool {tool}) {result.line()}", flush=True)
        return result.passed
    print(result.line(), flush=True)
    _report.setdefault("checks", []).append(result.as_dict())
    return result.passed


def report_facts(**facts) -> None:
    """Keep named values (e.g. a device query's findings) for the report."""
    _report.setdefault("facts", {}).update(facts)


_copy_bw: float | None = None


def ceiling() -> float:
    """The device-to-device copy bandwidth, measured once per run."""
    global _copy_bw
    if _copy_bw is None:
        _copy_bw = copy_bandwidth()
    return _copy_bw


def benchmark(name: str, fn: Callable[[], None], *, bytes_moved: int,
              baseline: tuple[str, Callable[[], None]] | None = None,
              targets: dict[str, float] | None = None) -> Benchmark:
    """Time `fn` and compare it with the measured copy bandwidth and,
    if given, a library baseline `(name, fn)` doing the same work.

    targets: e.g. {"copy": 0.90, "baseline": 0.95}: the fractions the result
    should reach; printed and recorded as met or MISSED (never an exit
    failure: a slow run is a finding, not a wrong answer).
    """
    init()
    budget = _report.get("budget_ms") or BUDGET_MS
    if baseline is not None:   # its first call too before the GPU is taken alone
        warm_up(baseline[1])
    t = bench(fn, working_set_bytes=bytes_moved, budget_ms=budget)
    base = None
    if baseline is not None:
        bname, bfn = baseline
        base = (bname, bench(bfn, working_set_bytes=bytes_moved, budget_ms=budget))
    result = Benchmark.make(name, t, bytes_moved, ceiling(), base, targets)
    for line in result.lines():
        print(line, flush=True)
    _report.setdefault("benchmarks", []).append(result.as_dict())
    return result


def finish() -> int:
    """Write the JSON report if asked; 0 if every check passed, else 1.
    Lets go of the GPU (see lock.py)."""
    checks = _report.get("checks", [])
    passed = bool(checks) and all(c["passed"] for c in checks)
    path = _report.get("json_path")
    if path is not None:
        out = {k: v for k, v in _report.items() if k != "json_path"}
        if RESOURCES:                      # each kernel's registers, local and shared bytes
            out["facts"] = {**out.get("facts", {}), "kernel_resources": dict(sorted(RESOURCES.items()))}
        out["passed"] = passed
        out["environment"] = environment()
        Path(path).write_text(json.dumps(out, indent=1, default=str))
    if not checks:
        print("FAILED: the listing checked nothing", file=sys.stderr)
    elif not passed:
        print(f"FAILED: {sum(not c['passed'] for c in checks)} of {len(checks)} check(s)",
              file=sys.stderr)
    lock.release()
    return 0 if passed else 1


def run(main: Callable[[], int]) -> int:
    """Call a listing's main; a missing prerequisite becomes exit code 77."""
    try:
        return main()
    except Unavailable as e:
        print(f"SKIPPED: {e}", file=sys.stderr, flush=True)
        return EXIT_SKIPPED
