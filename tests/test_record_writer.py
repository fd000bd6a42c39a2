"""The GPU suite's record writer, fed staged results by hand (no GPU): a
listing gets a record only when every one of its GPU tests ran, and the
record fails when any of them failed."""

from __future__ import annotations

import json
import shutil

import conftest
from conftest import LISTINGS, ROOT, expected_keys, store

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


def test_broken_listing_record(tmp_path, monkeypatch):
    """A deliberately broken listing needs only its sanitizer test, and its
    record keeps the sanitizer's report."""
    root = tmp_path / "tree"
    (root / "code" / "demo").mkdir(parents=True)
    shutil.copytree(ROOT / "code" / "cudabook", root / "code" / "cudabook")
    (root / "code" / "demo" / "broken_oob.py").write_text(
        '"""An out-of-bounds write.\n\nExpect: compute-sanitizer --tool memcheck reports it\n"""\n')
    (root / "code" / "demo" / "broken_oob.cu").write_text("// k\n")
    fake = records.Listing("demo", "broken_oob", root)
    assert fake.broken_tool == "memcheck"
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("CUDABOOK_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(conftest, "LISTINGS", [fake])
    monkeypatch.setitem(conftest.DESCRIPTIONS, fake.id, {"sized": True, "bench": False, "broken": "memcheck"})
    assert expected_keys(fake) == {"broken:memcheck"}
    store(fake, "broken:memcheck", {"passed": True, "report": "========= Invalid __global__ write of size 4"})
    rec = json.loads((tmp_path / "results" / "demo" / "broken_oob.json").read_text())
    assert rec["passed"] and rec["broken"] == "memcheck" and "Invalid __global__ write" in rec["broken_report"]
