"""The GPU suite: every listing, at every size, under every sanitizer, timed.

Run on a machine with an NVIDIA GPU and PyCUDA:

    REQUIRE_GPU=1 python -m cudabook verify            # everything
    REQUIRE_GPU=1 python -m cudabook verify --stale    # only what is not current

`verify` runs pytest three times over one staging folder: on every core,
first the checks, the sanitizer runs and most notebooks (-m "gpu and not
timed"), then the tests that measure (-m "gpu and timed": benchmarks,
listings that call cb.gpu_alone(), and the notebooks of their chapters),
each timing with its GPU to itself, and the hardware measurements and CPU
timings with every GPU (cudabook/lock.py); last, one at a time, the
benchmarks that time CPU code or host-bound GPU work (listings.times_cpu,
listings.times_host). One pytest with
everything mixed would make each timing wait for every long check
running beside it.

Without a GPU each test is skipped with the reason; with REQUIRE_GPU=1 a
missing GPU (or torch, for the baselines) is a failure. The session writes
each listing's GPU record (see gpu_harness.py); what a record must hold is
cudabook/suite.py. Inputs get a fresh seed every run; the seed is in the
record and in every failure message, so a failure can be reproduced.
"""

from __future__ import annotations

import json
import re
import secrets
import time

import pytest
from gpu_harness import (DESCRIPTIONS, LISTINGS, gpu_environment, gpu_ready, gpus_needed,  # noqa: F401
                         lock_env, results_root, run_listing, run_module, run_sizes, sanitizer_path,
                         sizes_outcome, skip_if_too_few_gpus, skip_or_fail, store)

from cudabook import listings, record, suite
from cudabook.gpu import EXIT_SKIPPED

pytestmark = pytest.mark.gpu

WORKING = [lst for lst in LISTINGS if not DESCRIPTIONS[lst.id]["broken"]]
BROKEN = [lst for lst in LISTINGS if DESCRIPTIONS[lst.id]["broken"]]
SIZED = [lst for lst in WORKING if DESCRIPTIONS[lst.id]["sized"]]
# Listings that call cb.gpu_alone(), read from their text (so also one that
# does so only under --bench): their runs, and their chapters' notebooks, are timed.
ALONE = [lst for lst in WORKING if "cb.gpu_alone()" in lst.py.read_text()]
UNSIZED = [pytest.param(lst, marks=pytest.mark.timed) if lst in ALONE else lst
           for lst in WORKING if not DESCRIPTIONS[lst.id]["sized"]]
KERNELS = [lst for lst in WORKING if listings.launches_kernels(lst)]
BENCHED = [lst for lst in WORKING if DESCRIPTIONS[lst.id]["bench"]]
STDOUT_LIMIT = 100_000
#: The environment of the processes that check and time nothing: each size,
#: each sanitizer run, the plain run of a listing that does not take the GPU
#: alone. Contexts do not start in parallel: on the H200 machine
#: cuCtxCreate took 0.10 s alone and about 1.8 s each with 16 at once, and
#: 16 processes started together, each starting a context, were all done
#: in 3.18 s with the default eight hardware work queues a context, against
#: 1.34 s with one (docs/assets/experiments/context_cost.txt). One queue
#: lines up the work of different streams, which could hide a missing wait
#: between two of them: the listings that use several streams (ram_vram's)
#: also check their answers in their --bench runs and notebooks, which keep
#: the default, as does every timing. (A listing that runs NCCL must not get
#: one queue, which is known to cause ordering hazards there: see to it when
#: the many-GPU part lands.)
CHECKS_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def _gpu_index(listing):
    """The GPU (as CUDA_VISIBLE_DEVICES names it) a one-GPU listing ran on;
    None for a listing that used every GPU."""
    index = lock_env(gpus_needed(listing)).get("CUDABOOK_GPU_INDEX")
    return int(index) if index is not None and index.isdigit() else index


def _run_and_store(listing, key, tmp_path, *args, env=None):
    """Run a listing, keep what it reported, and fail on a non-zero exit."""
    assert not DESCRIPTIONS[listing.id]["error"], DESCRIPTIONS[listing.id]["error"]
    skip_if_too_few_gpus(gpus_needed(listing), listing.id)
    seed = secrets.randbelow(2**31)
    out = tmp_path / "result.json"
    t0 = time.perf_counter()
    r = run_listing(listing, *args, "--seed", str(seed), "--json", str(out), env=env)
    wall = time.perf_counter() - t0
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip())
    how = f"python {listing.rel(listing.py)} {' '.join(args)} --seed {seed}"
    report = json.loads(out.read_text()) if out.exists() else {}
    _store_run(listing, key, args, seed, report, r.returncode, r.stdout, wall)
    assert r.returncode == 0, f"{how} exited {r.returncode}\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}"
    return r, report


def _store_run(listing, key, args, seed, report, returncode, stdout, wall):
    """Keep what one run of a listing reported (the record's run `key`)."""
    value = {"argv": list(args) + ["--seed", str(seed)], "n": None, "budget_ms": None, "checks": [],
             "benchmarks": [], "facts": {}, "environment": {}, **report}
    value.update(seed=seed, passed=returncode == 0 and report.get("passed", False),
                 wall_s=round(wall, 2), stdout=stdout[-STDOUT_LIMIT:], gpu_index=_gpu_index(listing))
    store(listing, key, value)


def _size_groups(lst):
    d = DESCRIPTIONS[lst.id]
    return suite.size_groups(d["bench_n"] if d["bench"] else None)


# A listing whose --bench run checks an awkward size far beyond the L2 skips
# the large size (suite.bench_is_large): test_benchmark does that job.
SIZE_CASES = [pytest.param(lst, g, id=f"{lst.id}-n" + "-".join(map(str, g)))
              for lst in SIZED for g in _size_groups(lst)]


@pytest.mark.parametrize(("listing", "sizes"), SIZE_CASES)
def test_correct_at_sizes(listing, sizes, tmp_path, gpu_ready):
    """The listing at each size of the group, one process for the group
    (tests/run_sizes.py), each size with a seed of its own. Each size must
    exit 0 having checked its own size and passed, and so must the process."""
    assert not DESCRIPTIONS[listing.id]["error"], DESCRIPTIONS[listing.id]["error"]
    skip_if_too_few_gpus(gpus_needed(listing), listing.id)
    seeds = {n: secrets.randbelow(2**31) for n in sizes}
    r = run_sizes(listing, tmp_path, [f"{n}:{seeds[n]}" for n in sizes], env=CHECKS_ENV)
    runs, failures, skipped = sizes_outcome(listing, tmp_path, seeds, r, STDOUT_LIMIT)
    for run in runs:
        _store_run(listing, f"n={run['n']}", ["--n", str(run["n"])], seeds[run["n"]], run["report"],
                   run["returncode"], run["stdout"], run["wall_s"])
    assert not failures, "\n\n".join(failures)
    if skipped:
        skip_or_fail(skipped[0])


@pytest.mark.parametrize("listing", UNSIZED, ids=lambda lst: lst.id)
def test_runs(listing, tmp_path, gpu_ready):
    _run_and_store(listing, "run", tmp_path, env=None if listing in ALONE else CHECKS_ENV)


def _sanitize(listing, tool, print_limit):
    """Run a listing under `compute-sanitizer --tool <tool>` at a small size;
    exit code 99 means the tool reported an error. Returns (process, n, wall_s)."""
    skip_if_too_few_gpus(gpus_needed(listing), listing.id)
    sanitizer = sanitizer_path()
    if sanitizer is None:
        skip_or_fail("compute-sanitizer not found (it ships with the CUDA toolkit)")
    args = ["--n", str(suite.SANITIZER_N)] if DESCRIPTIONS[listing.id]["sized"] else []
    # Only the listing's own process is traced: a listing that demonstrates a
    # crash does so in child processes, which would otherwise count as its errors.
    # A listing whose kernels run in the processes it starts (one a GPU)
    # says so (SANITIZE_CHILDREN = True), and those are traced too.
    children = suite.sanitize_children(listing.py.read_text())
    prefix = [sanitizer, "--tool", tool, "--error-exitcode", "99", "--print-limit", str(print_limit),
              "--target-processes", "all" if children else "application-only"]
    if children:        # NCCL's own kernels are NCCL's to check (peer writes defeat initcheck)
        prefix += ["--kernel-name-exclude", "kns=nccl"]
    t0 = time.perf_counter()
    r = run_listing(listing, *args, prefix=prefix, env={"CUDABOOK_SANITIZER": tool, **CHECKS_ENV})
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip())
    return r, suite.SANITIZER_N if args else None, round(time.perf_counter() - t0, 2)


@pytest.mark.parametrize("tool", suite.SANITIZER_TOOLS)
@pytest.mark.parametrize("listing", KERNELS, ids=lambda lst: lst.id)
def test_sanitizer(listing, tool, gpu_ready):
    r, n, wall = _sanitize(listing, tool, print_limit=20)
    lines = (r.stdout + r.stderr).splitlines()
    summary = [ln.strip() for ln in lines if record.ANY_SUMMARY.match(ln.strip())]
    ok = r.returncode == 0 and bool(summary) and all(record.CLEAN_SUMMARY.match(s) for s in summary)
    store(listing, f"sanitizer:{tool}", {"tool": tool, "n": n, "passed": ok,
                                          "summary": summary[-1] if summary else None, "wall_s": wall,
                                          "gpu_index": _gpu_index(listing)})
    assert ok, f"compute-sanitizer --tool {tool} on {listing.id}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"


@pytest.mark.parametrize("listing", BROKEN, ids=lambda lst: lst.id)
def test_broken_listing_is_caught(listing, gpu_environment):
    """A deliberately broken listing must be caught by the sanitizer tool its
    docstring names, with the error class it names; its report is kept for
    the book to show."""
    tool, error = listing.expectation
    r, n, _ = _sanitize(listing, tool, print_limit=3)
    text = r.stdout + r.stderr
    report = "\n".join(ln for ln in text.splitlines() if ln.startswith("=========")) or text[-3000:]
    counted = re.search(r"^========= (ERROR|RACECHECK) SUMMARY: [1-9]", report, re.M)
    caught = r.returncode == 99 and error in report and bool(counted)
    store(listing, f"broken:{tool}", {"tool": tool, "error": error, "n": n, "passed": caught,
                                       "report": report[:6000], "environment": gpu_environment})
    assert caught, f"compute-sanitizer --tool {tool} did not report {error!r} in {listing.id}:\n{text[-3000:]}"


# A chapter with such a listing runs its notebook with the timed tests (even
# when the listing calls gpu_alone only under --bench, which a notebook does
# not pass), the others with the checks.
CHAPTERS = [pytest.param(ch, marks=pytest.mark.timed) if any(lst.chapter == ch for lst in ALONE) else ch
            for ch in sorted({lst.chapter for lst in LISTINGS})]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_executes(chapter, gpu_ready):
    """Execute the chapter's companion notebook and store it with its outputs.
    A notebook runs each listing's checks at its default size; one whose
    listings measure the hardware runs in the timed pass, so that what they
    measure has the machine to itself (cudabook/lock.py)."""
    need = max(gpus_needed(lst) for lst in LISTINGS if lst.chapter == chapter)
    skip_if_too_few_gpus(need, f"the {chapter} notebook")
    r = run_module("cudabook.notebooks", "execute", chapter, timeout=900, gpus=need)
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip())
    assert r.returncode == 0, f"notebook for {chapter} failed:\n{r.stdout}\n{r.stderr[-4000:]}"


@pytest.mark.timed
@pytest.mark.parametrize("listing", BENCHED, ids=lambda lst: lst.id)
def test_benchmark(listing, tmp_path, gpu_ready):
    r, report = _run_and_store(listing, "bench", tmp_path, "--bench")
    assert report["benchmarks"] or report["facts"], f"{listing.id} --bench timed nothing"


def test_doctor_on_gpu(gpu_ready):
    """doctor passes on a GPU machine; its output is kept for the book."""
    r = run_module("cudabook", "doctor", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = results_root()
    out.mkdir(parents=True, exist_ok=True)
    (out / "doctor.json").write_text(json.dumps({"date": record.utc_now(), "output": r.stdout},
                                                indent=1) + "\n")
