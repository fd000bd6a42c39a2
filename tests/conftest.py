"""Shared test machinery: the listings, running one in a subprocess, and the
GPU record that a `pytest -m gpu` session writes.

Every GPU test stores what it saw in a staging folder shared by all pytest-xdist
workers; as soon as all of a listing's GPU tests have run, its record is
written to results/<chapter>/<name>.json (or under $CUDABOOK_RESULTS). A
listing with a skipped or deselected GPU test gets no new record.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code"))

from cudabook import records  # noqa: E402
from cudabook.gpu import EXIT_SKIPPED  # noqa: E402

LISTINGS = records.discover()
SIZES = [1, 31, 32, 33, 1_000_003, 2**27 + 7]  # warp edges, an awkward size, and > 4x L2
SANITIZER_TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]
SANITIZER_N = 4099  # small, and leaves a tail of 3 for float4 kernels
REQUIRE_GPU = os.environ.get("REQUIRE_GPU") == "1"


def pytest_configure(config):
    """One staging folder per test run, shared by pytest-xdist workers (they
    inherit the environment), where every GPU test leaves what it saw."""
    if not hasattr(config, "workerinput") and "CUDABOOK_STAGING" not in os.environ:
        os.environ["CUDABOOK_STAGING"] = tempfile.mkdtemp(prefix="cudabook-staging-")


def _staging() -> Path:
    return Path(os.environ["CUDABOOK_STAGING"])


@contextlib.contextmanager
def gpu_lock(exclusive: bool):
    """Timed work holds the GPU alone; checks may share it. With
    `pytest -n 8`, correctness and sanitizer runs overlap, and each
    benchmark waits until it has the GPU to itself."""
    with open(_staging() / ".gpu.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _description(lst: records.Listing) -> dict:
    """What the listing's command line accepts. A listing that cannot even
    describe itself is still collected, so that its tests fail and say why
    instead of the whole session failing to start."""
    try:
        return dict(records.describe(lst), broken=lst.broken_tool, alone=lst.needs_gpu_alone, error=None)
    except (RuntimeError, ValueError) as e:
        return {"sized": False, "bench": False, "broken": None, "alone": False, "error": str(e)}


DESCRIPTIONS = {lst.id: _description(lst) for lst in LISTINGS}


def run_listing(listing: records.Listing, *args: str, prefix: list[str] | None = None,
                timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a listing in its own process, so a crashed CUDA context cannot take
    the test session down with it. Under compute-sanitizer the suite sets
    CUDABOOK_SANITIZER=<tool>, so a listing can tell a check about the GPU's
    scheduling or timing (which instrumentation changes) from one about its
    answer (which it must not)."""
    cmd = [*(prefix or []), sys.executable, str(listing.py), *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def run_module(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m <args>` from the repository, with code/ importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "code"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


def expected_keys(listing: records.Listing) -> set[str]:
    d = DESCRIPTIONS[listing.id]
    if d["broken"]:
        return {f"broken:{d['broken']}"}
    keys = {f"n={n}" for n in SIZES} if d["sized"] else {"run"}
    if listing.cu is not None:
        keys |= {f"sanitizer:{t}" for t in SANITIZER_TOOLS}
    if d["bench"]:
        keys.add("bench")
    return keys


def store(listing: records.Listing, key: str, value: dict) -> None:
    """Keep one GPU test's findings; the test that completes a listing's set
    writes its record at once, so a run cut short keeps what it finished."""
    d = _staging() / listing.chapter / listing.name
    d.mkdir(parents=True, exist_ok=True)
    (d / (key.replace(":", "__") + ".json")).write_text(json.dumps(value, default=str))
    with open(_staging() / ".write.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            got = _staged().get(listing.id, {})
            if set(got) == expected_keys(listing) and not (d / ".written").exists():
                _write_records({listing.id: got})
                (d / ".written").touch()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _staged() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in _staging().glob("*/*/*.json"):
        lid = f"{f.parent.parent.name}/{f.parent.name}"
        out.setdefault(lid, {})[f.stem.replace("__", ":")] = json.loads(f.read_text())
    return out


def skip_or_fail(reason: str):
    if REQUIRE_GPU:
        pytest.fail(f"REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


def _probe(body: str) -> subprocess.CompletedProcess:
    """Run `body` (Python, with `cb` imported) in a fresh process through
    cb.run, so a missing GPU, driver, nvcc or PyCUDA skips (or, with
    REQUIRE_GPU=1, fails) the test instead of crashing it."""
    code = ("import json, sys; sys.path.insert(0, 'code'); import cudabook as cb\n"
            f"def body():\n    {body}\n    return 0\nsys.exit(cb.run(body))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip().removeprefix("SKIPPED: "))
    assert r.returncode == 0, f"GPU probe crashed:\n{r.stderr}"
    return r


@pytest.fixture(scope="session")
def gpu_ready() -> None:
    """Skip (or, with REQUIRE_GPU=1, fail) when this machine cannot run listings."""
    _probe("cb.init(); cb.gpu.ensure_nvcc_on_path()")


@pytest.fixture(scope="session")
def gpu_environment(gpu_ready) -> dict:
    """The GPU, driver and versions, for a record whose listing reports
    nothing itself (a broken listing only ever runs under the sanitizer)."""
    r = _probe("cb.init(); print(json.dumps(cb.gpu.environment()))")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _write_records(staged: dict[str, dict]) -> None:
    out_root = Path(os.environ.get("CUDABOOK_RESULTS", ROOT / "results"))
    env = None
    for listing in LISTINGS:
        got = staged.get(listing.id, {})
        if not got or set(got) != expected_keys(listing):
            continue  # some of its GPU tests did not run: no record
        if env is None:
            env = next((v["environment"] for v in got.values() if v.get("environment")), {})
        runs = [dict(v, key=k) for k, v in sorted(got.items()) if k.startswith(("n=", "run"))]
        errs = [c["rel_err"] for r in runs for c in r.get("checks", [])]
        rec = {
            "listing": listing.id,
            "files": [listing.rel(p) for p in records.hashed_files(listing)],
            "hash": records.content_hash(listing),
            "passed": all(v["passed"] for v in got.values()),
            "date": records.utc_now(),
            "environment": env,
            "worst_rel_err": max(errs) if errs else None,
            "runs": [{k: r.get(k) for k in ("key", "seed", "passed", "checks", "facts", "wall_s", "stdout")}
                     for r in runs],
            "sanitizer": {k.split(":", 1)[1]: v for k, v in got.items() if k.startswith("sanitizer:")},
            "benchmark": got.get("bench"),
            "broken": DESCRIPTIONS[listing.id]["broken"],
            "broken_report": next((v.get("report") for k, v in got.items() if k.startswith("broken:")), None),
            "command": "REQUIRE_GPU=1 python -m pytest -m gpu",
        }
        path = out_root / listing.chapter / f"{listing.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec, indent=1, sort_keys=True, default=str) + "\n")
        print(f"\nGPU record written: {path}")


def sanitizer_path() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for c in ("/usr/local/cuda/bin/compute-sanitizer",):
        if Path(c).exists():
            return c
    return None
