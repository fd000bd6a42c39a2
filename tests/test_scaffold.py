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
    tmp_path.mkdir(parents=True, exist_ok=True)
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


def test_new_exercise_solution_is_scaffolded_as_one(tmp_path):
    """ex<N>_<what> gets the docstring, the section and the collapsed
    admonition an exercise solution needs, and passes the checks for them."""
    tree = _tree(tmp_path)
    r = _run(tree, "-m", "cudabook", "new", "first_kernel", "ex9_demo")
    assert r.returncode == 0, r.stderr
    assert (tree / "code/first_kernel/ex9_demo.py").read_text().startswith('"""Solution to exercise 9')
    assert "--8<-- [start:solution]" in (tree / "code/first_kernel/ex9_demo.cu").read_text()
    assert '??? success "Solution"' in r.stdout
    assert '    --8<-- "code/first_kernel/ex9_demo.cu:solution"' in r.stdout
    page = tree / "chapters/first_kernel/index.md"
    blocks = r.stdout.split(":\n\n", 1)[1].rsplit("\n\ncheck it on the CPU", 1)[0]
    page.write_text(page.read_text() + "\n" + blocks + "\n")
    tests = ["tests/test_listings.py::test_layout", "tests/test_book.py::test_exercise_solutions_are_shown_collapsed",
             "tests/test_book.py::test_every_include_resolves_to_a_file_and_section"]
    r = _run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "ex9_demo", *tests)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "4 passed" in r.stdout, r.stdout[-500:]   # layout, collapsed, two includes


def test_new_refuses_to_write_into_another_checkout(tmp_path):
    """Run from a folder outside the checkout its cudabook comes from, `new`
    writes nothing and says where it would have written."""
    tree = _tree(tmp_path / "clone")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(tree / "code"))
    r = subprocess.run([sys.executable, "-m", "cudabook", "new", "first_kernel", "scale_demo"],
                       capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120)
    assert r.returncode == 2
    assert str(tree) in r.stderr and "PYTHONPATH=code" in r.stderr
    assert not (tree / "code/first_kernel/scale_demo.py").exists()
