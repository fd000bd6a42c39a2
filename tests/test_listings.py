"""Every listing, on a machine without a GPU: it follows the house layout,
says clearly why it cannot run, and its NumPy reference is right."""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import DESCRIPTIONS, LISTINGS, ROOT

from cudabook import listings
from cudabook.gpu import EXIT_SKIPPED


def _load(listing):
    spec = importlib.util.spec_from_file_location(f"listing_{listing.name}", listing.py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_layout(listing):
    tree = ast.parse(listing.py.read_text())
    doc = ast.get_docstring(tree)
    assert doc and "Run:" in doc, f"{listing.id}: the docstring must say what it shows and how to run it"
    main = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    assert main, f"{listing.id}: needs main(argv) -> int"
    params = main[-1].args
    assert params.posonlyargs or params.args, (
        f"{listing.id}: main takes the command-line arguments: def main(argv=None) -> int "
        f"(the companion notebook calls main([]), and cb.parse_args(argv, ...) reads them)")
    assert 'if __name__ == "__main__"' in listing.py.read_text(), (
        f"{listing.id}: end with\n\nif __name__ == \"__main__\":\n    sys.exit(cb.run(main))")
    if listing.exercise is not None:
        assert re.match(rf"Solution to exercise {listing.exercise}\b", doc), (
            f"{listing.id}: an exercise solution's docstring starts \"Solution to exercise "
            f"{listing.exercise}: ...\" (CONTRIBUTING.md, 'Exercise solutions')")
    if listing.cu is not None:
        src = listing.cu.read_text()
        assert 'extern "C"' in src, f"{listing.cu.name}: declare kernels extern \"C\""
        assert src.lstrip().startswith("//"), f"{listing.cu.name}: open with a comment saying what it is"


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_without_gpu_says_why_and_exits_77(listing, tmp_path):
    """With PyCUDA hidden, a listing prints one line naming what is missing
    first (on a machine with no NVIDIA driver, the driver; else PyCUDA) and
    exits 77 ("skipped"), never 0."""
    from cudabook.gpu import _driver_library

    (tmp_path / "pycuda").mkdir()
    (tmp_path / "pycuda" / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, str(listing.py)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=120)
    assert r.returncode == EXIT_SKIPPED, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    first = ("SKIPPED: no NVIDIA driver on this machine" if _driver_library() is not None
             else "SKIPPED: PyCUDA is not installed")
    assert len(lines) == 1 and lines[0].startswith(first), r.stderr


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_help(listing):
    r = subprocess.run([sys.executable, str(listing.py), "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "--seed" in r.stdout
    if DESCRIPTIONS[listing.id]["sized"]:
        assert "--n" in r.stdout


ADDS = [lst for lst in LISTINGS if lst.chapter == "first_kernel" and lst.name.startswith("add_")]


@pytest.mark.parametrize("listing", ADDS, ids=lambda lst: lst.id)
def test_vector_add_reference_against_exact_sums(listing):
    """The float64 reference equals the exactly rounded sum of each pair
    (math.fsum), computed one element at a time in pure Python."""
    mod = _load(listing)
    rng = np.random.default_rng(7)
    a = rng.standard_normal(1001, dtype=np.float32)
    b = (rng.standard_normal(1001) * 1e6).astype(np.float32)
    ref = mod.reference(a, b)
    assert ref.dtype == np.float64
    for i in range(a.size):
        assert ref[i] == math.fsum([float(a[i]), float(b[i])])


@pytest.mark.parametrize("listing", ADDS, ids=lambda lst: lst.id)
def test_vector_add_default_sizes_are_awkward(listing):
    src = listing.py.read_text()
    assert "n=1_000_003" in src and "bench_n=200_000_003" in src


def test_listings_that_measure_the_hardware_ask_for_the_gpu_alone():
    """A listing whose plain run measures the hardware (bandwidth, block
    scheduling) calls cb.gpu_alone(), so a suite that shares the GPU gives
    it the machine to itself."""
    for lid in ("ram_vram/bandwidth_meter", "ram_vram/ex3_copy_size", "threads_warps/block_placement",
                "threads_warps/ex1_tail_effect", "threads_warps/ex3_smem_limit"):
        assert "cb.gpu_alone()" in _listing(lid).py.read_text(), lid
    assert "cb.gpu_alone()" not in _listing("first_kernel/add_vectorized").py.read_text()


def test_cpu_baselines_are_the_fast_honest_ones():
    """No general power function for a small integer power, and results
    written into arrays allocated once (np.add(..., out=)), as a careful CPU
    programmer would write them."""
    for lid in ("why_gpus/gelu_cpu_vs_gpu", "why_gpus/ex1_add_one_crossover"):
        tree = ast.parse(_listing(lid).py.read_text())
        powers = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow)]
        assert not powers, f"{lid}: a general power function where a product would do, line(s) {powers}"
        outs = [k for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords if k.arg == "out"]
        assert outs, f"{lid}: results should go into arrays allocated once (out=)"


def _listing(lid):
    return next(lst for lst in LISTINGS if lst.id == lid)


def test_gelu_reference_and_numpy_version_against_math_tanh():
    mod = _load(_listing("why_gpus/gelu_cpu_vs_gpu"))
    x = np.random.default_rng(3).standard_normal(500).astype(np.float32)
    ref = mod.reference(x)
    y = np.full_like(x, np.nan)
    mod.gelu_numpy(x, y, np.empty_like(x))
    assert mod.cb.compare("numpy gelu", y, ref, k=8, scale=np.abs(x)).passed
    k = math.sqrt(2 / math.pi)
    for i in range(x.size):
        v = float(x[i])
        assert ref[i] == pytest.approx(0.5 * v * (1 + math.tanh(k * (v + 0.044715 * v**3))), rel=1e-13, abs=1e-15)


def test_gelu_crossover_logic():
    mod = _load(_listing("why_gpus/gelu_cpu_vs_gpu"))
    rows = [{"n": 1, "cpu_ms": 1, "g": 2}, {"n": 2, "cpu_ms": 3, "g": 2},
            {"n": 3, "cpu_ms": 1, "g": 2}, {"n": 4, "cpu_ms": 9, "g": 2}]
    assert mod.crossover(rows, "g", "cpu_ms") == 4  # from n=4 on the GPU always wins
    assert mod.crossover(rows[:3], "g", "cpu_ms") is None


def test_warp_rotate_reference():
    mod = _load(_listing("threads_warps/warp_sync"))
    x = np.arange(70, dtype=np.float32)
    ref = mod.reference(x)
    assert ref[0] == 1 and ref[31] == 0 and ref[32] == 33 and ref[63] == 32
    assert ref[64] == 65 and ref[69] == 0          # lane 5 of a partial warp: its neighbour is past the end


def test_overlap_reference_against_a_python_loop():
    mod = _load(_listing("ram_vram/overlap_streams"))
    x = np.random.default_rng(4).uniform(-1, 1, 50).astype(np.float32)
    ref = mod.reference(x)
    for i in range(x.size):
        v = xi = float(x[i])
        for _ in range(mod.ROUNDS):
            v = 0.5 * (math.sin(v) + xi)
        assert ref[i] == pytest.approx(v, rel=1e-14, abs=1e-15)
    assert f"#define ROUNDS {mod.ROUNDS}" in _listing("ram_vram/overlap_streams").cu.read_text()


def test_pcie_lane_rates():
    mod = _load(_listing("ram_vram/bandwidth_meter"))
    # PCIe 4.0 x16: 16 GT/s per lane, 128b/130b: 31.5 GB/s each way; 5.0 doubles it.
    assert 16 * mod.PCIE_LANE_GBS[4] == pytest.approx(31.5, rel=1e-3)
    assert 16 * mod.PCIE_LANE_GBS[5] == pytest.approx(63.0, rel=1e-3)


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_broken_listings_say_so_in_their_name(listing):
    """A deliberately broken listing is named broken_* and names the
    sanitizer tool that catches it; no other listing does either."""
    assert listing.name.startswith("broken_") == (listing.broken_tool is not None), \
        f"{listing.id}: broken_* listings need an 'Expect: compute-sanitizer --tool T ...' docstring line, and only they"


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda lst: lst.id)
def test_describes_itself(listing):
    """`--describe` (what the GPU suite asks first) works with no GPU."""
    assert not DESCRIPTIONS[listing.id]["error"], DESCRIPTIONS[listing.id]["error"]


def _ask_scratch_chapter(tmp_path, files: dict[str, str], question) -> dict[str, bool]:
    """question(listing) for each listing of a scratch chapter `ch` made of
    `files` (name: Python source)."""
    from cudabook import listings

    code = tmp_path / "code" / "ch"
    code.mkdir(parents=True)
    for name, source in files.items():
        (code / f"{name}.py").write_text(source)
    return {lst.name: question(lst) for lst in listings.discover(tmp_path)}


def _real_listings_where(question) -> set[str]:
    """The book's listings for which question(listing) holds; verify runs
    their timings alone through --bench, so each must have one."""
    real = {lst.id for lst in LISTINGS if question(lst)}
    assert all(DESCRIPTIONS[i]["bench"] for i in real), [i for i in real if not DESCRIPTIONS[i]["bench"]]
    return real


def test_times_host_follows_the_declaration_through_imports(tmp_path):
    """A listing's timings are host-bound when it, or a listing it imports,
    sets HOST_BOUND_TIMINGS = True at top level (annotated or not), unless
    it says False itself; False, a name inside a function, or another name
    does not count. The suite runs them alone."""
    from cudabook import listings

    found = _ask_scratch_chapter(tmp_path, {
        "block": "HOST_BOUND_TIMINGS = True\ndef run():\n    pass\n",
        "uses_block": "from ch import block\nblock.run()\n",
        "uses_block_fn": "from ch.block import run\nrun()\n",
        "says_false": "HOST_BOUND_TIMINGS = False\n",
        "in_function": "def f():\n    HOST_BOUND_TIMINGS = True\n",
        "other_name": "HOST_BOUND = True\n",
        "annotated": "HOST_BOUND_TIMINGS: bool = True\n",
        "opts_out": "from ch import block\nHOST_BOUND_TIMINGS = False\nblock.run()\n",
    }, listings.times_host)
    assert found == {"block": True, "uses_block": True, "uses_block_fn": True, "says_false": False,
                     "in_function": False, "other_name": False, "annotated": True, "opts_out": False}
    real = _real_listings_where(listings.times_host)
    assert {"transformer/gpt2_block", "transformer/ex2_batch_one"} <= real
    assert "attention/flash_bf16" not in real and "transformer/ex1_unfused_tail" not in real  # opts out


def test_times_cpu_finds_cpu_timings_through_imported_functions(tmp_path):
    """A listing times CPU code when it calls time_cpu, or imports from
    another listing a function that does (directly or through another of
    that module's functions); importing that module's other functions does
    not count. The suite runs such listings' timings alone (book_cli.verify)."""
    from cudabook import listings

    found = _ask_scratch_chapter(tmp_path, {
        "lib": ("import cudabook as cb\n"
                "def timed(fn):\n    return cb.time_cpu(fn)\n"
                "def sweep(fn):\n    return [timed(fn)]\n"
                "def reference(x):\n    return x\n"),
        "uses_sweep": "from ch.lib import sweep\ndef main():\n    return sweep(print)\n",
        "uses_reference": "from ch.lib import reference\nreference(1)\n",
        "own": "import cudabook as cb\ncb.time_cpu(print)\n",
        "plain": "import numpy as np\n",
        "via_module": "import ch.lib as lib\nlib.sweep(print)\n",
        "via_package": "from ch import lib\nlib.sweep(print)\n",
        "two_hops": "from ch.uses_sweep import sweep\ndef go():\n    return sweep(print)\n",
        "broken_syntax": "def (:\n",
    }, listings.times_cpu)
    assert found == {"lib": True, "uses_sweep": True, "uses_reference": False, "own": True, "plain": False,
                     "via_module": True, "via_package": True, "two_hops": True, "broken_syntax": False}
    real = _real_listings_where(listings.times_cpu)
    assert "why_gpus/gelu_cpu_vs_gpu" in real and "fusion/bias_gelu_residual" not in real


def _verify_calls(monkeypatch, args: list[str]) -> list[tuple[list[str], dict]]:
    """The pytest commands `cudabook verify <args>` would run, each with its
    environment, none of them run."""
    import subprocess
    import tempfile

    from cudabook import book_cli

    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, **kw: calls.append((cmd, kw["env"])) or 0)
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: "/nonexistent/cudabook-staging")
    assert book_cli.verify(args) == 0
    return calls


def test_verify_runs_cpu_and_host_bound_timings_last_and_alone(monkeypatch):
    """verify's second pass leaves out the benchmarks that time CPU code or
    host-bound GPU work; its third pass runs exactly those, on one worker."""
    from cudabook import book_cli, listings

    first, second, third = (cmd for cmd, _ in _verify_calls(monkeypatch, ["--stale"]))
    node = "tests/test_gpu.py::test_benchmark[{}]".format
    alone = {node(lst.id) for lst in LISTINGS if listings.times_cpu(lst) or listings.times_host(lst)}
    assert {node("why_gpus/gelu_cpu_vs_gpu"), node("transformer/gpt2_block"),
            node("transformer/ex3_long_sequences")} <= alone
    assert node("attention/flash_bf16") not in alone
    deselected = {second[i + 1] for i, a in enumerate(second) if a == "--deselect"}
    assert deselected == alone
    assert third[third.index("-n") + 1] == "1" and "--stale" in third
    assert {a for a in third if a.startswith("tests/test_gpu.py::")} == alone
    assert "--deselect" not in first and "--stale" in first
    # The first two passes collect only the files that hold GPU tests; the
    # third names its tests, and no file besides.
    files = [a for a in first if a.startswith("tests/") and "::" not in a]
    assert "tests/test_gpu.py" in files and "tests/test_records.py" not in files
    assert [a for a in second if a.startswith("tests/") and "::" not in a] == files
    assert not [a for a in third if a.startswith("tests/") and "::" not in a]
    assert all(f"no:{p}" in cmd for p in book_cli.UNUSED_PLUGINS for cmd in (first, second, third))


def test_verify_collects_what_it_is_told_to(monkeypatch):
    """Given test files or nodes of its own, verify adds none of its own
    files, and its third pass runs only the CPU-timing benchmarks among
    them; an option's value is not taken for a test path."""
    from cudabook import book_cli

    def commands(args):
        return [cmd for cmd, _ in _verify_calls(monkeypatch, args)]

    def collected(cmd):
        return [a for i, a in enumerate(cmd) if a.startswith("tests/") and cmd[i - 1] != "--deselect"]

    node = "tests/test_gpu.py::test_runs[why_gpus/ex3_one_copy]"
    calls = commands([node])
    assert len(calls) == 2, "no CPU-timing benchmark was asked for: no third pass"
    assert collected(calls[0]) == collected(calls[1]) == [node]

    gelu = "tests/test_gpu.py::test_benchmark[why_gpus/gelu_cpu_vs_gpu]"
    first, second, third = commands(["tests/test_gpu.py"])
    assert collected(first) == collected(second) == ["tests/test_gpu.py"]
    assert gelu in collected(third) and "tests/test_gpu.py" not in third, "the file once, not again whole"

    first = commands(["--deselect", node, "-k", "tests_of_mine"])[0]
    assert "tests/test_gpu.py" in collected(first), "an option's value is not a test path"
    assert book_cli.named_tests(["-k", "tests", "tests/test_gpu.py", "--deselect", node]) == ["tests/test_gpu.py"]


def test_verify_gives_timings_the_default_work_queues(monkeypatch):
    """A machine's image may export CUDA_DEVICE_MAX_CONNECTIONS; verify
    takes it away, so that only the suite's checking processes get one
    queue (tests/test_gpu.py, CHECKS_ENV)."""
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    envs = [env for _, env in _verify_calls(monkeypatch, [])]
    assert envs and all("CUDA_DEVICE_MAX_CONNECTIONS" not in env for env in envs)


#: Imports of a later chapter that are known and owed a fix (issue #45, item
#: 10): the first chapter's exercise 1 borrows the block-rate kernel that
#: chapter 4 introduces. Fixing it changes the listing and waits for the
#: book's next re-record; a new entry here needs the same kind of reason.
LATER_CHAPTER_IMPORTS = {("first_kernel/ex1_block_size", "threads_warps")}


def test_a_listing_imports_only_its_own_or_earlier_chapters():
    """CONTRIBUTING's rule: a listing may import an earlier chapter's code,
    never a later one's, since a reader meets the code in the book's order
    (and a later chapter's edit should not stale an earlier one's record)."""
    import re

    order = re.findall(r"chapters/(\w+)/index\.md", (ROOT / "mkdocs.yml").read_text())
    found = set()
    for lst in listings.discover():
        for module in listings.imported_modules(lst.py):
            other = module.split(".")[0]
            if other in order and lst.chapter in order and order.index(other) > order.index(lst.chapter):
                found.add((lst.id, other))
    assert found == LATER_CHAPTER_IMPORTS, (
        f"imports of a later chapter: {sorted(found - LATER_CHAPTER_IMPORTS)}; fixed, so drop from the list: "
        f"{sorted(LATER_CHAPTER_IMPORTS - found)}. Move the shared code to the earlier chapter (CONTRIBUTING.md, "
        "'Sharing code, and what makes a record stale')")
