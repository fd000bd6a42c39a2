"""The freshness gate: every listing has a passing GPU record that matches
its code. A listing changed since its last GPU run fails here, with the
command that re-verifies it."""

from __future__ import annotations

import shutil

import pytest
from conftest import LISTINGS, ROOT

from cudabook import records


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_listing_has_current_passing_gpu_record(listing):
    state, rec = records.status(listing)
    msg = {
        "missing": f"{listing.id} has never been run on a GPU (no {listing.rel(listing.record_path)})",
        "stale": f"{listing.id} changed since its GPU record was made",
        "failed": f"{listing.id} failed its last GPU run",
    }.get(state)
    assert state == "current", f"{msg}. Re-verify {records.reverify_command(listing)}"
    assert rec["listing"] == listing.id
    assert rec["environment"].get("gpu"), "a record must name its GPU"
    assert rec["files"] == [listing.rel(p) for p in records.hashed_files(listing)]
    if listing.broken_tool:
        assert rec["broken"] == listing.broken_tool and rec["broken_report"]
    elif listing.cu is not None:
        assert set(rec["sanitizer"]) == {"memcheck", "racecheck", "initcheck", "synccheck"}
        assert all(v["passed"] for v in rec["sanitizer"].values())


@pytest.fixture
def tree(tmp_path):
    """A copy of the book's code, docs and records to edit."""
    for d in ("code", "results", "docs", "chapters", "tests"):
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_hash_follows_listing_and_runtime_helpers_only(tree):
    lst = records.discover(tree)[0]
    before = records.content_hash(lst)
    (tree / "docs" / "index.md").write_text("edited\n")
    (tree / "chapters" / lst.chapter / "index.md").write_text("edited\n")
    (tree / "code" / "cudabook" / "mkdocs_hooks.py").write_text("# edited\n")
    (tree / "tests" / "conftest.py").write_text("# edited\n")
    assert records.content_hash(lst) == before, "docs, site and tests must not invalidate records"
    lst.py.write_text(lst.py.read_text() + "\n# edited\n")
    assert records.content_hash(lst) != before
    lst.py.write_text(lst.py.read_text().removesuffix("\n# edited\n"))
    assert records.content_hash(lst) == before
    (tree / "code" / "cudabook" / "check.py").write_text("# edited\n")
    assert records.content_hash(lst) != before


def test_stale_listing_is_named_with_the_command(tree):
    lst = next(x for x in records.discover(tree) if x.cu is not None)
    assert records.status(lst)[0] == "current"
    lst.cu.write_text(lst.cu.read_text() + "\n// edited\n")
    state, _ = records.status(lst)
    assert state == "stale"
    cmd = records.reverify_command(lst)
    assert "REQUIRE_GPU=1 python -m pytest -m gpu" in cmd and lst.name in cmd
    lst.record_path.unlink()
    assert records.status(lst)[0] == "missing"


def test_badge_text_from_a_record():
    rec = {"environment": {"gpu": "NVIDIA H200", "compute_capability": "9.0", "cuda": "13.0"},
           "date": "2026-11-30T10:00:00Z",
           "benchmark": {"benchmarks": [{"bytes_per_s": 4.1e12, "fraction_of_ceiling": 0.953,
                                         "baseline": {"name": "torch.add", "ratio": 0.99}}]}}
    assert records.badge_text(rec) == ("NVIDIA H200 · sm_90 · CUDA 13.0 · 2026-11-30 · "
                                       "4.10 TB/s (95% of copy, 0.99x torch.add)")
    del rec["benchmark"]
    assert records.badge_text(rec) == "NVIDIA H200 · sm_90 · CUDA 13.0 · 2026-11-30"


def test_broken_listing_badge():
    rec = {"broken": "racecheck", "environment": {"gpu": "NVIDIA H200"}, "date": "2026-11-30T00:00:00Z"}
    assert records.badge_text(rec) == ("broken on purpose: compute-sanitizer --tool racecheck catches it · "
                                       "NVIDIA H200 · 2026-11-30")


def test_hash_follows_the_listings_a_listing_imports(tree):
    """An exercise that reuses a chapter listing goes stale when that listing
    changes, whichever way it imports it."""
    by_id = {lst.id: lst for lst in records.discover(tree)}
    assert [d.id for d in records.uses(by_id["first_kernel/ex1_block_size"])] == ["first_kernel/add_one_per_thread"]
    assert [d.id for d in records.uses(by_id["threads_warps/ex1_tail_effect"])] == ["threads_warps/block_placement"]
    assert records.uses(by_id["first_kernel/add_one_per_thread"]) == []
    before = records.content_hash(by_id["threads_warps/ex1_tail_effect"])
    cu = tree / "code" / "threads_warps" / "block_placement.cu"
    cu.write_text(cu.read_text() + "\n// edited\n")
    assert records.content_hash(by_id["threads_warps/ex1_tail_effect"]) != before


def test_listings_that_measure_the_hardware_ask_for_the_gpu_alone():
    by_id = {lst.id: lst for lst in records.discover()}
    assert by_id["ram_vram/bandwidth_meter"].needs_gpu_alone
    assert by_id["threads_warps/block_placement"].needs_gpu_alone
    assert not by_id["first_kernel/add_vectorized"].needs_gpu_alone


def test_sanitizer_report_keeps_python_frames_only():
    from cudabook.mkdocs_hooks import _short_backtraces

    report = "\n".join([
        "========= Invalid __global__ read of size 4 bytes",
        "=========         Host Frame: pycudaboost::python::objects::caller [0x1] in _driver.so",
        "=========         Host Frame: main in broken_oob.py:58",
        "=========         Host Frame: _PyEval_EvalFrameDefault [0x2] in python3",
        "========= ERROR SUMMARY: 1 error",
    ])
    short = _short_backtraces(report).splitlines()
    assert short == ["========= Invalid __global__ read of size 4 bytes",
                     "=========         Host Frame: main in broken_oob.py:58",
                     "=========         ... 2 more host frame(s)",
                     "========= ERROR SUMMARY: 1 error"]
