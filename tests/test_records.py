"""The freshness gate, on the CPU: every listing has a GPU record that is
complete, current and consistent with itself, and a record that was edited
by hand, cut down, or left behind by a code change fails, naming the record
and the field."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tomllib

import pytest
from conftest import DESCRIPTIONS, LISTINGS, ROOT

from cudabook import hashing, listings, record, suite


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_listing_has_a_current_consistent_record(listing):
    rec = record.load(listing)
    assert rec is not None, (f"{listing.id} has never been run on a GPU (no {listing.rel(listing.record_path)}). "
                             f"Re-verify {record.reverify_command(listing)}")
    found = record.problems(listing, rec, DESCRIPTIONS[listing.id])
    assert not found, "\n".join(found) + f"\nRe-verify {record.reverify_command(listing)}"
    assert rec.passed, f"{listing.id} failed its last GPU run. Re-verify {record.reverify_command(listing)}"


def test_no_orphan_files_under_code():
    """Every file under code/<chapter>/ is a listing's .py or .cu, or a helper
    (`_name`) that some listing uses, and so is hashed into its record."""
    found = [p.relative_to(ROOT).as_posix() for p in listings.orphans()]
    assert not found, (
        f"files under code/ that belong to no listing: {', '.join(found)}. A listing is a "
        "<name>.py (with its <name>.cu, if it has a kernel); a helper that listings import or "
        "include has a name starting with _ (_common.py, _tiles.cuh) and is hashed into their "
        "records. Give each file its .py, rename it _<name>, or delete it (CONTRIBUTING.md, "
        "'Exercise solutions', on helper files)")


@pytest.fixture
def tree(tmp_path):
    """A copy of the book's code, tests, chapters and records to edit."""
    for d in ("code", "results", "docs", "chapters", "tests"):
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _copy(tree, listing_id):
    return listings.find(listing_id, tree)


# --- forgeries -----------------------------------------------------------------

def _forge(lst, edit):
    d = json.loads(lst.record_path.read_text())
    edit(d)
    lst.record_path.write_text(json.dumps(d, indent=1))
    return record.problems(lst, record.load(lst), DESCRIPTIONS[lst.id])


def test_a_hand_edited_speed_fails(tree):
    """Forgery 1: bytes_per_s of add_vectorized edited from 4.378e12 to 5.378e12."""
    lst = _copy(tree, "first_kernel/add_vectorized")
    assert record.problems(lst, record.load(lst), DESCRIPTIONS[lst.id]) == []

    def edit(d):
        bench = next(r for r in d["runs"] if r["key"] == "bench")
        bench["benchmarks"][0]["bytes_per_s"] += 1e12
    found = _forge(lst, edit)
    assert any("results/first_kernel/add_vectorized.json" in p and "benchmarks[0].bytes_per_s" in p
               for p in found), found


def test_a_consistent_hand_edit_still_shows_in_the_output(tree):
    """The same forgery with the timing edited to match: the printed line in
    the recorded output no longer matches the fields."""
    lst = _copy(tree, "first_kernel/add_vectorized")

    def edit(d):
        b = next(r for r in d["runs"] if r["key"] == "bench")["benchmarks"][0]
        b["timing"]["median_ms"] *= 0.8
        for k in ("p20_ms", "min_ms"):
            b["timing"][k] = min(b["timing"][k], b["timing"]["median_ms"])
        b["bytes_per_s"] /= 0.8
        b["fraction_of_ceiling"] /= 0.8
        b["baseline"]["ratio"] /= 0.8
    found = _forge(lst, edit)
    assert any("benchmarks[0]: the recorded output does not show its figures" in p for p in found), found


def test_a_cut_down_record_with_a_made_up_summary_and_another_gpu_fails(tree):
    """Forgery 3: a record cut down to its n=1 run, with a made-up sanitizer
    summary and the GPU renamed."""
    lst = _copy(tree, "first_kernel/add_vectorized")

    def edit(d):
        d["runs"] = [r for r in d["runs"] if r["key"] == "n=1"]
        d["sanitizer"]["memcheck"]["summary"] = "clean"
        d["environment"]["gpu"] = "NVIDIA B200"
    found = "\n".join(_forge(lst, edit))
    assert "add_vectorized.json: runs: has" in found
    assert "sanitizer.memcheck.summary = 'clean' is not a compute-sanitizer summary line" in found
    assert "runs[0] (n=1).environment differs from the record's in ['gpu']" in found


def test_a_changed_kernel_makes_its_record_stale(tree):
    """Forgery 2 without the forger's last step: a kernel changed to compute
    a - b, its record untouched, is stale. (With the hash recomputed by hand
    as well, only a GPU can tell: the GPU workflow re-runs the listing, and its
    check of c = a + b fails; docs/verification.md says so.)"""
    lst = _copy(tree, "first_kernel/add_vectorized")
    lst.cu.write_text(lst.cu.read_text().replace("x.x + y.x", "x.x - y.x"))
    assert record.status(lst)[0] == "stale"
    assert any("hash: first_kernel/add_vectorized changed" in p
               for p in record.problems(lst, record.load(lst), DESCRIPTIONS[lst.id]))


def test_a_record_with_an_unknown_field_is_refused(tree):
    lst = _copy(tree, "first_kernel/add_vectorized")
    d = json.loads(lst.record_path.read_text())
    d["verified_by"] = "me"
    lst.record_path.write_text(json.dumps(d))
    with pytest.raises(record.RecordError, match=r"add_vectorized.json: unknown field\(s\) \['verified_by'\]"):
        record.load(lst)


# --- what the hash covers --------------------------------------------------------

def test_hash_ignores_comments_docstrings_blank_lines_docs_and_tests(tree):
    lst = _copy(tree, "first_kernel/add_vectorized")
    before = hashing.content_hash(lst)
    (tree / "docs" / "index.md").write_text("edited\n")
    (tree / "chapters" / lst.chapter / "index.md").write_text("edited\n")
    (tree / "code" / "cudabook" / "mkdocs_hooks.py").write_text("# edited\n")
    (tree / "tests" / "test_book.py").write_text("# edited\n")
    py = lst.py.read_text()
    lst.py.write_text(py.replace('"""Vector add', '"""A new docstring.\n\nVector add', 1)
                      + "\n\n# a comment\n")
    lst.cu.write_text("// a new first comment\n" + lst.cu.read_text().replace("{", "{  /* note */", 1))
    helper = tree / "code" / "cudabook" / "check.py"
    helper.write_text(helper.read_text().replace("import math\n", "import math  # for sqrt\n\n"))
    assert hashing.content_hash(lst) == before, "prose, comments, docs, site and tests must not make records stale"
    lst.cu.write_text(lst.cu.read_text().replace("x.x + y.x", "x.x - y.x"))
    assert hashing.content_hash(lst) != before


def test_hash_follows_runtime_helpers_but_not_unused_ones(tree):
    lst = _copy(tree, "first_kernel/add_vectorized")
    names = [p.name for p in hashing.hashed_files(lst)]
    assert "roofline.py" not in names and "mkdocs_hooks.py" not in names and "record.py" not in names
    assert {"__init__.py", "check.py", "bench.py", "listing_cli.py", "lock.py"} <= set(names)
    before = hashing.content_hash(lst)
    (tree / "code" / "cudabook" / "roofline.py").write_text("x = 1\n")
    assert hashing.content_hash(lst) == before
    helper = tree / "code" / "cudabook" / "check.py"
    text = helper.read_text()
    changed = re.sub(r"^_CHUNK = .*$", "_CHUNK = 12345", text, count=1, flags=re.M)
    assert changed != text, "the test's edit found nothing to change"
    helper.write_text(changed)
    assert hashing.content_hash(lst) != before


def test_suite_change_makes_records_stale(tree):
    lst = _copy(tree, "first_kernel/add_vectorized")
    before = hashing.suite_hash(tree)
    s = tree / "code" / "cudabook" / "suite.py"
    s.write_text(s.read_text().replace("SANITIZER_N = 1027", "SANITIZER_N = 1029"))
    assert hashing.suite_hash(tree) != before
    assert record.status(lst)[0] == "stale"


def test_imports_are_read_from_the_syntax_tree(tree):
    """Parenthesised, multi-line and importlib imports all count; a name in a
    string or a comment does not."""
    ch = tree / "code" / "first_kernel"
    (ch / "demo_imports.py").write_text(
        '"""x\n\nRun: x\n"""\nimport importlib\n'
        "from first_kernel.add_one_per_thread import (\n    add,\n    reference,\n)\n"
        'mod = importlib.import_module("add_grid_stride")\n'
        '# import add_vectorized\ntext = "import ex4_saxpy"\n')
    lst = listings.find("first_kernel/demo_imports", tree)
    assert [d.id for d in listings.uses(lst)] == ["first_kernel/add_grid_stride", "first_kernel/add_one_per_thread"]
    assert listings.launches_kernels(lst)


def test_helper_file_is_hashed_into_its_users_and_orphans_are_found(tree):
    ch = tree / "code" / "threads_warps"
    already = set(listings.orphans(tree))      # the tree's own, reported by the test above
    (ch / "_shared.py").write_text("X = 1\n")
    (ch / "notes.txt").write_text("scratch\n")
    assert {p.name for p in set(listings.orphans(tree)) - already} == {"_shared.py", "notes.txt"}
    user = listings.find("threads_warps/warp_sum", tree)
    before = hashing.content_hash(user)
    user.py.write_text(user.py.read_text().replace("import numpy as np\n", "import numpy as np\nimport _shared\n", 1))
    assert {p.name for p in set(listings.orphans(tree)) - already} == {"notes.txt"}
    h1 = hashing.content_hash(user)
    (ch / "_shared.py").write_text("X = 2\n")
    assert hashing.content_hash(user) != h1 != before



def test_data_file_a_listing_names_is_hashed_with_it_and_is_no_orphan(tree):
    """A data file (`_*`, not code) that a listing or its helper names whole
    in a string belongs to that listing: no orphan, and editing it stales
    the listing's record. A name in a comment, a path, or a file that is
    not there adds nothing."""
    ch = tree / "code" / "threads_warps"
    already = set(listings.orphans(tree))
    (ch / "_text.txt").write_text("the data\n")
    (ch / "_helper.py").write_text('from pathlib import Path\nDATA = Path(__file__).with_name("_text.txt")\n'
                                   '# "_other.txt"\nMISSING = "_absent.txt"\n')
    assert {p.name for p in set(listings.orphans(tree)) - already} == {"_text.txt", "_helper.py"}
    user = listings.find("threads_warps/warp_sum", tree)
    user.py.write_text(user.py.read_text().replace("import numpy as np\n", "import numpy as np\nimport _helper\n", 1))
    assert set(listings.orphans(tree)) - already == set()
    assert [p.name for p in listings.code_closure(user) if p.suffix == ".txt"] == ["_text.txt"]
    h1 = hashing.content_hash(user)
    (ch / "_text.txt").write_text("other data\n")
    assert hashing.content_hash(user) != h1
    (ch / "_other.txt").write_text("named only in a comment\n")
    assert (ch / "_other.txt") in set(listings.orphans(tree))

def test_exercise_goes_stale_when_the_listing_it_imports_changes(tree):
    by_id = {lst.id: lst for lst in listings.discover(tree)}
    assert [d.id for d in listings.uses(by_id["threads_warps/ex1_tail_effect"])] == ["threads_warps/block_placement"]
    assert listings.uses(by_id["first_kernel/add_one_per_thread"]) == []
    before = hashing.content_hash(by_id["threads_warps/ex1_tail_effect"])
    cu = tree / "code" / "threads_warps" / "block_placement.cu"
    cu.write_text(cu.read_text().replace("spin_cycles", "spin_cycles + 0", 1))
    assert hashing.content_hash(by_id["threads_warps/ex1_tail_effect"]) != before


def test_listings_that_launch_a_kernel_elsewhere_are_sanitized():
    """The exercises that reuse another listing's kernel run under the
    sanitizer too."""
    by_id = {lst.id: lst for lst in LISTINGS}
    for lid in ("first_kernel/ex1_block_size", "threads_warps/ex3_smem_limit", "threads_warps/ex1_tail_effect",
                "kernels_go_wrong/ex3_check_block", "kernels_go_wrong/validate_inputs",
                "ram_vram/ex1_chunk_count", "ram_vram/ex2_pageable_overlap", "why_gpus/ex3_one_copy"):
        assert by_id[lid].cu is None and listings.launches_kernels(by_id[lid]), lid
    assert not listings.launches_kernels(by_id["first_kernel/device_query"])


def test_stale_message_gives_the_command(tree):
    lst = _copy(tree, "first_kernel/add_vectorized")
    cmd = record.reverify_command(lst)
    assert "REQUIRE_GPU=1 python -m cudabook verify --stale" in cmd
    assert "chapters/first_kernel/first_kernel.ipynb" in cmd
    lst.record_path.unlink()
    assert record.status(lst)[0] == "missing"


def test_records_name_the_pinned_compiler():
    """The compile checks use the nvcc pinned in pyproject.toml: it must be
    the CUDA release (major.minor) that made the records."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
    pin = next(d for d in dev if d.startswith("nvidia-cuda-nvcc=="))
    major_minor = ".".join(pin.split("==")[1].split(".")[:2])
    for lst in LISTINGS:
        rec = record.load(lst)
        if rec is None:
            continue
        nvcc = rec.environment.get("nvcc", "")
        got = re.match(r"(\d+\.\d+)", nvcc)
        assert got and got.group(1) == major_minor, \
            f"{lst.rel(lst.record_path)}: environment.nvcc = {nvcc!r}, but pyproject.toml pins {pin}"


def test_required_runs():
    every = {f"n={n}" for n in suite.SIZES} | {f"sanitizer:{t}" for t in suite.SANITIZER_TOOLS}
    assert suite.required_runs(sized=True, bench=True, bench_n=1_000_003, kernels=True, broken_tool=None) == \
        every | {"bench"}
    # A --bench run at an odd size of 2**26 or more checks what the large size would: no large size.
    assert suite.required_runs(sized=True, bench=True, bench_n=200_000_003, kernels=True, broken_tool=None) == \
        every - {f"n={suite.LARGE}"} | {"bench"}
    assert suite.required_runs(sized=False, bench=False, bench_n=None, kernels=False, broken_tool=None) == {"run"}
    assert suite.required_runs(sized=True, bench=False, bench_n=None, kernels=True,
                               broken_tool="racecheck") == {"broken:racecheck"}


@pytest.mark.parametrize(("bench_n", "large"), [(None, False), (2**26 - 1, False), (2**26, False),
                                                (2**26 + 1, True), (2**27, False), (200_000_003, True)])
def test_bench_stands_in_for_the_large_size_only_when_odd_and_far_beyond_the_l2(bench_n, large):
    assert suite.bench_is_large(bench_n) is large
    groups = suite.size_groups(bench_n)
    assert (suite.LARGE in [n for g in groups for n in g]) is not large
    assert groups[0] == suite.SIZE_GROUPS[0]


def test_a_bench_run_standing_in_for_the_large_size_must_check_its_size():
    """A record of a listing whose --bench run replaces the large size fails
    the CPU check if that run checked a smaller size than its own."""
    lst = next(x for x in LISTINGS if x.id == "first_kernel/add_vectorized")
    desc = {"sized": True, "bench": True, "bench_n": 200_000_003}
    assert suite.bench_is_large(desc["bench_n"])
    rec = record.load(lst)
    bench = rec.run("bench")
    assert bench is not None
    bench.checks = [dataclasses.replace(c, n=1_000_003) for c in bench.checks]
    found = [p for p in record.problems(lst, rec, desc) if "stands in for" in p]
    assert found and "add_vectorized.json: runs[" in found[0] and "must check n = 200000003" in found[0], found


def test_size_groups_run_every_size_once():
    together = [n for group in suite.SIZE_GROUPS for n in group]
    assert sorted(together) == sorted(suite.SIZES) and len(set(together)) == len(together)


def test_badge_text():
    rec = record.from_dict(json.loads((ROOT / "results/first_kernel/add_vectorized.json").read_text()))
    text = record.badge_text(rec)
    assert text.startswith(f"{rec.gpu} · sm_") and "% of copy" in text and rec.date[:10] in text


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


def test_prose_can_cite_one_rung_of_a_ladder(caplog):
    """[[rec:<listing>:bench[<name>].rate]] shows that benchmark's own figures,
    and a name the record does not have is a build warning, not a guess."""
    from types import SimpleNamespace

    from cudabook import mkdocs_hooks as hooks

    lid = "first_kernel/ex1_block_size"
    rec = record.load(listings.find(lid))
    assert len(rec.benchmarks) > 1, "the test needs a record with several benchmarks"
    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x/index.md"))
    last = rec.benchmarks[-1]
    m = hooks.FIELD.search(f"[[rec:{lid}:bench[{last.name}].rate]]")
    assert m and m.group(2) == f"bench[{last.name}].rate"
    assert hooks.field(lid, m.group(2), page) == record.rate_text(last.bytes_per_s)
    assert hooks.field(lid, f"bench[{last.name}].fraction", page) == f"{100 * last.fraction_of_ceiling:.0f}%"
    assert hooks.field(lid, "rate", page) == record.rate_text(rec.benchmarks[0].bytes_per_s)
    with caplog.at_level("INFO"):
        assert hooks.field(lid, "bench[no such rung].rate", page) == "(unknown)"
    assert "no benchmark named 'no such rung'" in caplog.text


def test_prose_can_say_whether_a_target_was_met(monkeypatch):
    """A yes/no fact such as target_met reads "met" or "missed" with |met,
    from the record, so a sentence about a target follows its record."""
    from types import SimpleNamespace

    from cudabook import mkdocs_hooks as hooks

    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x/index.md"))
    seen = set()
    for lst in listings.discover():
        rec = record.load(lst)
        met = rec.facts().get("target_met") if rec else None
        if isinstance(met, bool):
            m = hooks.FIELD.search(f"[[rec:{lst.id}:facts.target_met|met]]")
            assert m, "the |met spec must parse"
            assert hooks.field(lst.id, "facts.target_met", page, "met") == ("met" if met else "missed")
            seen.add(lst.id)
    assert seen, "the test needs a record with a target_met fact"
    # A missed target reads "missed", whether or not a record has one now.
    monkeypatch.setattr(hooks, "_status", lambda lst: ("current", SimpleNamespace(facts=lambda: {"target_met": False})))
    assert hooks.field(sorted(seen)[0], "facts.target_met", page, "met") == "missed"


def test_compare_records_reproduces_and_lists_moved_facts(tmp_path, capsys):
    """compare-records: a record written again with the same code, passing
    checks and benchmark rates within the band reproduces the committed
    one; a rate outside the band does not; --facts lists the facts that
    moved, and they do not fail it."""
    from cudabook import book_cli

    path = ROOT / "results/why_gpus/gelu_cpu_vs_gpu.json"
    old = record.from_dict(json.loads(path.read_text()))
    raw = json.loads(path.read_text())
    bench = next(r for r in raw["runs"] if r["key"] == "bench")
    b = bench["benchmarks"][0]
    b["bytes_per_s"] *= 1.05                                   # within the band
    bench["facts"]["sweep"][6]["torch_cpu_ms"] *= 3            # a fact that moved
    bench["facts"]["largest_n"] += 1                           # by less than the band
    new_dir = tmp_path / "why_gpus"
    new_dir.mkdir()
    (new_dir / "gelu_cpu_vs_gpu.json").write_text(json.dumps(raw))
    new = record.from_dict(raw)
    assert record.reproduces(new, old) == []
    assert record.moved_facts(new, old) == [
        f"why_gpus/gelu_cpu_vs_gpu: facts.sweep[6].torch_cpu_ms: "
        f"{old.facts()['sweep'][6]['torch_cpu_ms']!r} -> {new.facts()['sweep'][6]['torch_cpu_ms']!r}"]
    assert book_cli.compare_records(str(tmp_path), record.NOISE_BAND, facts=True) == 0
    out = capsys.readouterr().out
    assert "1 record(s) compared, 0 mismatch(es)" in out and "1 fact(s) moved" in out
    b["bytes_per_s"] *= 1.2                                    # now outside it
    (new_dir / "gelu_cpu_vs_gpu.json").write_text(json.dumps(raw))
    assert book_cli.compare_records(str(tmp_path), record.NOISE_BAND) == 1
    assert f"benchmarks[{b['name']!r}].bytes_per_s" in capsys.readouterr().out


def test_listings_with_streams_check_their_answers_with_the_default_queues():
    """The suite's checking processes have one hardware work queue
    (tests/test_gpu.py, CHECKS_ENV), which could hide a missing wait between
    two streams. A listing that makes streams must also check its answers in
    its --bench run, which keeps the default eight; its record shows it did."""
    found = []
    makes_streams = re.compile(r"\bStream\s*\(")      # cuda.Stream(), torch.cuda.Stream(...), ...
    for lst in listings.discover():
        code = [f for f in listings.code_closure(lst) if f.suffix == ".py"]
        if not any(makes_streams.search(f.read_text()) for f in code):
            continue
        rec = record.load(lst)
        bench = next((r for r in rec.runs if r.key == "bench"), None) if rec else None
        assert bench is not None and bench.checks and all(c.passed for c in bench.checks), (
            f"{lst.id} makes CUDA streams, but its record has no --bench run whose checks passed")
        found.append(lst.id)
    assert "ram_vram/overlap_streams" in found, found


def test_a_sentence_is_chosen_by_the_record(caplog):
    """[[if rec:<listing>:<condition>]]yes[[else]]no[[end]] keeps the text
    the record's condition picks (issue #45, item 8): a yes/no fact, numbers
    compared with numbers or other fields, nested facts, conditions joined
    by 'and'. A condition the record cannot decide is a build warning
    (a failure under --strict), never a silent choice."""
    from types import SimpleNamespace

    from cudabook import mkdocs_hooks as hooks

    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x/index.md"))
    lid = "softmax_norm/ex1_row_length"
    rec = record.load(listings.find(lid))
    online, safe = rec.facts()["online_16384_of_copy"], rec.facts()["safe_16384_of_copy"]
    assert hooks.decide(rec, f"facts.online_16384_of_copy > {online - 1e-6}")
    assert not hooks.decide(rec, f"facts.online_16384_of_copy >= {online + 1e-6}")
    assert hooks.decide(rec, "facts.online_16384_of_copy > facts.safe_16384_of_copy") == (online > safe)
    assert hooks.decide(rec, "facts.online_16384_of_copy > 0 and facts.safe_16384_of_copy < 0") is False
    text = f"A [[if rec:{lid}:facts.online_16384_of_copy > 0]]yes[[else]]no[[end]], B [[if rec:{lid}:facts.online_16384_of_copy < 0]]shown[[end]]."
    assert hooks.choose(text, page) == "A yes, B ."
    nested = record.load(listings.find("reductions/sum_ladder"))
    pw = nested.facts()["rel_err"]["pairwise"]
    assert hooks.decide(nested, f"facts.rel_err.pairwise == {pw!r}")
    for bad, why in (("facts.no_such_fact", "no fact"), ("facts.online_16384_of_copy", "not yes or no"),
                     ("facts.online_16384_of_copy > seven", "neither a number"),
                     ("bench[nope].ratio > 1", "no benchmark")):
        with pytest.raises(hooks.Undecided, match=why):
            hooks.decide(rec, bad)
    with caplog.at_level("WARNING"):
        assert hooks.choose(f"[[if rec:{lid}:facts.no_such_fact]]a[[else]]b[[end]]", page) == "(undecided)"
    assert "no fact 'no_such_fact'" in caplog.text


def test_a_flop_rate_reads_in_tflops():
    """`|TFLOP/s` shows a fact in FLOP/s as prose says it: whole TFLOP/s
    from 100 up, one decimal below."""
    from cudabook import mkdocs_hooks as hooks

    assert hooks._number(680134956461451.0, "TFLOP/s", "w") == "680 TFLOP/s"
    assert hooks._number(4.13e13, "TFLOP/s", "w") == "41.3 TFLOP/s"


def test_a_chain_of_sentences_takes_the_first_that_holds(caplog):
    """[[elif rec:...]] branches are tried in order after the [[if]], the
    [[else]] text is the fallback, every condition is decided (a missing
    fact fails even after a branch held), and [[else fail]] makes a record
    that no sentence fits a build problem."""
    from types import SimpleNamespace

    from cudabook import mkdocs_hooks as hooks

    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x/index.md"))
    lid = "softmax_norm/ex1_row_length"
    yes, no = "facts.online_16384_of_copy > 0", "facts.online_16384_of_copy < 0"
    assert hooks.choose(f"[[if rec:{lid}:{no}]]a[[elif rec:{lid}:{yes}]]b[[elif rec:{lid}:{yes}]]c[[else]]d[[end]]",
                        page) == "b"
    assert hooks.choose(f"[[if rec:{lid}:{no}]]a[[elif rec:{lid}:{no}]]b[[else]]d[[end]]", page) == "d"
    assert hooks.choose(f"[[if rec:{lid}:{no}]]a[[end]]", page) == ""
    with caplog.at_level("WARNING"):
        assert hooks.choose(f"[[if rec:{lid}:{yes}]]a[[elif rec:{lid}:facts.nope > 1]]b[[end]]", page) == "(undecided)"
        assert hooks.choose(f"[[if rec:{lid}:{no}]]a[[else fail]][[end]]", page) == "(no sentence fits the record)"
    assert "no fact 'nope'" in caplog.text and "no sentence of this chain holds" in caplog.text


def test_a_condition_may_compare_a_ratio_of_two_facts():
    """facts.a/facts.b in a condition is their ratio; dividing by zero or by
    a non-number is undecided, never a guess."""
    from cudabook import mkdocs_hooks as hooks

    rec = record.load(listings.find("softmax_norm/ex1_row_length"))
    f = rec.facts()
    ratio = f["online_16384_of_copy"] / f["safe_16384_of_copy"]
    assert hooks.decide(rec, f"facts.online_16384_of_copy/facts.safe_16384_of_copy > {ratio - 1e-9}")
    assert not hooks.decide(rec, f"facts.online_16384_of_copy/facts.safe_16384_of_copy > {ratio + 1e-9}")
    with pytest.raises(hooks.Undecided, match="is 0"):
        hooks.decide(rec, "facts.online_16384_of_copy/0 > 1")


def test_a_condition_may_compare_two_benchmarks_of_one_run():
    """bench[a].fraction/bench[b].fraction is the ratio of two rungs' rates
    (the same bytes, the same run's copy); a '/' inside a name is the name's."""
    from cudabook import mkdocs_hooks as hooks

    rec = record.load(listings.find("reductions/sum_ladder"))
    bs = {b.name: b for b in rec.benchmarks}
    ratio = bs["sum_vectorized"].fraction_of_ceiling / bs["sum_tree"].fraction_of_ceiling
    cond = "bench[sum_vectorized].fraction/bench[sum_tree].fraction"
    assert hooks.decide(rec, f"{cond} > {ratio - 1e-9}")
    assert not hooks.decide(rec, f"{cond} > {ratio + 1e-9}")
    assert hooks._ratio_slash("bench[a/b].fraction/facts.x") == len("bench[a/b].fraction")
    with pytest.raises(hooks.Undecided, match="no benchmark named 'a/b'"):
        hooks.decide(rec, "bench[a/b].fraction > 1")


def test_prose_and_conditions_read_an_item_of_a_listed_fact():
    """facts.sweep.-1.x and facts.sweep.4.x pick an item of a list fact, in
    prose and in conditions alike; an index past the list is a missing fact."""
    from types import SimpleNamespace

    from cudabook import mkdocs_hooks as hooks

    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x/index.md"))
    rec = record.load(listings.find("why_gpus/gelu_cpu_vs_gpu"))
    sweep = rec.facts()["sweep"]
    last, fifth = sweep[-1]["numpy_ms"], sweep[4]["torch_cpu_ms"]
    assert hooks.field("why_gpus/gelu_cpu_vs_gpu", "facts.sweep.-1.numpy_ms", page, ".3f") == format(last, ".3f")
    assert hooks.field("why_gpus/gelu_cpu_vs_gpu", "facts.sweep.4.torch_cpu_ms", page, ".3f") == format(fifth, ".3f")
    assert hooks.decide(rec, f"facts.sweep.-1.numpy_ms/facts.sweep.-1.torch_cpu_1_ms == {last / sweep[-1]['torch_cpu_1_ms']!r}")
    with pytest.raises(hooks.Undecided, match="no fact"):
        hooks.decide(rec, f"facts.sweep.{len(sweep)}.numpy_ms > 0")
    assert hooks.FIELD.fullmatch("[[rec:why_gpus/gelu_cpu_vs_gpu:facts.sweep.-1.numpy_ms|,.0f]]")


def test_a_typed_baseline_gives_its_time_as_called_and_its_kernels_time():
    """baseline_time and baseline_kernel_time: the library call as timed and
    the summed GPU time of the kernels it ran (the transformer's compiled
    block was host-bound: the first is about twice the second)."""
    from cudabook import mkdocs_hooks as hooks

    rec = record.load(listings.find("transformer/gpt2_block"))
    b = next(b for b in rec.benchmarks if b.name == "GPT-2 block B=8 T=1024 vs torch.compile")
    v = hooks._values(rec, b)
    assert v["baseline_time"] == record.time_text(b.baseline.timing.median_ms)
    assert v["baseline_kernel_time"] == record.time_text(b.baseline.side.kernel_ms)


def test_prose_and_conditions_read_a_nested_fact_alike():
    """[[rec:...:facts.a.b]] in prose and facts.a.b in a condition find the
    same nested fact (one lookup serves both)."""
    from types import SimpleNamespace

    from cudabook import mkdocs_hooks as hooks

    page = SimpleNamespace(file=SimpleNamespace(src_uri="chapters/x/index.md"))
    rec = record.load(listings.find("reductions/sum_ladder"))
    pw = rec.facts()["rel_err"]["pairwise"]
    assert hooks.field("reductions/sum_ladder", "facts.rel_err.pairwise", page, ".3g") == format(pw, ".3g")
    assert hooks.decide(rec, f"facts.rel_err.pairwise == {pw!r}")
