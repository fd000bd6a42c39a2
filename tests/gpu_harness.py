"""The GPU suite's machinery: running a listing in its own process, sharing
the GPU between listings, and writing each listing's record.

Every GPU test stores what it saw in a staging folder shared by all
pytest-xdist workers; as soon as all of a listing's GPU tests have run, its
record is written to results/<chapter>/<name>.json (or under
$CUDABOOK_RESULTS). A listing with a skipped or deselected GPU test gets no
new record.

The GPU is shared through the lock in cudabook/lock.py: every listing
process holds it shared, and a listing that times something, or measures the
hardware, takes it alone for that part. The lock lives in the staging folder
and is named to the listings in CUDABOOK_GPU_LOCK.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DESCRIPTIONS, LISTINGS, REQUIRE_GPU, ROOT, once_per_run, pycache_folder

from cudabook import listings, record, suite
from cudabook.gpu import EXIT_SKIPPED


def staging() -> Path:
    """The session's staging folder (conftest.py makes it)."""
    return Path(os.environ["CUDABOOK_STAGING"])


def results_root() -> Path:
    return Path(os.environ.get("CUDABOOK_RESULTS", ROOT / "results"))


def lock_env(gpus_needed: int = 1) -> dict:
    """What every process the suite starts is given: the GPU(s) it runs on
    and their locks (see cudabook/suite.py: worker k runs one-GPU listings
    on GPU k mod G; a listing that needs several GPUs sees, and locks, all
    of them), the machine's GPU count for the record, and a folder for
    compiled Python (conftest.pycache_folder)."""
    env = {"PYTHONPYCACHEPREFIX": pycache_folder()}
    gpus = suite.visible_gpus()
    if not gpus:                                       # no GPU here: listings skip anyway
        env["CUDABOOK_GPU_LOCK"] = str(staging() / "gpu.lock")
        return env
    env["CUDABOOK_MACHINE_GPUS"] = str(len(gpus))
    env["CUDABOOK_MACHINE_LOCKS"] = os.pathsep.join(str(staging() / f"gpu{g}.lock") for g in gpus)
    if gpus_needed > 1:
        env["CUDABOOK_GPU_LOCK"] = os.pathsep.join(str(staging() / f"gpu{g}.lock") for g in gpus)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    else:
        mine = gpus[suite.worker_gpu(os.environ.get("PYTEST_XDIST_WORKER"), len(gpus))]
        env["CUDABOOK_GPU_LOCK"] = str(staging() / f"gpu{mine}.lock")
        env["CUDA_VISIBLE_DEVICES"] = mine
        env["CUDABOOK_GPU_INDEX"] = mine
    return env


def gpus_needed(listing: listings.Listing) -> int:
    """MIN_GPUS of the listing (1 unless it declares more)."""
    return suite.min_gpus(listing.py.read_text())


def skip_if_too_few_gpus(need: int, what: str) -> None:
    """A listing that needs more GPUs than this machine has cannot be run
    here, REQUIRE_GPU or not: skip it, saying where its record must come from
    (the freshness tests still demand a current record)."""
    have = len(suite.visible_gpus())
    if have and have < need:
        pytest.skip(f"{what} needs {need} GPUs and this machine has {have}: "
                    f"verify it on a machine with {need} or more")


def run_listing(listing: listings.Listing, *args: str, prefix: list[str] | None = None,
                timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a listing in its own process, so a crashed CUDA context cannot take
    the test session down with it. Under compute-sanitizer the suite sets
    CUDABOOK_SANITIZER=<tool>, so a listing can tell a check about the GPU's
    scheduling or timing (which instrumentation changes) from one about its
    answer (which it must not)."""
    return _run([*(prefix or []), sys.executable, str(listing.py), *args], listing, timeout, env)


def _run(cmd: list[str], listing: listings.Listing, timeout: int,
         env: dict | None = None) -> subprocess.CompletedProcess:
    """A process of the suite for `listing`: from the repository, unbuffered,
    on its GPU(s) with their locks' environment."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **lock_env(gpus_needed(listing)), **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def run_sizes(listing: listings.Listing, out: Path, pairs: list[str],
              timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a listing at several sizes in one process (tests/run_sizes.py):
    `pairs` are "<n>:<seed>"; each size's findings land in `out`. `env`:
    variables to add to the process's environment."""
    return _run([sys.executable, str(ROOT / "tests" / "run_sizes.py"), str(listing.py), str(out), *pairs],
                listing, timeout, env)


def sizes_outcome(listing: listings.Listing, out: Path, seeds: dict[int, int],
                  r: subprocess.CompletedProcess, stdout_limit: int) -> tuple[list[dict], list[str], list[str]]:
    """What a run_sizes process left in `out` for the sizes in `seeds`
    ({n: seed}): (the runs to store, each {n, returncode, stdout, wall_s,
    report}; what failed, one message a size; the skip reasons). A size
    fails if it exited non-zero, checked nothing, failed a check or checked
    another size, or was not finished; the process fails if it exited
    non-zero after its last size; some sizes skipped and others not fails."""
    runs, failures, skipped = [], [], []

    def text(name: str, limit: int) -> str:
        f = out / name
        return f.read_text(errors="replace")[-limit:] if f.exists() else ""

    none_started = not any((out / f"n{n}.started").exists() for n in seeds)
    for n, seed in seeds.items():
        how = f"python {listing.rel(listing.py)} --n {n} --seed {seed}"
        if not (out / f"n{n}.started").exists():
            if none_started and not failures:    # it died before any size: say how, once
                failures.append(f"{how}: not run, the process ended before its first size "
                                f"(exit {r.returncode})\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
            else:
                failures.append(f"{how}: not run, the process ended "
                                + ("before its first size" if none_started else "at an earlier size"))
            continue
        stdout, stderr = text(f"n{n}.stdout", stdout_limit), text(f"n{n}.stderr", 4000)
        if not (out / f"n{n}.run.json").exists():
            failures.append(f"{how}: the process died running it (exit {r.returncode})\n"
                            f"{stdout[-4000:]}\n{stderr}")
            continue
        run = json.loads((out / f"n{n}.run.json").read_text())
        if run["returncode"] == EXIT_SKIPPED:
            skipped.append(stderr.strip())
            continue
        report = json.loads((out / f"n{n}.json").read_text()) if (out / f"n{n}.json").exists() else {}
        runs.append({"n": n, "returncode": run["returncode"], "stdout": stdout, "wall_s": run["wall_s"],
                     "report": report})
        checks = report.get("checks") or []
        if run["returncode"] != 0:
            failures.append(f"{how} exited {run['returncode']}\n{stdout[-4000:]}\n{stderr}")
        elif not checks:
            failures.append(f"{how} checked nothing")
        elif not all(c["passed"] for c in checks) or not all(c["n"] == n for c in checks):
            failures.append(f"{how}: a check failed or covered another size\n{stdout[-4000:]}")
    if r.returncode != 0 and all((out / f"n{n}.run.json").exists() for n in seeds):
        failures.append(f"the process that ran sizes {', '.join(map(str, seeds))} exited "
                        f"{r.returncode} after the last\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    if skipped and len(skipped) < len(seeds):
        failures.append(f"{len(skipped)} of {len(seeds)} sizes were skipped: {skipped[0]}")
    return runs, failures, skipped


def run_module(*args: str, timeout: int = 600, gpus: int = 1) -> subprocess.CompletedProcess:
    """`python -m <args>` from the repository, with code/ importable, on
    `gpus` GPUs (one, chosen by worker, or all)."""
    env = dict(os.environ, **lock_env(gpus),
               PYTHONPATH=os.pathsep.join([str(ROOT / "code"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


def required_runs(listing: listings.Listing) -> set[str]:
    d = DESCRIPTIONS[listing.id]
    return suite.required_runs(sized=d["sized"], bench=d["bench"], bench_n=d["bench_n"],
                               kernels=listings.launches_kernels(listing), broken_tool=d["broken"])


def store(listing: listings.Listing, key: str, value: dict) -> None:
    """Keep one GPU test's findings; the test that completes a listing's set
    writes its record at once, so a run cut short keeps what it finished."""
    d = staging() / listing.chapter / listing.name
    d.mkdir(parents=True, exist_ok=True)
    # Written whole, then renamed into place: a worker reading the staging
    # folder meanwhile sees the file complete or not at all (it once read
    # one half written, and a sanitizer run failed on the JSON).
    name = key.replace(":", "__") + ".json"
    part = d / f".{name}.{os.getpid()}.part"
    part.write_text(json.dumps(value, default=str))
    os.replace(part, d / name)
    with open(staging() / ".write.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            got = staged(listing).get(listing.id, {})
            if set(got) == required_runs(listing) and not (d / ".written").exists():
                rec = record.build(listing, got, DESCRIPTIONS[listing.id])
                path = results_root() / listing.chapter / f"{listing.name}.json"
                rec.write(path)
                (d / ".written").touch()
                print(f"\nGPU record written: {path}")
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def staged(listing: listings.Listing | None = None) -> dict[str, dict]:
    """What the GPU tests have kept so far, by listing and run: every
    listing's, or one listing's."""
    out: dict[str, dict] = {}
    where = f"{listing.chapter}/{listing.name}/*.json" if listing else "*/*/*.json"
    for f in staging().glob(where):
        lid = f"{f.parent.parent.name}/{f.parent.name}"
        out.setdefault(lid, {})[f.stem.replace("__", ":")] = json.loads(f.read_text())
    return out


def skip_or_fail(reason: str):
    """Skip a GPU test whose machine lacks something, unless REQUIRE_GPU=1
    (the GPU workflow), where every missing piece is a failure."""
    if REQUIRE_GPU:
        pytest.fail(f"REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


def probe(body: str, once: str | None = None) -> subprocess.CompletedProcess:
    """Run `body` (Python, with `cb` imported) in a fresh process through
    cb.run, so a missing GPU, driver, nvcc or PyCUDA skips (or, with
    REQUIRE_GPU=1, fails) the test instead of crashing it. once: a name under
    which a success is kept for the whole run (conftest.once_per_run), so
    that the workers do not each start a CUDA context to ask the same thing;
    a failure or a skip is asked again by each worker, as a probe that
    failed once by chance must not fail every test of the run."""
    code = ("import json, sys; sys.path.insert(0, 'code'); import cudabook as cb\n"
            f"def body():\n    {body}\n    return 0\nsys.exit(cb.run(body))")

    def ask() -> dict:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                           timeout=120, env=dict(os.environ, **lock_env()))
        return {"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
    got = once_per_run(once, ask) if once else ask()
    if once and got["returncode"] != 0:
        got = ask()
    r = subprocess.CompletedProcess([sys.executable, "-c", code], **got)
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip().removeprefix("SKIPPED: "))
    assert r.returncode == 0, f"GPU probe crashed:\n{r.stderr}"
    return r


@pytest.fixture(scope="session")
def gpu_ready() -> None:
    """Skip (or, with REQUIRE_GPU=1, fail) when this machine cannot run listings."""
    probe("cb.init(); cb.gpu.ensure_nvcc_on_path()", once="gpu_ready")


@pytest.fixture(scope="session")
def gpu_environment(gpu_ready) -> dict:
    """The GPU, driver and versions, for a record whose listing reports
    nothing itself (a broken listing only ever runs under the sanitizer)."""
    r = probe("cb.init(); print(json.dumps(cb.gpu.environment()))", once="gpu_environment")
    return json.loads(r.stdout.strip().splitlines()[-1])


def sanitizer_path() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for c in ("/usr/local/cuda/bin/compute-sanitizer",):
        if Path(c).exists():
            return c
    return None


__all__ = ["LISTINGS", "DESCRIPTIONS", "ROOT", "gpu_environment", "gpu_ready", "gpus_needed", "probe",
           "run_listing", "run_module", "run_sizes", "required_runs", "sizes_outcome", "results_root", "sanitizer_path",
           "skip_if_too_few_gpus", "skip_or_fail", "staged", "staging", "store"]
