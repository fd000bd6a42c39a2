"""One typed benchmark entry for every speed claim: bandwidth or FLOP rate,
against a named, measured ceiling, beside the library call a user would
make instead, timed in alternation, with the GPU's state around it.

    peak = ...                                     # measured in this run
    cb.evidence.benchmark("sgemm 4096^3", fn, flops=2 * m * n * k,
                          working_set_bytes=4 * (m * k + k * n + m * n),
                          ceiling=("FP32 FMA peak (peak_flops.py's chains)", peak),
                          baseline=("cuBLAS SGEMM", cublas), targets={"baseline": 0.8})

What an entry holds, and why (issue #45):

- `flops` and `flops_per_s` where the listing counts FLOPs, `bytes_moved`
  and `bytes_per_s` where it counts bytes; the ceiling is named and is in
  the same unit (`ceiling_unit`), so "82% of the FMA peak" and "91% of
  copy" are the same kind of figure, recomputed by the record's checker.
- Ours and the baseline timed in alternation (comparison.alternate: ABBA
  rounds, at least five), so a clock that drifts falls on both. The
  baseline's `ratio` is the median of the rounds' ratios, with `ratio_p20`
  and `ratio_p80`; `rounds` keeps every round's pair of medians, from which
  the checker recomputes all three. A target on the baseline is judged
  against the median.
- `how` each side was timed: CUDA events around each call, or a CUDA
  graph's replay (for a baseline of many launches that the host would
  otherwise pace: the page says which).
- The kernels each side ran, from the profiler (`kernels`), so a baseline
  is named by what ran, not by a guess at its backend.
- `gpu_state`: NVML's reading before and after the whole measurement, and
  the time the GPU spent held below its clocks in between (gpu_state.py).
  A throttled measurement says so in its printed lines and its record.

Entries carry `kind = "measurement"`, which is how a record tells them
from bench.Benchmark's older byte-only entries; both are read, and a
listing moves to this one when the book is re-recorded with it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Callable

from . import comparison, gpu_state
from .bench import BUDGET_MS, Targets, Timing, bench, warm_up

#: The entry's marker in a record's `benchmarks` list.
KIND = "measurement"
UNITS = ("bytes", "flops")
EVENTS = "CUDA events around each call"
GRAPH = "one CUDA graph replay per call (PyTorch's launches captured once)"


class MeasurementError(ValueError):
    """A benchmark asked for with arguments that do not describe one."""


def rate_text(per_s: float, unit: str) -> str:
    """'4.38 TB/s', '55 GB/s', '612 TFLOP/s', '41.3 TFLOP/s' or '820 GFLOP/s'."""
    if unit == "bytes":
        return (f"{per_s / 1e12:.2f} TB/s" if per_s >= 1e12 else f"{per_s / 1e9:.0f} GB/s" if per_s >= 1e10
                else f"{per_s / 1e9:.2g} GB/s")
    if per_s >= 1e14:
        return f"{per_s / 1e12:.0f} TFLOP/s"
    return f"{per_s / 1e12:.1f} TFLOP/s" if per_s >= 1e12 else f"{per_s / 1e9:.0f} GFLOP/s"


@dataclass
class Side:
    """One side of a comparison as it ran: how it was timed and what it
    launched."""
    how: str
    kernels: list[str] | None         # distinct kernels of one call (None: not profiled)
    launches: float | None            # GPU operations a call
    kernel_ms: float | None           # their summed GPU time a call, from the profiler


@dataclass
class LibraryBaseline:
    """The call a user would make instead, timed in alternation with ours."""
    name: str
    timing: Timing                    # pooled over the rounds
    bytes_per_s: float | None
    flops_per_s: float | None
    ratio: float                      # ours / baseline by rate: the rounds' median
    ratio_p20: float
    ratio_p80: float
    ours_blocks: list[Timing]         # each round's A B B A: ours first and last,
    blocks: list[Timing]              # the baseline in between (comparison.alternate)
    side: Side

    @property
    def rounds(self) -> int:
        return len(self.blocks) // 2


@dataclass
class Measurement:
    """One timed piece of work: its rate against a named ceiling measured
    in the same run, beside a library baseline if there is one."""
    name: str
    timing: Timing
    bytes_moved: int | None
    bytes_per_s: float | None
    flops: int | None
    flops_per_s: float | None
    working_set_bytes: int
    ceiling: str                      # what the ceiling is, e.g. "device-to-device copy"
    ceiling_unit: str                 # "bytes" or "flops"
    ceiling_per_s: float
    fraction_of_ceiling: float
    side: Side
    baseline: LibraryBaseline | None
    targets: Targets | None
    gpu_state: dict | None            # gpu_state.StateSpan.as_dict(), None where NVML is absent
    kind: str = KIND

    # --- derived, in one place (the record's checker calls these too) -----
    @property
    def rate(self) -> float:
        """The rate in the ceiling's unit."""
        return self.flops_per_s if self.ceiling_unit == "flops" else self.bytes_per_s

    @property
    def ceiling_bytes_per_s(self) -> float | None:
        """The ceiling where it is a bandwidth (as bench.Benchmark names it)."""
        return self.ceiling_per_s if self.ceiling_unit == "bytes" else None

    @property
    def throttled(self) -> bool:
        return bool(self.gpu_state and self.gpu_state.get("throttled"))

    @staticmethod
    def rates(timing_ms: float, bytes_moved: int | None, flops: int | None) -> tuple:
        s = timing_ms * 1e-3
        return (bytes_moved / s if bytes_moved is not None else None,
                flops / s if flops is not None else None)

    @classmethod
    def make(cls, name: str, timing: Timing, *, bytes_moved: int | None = None, flops: int | None = None,
             working_set_bytes: int, ceiling: tuple[str, float], ceiling_unit: str, side: Side,
             baseline: tuple[str, list[Timing], list[Timing], Side] | None = None,
             targets: dict | None = None, state: dict | None = None) -> Measurement:
        """Every derived figure from the timings (the checker recomputes
        them with this same function). With a baseline, `baseline` is (its
        name, our blocks, its blocks, its side) from comparison.alternate,
        and `timing` must be our blocks pooled."""
        if ceiling_unit not in UNITS:
            raise MeasurementError(f"ceiling_unit: expected 'bytes' or 'flops', got {ceiling_unit!r}")
        if (bytes_moved if ceiling_unit == "bytes" else flops) is None:
            raise MeasurementError(f"{name}: the ceiling is in {ceiling_unit}, so the work must be "
                                   f"counted in {ceiling_unit} ({'bytes_moved' if ceiling_unit == 'bytes' else 'flops'}=)")
        bps, fps = cls.rates(timing.median_ms, bytes_moved, flops)
        rate = fps if ceiling_unit == "flops" else bps
        b = None
        if baseline is not None:
            bname, ours_blocks, blocks, bside = baseline
            if len(blocks) != len(ours_blocks) or len(blocks) % 2:
                raise MeasurementError(f"{name}: {len(ours_blocks)} blocks of ours and {len(blocks)} of the "
                                       "baseline are not rounds of A B B A")
            bt = comparison.pool(blocks)
            bbps, bfps = cls.rates(bt.median_ms, bytes_moved, flops)
            med, p20, p80 = comparison.spread(comparison.ratios_of(ours_blocks, blocks))
            b = LibraryBaseline(bname, bt, bbps, bfps, med, p20, p80, list(ours_blocks), list(blocks), bside)
        out = cls(name=name, timing=timing, bytes_moved=None if bytes_moved is None else int(bytes_moved),
                  bytes_per_s=bps, flops=None if flops is None else int(flops), flops_per_s=fps,
                  working_set_bytes=int(working_set_bytes), ceiling=ceiling[0], ceiling_unit=ceiling_unit,
                  ceiling_per_s=float(ceiling[1]), fraction_of_ceiling=rate / ceiling[1], side=side,
                  baseline=b, targets=None, gpu_state=state)
        if targets:
            out.targets = Targets(dict(targets), out.targets_met(targets))
        return out

    def targets_met(self, wanted: dict) -> dict:
        unknown = set(wanted) - {"ceiling", "baseline"}
        if unknown:
            raise MeasurementError(f"targets: {sorted(unknown)}: a target is 'ceiling' or 'baseline'")
        met = {}
        if "ceiling" in wanted:
            met["ceiling"] = self.fraction_of_ceiling >= wanted["ceiling"]
        if "baseline" in wanted:
            met["baseline"] = self.baseline is not None and self.baseline.ratio >= wanted["baseline"]
        return met

    def lines(self) -> list[str]:
        """What the listing prints (the record's checker finds each line in
        the recorded output)."""
        t, u = self.timing, self.ceiling_unit
        of = (f"medians of {len(self.baseline.ours_blocks)} blocks, {t.reps} runs" if self.baseline
              else f"{t.reps} runs")
        out = [f"{self.name}: {t.median_ms:.4f} ms (p20 {t.p20_ms:.4f}, p80 {t.p80_ms:.4f}; {of})",
               f"  {rate_text(self.rate, u)} = {100 * self.fraction_of_ceiling:.1f}% of {self.ceiling} "
               f"({rate_text(self.ceiling_per_s, u)})"]
        if self.side.kernels:
            out.append(f"  ran: {', '.join(self.side.kernels)}")
        if self.baseline is not None:
            b = self.baseline
            out.append(f"  {b.name}: {b.timing.median_ms:.4f} ms, "
                       f"{rate_text(b.flops_per_s if u == 'flops' else b.bytes_per_s, u)}")
            out.append(f"  ours/{b.name} = {b.ratio:.3f} (p20 {b.ratio_p20:.3f}, p80 {b.ratio_p80:.3f}; "
                       f"median of {b.rounds} ABBA rounds)")
            if b.side.how != EVENTS:
                out.append(f"  {b.name} timed as {b.side.how}")
            if b.side.kernels:
                out.append(f"  {b.name} ran: {', '.join(b.side.kernels)}")
        if self.targets is not None:
            for k, want in self.targets.wanted.items():
                what = self.ceiling if k == "ceiling" else (self.baseline.name if self.baseline else "baseline")
                out.append(f"  target >= {100 * want:.0f}% of {what}: "
                           f"{'met' if self.targets.met.get(k) else 'MISSED'}")
        if self.gpu_state is not None:
            out.append("  " + state_line(self.gpu_state))
        return out

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Measurement:
        d = dict(d)
        if d.get("kind") != KIND:
            raise MeasurementError(f"kind = {d.get('kind')!r}, expected {KIND!r}")
        d["timing"] = Timing(**d["timing"])
        d["side"] = Side(**d["side"])
        if d.get("baseline"):
            b = dict(d["baseline"])
            b["timing"] = Timing(**b["timing"])
            b["ours_blocks"] = [Timing(**t) for t in b["ours_blocks"]]
            b["blocks"] = [Timing(**t) for t in b["blocks"]]
            b["side"] = Side(**b["side"])
            d["baseline"] = LibraryBaseline(**b)
        if d.get("targets"):
            d["targets"] = Targets(**d["targets"])
        return cls(**d)


def state_line(state: dict) -> str:
    """The GPU's state around a measurement, in one line: the clocks at both
    ends and their ceiling, and, when the GPU was held below its clocks,
    THROTTLED with the cause."""
    b, a = state["before"], state["after"]
    s = f"GPU: SM {b['sm_clock_mhz']}->{a['sm_clock_mhz']} MHz of {a['max_sm_clock_mhz']}"
    during = state.get("sm_clock_during")
    if during:
        s += f" (during: {during['min']}-{during['max']}, median {during['median']:g})"
    s += f", memory {a['mem_clock_mhz']} MHz, {a['temperature_c']} C"
    if state.get("mean_power_w") is not None:
        s += f", {state['mean_power_w']:.0f} W of {a['power_limit_w']:.0f}"
    if state.get("throttled"):
        from .gpu_state import THROTTLING

        causes = sorted(THROTTLING & (set(b["reasons"]) | set(a["reasons"])))
        held = [f"held {v / 1e6:,.0f} ms by {k}" for k, v in state.get("held_ns", {}).items() if v > 0]
        s += "; THROTTLED: " + ", ".join(causes + held)
    return s


def _profile(fn: Callable[[], object], how: str) -> Side:
    """The kernels one call ran, where PyTorch's profiler is here (it sees
    PyCUDA's launches too); else the side, unnamed."""
    from .bench import torch_cuda

    if torch_cuda() is None:
        return Side(how, None, None, None)
    p = comparison.kernels(fn, calls=3)
    return Side(how, p.kernels, p.launches, p.gpu_ms)


def _nvml_device() -> str | None:
    """The PCI bus id of the GPU this process computes on, which is how NVML
    finds the same GPU (CUDA's and NVML's numbering may differ); None
    without PyCUDA or a context (then gpu_state takes the first visible)."""
    try:
        from .gpu import init

        return init().device.pci_bus_id()
    except Exception:   # no GPU here: the fakes of the tests, or NVML's own default
        return None


def _state_or_none(span) -> dict | None:
    if span is None and os.environ.get("REQUIRE_GPU") == "1":
        from .gpu import Unavailable

        raise Unavailable(f"the GPU's state cannot be read ({gpu_state.why_not()}), and a record "
                          "must say what state its timings ran in")
    return span.as_dict() if span is not None else None


def measure(name: str, fn: Callable[[], None], *, bytes_moved: int | None = None, flops: int | None = None,
            working_set_bytes: int | None = None, ceiling: tuple[str, float], ceiling_unit: str | None = None,
            baseline: tuple[str, Callable[[], object]] | None = None, baseline_as_graph: bool = False,
            targets: dict | None = None, budget_ms: float = BUDGET_MS, rounds: int = comparison.ROUNDS,
            timer: Callable[..., Timing] = bench) -> Measurement:
    """Time `fn`, and `baseline` in alternation with it, and return the
    entry (nothing printed or kept: see `benchmark`).

    ceiling: (what it is, its rate per second), measured in this run, in
    bytes unless `ceiling_unit="flops"` (the default when only `flops` is
    given). baseline_as_graph: capture the baseline (PyTorch work) as a
    CUDA graph and time its replay, for a baseline of many launches.
    """
    if bytes_moved is None and flops is None:
        raise MeasurementError(f"{name}: give bytes_moved=, flops= or both: the work one call does")
    unit = ceiling_unit or ("flops" if bytes_moved is None else "bytes")
    ws = working_set_bytes if working_set_bytes is not None else bytes_moved
    if ws is None:
        raise MeasurementError(f"{name}: working_set_bytes= is needed when only flops= is given "
                               "(it decides whether the L2 is flushed between calls)")
    device = _nvml_device()
    warm_up(fn)
    if baseline is None:
        t, span = gpu_state.around(lambda: timer(fn, working_set_bytes=ws, budget_ms=budget_ms), device)
        state = _state_or_none(span)
        return Measurement.make(name, t, bytes_moved=bytes_moved, flops=flops, working_set_bytes=ws,
                                ceiling=ceiling, ceiling_unit=unit, side=_profile(fn, EVENTS),
                                targets=targets, state=state)
    bname, bfn = baseline
    if baseline_as_graph:
        bfn = comparison.graphed(bfn)
    warm_up(bfn)
    c = comparison.alternate(fn, bfn, working_set_bytes=ws, rounds=rounds, budget_ms=budget_ms,
                             timer=timer, device=device)
    state = c.state if c.state is not None else _state_or_none(None)
    return Measurement.make(
        name, c.ours, bytes_moved=bytes_moved, flops=flops, working_set_bytes=ws, ceiling=ceiling,
        ceiling_unit=unit, side=_profile(fn, EVENTS),
        baseline=(bname, c.ours_blocks, c.baseline_blocks, _profile(bfn, GRAPH if baseline_as_graph else EVENTS)),
        targets=targets, state=state)


def benchmark(name: str, fn: Callable[[], None], **kwargs) -> Measurement:
    """`measure`, then print the entry's lines and keep it in the listing's
    report (listing_cli), as `cb.benchmark` does for a bandwidth figure."""
    from . import listing_cli
    from .gpu import init

    init()
    kwargs.setdefault("budget_ms", listing_cli._report.get("budget_ms") or BUDGET_MS)
    m = measure(name, fn, **kwargs)
    for line in m.lines():
        print(line, flush=True)
    listing_cli._report.setdefault("benchmarks", []).append(m.as_dict())
    return m


def speed_against(entry: Measurement, pooled: LibraryBaseline | None) -> float | None:
    """How fast `entry` ran against a library, as a ratio (above 1: faster):
    the median of its own ABBA rounds where it was alternated with one, else
    the library's time pooled over another entry's rounds of the same run
    (`pooled`) over its own median; None with neither."""
    if entry.baseline is not None:
        return entry.baseline.ratio
    if pooled is not None:
        return pooled.timing.median_ms / entry.timing.median_ms
    return None
