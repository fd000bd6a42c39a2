"""The GPU suite's record writer, fed staged results by hand (no GPU): a
listing gets a record only when every one of its GPU tests ran, and the
record fails when any of them failed."""

from __future__ import annotations

import json

import conftest
from conftest import LISTINGS, expected_keys, store

from cudabook import records


def _stage_all(listing, passed=True):
    for key in expected_keys(listing):
        value = {"passed": passed, "environment": {"gpu": "Test GPU", "compute_capability": "9.0"}}
        if key.startswith(("n=", "run")):
            value["checks"] = [{"rel_err": 1e-8, "passed": passed}]
        store(listing, key, value)


def test_complete_listing_gets_a_record(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    listing = next(lst for lst in LISTINGS if lst.cu is not None)
    _stage_all(listing)  # the last store writes the record by itself
    rec = json.loads((tmp_path / "results" / listing.chapter / f"{listing.name}.json").read_text())
    assert rec["passed"] and rec["hash"] == records.content_hash(listing)
    assert rec["worst_rel_err"] == 1e-8 and set(rec["sanitizer"]) == set(conftest.SANITIZER_TOOLS)


def test_incomplete_listing_gets_none_and_failure_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    a, b = [lst for lst in LISTINGS if lst.cu is not None][:2]
    store(a, "n=1", {"passed": True})  # one test of many: no record
    _stage_all(b, passed=False)
    assert not (tmp_path / "results" / a.chapter / f"{a.name}.json").exists()
    assert json.loads((tmp_path / "results" / b.chapter / f"{b.name}.json").read_text())["passed"] is False
