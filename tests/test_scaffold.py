"""`python -m cudabook new`: a scaffolded listing is picked up by every check
by itself, passes the CPU checks once included, and fails the freshness gate
(naming itself) until it has been run on a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import ROOT


def _tree(tmp_path):
    for d in ("code", "chapters", "results", "docs", "tests"):
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for f in ("mkdocs.yml", "pyproject.toml", "CONTRIBUTING.md"):
        shutil.copy(ROOT / f, tmp_path / f)
    return tmp_path


def _run(tree, *args, **kw):
    env = dict(os.environ, PYTHONPATH=str(tree / "code"))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=tree, env=env,
                          timeout=600, **kw)


def test_new_listing_goes_through_every_check(tmp_path):
    tree = _tree(tmp_path)
    r = _run(tree, "-m", "cudabook", "new", "first_kernel", "scale_demo")
    assert r.returncode == 0, r.stderr
    assert (tree / "code/first_kernel/scale_demo.cu").exists()
    assert '--8<-- "code/first_kernel/scale_demo.cu:kernel"' in r.stdout
    assert _run(tree, "-m", "cudabook", "new", "first_kernel", "scale_demo").returncode == 2  # no overwrite
    assert _run(tree, "-m", "cudabook", "new", "first_kernel", "bad-name").returncode == 2

    # Paste the printed includes into the chapter, as CONTRIBUTING.md says.
    page = tree / "chapters/first_kernel/index.md"
    blocks = r.stdout.split("\n\n", 1)[1].rsplit("\n\nthen", 1)[0]
    page.write_text(page.read_text() + "\n" + blocks.split(":\n\n", 1)[1] + "\n")

    # Every CPU check picks it up and passes, except the freshness gate.
    tests = ["tests/test_listings.py", "tests/test_compile.py", "tests/test_book.py::test_every_listing_is_included_by_a_chapter",
             "tests/test_book.py::test_every_include_resolves_to_a_file_and_section",
             "tests/test_book.py::test_chapters_include_code_rather_than_paste_it"]
    r = _run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "scale_demo or first_kernel", *tests)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "scale_demo" in _run(tree, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                                "tests/test_gpu.py").stdout
    r = _run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_records.py", "-k", "scale_demo")
    assert r.returncode == 1
    assert "first_kernel/scale_demo has never been run on a GPU" in r.stdout
    assert "REQUIRE_GPU=1 python -m cudabook verify --stale" in r.stdout and "scale_demo" in r.stdout
