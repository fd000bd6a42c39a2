"""Shared test machinery: the listings, what each says about itself, the
`--stale` option (listings whose record, and chapters whose notebook, is not
current), and the order tests run in.

The GPU suite's own machinery (running a listing, the shared GPU lock,
staging and writing records) is in gpu_harness.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code"))

# The mkdocs builds that the tests run (test_book, test_browser) stay
# quiet about MkDocs 2: Material prints a banner about it at every build,
# which would head every failing report.
os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")

from cudabook import listings, notebooks, record, suite  # noqa: E402

LISTINGS = listings.discover()
REQUIRE_GPU = os.environ.get("REQUIRE_GPU") == "1"

# One staging folder per test run, shared by the pytest-xdist workers (they
# inherit the environment) and by every pass of `cudabook verify` (which
# names it), where every GPU test leaves what it saw. Made here, in the first
# process to import this file, so that it exists before any worker starts;
# likewise the run's token, which keys what once_per_run keeps there (verify
# gives both its passes one token; a staging folder named by hand and used
# again by a later run gets no answers of the earlier run).
if "CUDABOOK_STAGING" not in os.environ:
    os.environ["CUDABOOK_STAGING"] = tempfile.mkdtemp(prefix="cudabook-staging-")
os.environ.setdefault("CUDABOOK_RUN", uuid.uuid4().hex)
# The GPUs this run may use, found once (suite.visible_gpus runs nvidia-smi).
os.environ.setdefault(suite.GPUS_VARIABLE, ",".join(suite.visible_gpus()))


def pycache_folder() -> str:
    """Where the processes the tests start keep compiled Python
    (PYTHONPYCACHEPREFIX): a writable folder, so that a read-only
    site-packages, as in many GPU images, does not make every listing
    process compile NumPy and torch again (seconds each time)."""
    return os.environ.get("PYTHONPYCACHEPREFIX") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudabook" / "pycache")


def _pycache_env() -> dict:
    """The environment for a listing's --describe: compiled Python is kept
    (pycache_folder), even where PYTHONDONTWRITEBYTECODE is set."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=pycache_folder())
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def once_per_run(name: str, compute):
    """compute(), done by the first process of this test run to ask (under a
    lock) and kept as JSON in the staging folder, where the other
    pytest-xdist workers, and the second pass of `cudabook verify`, read it."""
    staging = Path(os.environ["CUDABOOK_STAGING"])
    staging.mkdir(parents=True, exist_ok=True)
    # Keyed by the run and by the tree: a test's copy of the tree has answers of its own.
    key = hashlib.sha256(f"{os.environ['CUDABOOK_RUN']}\0{ROOT}".encode()).hexdigest()[:16]
    path = staging / f"{name}-{key}.json"
    with open(staging / f".{name}-{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.exists():
                part = path.with_suffix(".part")
                part.write_text(json.dumps(compute()))
                os.replace(part, path)        # a reader never sees half a file
            return json.loads(path.read_text())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _descriptions() -> dict[str, dict]:
    """What each listing's command line accepts, asked once per test run
    (asked by every worker, a 16-worker run started 16 x 94 Python
    processes before its first test). A listing that cannot even describe
    itself is still collected, so that its tests fail and say why instead
    of the whole session failing to start."""
    # Keyed by the listings too: a listing added since, in a run or staging
    # folder named again by hand, is described instead of missing.
    ids = hashlib.sha256(",".join(sorted(lst.id for lst in LISTINGS)).encode()).hexdigest()[:8]
    got = once_per_run(f"descriptions-{ids}", lambda: listings.describe_all(LISTINGS, env=_pycache_env()))
    out = {}
    for lst in LISTINGS:
        d = got.get(lst.id) or f"{lst.id} was not described"
        out[lst.id] = (dict(d, broken=lst.broken_tool, error=None) if isinstance(d, dict)
                       else {"sized": False, "bench": False, "bench_n": None, "broken": None, "error": d})
    return out


DESCRIPTIONS = _descriptions()


def pytest_addoption(parser):
    parser.addoption("--stale", action="store_true",
                     help="GPU suite: run only the listings (and chapter notebooks) whose record is "
                          "missing, stale, failed or inconsistent")


def stale_ids() -> set[str]:
    """Listings whose record is not current and consistent."""
    return {lst.id for lst in LISTINGS if record.status(lst, DESCRIPTIONS[lst.id])[0] != "current"}


def stale_notebooks() -> set[str]:
    """Chapters whose stored notebook is not the executed form of a fresh
    build (a listing, its docstring or the notebook builder changed)."""
    return {ch for ch in listings.chapters()
            if notebooks.out_of_date(ch, describe=lambda lst: DESCRIPTIONS[lst.id])}


def stale_selection() -> tuple[set[str], set[str]]:
    """What --stale runs: (listings, chapters whose notebook runs), decided
    once, when the run starts. Verify's second pass must time the listings
    its first pass checked, though some of their records are written by then."""
    def decide() -> dict:
        ids = stale_ids()
        return {"listings": sorted(ids), "chapters": sorted({i.split("/")[0] for i in ids} | stale_notebooks())}
    got = once_per_run("stale", decide)
    return set(got["listings"]), set(got["chapters"])


# Tests that run first: with -x the freshness gate names the listing and the
# command before anything slower runs; in the GPU suite, the long tests and
# the ones that time things start first, so that they do not wait behind a
# crowd of short checks for the GPU.
FIRST = ("test_records.py::test_listing_has_a_current_consistent_record",
         "test_gpu.py::test_notebook_executes", "test_gpu.py::test_benchmark",
         "test_gpu.py::test_runs")
# ...except a notebook that measures the hardware (marked timed): it runs
# last. Each of its cells waits for every timing queued when it starts
# (cudabook/lock.py). Started first among the benchmarks (H200 machine,
# 2026-12-01), the notebooks took 74 to 129 s each, most of that waiting,
# and held workers the benchmarks needed.
LAST = "test_gpu.py::test_notebook_executes"


def _last_wall_s() -> dict[tuple[str, str], float]:
    """How long each GPU test took when the committed record was made,
    {(listing id, run key): seconds}, from the records' wall_s."""
    out: dict[tuple[str, str], float] = {}
    for lst in LISTINGS:
        try:
            rec = record.load(lst)
        except record.RecordError:
            continue
        if rec is None:
            continue
        out.update({(lst.id, r.key): r.wall_s or 0.0 for r in rec.runs})
        out.update({(lst.id, f"sanitizer:{t}"): s.wall_s or 0.0 for t, s in rec.sanitizer.items()})
    return out


def _run_keys(item) -> tuple[str, list[str]] | None:
    """(listing id, the record's keys for the runs this test makes), for a GPU test of one listing."""
    params = item.callspec.params if hasattr(item, "callspec") else {}
    lst = params.get("listing")
    if lst is None:
        return None
    name = getattr(item, "originalname", item.name)
    keys = {"test_correct_at_sizes": [f"n={n}" for n in params.get("sizes", ())], "test_runs": ["run"],
            "test_benchmark": ["bench"], "test_sanitizer": [f"sanitizer:{params.get('tool')}"]}.get(name)
    return (lst.id, keys) if keys else None


def pytest_collection_modifyitems(config, items):
    """Order: FIRST, then within each group the GPU tests longest first, by
    the time each took when its record was made (a test never timed counts
    as long), so that with -n the last test to finish is a short one
    rather than a 30 s check that started late."""
    walls = _last_wall_s() if any("gpu" in item.keywords for item in items) else {}

    # A notebook runs each of its chapter's listings once, with its checks
    # at the default size: about what the plain runs took, a listing each.
    notebook: dict[str, float] = {}
    for lst in LISTINGS:
        plain = walls.get((lst.id, "run"), walls.get((lst.id, "n=1000003"), 0.0))
        notebook[lst.chapter] = notebook.get(lst.chapter, 0.0) + plain

    def rank(item):
        name = f"{Path(str(item.fspath)).name}::{getattr(item, 'originalname', item.name)}"
        first = FIRST.index(name) if name in FIRST else len(FIRST)
        if name == LAST and "timed" in item.keywords:
            first = len(FIRST) + 1
        if "gpu" not in item.keywords:
            return (first, 0.0)                 # CPU tests keep their order
        run = _run_keys(item)
        chapter = item.callspec.params.get("chapter") if hasattr(item, "callspec") else None
        if run:
            expected = sum(walls.get((run[0], k), 60.0) for k in run[1])
        else:
            expected = notebook.get(chapter, 60.0) if chapter else 60.0
        return (first, -expected)
    items.sort(key=rank)
    if config.getoption("--stale"):
        stale, chapters = stale_selection()
        keep, drop = [], []
        for item in items:
            lst = item.callspec.params.get("listing") if hasattr(item, "callspec") else None
            chapter = item.callspec.params.get("chapter") if hasattr(item, "callspec") else None
            if "gpu" in item.keywords and ((lst is not None and lst.id not in stale)
                                           or (chapter is not None and chapter not in chapters)):
                drop.append(item)
            else:
                keep.append(item)
        items[:] = keep
        config.hook.pytest_deselected(items=drop)
