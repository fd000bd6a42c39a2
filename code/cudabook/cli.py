"""The command line every listing shares, and its report.

    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=200_000_003)
    ...
    cb.report_check(cb.compare("c", c, ref))
    if args.bench:
        cb.benchmark("my kernel", fn, bytes_moved=..., baseline=("torch.add", fn2))
    return cb.finish()

`run(main)` turns a missing GPU, driver, nvcc or PyCUDA into one line on
stderr and exit code 77, which the tests treat as "skipped".
Exit codes: 0 all checks passed, 1 a check failed, 2 bad command line,
77 skipped (something missing on this machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from .bench import bench, copy_bandwidth
from .check import CheckResult
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
        p.add_argument("--reps", type=int, default=50, help="timed repetitions under --bench")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--describe", action="store_true",
                   help="print what this listing accepts, as JSON, and exit (used by the tests)")
    args = p.parse_args(argv)
    if args.describe:
        print(json.dumps({"sized": n is not None, "bench": bench_n is not None}))
        raise SystemExit(0)
    if n is not None and args.n is None:
        args.n = bench_n if getattr(args, "bench", False) and bench_n else n
    if n is not None and args.n < 1:
        p.error(f"--n must be >= 1, got {args.n}")
    _report.clear()
    shown = list(sys.argv[1:] if argv is None else argv)
    if "--json" in shown:  # where the report goes is not part of the run
        i = shown.index("--json")
        del shown[i:i + 2]
    _report.update(argv=shown,
                   n=getattr(args, "n", None), seed=args.seed, checks=[], benchmarks=[],
                   json_path=args.json, facts={})
    return args


def report_check(result: CheckResult) -> bool:
    """Print a check's line and keep it for the report. Returns passed."""
    print(result.line(), flush=True)
    _report.setdefault("checks", []).append(result.as_dict())
    return result.passed


def report_facts(**facts) -> None:
    """Keep named values (e.g. a device query's findings) for the report."""
    _report.setdefault("facts", {}).update(facts)


_copy_bw: float | None = None


def benchmark(name: str, fn: Callable[[], None], *, bytes_moved: int, reps: int = 50,
              baseline: tuple[str, Callable[[], None]] | None = None,
              targets: dict[str, float] | None = None) -> dict:
    """Time `fn` and compare it with the measured copy bandwidth and,
    if given, a library baseline `(name, fn)` doing the same work.

    targets: e.g. {"copy": 0.90, "baseline": 0.95}: the fractions the result
    should reach; printed and recorded as met or not (never an exit failure:
    a slow run is a finding, not a wrong answer).
    """
    global _copy_bw
    init()
    if _copy_bw is None:
        _copy_bw = copy_bandwidth()
    t = bench(fn, working_set_bytes=bytes_moved, reps=reps)
    rate = bytes_moved / (t.median_ms * 1e-3)
    result = {
        "name": name, "timing": t.as_dict(), "bytes_moved": bytes_moved,
        "bytes_per_s": rate, "ceiling": "device-to-device copy",
        "ceiling_bytes_per_s": _copy_bw, "fraction_of_ceiling": rate / _copy_bw,
    }
    print(f"{name:<24} {t.median_ms:9.4f} ms (p20 {t.p20_ms:.4f}, p80 {t.p80_ms:.4f})"
          f"  {rate / 1e9:8.1f} GB/s  {100 * rate / _copy_bw:5.1f}% of copy ({_copy_bw / 1e9:.1f} GB/s)",
          flush=True)
    if baseline is not None:
        bname, bfn = baseline
        bt = bench(bfn, working_set_bytes=bytes_moved, reps=reps)
        brate = bytes_moved / (bt.median_ms * 1e-3)
        result["baseline"] = {"name": bname, "timing": bt.as_dict(), "bytes_per_s": brate,
                              "ratio": rate / brate}
        print(f"{bname:<24} {bt.median_ms:9.4f} ms (p20 {bt.p20_ms:.4f}, p80 {bt.p80_ms:.4f})"
              f"  {brate / 1e9:8.1f} GB/s  ours/baseline = {rate / brate:.3f}", flush=True)
    else:
        print(f"{'(no baseline)':<24} no library baseline given (or torch with CUDA not available)")
    if targets:
        met = {}
        if "copy" in targets:
            met["copy"] = result["fraction_of_ceiling"] >= targets["copy"]
        if "baseline" in targets and "baseline" in result:
            met["baseline"] = result["baseline"]["ratio"] >= targets["baseline"]
        result["targets"] = {"wanted": targets, "met": met}
        for k, ok in met.items():
            print(f"target: >= {100 * targets[k]:.0f}% of {k}: {'met' if ok else 'NOT met'}")
    _report.setdefault("benchmarks", []).append(result)
    return result


def finish() -> int:
    """Write the JSON report if asked; 0 if every check passed, else 1."""
    checks = _report.get("checks", [])
    passed = all(c["passed"] for c in checks)
    path = _report.get("json_path")
    if path is not None:
        out = {k: v for k, v in _report.items() if k != "json_path"}
        out["passed"] = passed
        out["environment"] = environment()
        Path(path).write_text(json.dumps(out, indent=1, default=str))
    if not passed:
        print(f"FAILED: {sum(not c['passed'] for c in checks)} of {len(checks)} check(s)",
              file=sys.stderr)
    return 0 if passed else 1


def run(main: Callable[[], int]) -> int:
    """Call a listing's main; a missing prerequisite becomes exit code 77."""
    try:
        return main()
    except Unavailable as e:
        print(f"SKIPPED: {e}", file=sys.stderr, flush=True)
        return EXIT_SKIPPED
