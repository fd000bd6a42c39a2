"""The measurement machinery of issue #45, without a GPU: the GPU's state
through NVML (a fake pynvml), and our kernel against its baseline in
alternation (a fake timer)."""

from __future__ import annotations

import sys
import types

import pytest

from cudabook import comparison, gpu_state
from cudabook.bench import Timing


class FakeNvml(types.ModuleType):
    """Enough of pynvml for gpu_state.read: one GPU whose counters move by
    what the test says between readings."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        pass

    def __init__(self, reasons=0x0, power_held_ns=(0, 0), energy_mj=(1000, 1000)):
        super().__init__("pynvml")
        self.readings = 0
        self.reasons, self.power_held, self.energy = reasons, list(power_held_ns), list(energy_mj)

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        self.readings += 1                       # each reading starts by finding the GPU
        return ("index", i)

    def nvmlDeviceGetHandleByUUID(self, u):
        return ("uuid", u)

    def nvmlDeviceGetHandleByPciBusId(self, b):
        return ("pci", b)

    def nvmlDeviceGetUUID(self, h):
        return b"GPU-1234"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetClockInfo(self, h, which):
        return 1980 if which == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return 1980

    def nvmlDeviceGetPowerUsage(self, h):
        return 650_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetTemperature(self, h, which):
        return 55

    def nvmlDeviceGetPerformanceState(self, h):
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.reasons

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self.energy[min(self.readings, len(self.energy)) - 1]

    def nvmlDeviceGetViolationStatus(self, h, policy):
        if policy == 1:
            raise self.NVMLError("not supported")
        return types.SimpleNamespace(violationTime=self.power_held[min(self.readings, len(self.power_held)) - 1])


@pytest.fixture
def nvml(monkeypatch):
    def install(**kw):
        fake = FakeNvml(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        monkeypatch.setattr(gpu_state, "_NVML", {})
        return fake
    return install


def test_a_reading_names_the_gpu_its_clocks_and_its_limits(nvml):
    nvml(reasons=0x1)
    s = gpu_state.read()
    assert (s.uuid, s.sm_clock_mhz, s.max_sm_clock_mhz, s.mem_clock_mhz) == ("GPU-1234", 1980, 1980, 3201)
    assert (s.power_w, s.power_limit_w, s.temperature_c, s.pstate) == (650.0, 700.0, 55, 0)
    assert s.reasons == ["idle"] and not s.throttled()
    assert s.violation_ns == {"power": 0}            # thermal: not supported here, so absent


def test_clock_event_reasons_by_name():
    assert gpu_state.reasons_of(0x4 | 0x40) == ["software power cap", "hardware thermal slowdown"]
    assert gpu_state.reasons_of(0) == []
    assert gpu_state.reasons_of(0x1000) == ["unknown (0x1000)"]


def test_a_span_is_throttled_when_the_counters_moved_between_readings(nvml):
    """Neither reading shows a reason, but the GPU spent 2 ms held by its
    power limit in between: the span says so, and gives the mean power."""
    nvml(power_held_ns=(5_000_000, 7_000_000), energy_mj=(1_000, 651_000))
    _, span = gpu_state.around(lambda: None)
    assert not span.before.throttled() and not span.after.throttled()
    assert span.held_ns == {"power": 2_000_000}
    assert span.throttled()
    assert "THROTTLED" in span.summary() and "2.0 ms held by power" in span.summary()
    assert span.as_dict()["throttled"] is True
    span.seconds = 1.0
    assert span.mean_power_w == pytest.approx(650.0)


def test_a_quiet_span_is_not_throttled(nvml):
    nvml(power_held_ns=(5_000_000, 5_000_000))
    result, span = gpu_state.around(lambda: 42)
    assert result == 42 and not span.throttled() and "THROTTLED" not in span.summary()


def test_a_power_cap_at_either_end_is_throttling(nvml):
    nvml(reasons=0x4)
    _, span = gpu_state.around(lambda: None)
    assert span.throttled() and "software power cap" in span.summary()


def test_without_nvml_there_is_no_reading_and_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)      # import pynvml raises ImportError
    monkeypatch.setattr(gpu_state, "_NVML", {})
    assert gpu_state.read() is None
    assert "nvidia-ml-py" in gpu_state.why_not()
    assert gpu_state.around(lambda: 1) == (1, None)


def test_the_device_is_found_by_uuid_bus_id_or_index(nvml, monkeypatch):
    fake = nvml()
    assert gpu_state._handle(fake, "GPU-abc") == ("uuid", "GPU-abc")
    assert gpu_state._handle(fake, "0000:19:00.0") == ("pci", "0000:19:00.0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_state._handle(fake, None) == ("index", 3)


def _t(ms: float, reps: int = 10) -> Timing:
    return Timing(median_ms=ms, p20_ms=ms, p80_ms=ms, min_ms=ms * 0.99, reps=reps, l2_flushed=False)


def test_alternation_is_abba_and_each_round_gives_a_ratio(monkeypatch):
    """Ours at 1.0 ms, the baseline at 2.0 ms, slowing by 1% a block as the
    chip warms: rounds of A B B A, one ratio a round, the median between
    the rounds' extremes, both sides' repetitions all counted."""
    monkeypatch.setattr(gpu_state, "around", lambda fn, device=None: (fn(), None))
    order, clock = [], [1.0]

    def ours():
        pass

    def theirs():
        pass

    def timer(fn, *, working_set_bytes, budget_ms, warmup_ms, min_reps):
        order.append("A" if fn is ours else "B")
        clock[0] *= 1.01
        return _t((1.0 if fn is ours else 2.0) * clock[0])

    c = comparison.alternate(ours, theirs, working_set_bytes=1 << 30, rounds=5, timer=timer)
    assert "".join(order) == "ABBA" * 5
    assert len(c.ratios) == 5 and len(c.ours_blocks) == len(c.baseline_blocks) == 10
    assert all(r == pytest.approx(2.0, rel=1e-3) for r in c.ratios)
    assert c.ratio_p20 <= c.ratio <= c.ratio_p80
    assert c.ours.reps == c.baseline.reps == 100
    assert "median of 5 alternations" in c.line("flash", "SDPA")


@pytest.mark.parametrize("rounds", [5, 6, 7])
def test_a_drift_cancels_within_each_round(monkeypatch, rounds):
    """The same work on both sides while the clock slows steadily (0.02 ms
    a block): every round's ratio is exactly 1, whatever the number of
    rounds. A ratio of one A and one B would read above 1 in AB rounds and
    below in BA rounds, and an odd count would tip the median."""
    monkeypatch.setattr(gpu_state, "around", lambda fn, device=None: (fn(), None))
    t = [1.0]

    def timer(fn, **kw):
        t[0] += 0.02
        return _t(t[0])

    c = comparison.alternate(lambda: None, lambda: None, working_set_bytes=1, rounds=rounds, timer=timer)
    assert c.ratios == pytest.approx([1.0] * rounds, abs=1e-12)
    assert c.ratio == pytest.approx(1.0, abs=1e-12)


def test_alternation_needs_five_rounds():
    with pytest.raises(ValueError, match="at least 5"):
        comparison.alternate(lambda: None, lambda: None, working_set_bytes=1, rounds=4)


def test_pooled_timing_takes_the_blocks_medians():
    p = comparison.pool([_t(1.0, 10), _t(3.0, 20), _t(2.0, 30)])
    assert (p.median_ms, p.reps, p.min_ms) == (2.0, 60, 0.99)
    assert p.p20_ms < p.median_ms < p.p80_ms


def test_a_kernel_profile_counts_one_call():
    """kernels() divides what the profiler saw by the number of calls."""
    prof = comparison.KernelProfile(kernels=["a", "b"], launches=2.0, gpu_ms=0.5)
    assert prof.as_dict() == {"kernels": ["a", "b"], "launches": 2.0, "gpu_ms": 0.5}
    assert comparison._device_ms(types.SimpleNamespace(device_time=1500.0)) == 1.5
    assert comparison._device_ms(types.SimpleNamespace(cuda_time=250.0)) == 0.25


# --- evidence.py: the typed entry ----------------------------------------------------

def _measured(monkeypatch, nvml, *, held=(0, 0), ours_ms=1.0, theirs_ms=2.0, **kw):
    """evidence.measure on a fake timer (ours at ours_ms, the baseline at
    theirs_ms, each round 1% slower than the last) and a fake NVML."""
    from cudabook import evidence

    nvml(power_held_ns=held)
    monkeypatch.setattr(evidence, "warm_up", lambda fn: None)
    monkeypatch.setattr(evidence, "_profile", lambda fn, how: evidence.Side(how, ["k"], 1.0, 0.9))
    clock = [1.0]

    def ours():
        pass

    def theirs():
        pass

    def timer(fn, *, working_set_bytes, budget_ms, warmup_ms=0.0, min_reps=10):
        clock[0] *= 1.01
        return _t((ours_ms if fn is ours else theirs_ms) * clock[0])

    kw.setdefault("baseline", ("cuBLAS", theirs))
    return evidence.measure("gemm", ours, timer=timer, **kw)


def test_a_flop_rate_is_typed_against_a_named_peak(monkeypatch, nvml):
    m = _measured(monkeypatch, nvml, flops=2 * 4096**3, working_set_bytes=3 * 4 * 4096**2,
                  ceiling=("FP32 FMA peak", 60e12), targets={"baseline": 2.5, "ceiling": 0.5})
    assert m.ceiling_unit == "flops" and m.bytes_per_s is None
    assert m.flops_per_s == pytest.approx(2 * 4096**3 / (m.timing.median_ms * 1e-3))
    assert m.fraction_of_ceiling == pytest.approx(m.flops_per_s / 60e12)
    b = m.baseline
    assert b.rounds == 7 and b.ratio_p20 <= b.ratio <= b.ratio_p80
    assert b.ratio == pytest.approx(2.0, rel=0.03)            # ours/baseline by rate: half the time
    assert m.targets.met == {"baseline": False, "ceiling": m.fraction_of_ceiling >= 0.5}
    text = "\n".join(m.lines())
    assert "TFLOP/s" in text and "median of 7 ABBA rounds" in text and "target >= 250% of cuBLAS: MISSED" in text
    assert "GPU: SM 1980->1980 MHz of 1980" in text and "THROTTLED" not in text


def test_a_throttled_measurement_says_so(monkeypatch, nvml):
    m = _measured(monkeypatch, nvml, held=(0, 3_000_000), bytes_moved=1 << 30, ceiling=("device-to-device copy", 4e12))
    assert m.throttled and "THROTTLED" in m.lines()[-1] and "held 3 ms by power" in m.lines()[-1]


def test_a_measurement_reads_back_and_the_checker_recomputes_it(monkeypatch, nvml):
    import copy
    import json

    from cudabook import evidence, record

    m = _measured(monkeypatch, nvml, flops=10**12, working_set_bytes=1 << 20, ceiling=("bf16 peak", 9e14),
                  targets={"baseline": 0.4})
    d = json.loads(json.dumps(m.as_dict()))
    back = record.benchmark_from_dict(d, "b")
    assert isinstance(back, evidence.Measurement) and back == m
    stdout = "\n".join(m.lines())
    assert record._benchmark_problems(back, "b", stdout) == []
    forged = copy.deepcopy(d)
    forged["baseline"]["ratio"] *= 1.1                     # a ratio the rounds do not give
    assert any("baseline.ratio" in p for p in record._benchmark_problems(record.benchmark_from_dict(forged, "b"), "b", stdout))
    forged = copy.deepcopy(d)
    forged["flops_per_s"] *= 1.2
    assert any("flops_per_s" in p for p in record._benchmark_problems(record.benchmark_from_dict(forged, "b"), "b", stdout))
    def problems(forged):
        return record._benchmark_problems(record.benchmark_from_dict(forged, "b"), "b", stdout)

    forged = copy.deepcopy(d)
    for side in ("ours_blocks", "blocks"):
        forged["baseline"][side] = forged["baseline"][side][:8]
    assert any("needs 5" in p for p in problems(forged))
    forged = copy.deepcopy(d)                              # a faster time and its rate, edited together
    forged["timing"]["median_ms"] /= 1.2
    forged["flops_per_s"] *= 1.2
    assert any("timing is not its blocks pooled" in p for p in problems(forged))
    forged = copy.deepcopy(d)
    forged["baseline"]["blocks"][3]["median_ms"] *= 3     # a slower baseline block: ratio and timing move
    assert any("baseline.ratio" in p or "baseline.timing" in p for p in problems(forged))
    forged = copy.deepcopy(d)
    forged["gpu_state"]["after"]["violation_ns"]["power"] += 5_000_000   # held, but says not throttled
    assert any("gpu_state.throttled" in p for p in problems(forged))
    forged = copy.deepcopy(d)
    forged["gpu_state"] = None
    assert any("gpu_state is missing" in p for p in problems(forged))
    assert any("does not show" in p for p in record._benchmark_problems(back, "b", stdout.replace("ours/", "mine/")))
    forged = copy.deepcopy(d)
    forged["surprise"] = 1
    with pytest.raises(record.RecordError, match="surprise"):
        record.benchmark_from_dict(forged, "b")


def test_a_measurement_without_its_work_or_with_a_wrong_target_is_refused(monkeypatch, nvml):
    from cudabook import evidence

    with pytest.raises(evidence.MeasurementError, match="bytes_moved=, flops="):
        _measured(monkeypatch, nvml, ceiling=("copy", 1.0))
    with pytest.raises(evidence.MeasurementError, match="working_set_bytes"):
        _measured(monkeypatch, nvml, flops=1, ceiling=("peak", 1.0))
    with pytest.raises(evidence.MeasurementError, match="counted in flops"):
        _measured(monkeypatch, nvml, bytes_moved=1, ceiling=("peak", 1.0), ceiling_unit="flops")
    with pytest.raises(evidence.MeasurementError, match="'ceiling' or 'baseline'"):
        _measured(monkeypatch, nvml, bytes_moved=1, ceiling=("copy", 1.0), targets={"copy": 0.9})


def test_without_nvml_a_required_record_stops(monkeypatch, nvml):
    from cudabook import evidence
    from cudabook.gpu import Unavailable

    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(gpu_state, "_NVML", {})
    monkeypatch.setenv("REQUIRE_GPU", "1")
    monkeypatch.setattr(evidence, "warm_up", lambda fn: None)
    with pytest.raises(Unavailable, match="nvidia-ml-py"):
        evidence.measure("x", lambda: None, bytes_moved=1, ceiling=("copy", 1.0),
                         timer=lambda fn, **kw: _t(1.0))


def test_rates_print_in_their_unit():
    from cudabook.evidence import rate_text

    assert rate_text(4.38e12, "bytes") == "4.38 TB/s" and rate_text(5.5e10, "bytes") == "55 GB/s"
    assert rate_text(6.12e14, "flops") == "612 TFLOP/s" and rate_text(4.13e13, "flops") == "41.3 TFLOP/s"
    assert rate_text(8.2e11, "flops") == "820 GFLOP/s"


def test_the_sm_clock_is_sampled_while_the_work_runs(nvml, monkeypatch):
    """around() reads the SM clock from a second thread while the work
    runs; the span gives its lowest, median and highest, the summary line
    shows them, and the record's checker recomputes them from the samples."""
    import time

    from cudabook import record

    fake = nvml()
    clocks = iter([1980, 1755, 1980, 1890] + [1980] * 1000)
    monkeypatch.setattr(fake, "nvmlDeviceGetClockInfo",
                        lambda h, which: next(clocks) if which == fake.NVML_CLOCK_SM else 3201)
    _, span = gpu_state.around(lambda: time.sleep(0.15), sample_ms=10)
    assert len(span.sm_clock_samples) >= 3
    d = span.sm_clock_during
    assert d["min"] <= d["median"] <= d["max"] and d["samples"] == len(span.sm_clock_samples)
    assert "during" in span.summary()
    state = span.as_dict()
    assert record._state_problems(state, "s") == []
    state["sm_clock_during"] = dict(state["sm_clock_during"], min=1980)      # hide the dip
    assert any("sm_clock_during" in p for p in record._state_problems(state, "s"))


def test_speed_against_prefers_the_entrys_own_rounds():
    """An alternated entry's ratio is its rounds' median; one that was not
    alternated is set against the pooled library time of the same run."""
    from types import SimpleNamespace as NS

    from cudabook.evidence import speed_against

    pooled = NS(timing=NS(median_ms=2.0), ratio=0.5)
    assert speed_against(NS(baseline=NS(ratio=0.9), timing=NS(median_ms=4.0)), pooled) == 0.9
    assert speed_against(NS(baseline=None, timing=NS(median_ms=4.0)), pooled) == 0.5
    assert speed_against(NS(baseline=None, timing=NS(median_ms=4.0)), None) is None
