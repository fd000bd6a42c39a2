"""Shared test machinery: the listings, what each says about itself, the
`--stale` option, and the order tests run in.

The GPU suite's own machinery (running a listing, the shared GPU lock,
staging and writing records) is in gpu_harness.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code"))

from cudabook import listings, record  # noqa: E402

LISTINGS = listings.discover()
REQUIRE_GPU = os.environ.get("REQUIRE_GPU") == "1"


def _description(lst: listings.Listing) -> dict:
    """What the listing's command line accepts. A listing that cannot even
    describe itself is still collected, so that its tests fail and say why
    instead of the whole session failing to start."""
    try:
        return dict(listings.describe(lst), broken=lst.broken_tool, error=None)
    except (RuntimeError, ValueError) as e:
        return {"sized": False, "bench": False, "broken": None, "error": str(e)}


DESCRIPTIONS = {lst.id: _description(lst) for lst in LISTINGS}


def pytest_configure(config):
    """One staging folder per test run, shared by pytest-xdist workers (they
    inherit the environment), where every GPU test leaves what it saw."""
    if not hasattr(config, "workerinput") and "CUDABOOK_STAGING" not in os.environ:
        os.environ["CUDABOOK_STAGING"] = tempfile.mkdtemp(prefix="cudabook-staging-")


def pytest_addoption(parser):
    parser.addoption("--stale", action="store_true",
                     help="GPU suite: run only the listings (and chapter notebooks) whose record is "
                          "missing, stale, failed or inconsistent")


def stale_ids() -> set[str]:
    """Listings whose record is not current and consistent."""
    return {lst.id for lst in LISTINGS if record.status(lst, DESCRIPTIONS[lst.id])[0] != "current"}


# Tests that run first: with -x the freshness gate names the listing and the
# command before anything slower runs; in the GPU suite, the long tests and
# the ones that time things start first, so that they do not wait behind a
# crowd of short checks for the GPU.
FIRST = ("test_records.py::test_listing_has_a_current_consistent_record",
         "test_gpu.py::test_notebook_executes", "test_gpu.py::test_benchmark",
         "test_gpu.py::test_runs")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = f"{Path(str(item.fspath)).name}::{getattr(item, 'originalname', item.name)}"
        return FIRST.index(name) if name in FIRST else len(FIRST)
    items.sort(key=rank)
    if config.getoption("--stale"):
        stale = stale_ids()
        chapters = {s.split("/")[0] for s in stale}
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
