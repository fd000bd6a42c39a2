"""The GPU record: one typed definition, used by the suite that writes it,
the site that shows it, the charts drawn from it and the tests that check it.

A record is `results/<chapter>/<name>.json`. It says what ran (the listing's
content hash and the suite's), where (GPU, driver, toolchain), what every run
printed and found, and how fast the benchmarks were. `load` reads one
strictly (an unknown or missing field is an error); `problems` checks it on
the CPU: complete (exactly the runs the suite requires), current (hashes),
and consistent with itself (derived figures recomputed from their sources,
printed lines equal to the recorded fields, one GPU throughout). What the
CPU cannot check, that the numbers were measured at all, the GPU workflow
checks by measuring them again (see docs/verification.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from . import hashing, listings, suite
from .bench import Benchmark
from .check import CheckResult
from .evidence import KIND as MEASUREMENT
from .comparison import pool
from .evidence import Measurement, MeasurementError, rate_text as unit_rate_text
from .gpu_state import GpuState, StateSpan
from .listings import Listing

#: Toolchain facts every record names.
ENVIRONMENT_KEYS = ("gpu", "compute_capability", "sm_count", "driver", "cuda", "nvcc", "pycuda",
                    "python", "numpy")
CLEAN_SUMMARY = re.compile(r"^========= (ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed "
                           r"\(0 errors, 0 warnings\))$")
ANY_SUMMARY = re.compile(r"^========= (ERROR|RACECHECK) SUMMARY: ")
COMMAND = "REQUIRE_GPU=1 python -m cudabook verify"


class RecordError(ValueError):
    """A record file that does not have the record's shape."""


@dataclass
class Run:
    """One run of the listing's own program (at one size, or with --bench)."""
    key: str                 # "n=33", "run" or "bench"
    argv: list[str]
    n: int | None
    seed: int
    budget_ms: float | None
    passed: bool
    checks: list[CheckResult]
    benchmarks: list[Benchmark]
    facts: dict
    environment: dict
    wall_s: float
    stdout: str
    gpu_index: int | str | None = None   # the GPU it ran on (None: every GPU, or unknown)


@dataclass
class SanitizerRun:
    tool: str
    n: int | None
    passed: bool
    summary: str | None      # compute-sanitizer's last summary line
    wall_s: float
    gpu_index: int | str | None = None


@dataclass
class Broken:
    """A listing broken on purpose, caught (or not) by the tool it names."""
    tool: str
    error: str               # the error class its docstring names
    n: int | None
    passed: bool             # the tool reported that error
    report: str
    environment: dict


@dataclass
class Record:
    listing: str
    files: list[str]
    hash: str
    suite_hash: str
    passed: bool
    date: str
    environment: dict
    description: dict        # {"sized", "bench", "bench_n", "kernels"}: what the suite had to run
    runs: list[Run]
    sanitizer: dict[str, SanitizerRun]
    broken: Broken | None
    command: str

    # --- reading ---------------------------------------------------------
    def run(self, key: str) -> Run | None:
        return next((r for r in self.runs if r.key == key), None)

    @property
    def bench(self) -> Run | None:
        return self.run("bench")

    @property
    def benchmarks(self) -> list[Benchmark]:
        return self.bench.benchmarks if self.bench else []

    def facts(self) -> dict:
        """The record's named findings: the first run's facts, overlaid by
        those of the benchmark run. What [[rec:...:facts.<key>]] in prose and
        the charts read."""
        out = dict(next((r.facts for r in self.runs if r.facts and r.key != "bench"), {}))
        if self.bench:
            out.update(self.bench.facts)
        return out

    def checks(self) -> list[CheckResult]:
        return [c for r in self.runs for c in r.checks]

    @property
    def worst_ratio(self) -> float | None:
        """The worst element over every compare of every run, as a share of
        its bound (None when the listing compares no numbers)."""
        ratios = [c.worst_ratio for c in self.checks() if c.detail is None]
        return max(ratios) if ratios else None

    @property
    def gpu(self) -> str:
        return self.environment.get("gpu", "unknown GPU")

    # --- writing ---------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True, default=str) + "\n"

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())


# --- strict reading -----------------------------------------------------------

def _strict(cls, d: dict, where: str):
    """cls(**d), refusing unknown and missing fields with the field's name."""
    if not isinstance(d, dict):
        raise RecordError(f"{where}: expected an object, got {type(d).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    if set(d) - names:
        raise RecordError(f"{where}: unknown field(s) {sorted(set(d) - names)}")
    if required - set(d):
        raise RecordError(f"{where}: missing field(s) {sorted(required - set(d))}")
    return d


def benchmark_from_dict(d: dict, where: str) -> Benchmark | Measurement:
    """A benchmark entry: evidence.Measurement (kind = "measurement", the
    typed entry with FLOP rates, alternation and the GPU's state) or
    bench.Benchmark (a bandwidth against copy, the book's first kind)."""
    if isinstance(d, dict) and d.get("kind") == MEASUREMENT:
        _strict(Measurement, d, where)
        return Measurement.from_dict(d)
    return Benchmark.from_dict(_strict(Benchmark, d, where))


def run_from_dict(d: dict, where: str = "run") -> Run:
    d = dict(_strict(Run, d, where))
    try:
        d["checks"] = [CheckResult.from_dict(_strict(CheckResult, c, f"{where}.checks[{i}]"))
                       for i, c in enumerate(d["checks"])]
        d["benchmarks"] = [benchmark_from_dict(b, f"{where}.benchmarks[{i}]")
                           for i, b in enumerate(d["benchmarks"])]
    except (TypeError, MeasurementError) as e:
        raise RecordError(f"{where}: {e}") from None
    return Run(**d)


def from_dict(d: dict, where: str = "record") -> Record:
    d = dict(_strict(Record, d, where))
    d["runs"] = [run_from_dict(r, f"{where}.runs[{i}]") for i, r in enumerate(d["runs"])]
    d["sanitizer"] = {k: SanitizerRun(**_strict(SanitizerRun, v, f"{where}.sanitizer.{k}"))
                      for k, v in d["sanitizer"].items()}
    if d["broken"] is not None:
        d["broken"] = Broken(**_strict(Broken, d["broken"], f"{where}.broken"))
    return Record(**d)


def load(listing: Listing) -> Record | None:
    """The listing's record, or None if it has none. A file that is not a
    record raises RecordError naming the file and the field."""
    p = listing.record_path
    if not p.exists():
        return None
    try:
        return from_dict(json.loads(p.read_text()), listing.rel(p))
    except json.JSONDecodeError as e:
        raise RecordError(f"{listing.rel(p)}: not JSON ({e})") from None


# --- checking on the CPU --------------------------------------------------------

def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _measurement_problems(m: Measurement, where: str, stdout: str) -> list[str]:
    """A typed entry's derived figures recomputed from its timings and
    rounds (rates, share of the ceiling, the ratio's median and spread,
    targets), and its printed lines found in the recorded output."""
    out = []
    base = ((m.baseline.name, m.baseline.ours_blocks, m.baseline.blocks, m.baseline.side)
            if m.baseline else None)
    try:
        again = Measurement.make(m.name, m.timing, bytes_moved=m.bytes_moved, flops=m.flops,
                                 working_set_bytes=m.working_set_bytes, ceiling=(m.ceiling, m.ceiling_per_s),
                                 ceiling_unit=m.ceiling_unit, side=m.side, baseline=base,
                                 targets=m.targets.wanted if m.targets else None, state=m.gpu_state)
    except (MeasurementError, ZeroDivisionError, ValueError) as e:
        return [f"{where}: {e}"]
    for name in ("bytes_per_s", "flops_per_s", "fraction_of_ceiling"):
        a, b = getattr(m, name), getattr(again, name)
        if (a is None) != (b is None) or (a is not None and not _close(a, b)):
            out.append(f"{where}.{name} = {a!r}, but its timing gives {b!r}")
    if m.baseline:
        if m.baseline.rounds < 5:
            out.append(f"{where}.baseline: {m.baseline.rounds} ABBA rounds; a ratio's spread needs 5")
        if m.timing != pool(m.baseline.ours_blocks):
            out.append(f"{where}.timing is not its blocks pooled ({pool(m.baseline.ours_blocks)})")
        if m.baseline.timing != again.baseline.timing:
            out.append(f"{where}.baseline.timing is not its blocks pooled ({again.baseline.timing})")
        for name in ("bytes_per_s", "flops_per_s", "ratio", "ratio_p20", "ratio_p80"):
            a, b = getattr(m.baseline, name), getattr(again.baseline, name)
            if (a is None) != (b is None) or (a is not None and not _close(a, b)):
                out.append(f"{where}.baseline.{name} = {a!r}, but its rounds give {b!r}")
        if not (m.baseline.ratio_p20 <= m.baseline.ratio <= m.baseline.ratio_p80):
            out.append(f"{where}.baseline: the ratio's median is not between its p20 and p80")
    if m.targets is not None and m.targets.met != (again.targets.met if again.targets else {}):
        out.append(f"{where}.targets.met = {m.targets.met}, but the figures give "
                   f"{again.targets.met if again.targets else {}}")
    out += _state_problems(m.gpu_state, f"{where}.gpu_state")
    return _timing_and_lines_problems(m, where, stdout, out)


def _timing_and_lines_problems(b: Benchmark | Measurement, where: str, stdout: str, out: list[str]) -> list[str]:
    """`out`, and what is wrong with a benchmark's timing as a set of
    measurements; when nothing else is wrong, whether the recorded output
    shows every line the benchmark prints."""
    t = b.timing
    if not (t.min_ms <= t.p20_ms <= t.median_ms <= t.p80_ms) or t.reps < 1:
        out.append(f"{where}.timing is not a set of measurements (min <= p20 <= median <= p80): {t}")
    if not out:
        missing = [ln for ln in b.lines() if ln not in stdout.splitlines()]
        if missing:
            out.append(f"{where}: the recorded output does not show its figures: {missing[0]!r}")
    return out


def _state_problems(state: dict | None, where: str) -> list[str]:
    """A typed entry's GPU state: present (the suite runs with REQUIRE_GPU=1,
    which refuses to time without it), two readings of one GPU, and its
    derived figures (time held below the clocks, mean power, throttled)
    those the readings give."""
    if state is None:
        return [f"{where} is missing: a record must say what state its timings ran in"]
    try:
        span = StateSpan(GpuState(**state["before"]), GpuState(**state["after"]), state["seconds"],
                         list(state.get("sm_clock_samples", [])))
    except (KeyError, TypeError) as e:
        return [f"{where} is not two readings of the GPU ({e})"]
    out = []
    if span.before.uuid != span.after.uuid:
        out.append(f"{where}: read from two GPUs ({span.before.uuid}, {span.after.uuid})")
    again = span.as_dict()
    for name in ("held_ns", "mean_power_w", "throttled", "sm_clock_during"):
        if state.get(name) != again[name] and not (
                isinstance(again[name], float) and isinstance(state.get(name), float)
                and _close(state[name], again[name])):
            out.append(f"{where}.{name} = {state.get(name)!r}, but its readings give {again[name]!r}")
    return out


def _benchmark_problems(b: Benchmark | Measurement, where: str, stdout: str) -> list[str]:
    """A benchmark's derived figures, recomputed from the timings it records,
    and its printed lines, found in the recorded output."""
    if isinstance(b, Measurement):
        return _measurement_problems(b, where, stdout)
    out = []
    base = (b.baseline.name, b.baseline.timing) if b.baseline else None
    again = Benchmark.make(b.name, b.timing, b.bytes_moved, b.ceiling_bytes_per_s, base,
                           b.targets.wanted if b.targets else None)
    for name in ("bytes_per_s", "fraction_of_ceiling"):
        if not _close(getattr(b, name), getattr(again, name)):
            out.append(f"{where}.{name} = {getattr(b, name)!r}, but its timing gives {getattr(again, name)!r}")
    if b.baseline:
        for name in ("bytes_per_s", "ratio"):
            if not _close(getattr(b.baseline, name), getattr(again.baseline, name)):
                out.append(f"{where}.baseline.{name} = {getattr(b.baseline, name)!r}, "
                           f"but its timing gives {getattr(again.baseline, name)!r}")
    if b.targets and b.targets.met != again.targets.met:
        out.append(f"{where}.targets.met = {b.targets.met}, but the figures give {again.targets.met}")
    return _timing_and_lines_problems(b, where, stdout, out)


def _check_problems(c: CheckResult, where: str, stdout: str, n: int | None) -> list[str]:
    out = []
    if c.detail is None:
        if c.passed != (c.outside == 0):
            out.append(f"{where}.passed = {c.passed}, but {c.outside} element(s) are outside the bound")
        if (c.worst_ratio <= 1.0) != (c.outside == 0):
            out.append(f"{where}.worst_ratio = {c.worst_ratio}, which does not agree with outside = {c.outside}")
        if c.nonfinite > c.outside:
            out.append(f"{where}.nonfinite = {c.nonfinite} > outside = {c.outside}")
    if n is not None and c.n != n:
        out.append(f"{where}.n = {c.n}, but the run was at n = {n}")
    if f"\n{c.line()}\n" not in f"\n{stdout}\n":
        out.append(f"{where}: the recorded output does not show this check: {c.line()!r}")
    return out


def problems(listing: Listing, rec: Record, description: dict) -> list[str]:
    """Everything wrong with a record, each message naming the record and the
    field. `description` is what the listing says of itself
    ({"sized": ..., "bench": ...}). An empty list means complete, current and
    consistent."""
    f = listing.rel(listing.record_path)
    out: list[str] = []
    if rec.listing != listing.id:
        out.append(f"{f}: listing = {rec.listing!r}, expected {listing.id!r}")
    files = [listing.rel(p) for p in hashing.hashed_files(listing)]
    if rec.files != files:
        out.append(f"{f}: files = {rec.files}, but the listing's code is {files}")
    if rec.hash != hashing.content_hash(listing):
        out.append(f"{f}: hash: {listing.id} changed since its GPU record was made")
    if rec.suite_hash != hashing.suite_hash(listing.root):
        out.append(f"{f}: suite_hash: the GPU suite changed since this record was made")
    kernels = listings.launches_kernels(listing)
    want_desc = {"sized": description["sized"], "bench": description["bench"],
                 "bench_n": description.get("bench_n"), "kernels": kernels}
    if rec.description != want_desc:
        out.append(f"{f}: description = {rec.description}, but the listing says {want_desc}")
    required = suite.required_runs(sized=description["sized"], bench=description["bench"],
                                   bench_n=description.get("bench_n"), kernels=kernels,
                                   broken_tool=listing.broken_tool)
    bench_is_large = suite.bench_is_large(description.get("bench_n"))   # set only for a sized --bench
    have = {r.key for r in rec.runs} | {f"sanitizer:{t}" for t in rec.sanitizer} \
        | ({f"broken:{rec.broken.tool}"} if rec.broken else set())
    if have != required or len(rec.runs) != len({r.key for r in rec.runs}):
        out.append(f"{f}: runs: has {sorted(have)}, the suite requires exactly {sorted(required)}")
    try:
        dt.datetime.strptime(rec.date, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        out.append(f"{f}: date = {rec.date!r} is not a UTC timestamp")
    missing_env = [k for k in ENVIRONMENT_KEYS if not rec.environment.get(k)]
    if missing_env:
        out.append(f"{f}: environment lacks {missing_env}")
    for i, r in enumerate(rec.runs):
        w = f"{f}: runs[{i}] ({r.key})"
        if r.environment != rec.environment:
            diff = sorted(k for k in set(r.environment) | set(rec.environment)
                          if r.environment.get(k) != rec.environment.get(k))
            out.append(f"{w}.environment differs from the record's in {diff}")
        size = int(r.key[2:]) if r.key.startswith("n=") else None
        if size is not None and (r.n != size or ["--n", str(size)] != r.argv[:2]):
            out.append(f"{w}: n = {r.n}, argv = {r.argv}, but the run is {r.key}")
        if r.key == "bench" and "--bench" not in r.argv:
            out.append(f"{w}.argv = {r.argv} lacks --bench")
        if r.key == "bench" and bench_is_large and not (
                r.n == description.get("bench_n") and any(c.n == r.n for c in r.checks)):
            out.append(f"{w}: n = {r.n}, checks at n = {sorted({c.n for c in r.checks})}, but this run "
                       f"stands in for n = {suite.LARGE} and must check n = {description.get('bench_n')}")
        if r.passed != (bool(r.checks) and all(c.passed for c in r.checks)):
            out.append(f"{w}.passed = {r.passed}, but its checks say otherwise")
        for j, c in enumerate(r.checks):
            out += _check_problems(c, f"{w}.checks[{j}]", r.stdout, size)
        for j, b in enumerate(r.benchmarks):
            out += _benchmark_problems(b, f"{w}.benchmarks[{j}]", r.stdout)
        if r.key == "bench" and description["bench"] and not (r.benchmarks or r.facts):
            out.append(f"{w}: --bench timed nothing")
    for tool, s in rec.sanitizer.items():
        w = f"{f}: sanitizer.{tool}"
        if s.tool != tool:
            out.append(f"{w}.tool = {s.tool!r}")
        if s.n != (suite.SANITIZER_N if description["sized"] else None):
            out.append(f"{w}.n = {s.n}, the suite runs sanitizers at n = {suite.SANITIZER_N}")
        if s.summary is None or not ANY_SUMMARY.match(s.summary):
            out.append(f"{w}.summary = {s.summary!r} is not a compute-sanitizer summary line")
        elif s.passed != bool(CLEAN_SUMMARY.match(s.summary)):
            out.append(f"{w}.passed = {s.passed}, but the summary says {s.summary!r}")
    if rec.broken is not None:
        w = f"{f}: broken"
        if listing.expectation != (rec.broken.tool, rec.broken.error):
            out.append(f"{w} = ({rec.broken.tool}, {rec.broken.error!r}), the listing expects "
                       f"{listing.expectation}")
        caught = rec.broken.error in rec.broken.report and bool(
            re.search(r"^========= (ERROR|RACECHECK) SUMMARY: [1-9]", rec.broken.report, re.M))
        if rec.broken.passed != caught:
            out.append(f"{w}.passed = {rec.broken.passed}, but the report "
                       f"{'shows' if caught else 'does not show'} {rec.broken.error!r} with errors counted")
        if rec.broken.environment != rec.environment:
            out.append(f"{w}.environment differs from the record's")
    everything = [r.passed for r in rec.runs] + [s.passed for s in rec.sanitizer.values()] \
        + ([rec.broken.passed] if rec.broken else [])
    if rec.passed != (bool(everything) and all(everything)):
        out.append(f"{f}: passed = {rec.passed}, but its runs say {all(everything)}")
    return out


def status(listing: Listing, description: dict | None = None) -> tuple[str, Record | None]:
    """('current' | 'stale' | 'failed' | 'inconsistent' | 'missing' | 'unreadable', record). Stale means the
    code or the suite changed since the record was made; 'inconsistent', that
    `problems` found something else wrong. Without `description` (what the
    listing says of itself, which takes a subprocess to ask), the record's
    own description is trusted for which runs it must hold."""
    try:
        rec = load(listing)
    except RecordError:
        return "unreadable", None
    if rec is None:
        return "missing", None
    if rec.hash != hashing.content_hash(listing) or rec.suite_hash != hashing.suite_hash(listing.root):
        return "stale", rec
    if not rec.passed:
        return "failed", rec
    if problems(listing, rec, description or rec.description):
        return "inconsistent", rec
    return "current", rec


def reverify_command(listing: Listing) -> str:
    """The one command that makes a stale listing current again (its chapter's
    notebook included), then what to commit."""
    return (f"on a GPU machine: REQUIRE_GPU=1 python -m cudabook verify --stale "
            f"(it re-runs {listing.id} and the {listing.chapter} notebook), "
            f"then commit results/ and chapters/{listing.chapter}/{listing.chapter}.ipynb")


# --- building from what the suite saw -----------------------------------------

def utc_now() -> str:
    """The timestamp written into records and notebooks."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build(listing: Listing, staged: dict[str, dict], description: dict) -> Record:
    """The record of a listing from every GPU test's findings (`staged`: key
    -> what the test stored), as the suite writes it."""
    runs, sanitizer, broken, env = [], {}, None, None
    for key, v in sorted(staged.items()):
        if key.startswith(("n=", "run", "bench")):
            env = env or v["environment"]
            runs.append(run_from_dict({**{k: v[k] for k in (
                "argv", "n", "seed", "budget_ms", "passed", "checks", "benchmarks", "facts",
                "environment", "wall_s", "stdout")}, "key": key, "gpu_index": v.get("gpu_index")},
                f"{listing.id} {key}"))
        elif key.startswith("sanitizer:"):
            sanitizer[key.split(":", 1)[1]] = SanitizerRun(**v)
        elif key.startswith("broken:"):
            broken = Broken(**v)
            env = env or v["environment"]
    everything = [r.passed for r in runs] + [s.passed for s in sanitizer.values()] \
        + ([broken.passed] if broken else [])
    return Record(
        listing=listing.id, files=[listing.rel(p) for p in hashing.hashed_files(listing)],
        hash=hashing.content_hash(listing), suite_hash=hashing.suite_hash(listing.root),
        passed=bool(everything) and all(everything), date=utc_now(), environment=env or {},
        description={"sized": description["sized"], "bench": description["bench"],
                     "bench_n": description["bench_n"], "kernels": listings.launches_kernels(listing)},
        runs=runs, sanitizer=sanitizer, broken=broken, command=COMMAND)


# --- showing it -----------------------------------------------------------------

def rate_text(bps: float) -> str:
    """A rate in bytes/s for prose and badges: '4.38 TB/s' or '55 GB/s'."""
    return f"{bps / 1e12:.2f} TB/s" if bps >= 1e12 else f"{bps / 1e9:.0f} GB/s"


def time_text(ms: float) -> str:
    """A time for prose, in the unit that fits, with three significant
    figures and thousands separators: '8.25 µs', '236 µs', '2.01 ms',
    '471 ms', '1,204.50 s'."""
    for value, unit in ((ms * 1e3, "µs"), (ms, "ms")):
        text = f"{value:.{2 if value < 10 else 1 if value < 100 else 0}f}"
        if float(text) < 1000:                       # 999.7 µs is 1.00 ms, not "1000 µs"
            return f"{text} {unit}"
    return f"{ms / 1e3:,.2f} s"


def headline_benchmark(rec: Record) -> Benchmark | None:
    """The benchmark a badge shows: the listing's own best, that is the
    nearest its ceiling of those with targets, else of those beside a library
    baseline, else of all (not a reference copy timed for comparison)."""
    if not rec.benchmarks:
        return None
    mine = ([b for b in rec.benchmarks if b.targets] or [b for b in rec.benchmarks if b.baseline]
            or rec.benchmarks)
    return max(mine, key=lambda b: b.fraction_of_ceiling)   # for bandwidths, the same order as bytes_per_s


def benchmark_rate_text(b: Benchmark | Measurement) -> str:
    """A benchmark's rate in its own unit: '4.38 TB/s', '612 TFLOP/s'."""
    if isinstance(b, Measurement):
        return unit_rate_text(b.rate, b.ceiling_unit)
    return rate_text(b.bytes_per_s)


def ceiling_name(b: Benchmark | Measurement) -> str:
    """'copy' for a bandwidth against the copy ceiling, else the ceiling's
    name without its parenthesis: 'FP32 FMA peak', 'cuBLAS bf16 8192^3'."""
    if not isinstance(b, Measurement) or b.ceiling == "device-to-device copy":
        return "copy"
    return b.ceiling.split(" (")[0]


def headline(rec: Record) -> str | None:
    """The one number a badge shows: the headline benchmark's rate and its
    share of the ceiling, e.g. '4.12 TB/s (95% of copy, 1.00x torch.add)'."""
    b = headline_benchmark(rec)
    if b is None:
        return None
    s = f"{benchmark_rate_text(b)} ({100 * b.fraction_of_ceiling:.0f}% of {ceiling_name(b)}"
    if b.baseline:
        s += f", {b.baseline.ratio:.2f}x {b.baseline.name}"
        if isinstance(b, Measurement):
            s += f" [{b.baseline.ratio_p20:.2f}-{b.baseline.ratio_p80:.2f}]"
    if isinstance(b, Measurement) and b.throttled:
        s += ", throttled"
    return s + ")"


def names_section(benchmark_name: str, section: str) -> bool:
    """Does a benchmark's name name a kernel file's section? 'naive
    8192x8192' names `naive`, 'sum_atomic' names `atomic`, 'layernorm
    forward, Welford f32' names `welford` and `forward`: the section's name
    as a whole word, where words end at spaces, commas and underscores."""
    return re.search(rf"(?:^|[ ,_]){re.escape(section)}(?:$|[ ,_])", benchmark_name, re.I) is not None


def missed_targets(rec: Record, benchmarks: list[Benchmark] | None = None) -> list[str]:
    """Targets a benchmark (of `benchmarks`, else of the record) declared
    and did not meet, as text."""
    out = []
    for b in rec.benchmarks if benchmarks is None else benchmarks:
        if b.targets:
            for k, want in b.targets.wanted.items():
                if not b.targets.met.get(k):
                    what = ("copy" if k == "copy" else ceiling_name(b) if k == "ceiling"
                            else (b.baseline.name if b.baseline else "baseline"))
                    out.append(f"{b.name}: target >= {100 * want:.0f}% of {what} missed")
    return out


def where_text(rec: Record) -> str:
    """GPU, architecture, CUDA and date: 'NVIDIA H200 · sm_90 · CUDA 13.0 · 2026-11-30'."""
    env = rec.environment
    cc = str(env.get("compute_capability", "?")).replace(".", "")
    return " · ".join([rec.gpu, f"sm_{cc}", f"CUDA {env.get('cuda', '?')}", rec.date[:10]])


def badge_text(rec: Record) -> str:
    if rec.broken:
        return (f"broken on purpose: compute-sanitizer --tool {rec.broken.tool} catches it · "
                f"{rec.gpu} · {rec.date[:10]}")
    h = headline(rec)
    return where_text(rec) + (f" · {h}" if h else "")


# --- reproducing a record ------------------------------------------------------

#: How far a benchmark's rate may move between two runs of the same code on
#: the same kind of GPU before a reproduction counts as a mismatch.
NOISE_BAND = 0.10


def _flat(prefix: str, value, out: dict) -> None:
    """A fact's leaves, by path: sweep[6].torch_cpu_ms."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flat(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = value


def moved_facts(new: Record, old: Record, band: float = NOISE_BAND) -> list[str]:
    """The facts the prose can cite (Record.facts) that differ between two
    records of a listing: a number that moved by more than `band`, any other
    value that changed, a fact added or gone. Not a failure: errors of random
    inputs and some timings move from run to run. It is the list of
    sentences to re-read after a re-record."""
    a, b = {}, {}
    _flat("", old.facts(), a)
    _flat("", new.facts(), b)
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, "(none)"), b.get(key, "(none)")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
        if x == y or (numbers and x != 0 and abs(y / x - 1) <= band):
            continue
        out.append(f"{new.listing}: facts.{key}: {x!r} -> {y!r}")
    return out


def reproduces(new: Record, old: Record, band: float = NOISE_BAND) -> list[str]:
    """Why `new` (made just now by the GPU workflow) does not reproduce `old`
    (the committed record): same code and suite, same GPU model, every run
    and check passing as before, every benchmark's rate within `band`.
    Empty when it does."""
    w = new.listing
    out = []
    for name in ("listing", "hash", "suite_hash"):
        if getattr(new, name) != getattr(old, name):
            out.append(f"{w}: {name} differs ({getattr(old, name)!r} committed, {getattr(new, name)!r} now)")
    if new.gpu != old.gpu:
        out.append(f"{w}: environment.gpu: committed on {old.gpu!r}, reproduced on {new.gpu!r}: "
                   "compare on the same kind of GPU")
    if not new.passed:
        out.append(f"{w}: passed: the new run failed")
    old_checks = {(r.key, c.name): c.passed for r in old.runs for c in r.checks}
    new_checks = {(r.key, c.name): c.passed for r in new.runs for c in r.checks}
    if {k for k in old_checks if not k[1].startswith("(")} != {k for k in new_checks if not k[1].startswith("(")}:
        out.append(f"{w}: checks: the runs checked other things ({sorted(set(old_checks) ^ set(new_checks))[:4]})")
    old_b = {b.name: b for b in old.benchmarks}
    for b in new.benchmarks:
        o = old_b.get(b.name)
        if o is None:
            out.append(f"{w}: benchmarks: {b.name!r} is not in the committed record")
            continue
        rate = "rate" if isinstance(b, Measurement) and isinstance(o, Measurement) else "bytes_per_s"
        for what, a, c in ((rate, getattr(o, rate, None), getattr(b, rate, None)),
                           ("baseline.ratio", o.baseline.ratio if o.baseline else None,
                            b.baseline.ratio if b.baseline else None)):
            if a is None and c is None:
                continue
            if a is None or c is None or abs(c / a - 1) > band:
                out.append(f"{w}: benchmarks[{b.name!r}].{what}: committed {a!r}, reproduced {c!r} "
                           f"(band ±{100 * band:.0f}%)")
    return out
