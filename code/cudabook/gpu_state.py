"""The GPU's state around a timing, read through NVML: the conditions a
speed figure was measured under.

A rate means little without the clock it ran at. The same cuBLAS bf16
product read 680 to 770 TFLOP/s across the book's records, with nothing in
them to say why. So a timing is bracketed by two readings:

- `read()` before and after: the SM and memory clocks at that moment, the
  SM clock's ceiling, power draw and limit, temperature, performance state,
  and the clock-event reasons NVML reports (power cap, thermal slowdown,
  ...), with the GPU's UUID, so two records can be said to come from the
  same card or not;
- the SM clock, read every SAMPLE_MS from a second thread while the work
  runs: its lowest, median and highest value *during* the work;
- NVML's cumulative counters, read both times, give what happened *in
  between*, which a reading at either end cannot see: the nanoseconds the
  GPU spent held below its clocks by its power or thermal limits (the
  violation counters) and the energy it used (so the mean power).

`around(fn)` runs `fn` between two readings and returns its result with a
`StateSpan`. A span `throttled()` when the GPU spent time held by power or
temperature, or when either reading shows such a reason: the record and the
page say so beside the figure. Measure only: nothing here changes the
GPU's settings.

NVML comes from nvidia-ml-py (`import pynvml`), a pure-Python binding of
the driver's libnvidia-ml. Without it, or without a driver, `read()`
returns None and `why_not()` says why; the book's GPU suite
(REQUIRE_GPU=1) makes that an error, since a record without its
conditions is incomplete.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Callable

#: NVML's clock-event reasons (nvmlClocksEventReason*), by bit.
REASONS = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}

#: The reasons that mean the GPU ran below the clock it could otherwise have
#: run at because of its power or thermal limits, or a hardware slowdown.
THROTTLING = {"software power cap", "hardware slowdown", "software thermal slowdown",
              "hardware thermal slowdown", "hardware power brake"}

#: NVML's performance-policy counters of time spent held below the clocks
#: (nvmlDeviceGetViolationStatus): NVML_PERF_POLICY_POWER and _THERMAL.
VIOLATION_POLICIES = {"power": 0, "thermal": 1}


@dataclass
class GpuState:
    """One reading of the GPU."""
    uuid: str
    name: str
    sm_clock_mhz: int
    max_sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float
    power_limit_w: float
    temperature_c: int
    pstate: int
    reasons: list[str]
    # Cumulative counters, meaningful only as differences between readings.
    energy_mj: int | None = None
    violation_ns: dict = field(default_factory=dict)

    def throttled(self) -> bool:
        return bool(THROTTLING & set(self.reasons))

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class StateSpan:
    """The GPU's state before and after some work, and what the counters
    say happened in between."""
    before: GpuState
    after: GpuState
    seconds: float
    sm_clock_samples: list[int] = field(default_factory=list)   # MHz, read every SAMPLE_MS in between

    @property
    def sm_clock_during(self) -> dict | None:
        """The SM clock while the work ran: the lowest, the median and the
        highest of the samples, and how many there were (None: no sample)."""
        s = sorted(self.sm_clock_samples)
        if not s:
            return None
        mid = len(s) // 2
        median = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
        return {"min": s[0], "median": median, "max": s[-1], "samples": len(s)}

    @property
    def held_ns(self) -> dict:
        """Nanoseconds spent held below the clocks, by cause, in between."""
        return {k: self.after.violation_ns.get(k, 0) - self.before.violation_ns.get(k, 0)
                for k in VIOLATION_POLICIES if k in self.before.violation_ns and k in self.after.violation_ns}

    @property
    def mean_power_w(self) -> float | None:
        if self.before.energy_mj is None or self.after.energy_mj is None or self.seconds <= 0:
            return None
        return (self.after.energy_mj - self.before.energy_mj) / 1e3 / self.seconds

    def throttled(self) -> bool:
        return self.before.throttled() or self.after.throttled() or any(v > 0 for v in self.held_ns.values())

    def summary(self) -> str:
        """One line for a listing's output: the clocks and what held them."""
        b, a = self.before, self.after
        s = f"GPU state: SM {b.sm_clock_mhz}->{a.sm_clock_mhz} MHz (max {a.max_sm_clock_mhz})"
        if self.sm_clock_during:
            d = self.sm_clock_during
            s += f", during {d['min']}-{d['max']} MHz (median {d['median']:g})"
        s += f", memory {a.mem_clock_mhz} MHz, {a.temperature_c} C"
        if self.mean_power_w is not None:
            s += f", {self.mean_power_w:.0f} W mean of {a.power_limit_w:.0f}"
        held = {k: v for k, v in self.held_ns.items() if v > 0}
        if self.throttled():
            why = sorted(THROTTLING & (set(b.reasons) | set(a.reasons)))
            s += "; THROTTLED: " + ", ".join(why + [f"{v / 1e6:.1f} ms held by {k}" for k, v in held.items()])
        return s

    def as_dict(self) -> dict:
        return {"before": self.before.as_dict(), "after": self.after.as_dict(), "seconds": self.seconds,
                "sm_clock_samples": list(self.sm_clock_samples), "sm_clock_during": self.sm_clock_during,
                "held_ns": self.held_ns, "mean_power_w": self.mean_power_w, "throttled": self.throttled()}


def reasons_of(mask: int) -> list[str]:
    """The clock-event reasons set in an NVML bit mask, by name."""
    return [name for bit, name in REASONS.items() if mask & bit] + \
        ([f"unknown (0x{mask & ~sum(REASONS):x})"] if mask & ~sum(REASONS) else [])


_NVML: dict = {}


def _nvml():
    """pynvml, initialised once a process; raises what stops it."""
    if "module" not in _NVML:
        import pynvml

        pynvml.nvmlInit()
        _NVML["module"] = pynvml
    return _NVML["module"]


def why_not() -> str | None:
    """None when NVML can be read here, else the reason it cannot."""
    try:
        _nvml()
    except ImportError:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    except Exception as e:   # pynvml.NVMLError and its subclasses: no driver, no library
        return f"NVML could not start: {e}"
    return None


def _handle(nvml, device: str | int | None):
    """The NVML handle of a PCI bus id ('0000:19:00.0'), a UUID
    ('GPU-...'), an NVML index, or, when None, of the GPU this process
    computes on (the first of CUDA_VISIBLE_DEVICES, else index 0)."""
    if device is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        device = visible if visible else 0
    if isinstance(device, str) and device.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(device)
    if isinstance(device, str) and ":" in device:
        return nvml.nvmlDeviceGetHandleByPciBusId(device)
    return nvml.nvmlDeviceGetHandleByIndex(int(device))


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def read(device: str | int | None = None) -> GpuState | None:
    """One reading of the GPU, or None where NVML cannot be read."""
    if why_not() is not None:
        return None
    nvml = _nvml()
    h = _handle(nvml, device)

    def optional(call, *args):
        try:
            return call(h, *args)
        except (nvml.NVMLError, AttributeError):     # not supported on this GPU, driver or binding
            return None

    def number(v, default=-1):
        return int(v) if v is not None else default

    violations = {}
    for name, policy in VIOLATION_POLICIES.items():
        v = optional(nvml.nvmlDeviceGetViolationStatus, policy)
        if v is not None:
            violations[name] = int(v.violationTime)
    reasons_call = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                    or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"))   # the older name
    mask = optional(reasons_call)
    power = optional(nvml.nvmlDeviceGetPowerUsage)
    limit = optional(nvml.nvmlDeviceGetEnforcedPowerLimit)
    return GpuState(
        uuid=_text(nvml.nvmlDeviceGetUUID(h)),
        name=_text(nvml.nvmlDeviceGetName(h)),
        sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
        max_sm_clock_mhz=number(optional(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM)),
        mem_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
        power_w=power / 1e3 if power is not None else float("nan"),
        power_limit_w=limit / 1e3 if limit is not None else float("nan"),
        temperature_c=number(optional(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)),
        pstate=number(optional(nvml.nvmlDeviceGetPerformanceState)),
        reasons=reasons_of(int(mask)) if mask is not None else [],
        energy_mj=optional(nvml.nvmlDeviceGetTotalEnergyConsumption),
        violation_ns=violations,
    )


#: How often the SM clock is read while the work runs, in milliseconds.
SAMPLE_MS = 20.0


def sm_clock(device: str | int | None = None) -> int | None:
    """The SM clock now, in MHz (None where NVML cannot be read)."""
    if why_not() is not None:
        return None
    nvml = _nvml()
    return int(nvml.nvmlDeviceGetClockInfo(_handle(nvml, device), nvml.NVML_CLOCK_SM))


def around(fn: Callable[[], object], device: str | int | None = None,
           sample_ms: float = SAMPLE_MS) -> tuple[object, StateSpan | None]:
    """Run `fn` between two readings, reading the SM clock every
    `sample_ms` from a second thread while it runs: (its result, the span),
    the span None where NVML cannot be read. The two readings at the ends
    see the clock before the work and after it; the samples see it during."""
    import threading
    import time

    before = read(device)
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(sample_ms / 1e3):
            try:
                mhz = sm_clock(device)
            except Exception:        # NVML went away mid-run: keep what was read
                return
            if mhz is not None:
                samples.append(mhz)

    sampler = threading.Thread(target=sample, daemon=True) if before is not None else None
    if sampler:
        sampler.start()
    t0 = time.perf_counter()
    try:
        result = fn()
    finally:
        seconds = time.perf_counter() - t0
        done.set()
        if sampler:
            sampler.join()
    after = read(device)
    span = StateSpan(before, after, seconds, samples) if before is not None and after is not None else None
    return result, span
