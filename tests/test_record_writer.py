"""The GPU suite's record writer, fed staged results by hand (no GPU): a
listing gets a record only when every one of its GPU tests ran, the record
fails when any of them failed, and a record the writer makes passes the
CPU's consistency check."""

from __future__ import annotations

import json
import shutil

import gpu_harness
from conftest import DESCRIPTIONS, LISTINGS, ROOT
from gpu_harness import required_runs, store

from cudabook import check, listings, record

ENV = {"gpu": "Test GPU", "compute_capability": "9.0", "sm_count": 132, "driver": "1.0", "cuda": "13.0",
       "nvcc": "13.0, V13.0.88", "pycuda": "2026.1", "python": "3.12.3", "numpy": "2.5.2"}


def _run_value(key, passed=True, bench_n=None):
    n = int(key[2:]) if key.startswith("n=") else bench_n if key == "bench" else None
    c = check.CheckResult(name="c = a + b", n=n or 1, passed=passed, k=1, u=2**-24,
                          worst_ratio=0.5 if passed else 2.0, outside=0 if passed else 1)
    argv = (["--bench"] if key == "bench" else ["--n", str(n)] if n else []) + ["--seed", "1"]
    return {"argv": argv, "n": n, "seed": 1, "budget_ms": None, "passed": passed,
            "checks": [c.as_dict()], "benchmarks": [], "facts": {"x": 1} if key == "bench" else {},
            "environment": ENV, "wall_s": 0.1, "stdout": c.line() + "\n"}


def _stage_all(listing, passed=True, bench=None):
    """Store every run the suite requires of `listing`; `bench`, if given,
    changes the bench run's value before it is stored."""
    for key in sorted(required_runs(listing)):
        if key.startswith("sanitizer:"):
            tool = key.split(":")[1]
            summary = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" \
                if tool == "racecheck" else "========= ERROR SUMMARY: 0 errors"
            store(listing, key, {"tool": tool, "n": 1027, "passed": passed, "summary": summary, "wall_s": 1.0})
        else:
            value = _run_value(key, passed, DESCRIPTIONS[listing.id]["bench_n"])
            store(listing, key, bench(value) if bench and key == "bench" else value)


def test_complete_listing_gets_a_consistent_record(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    listing = next(lst for lst in LISTINGS if lst.id == "first_kernel/add_one_per_thread")
    _stage_all(listing)  # the last store writes the record by itself
    path = tmp_path / "results" / listing.chapter / f"{listing.name}.json"
    rec = record.from_dict(json.loads(path.read_text()))
    assert rec.passed and rec.worst_ratio == 0.5
    assert set(rec.sanitizer) == {"memcheck", "racecheck", "initcheck", "synccheck"}
    found = record.problems(listing, rec, DESCRIPTIONS[listing.id])
    assert found == [], found


def test_incomplete_listing_gets_none_and_failure_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    a, b = [lst for lst in LISTINGS if lst.cu is not None and not lst.broken_tool][:2]
    store(a, "n=1", _run_value("n=1"))  # one test of many: no record
    _stage_all(b, passed=False)
    assert not (tmp_path / "results" / a.chapter / f"{a.name}.json").exists()
    assert json.loads((tmp_path / "results" / b.chapter / f"{b.name}.json").read_text())["passed"] is False


def test_broken_listing_record(tmp_path, monkeypatch):
    """A deliberately broken listing needs only its sanitizer test, and its
    record keeps the sanitizer's report."""
    root = tmp_path / "tree"
    (root / "code" / "demo").mkdir(parents=True)
    shutil.copytree(ROOT / "code" / "cudabook", root / "code" / "cudabook")
    shutil.copytree(ROOT / "tests", root / "tests")
    (root / "code" / "demo" / "broken_oob.py").write_text(
        '"""An out-of-bounds write.\n\nExpect: compute-sanitizer --tool memcheck reports '
        '"Invalid __global__ write" in k.\n"""\n')
    (root / "code" / "demo" / "broken_oob.cu").write_text("// k\n")
    fake = listings.Listing("demo", "broken_oob", root)
    assert fake.expectation == ("memcheck", "Invalid __global__ write")
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    monkeypatch.setitem(DESCRIPTIONS, fake.id, {"sized": True, "bench": False, "bench_n": None,
                                                "broken": "memcheck", "error": None})
    assert required_runs(fake) == {"broken:memcheck"}
    report = "========= Invalid __global__ write of size 4\n========= ERROR SUMMARY: 1 error"
    store(fake, "broken:memcheck", {"tool": "memcheck", "error": "Invalid __global__ write", "n": 1027,
                                    "passed": True, "report": report, "environment": ENV})
    rec = record.from_dict(json.loads((tmp_path / "results" / "demo" / "broken_oob.json").read_text()))
    assert rec.passed and rec.broken.tool == "memcheck" and "Invalid __global__ write" in rec.broken.report
    assert gpu_harness.staged()["demo/broken_oob"]["broken:memcheck"]["passed"]


def test_another_listings_half_written_result_is_not_read(tmp_path, monkeypatch):
    """Workers store side by side: a worker completing one listing's record
    must not read another listing's findings, which may be half written
    (a sanitizer test once failed on such a file's empty JSON). Each file
    is written whole and renamed into place, leaving no partial file."""
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    other = tmp_path / "staging" / "why_gpus" / "gelu_cpu_vs_gpu"
    other.mkdir(parents=True)
    (other / "sanitizer__racecheck.json").write_text("")       # another worker, mid-write
    listing = next(lst for lst in LISTINGS if lst.id == "first_kernel/add_one_per_thread")
    _stage_all(listing)
    assert (tmp_path / "results" / listing.chapter / f"{listing.name}.json").exists()
    assert not list((tmp_path / "staging").rglob("*.part"))


def _measurement():
    """A typed entry as evidence.measure makes one: 5 ABBA rounds against a
    baseline, a FLOP rate against a named peak, and two NVML readings."""
    from cudabook.bench import Timing
    from cudabook.evidence import Measurement, Side

    def t(ms):
        return Timing(median_ms=ms, p20_ms=ms, p80_ms=ms, min_ms=ms, reps=5, l2_flushed=False)
    ours = [t(1.0 + 0.01 * i) for i in range(10)]
    theirs = [t(1.6 + 0.01 * i) for i in range(10)]
    reading = {"uuid": "GPU-1", "name": "Test GPU", "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980,
               "mem_clock_mhz": 3201, "power_w": 600.0, "power_limit_w": 700.0, "temperature_c": 50,
               "pstate": 0, "reasons": [], "energy_mj": 1000, "violation_ns": {"power": 0}}
    state = {"before": reading, "after": dict(reading, energy_mj=1600), "seconds": 1.0,
             "held_ns": {"power": 0}, "mean_power_w": 0.6, "throttled": False}
    from cudabook.comparison import pool
    return Measurement.make("gemm 4096^3", pool(ours), flops=2 * 4096**3, working_set_bytes=3 * 4 * 4096**2,
                            ceiling=("FP32 FMA peak", 60e12), ceiling_unit="flops",
                            side=Side("CUDA events around each call", ["sgemm_double_buffer"], 1.0, 1.0),
                            baseline=("cuBLAS", ours, theirs, Side("CUDA events around each call",
                                                                   ["sm90_xmma_gemm"], 1.0, 1.6)),
                            targets={"baseline": 0.8}, state=state)


def test_a_typed_measurement_goes_through_the_writer_and_the_checker(tmp_path, monkeypatch):
    """evidence.Measurement entries (issue #45) are written into a record as
    a listing reports them, read back, pass the consistency check, show on
    the badge with the ratio's spread, and a forged ratio is caught."""
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    listing = next(lst for lst in LISTINGS if lst.id == "first_kernel/add_one_per_thread")
    m = _measurement()
    _stage_all(listing, bench=lambda value: dict(value, benchmarks=[m.as_dict()],
                                                 stdout=value["stdout"] + "\n".join(m.lines()) + "\n"))
    path = tmp_path / "results" / listing.chapter / f"{listing.name}.json"
    d = json.loads(path.read_text())
    rec = record.from_dict(d)
    assert rec.benchmarks == [m]
    assert record.problems(listing, rec, DESCRIPTIONS[listing.id]) == []
    assert record.headline(rec).startswith(f"{record.benchmark_rate_text(m)} (")
    assert f"{m.baseline.ratio:.2f}x cuBLAS [{m.baseline.ratio_p20:.2f}-{m.baseline.ratio_p80:.2f}]" in record.headline(rec)
    bench = next(r for r in d["runs"] if r["key"] == "bench")
    bench["benchmarks"][0]["baseline"]["ratio"] = 0.99
    found = record.problems(listing, record.from_dict(d), DESCRIPTIONS[listing.id])
    assert any("baseline.ratio = 0.99, but its rounds give" in p for p in found), found
