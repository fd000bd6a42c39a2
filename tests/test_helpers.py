"""Unit tests of the helper package's logic, on the CPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import cudabook as cb
from cudabook import listing_cli as cli
from cudabook import listings
from cudabook.listings import ROOT
from cudabook.roofline import fp32_peak_flops, roofline


@pytest.mark.parametrize("a,b,q", [(1, 256, 1), (256, 256, 1), (257, 256, 2), (0, 32, 0),
                                   (1_000_003, 256, 3907), (2**31 - 1, 1024, 2**21)])
def test_ceil_div(a, b, q):
    assert cb.ceil_div(a, b) == q
    assert q * b >= a and (q - 1) * b < a or a == 0


def test_check_array_names_the_argument():
    x = np.zeros(10, np.float32)
    cb.check_array("x", x, dtype=np.float32, ndim=1, shape=(10,))
    with pytest.raises(TypeError, match=r"^a: expected dtype float32, got float64"):
        cb.check_array("a", x.astype(np.float64), dtype=np.float32)
    with pytest.raises(ValueError, match=r"^b: expected shape \(11,\)"):
        cb.check_array("b", x, shape=(11,))
    with pytest.raises(ValueError, match=r"^c: expected 2-D"):
        cb.check_array("c", x, ndim=2)
    with pytest.raises(ValueError, match=r"^d: expected a C-contiguous"):
        cb.check_array("d", np.zeros(20, np.float32)[::2])
    with pytest.raises(TypeError, match=r"^e: expected an array, got list"):
        cb.check_array("e", [1.0, 2.0])
    with pytest.raises(TypeError, match=r"^f: expected a device array .* got numpy.ndarray"):
        cb.check_array("f", x, on_device=True)


class FakeDeviceArray:
    """Just enough of a GPUArray for the checks: dtype, shape, flags, gpudata."""

    def __init__(self, address):
        self.dtype, self.shape, self.strides = np.dtype(np.float32), (4,), (4,)
        self.flags = np.zeros(4, np.float32).flags
        self.gpudata = address


def test_check_array_alignment():
    cb.check_array("a", FakeDeviceArray(0x7F0000000100), on_device=True, alignment=16)
    with pytest.raises(ValueError, match=r"^a: expected a device address aligned to 16 bytes"):
        cb.check_array("a", FakeDeviceArray(0x7F0000000104), on_device=True, alignment=16)


class FakeBuffer:
    """A device array reduced to what the overlap check reads: an address and a size."""

    def __init__(self, address, nbytes):
        self.gpudata, self.nbytes = address, nbytes


def test_check_separate_names_the_output_and_the_input():
    base = 0x7F0000000000
    a, b = FakeBuffer(base, 400), FakeBuffer(base + 400, 400)         # adjacent, not overlapping
    cb.check_separate("c", FakeBuffer(base + 800, 4), a=a, b=b)
    assert not cb.overlaps(a, b) and not cb.overlaps(b, a)
    assert cb.overlaps(a, FakeBuffer(base + 396, 4)) and cb.overlaps(FakeBuffer(base + 396, 4), a)
    assert cb.overlaps(a, FakeBuffer(base + 100, 8))                   # inside
    assert not cb.overlaps(a, FakeBuffer(base - 4, 4))
    with pytest.raises(ValueError, match=r"^c: overlaps b; the launch needs c in memory of its own"):
        cb.check_separate("c", FakeBuffer(base + 796, 8), a=a, b=b)
    cb.check_separate("out", FakeBuffer(base + 800, 4), a=a, res=None)   # None is no input
    x = np.zeros(100, np.float32)
    assert cb.overlaps(x, x[50:]) and cb.overlaps(x[::2], x[1::2])
    assert not cb.overlaps(x[:50], x[50:]) and not cb.overlaps(x, np.zeros(100, np.float32))
    assert not cb.overlaps(x, FakeBuffer(x.ctypes.data, x.nbytes))    # host and device memory
    with pytest.raises(ValueError, match=r"^y: overlaps x"):
        cb.check_separate("y", x[10:20], w=np.ones(3), x=x)
    cb.check_separate("y", x[:50], x=x[50:])


def test_bf16_rounding_is_to_nearest_with_ties_to_even():
    from cudabook.bf16 import from_bf16, to_bf16

    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the even one is 1;
    # 1 + 3 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-7, -2.5, 1 + 2**-8 + 2**-20], np.float32)
    assert from_bf16(to_bf16(x)).tolist() == [1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -2.5, 1 + 2**-7]
    assert to_bf16(x).dtype == np.uint16 and from_bf16(to_bf16(x)).dtype == np.float32
    assert to_bf16(np.array([3.0, -2.5], np.float32)).tolist() == [0x4040, 0xC020]   # the top halves


def test_check_size():
    assert cb.check_size("n", np.int64(5)) == 5
    with pytest.raises(ValueError, match=r"^n: expected 1 <= n"):
        cb.check_size("n", 0)
    with pytest.raises(ValueError, match=r"^n: expected"):
        cb.check_size("n", 2**31)
    with pytest.raises(TypeError, match=r"^n: expected an integer, got float"):
        cb.check_size("n", 3.0)
    with pytest.raises(TypeError):
        cb.check_size("n", True)


def test_compare_checks_every_element():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(1001)
    ok = cb.compare("x", ref.astype(np.float32), ref)
    assert ok.passed and 0 < ok.worst_ratio <= 1.0 and ok.outside == 0 and 0 < ok.norm_rel_err < 1e-7
    bad = ref.astype(np.float32)
    bad[700] = np.float32(bad[700] * (1 + 1e-5))
    res = cb.compare("x", bad, ref)
    assert not res.passed and res.outside == 1 and res.worst[0].index == 700
    assert res.norm_rel_err < 1e-6, "a norm-wise check would have let this pass"
    assert "FAIL" in res.line() and "[700]" in res.line() and "1 outside the bound" in res.line()


def test_compare_catches_one_element_in_a_hundred_million():
    """One element off by 3e-3 (relative) at n = 2**27 + 7 fails, and the
    check names it; the norm-wise error hides it."""
    n = 2**27 + 7
    ref = np.linspace(1.0, 2.0, n)
    out = ref.astype(np.float32)
    i = n - 5
    out[i] *= np.float32(1 + 3e-3)
    res = cb.compare("x", out, ref)
    assert not res.passed and res.outside == 1 and res.worst[0].index == i
    assert res.norm_rel_err < 1e-6
    del ref, out


def test_compare_does_not_depend_on_the_chunking(monkeypatch):
    """The result, ties and worst elements included, is the same whatever
    the chunk size: chunks of 7 elements, of 1,000, and one chunk for all."""
    from cudabook import check

    rng = np.random.default_rng(7)
    ref = np.round(rng.standard_normal(50_001), 2)          # many equal values: ties
    out = ref.astype(np.float32)
    out[[3, 20_000, 49_999]] = np.float32(np.nan), np.float32(1e9), out[49_999] * np.float32(1.1)
    ref[11] = 0.0
    out[11] = 0.0                                          # 0/0: exact where the bound is 0
    whole, exact = cb.compare("x", out, ref, k=2), cb.compare("x", out[:5000], ref[:5000], k=0)
    for chunk in (7, 1000, 4096, 1 << 20):
        monkeypatch.setattr(check, "_CHUNK", chunk)
        assert repr(cb.compare("x", out, ref, k=2)) == repr(whole)   # repr: NaN != NaN
        assert repr(cb.compare("x", out[:5000], ref[:5000], k=0)) == repr(exact)
    assert [e.index for e in whole.worst] == [3, 20_000, 49_999] and whole.outside == 3
    assert cb.compare("x", out, ref, k=2, show=0).worst == []
    bad = ref.copy()
    bad[9] = np.inf
    with pytest.raises(ValueError, match="reference has NaN or inf"):
        cb.compare("x", out, bad)


def test_compare_takes_a_float32_scale_or_a_number_as_the_float64_one():
    """A scale in float32, or one number for every element, gives the same
    check as the same values in float64 (each is widened exactly)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(10_001).astype(np.float32)
    ref = np.tanh(x.astype(np.float64))
    out = (ref * (1 + 4e-7 * rng.standard_normal(ref.size))).astype(np.float32)
    wide = cb.compare("x", out, ref, k=2, scale=np.abs(x).astype(np.float64))
    assert repr(cb.compare("x", out, ref, k=2, scale=np.abs(x))) == repr(wide)
    assert not wide.passed and wide.outside > 0          # the test compares failures, worst elements too
    one = cb.compare("x", out, ref, k=2, scale=0.5)
    assert repr(cb.compare("x", out, ref, k=2, scale=np.full(ref.size, 0.5))) == repr(one)
    assert [e.bound for e in one.worst] == [2 * 2**-24 * (abs(e.expected) + 0.5) for e in one.worst]


def test_torch_is_not_started_under_compute_sanitizer(monkeypatch):
    """Under the suite's sanitizer runs there are no library baselines, even
    with REQUIRE_GPU=1 (which otherwise makes a missing torch an error)."""
    monkeypatch.setenv("REQUIRE_GPU", "1")
    monkeypatch.setenv("CUDABOOK_SANITIZER", "memcheck")
    monkeypatch.setitem(__import__("sys").modules, "torch", None)   # importing it would fail
    assert cb.torch_cuda() is None
    monkeypatch.delenv("CUDABOOK_SANITIZER")
    with pytest.raises(cb.Unavailable, match="torch"):
        cb.torch_cuda()


def test_compare_bound_scales_with_k_and_scale():
    ref = np.array([1.0, 2.0])
    off = np.array([1.0, 2.0 * (1 + 3 * 2**-24)], dtype=np.float32)   # 3 units of roundoff off
    assert not cb.compare("x", off, ref, k=2).passed
    assert cb.compare("x", off, ref, k=4).passed
    cancel = np.array([1e-6])                    # a result of 1e-6 from terms of size 1
    noisy = np.array([1e-6 + 3e-8], dtype=np.float32)
    assert not cb.compare("x", noisy, cancel, k=1).passed
    assert cb.compare("x", noisy, cancel, k=1, scale=1.0).passed
    exact = cb.compare("max", np.array([3.0], np.float32), np.array([3.0]), k=0)
    assert exact.passed and "exact" in exact.line()
    assert not cb.compare("max", np.array([3.0000002], np.float32), np.array([3.0]), k=0).passed


def test_compare_catches_unwritten_poisoned_elements():
    ref = np.arange(1.0, 101.0)
    out = ref.astype(np.float32)
    out[-1] = np.nan  # the last element was never written
    res = cb.compare("x", out, ref)
    assert not res.passed and res.nonfinite == 1 and res.worst[0].index == 99
    assert "NaN/inf" in res.line()


def test_compare_unit_roundoff_and_shape():
    assert cb.unit_roundoff(np.float32) == 2**-24 and cb.unit_roundoff("bfloat16") == 2**-8
    assert cb.compare("x", np.ones(8, np.float32), np.ones(8)).u == 2**-24
    with pytest.raises(ValueError, match="shape"):
        cb.compare("x", np.ones(7, np.float32), np.ones(8))


def test_check_result_round_trips_through_json():
    res = cb.compare("x", np.array([1.0, 2.5], np.float32), np.array([1.0, 2.0]))
    again = cb.CheckResult.from_dict(json.loads(json.dumps(res.as_dict())))
    assert again == res and again.line() == res.line()


def test_benchmark_derives_its_figures_and_prints_them_short():
    t = cb.Timing(median_ms=1.0, p20_ms=0.9, p80_ms=1.1, min_ms=0.8, reps=50, l2_flushed=False)
    bt = cb.Timing(median_ms=2.0, p20_ms=1.9, p80_ms=2.1, min_ms=1.8, reps=50, l2_flushed=False)
    b = cb.Benchmark.make("k", t, 4_000_000_000, 5e12, ("torch.add", bt), {"copy": 0.9, "baseline": 1.5})
    assert b.bytes_per_s == pytest.approx(4e12) and b.fraction_of_ceiling == pytest.approx(0.8)
    assert b.baseline.ratio == pytest.approx(2.0) and b.targets.met == {"copy": False, "baseline": True}
    lines = b.lines()
    assert all(len(ln) <= 80 for ln in lines), lines
    assert any("MISSED" in ln for ln in lines) and any("ours/torch.add = 2.000" in ln for ln in lines)
    assert cb.Benchmark.from_dict(json.loads(json.dumps(b.as_dict()))) == b


def test_gpu_lock_gives_timing_the_machine_alone(tmp_path):
    """Readers share the lock; a timer waits for them, and nobody runs beside
    it. Checked on the order of what happened, not on how long it took."""
    import subprocess
    import sys

    script = tmp_path / "worker.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'code')!r})\n"
        "from cudabook import lock\n"
        "log = open(sys.argv[2], 'a')\n"
        "def say(w):\n    log.write(f'{w} {sys.argv[1]}\\n'); log.flush()\n"
        "lock.shared()\n"
        "if sys.argv[1].startswith('w'):\n"
        "    lock.exclusive(); say('W+'); time.sleep(0.05); say('W-')\n"
        "else:\n"
        "    say('r+'); time.sleep(0.05); say('r-')\n"
        "lock.release()\n")
    log = tmp_path / "log"
    env = dict(os.environ, CUDABOOK_GPU_LOCK=str(tmp_path / "gpu.lock"))
    procs = [subprocess.Popen([sys.executable, str(script), f"{'w' if i % 3 == 0 else 'r'}{i}", str(log)], env=env)
             for i in range(9)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    readers = writers = 0
    for line in log.read_text().split():
        if line in ("r+", "r-", "W+", "W-"):
            readers += {"r+": 1, "r-": -1}.get(line, 0)
            writers += {"W+": 1, "W-": -1}.get(line, 0)
            assert writers <= 1 and not (writers and readers), log.read_text()


def test_roofline():
    r = roofline(1e-3, bytes_moved=3_000_000_000, bandwidth=4e12)
    assert r["bound"] == "memory"
    assert r["bytes_per_s"] == pytest.approx(3e12)
    assert r["fraction"] == pytest.approx(0.75)
    r = roofline(1.0, bytes_moved=1, flops=10**12, bandwidth=1e12, peak_flops=2e12)
    assert r["bound"] == "compute" and r["fraction"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        roofline(0.0, bytes_moved=1, bandwidth=1.0)
    # H100/H200 SXM: 132 SMs x 128 lanes x 2 x 1.98 GHz = 66.9 TFLOP/s
    assert fp32_peak_flops((9, 0), 132, 1.98e9) == pytest.approx(66.9e12, rel=1e-3)
    assert fp32_peak_flops((1, 0), 1, 1.0) is None


def test_parse_args_defaults_and_describe(capsys):
    args = cli.parse_args([], "doc", n=10, bench_n=99)
    assert args.n == 10 and args.seed == 0 and not args.bench and args.budget_ms == 100
    assert cli.parse_args(["--bench"], "doc", n=10, bench_n=99).n == 99
    assert cli.parse_args(["--bench", "--n", "7"], "doc", n=10, bench_n=99).n == 7
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--describe"], "doc", n=10, bench_n=99)
    assert e.value.code == 0
    assert json.loads(capsys.readouterr().out) == {"sized": True, "bench": True, "bench_n": 99}
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--n", "0"], "doc", n=10)
    assert e.value.code == 2


def test_finish_exit_code_and_json(tmp_path):
    out = tmp_path / "r.json"
    cli.parse_args(["--json", str(out)], "doc", n=4)
    cli.report_check(cb.compare("x", np.ones(4, np.float32), np.ones(4)))
    assert cli.finish() == 0
    rec = json.loads(out.read_text())
    assert rec["passed"] and rec["checks"][0]["worst_ratio"] == 0 and "--json" not in rec["argv"]
    assert {"numpy", "python", "host_cpu"} <= set(rec["environment"])
    cli.parse_args([], "doc", n=4)
    cli.report_check(cb.compare("x", np.zeros(4, np.float32), np.ones(4)))
    assert cli.finish() == 1
    cli.parse_args([], "doc", n=4)
    assert cli.finish() == 1, "a listing that checks nothing fails"


def test_the_report_keeps_each_kernels_resources(tmp_path):
    """Each kernel looked up through cb.compile's module has its registers,
    local bytes (spills land there) and shared bytes in the run's facts;
    a new run starts with none."""
    from types import SimpleNamespace

    from cudabook.compile import Module

    kernel = SimpleNamespace(num_regs=40, local_size_bytes=8, shared_size_bytes=4096)
    inner = SimpleNamespace(get_function=lambda name: kernel, get_global=lambda name: ("ptr", 4))
    out = tmp_path / "r.json"
    cli.parse_args(["--json", str(out)], "doc", n=4)
    module = Module(inner)
    assert module.get_function("saxpy") is kernel and module.get_global("g") == ("ptr", 4)
    cli.report_facts(mine=1)
    cli.report_check(cb.compare("x", np.ones(4, np.float32), np.ones(4)))
    assert cli.finish() == 0
    facts = json.loads(out.read_text())["facts"]
    assert facts == {"mine": 1, "kernel_resources": {
        "saxpy": {"registers": 40, "local_bytes": 8, "shared_bytes": 4096}}}
    cli.parse_args(["--json", str(out)], "doc", n=4)
    cli.report_check(cb.compare("x", np.ones(4, np.float32), np.ones(4)))
    cli.finish()
    assert "kernel_resources" not in json.loads(out.read_text())["facts"]


def test_run_turns_unavailable_into_skip(capsys):
    def main():
        raise cb.Unavailable("no NVIDIA GPU found")
    assert cli.run(main) == cb.EXIT_SKIPPED == 77
    assert capsys.readouterr().err.strip() == "SKIPPED: no NVIDIA GPU found"
    assert cli.run(lambda: 0) == 0


# Native Windows, as far as a Linux machine can play it: no fcntl module
# (blocked before cudabook is imported), and sys.platform "win32" once
# NumPy and cudabook are in (NumPy would look for Windows DLLs at import).
AS_WINDOWS = """
import runpy, sys
sys.modules["fcntl"] = None
import numpy, cudabook
sys.platform = "win32"
"""


def _as_windows(code: str, **env) -> "subprocess.CompletedProcess":
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", AS_WINDOWS + code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "code"), **env})


def test_native_windows_listing_says_what_is_missing():
    """cudabook imports without fcntl, and a listing exits 77 with one line
    that names Linux and what to use instead, not a ModuleNotFoundError."""
    listing = ROOT / "code" / "first_kernel" / "add_vectorized.py"
    r = _as_windows(f"sys.argv = [{str(listing)!r}]\nrunpy.run_path({str(listing)!r}, run_name='__main__')")
    assert r.returncode == cb.EXIT_SKIPPED, r.stderr
    assert r.stderr.strip().splitlines() == [
        "SKIPPED: native Windows: the book's code runs on Linux (it loads libcuda.so.1 and uses POSIX "
        "file locks); on Windows, run it under WSL2 (NVIDIA's CUDA on WSL), or on Colab"]


def test_native_windows_suite_lock_says_why():
    """Where the GPU suite's lock is asked for without fcntl, the error says why."""
    r = _as_windows("from cudabook import lock\nlock.shared()", CUDABOOK_GPU_LOCK="/tmp/no-such.lock")
    assert r.returncode == 1
    assert "no POSIX file locks (fcntl): the GPU suite runs on Linux" in r.stderr.strip().splitlines()[-1]


TOOLING = {"__main__.py", "book_cli.py", "hashing.py", "listings.py", "mkdocs_hooks.py", "notebooks.py",
           "plots.py", "project.py", "record.py", "suite.py"}


def test_runtime_modules_are_what_listings_load():
    """The helper modules hashed into a listing's record are exactly those its
    run imports: the package's __init__ and what it imports. The modules that
    build the book and run the tests are never among them, so editing them
    never makes a record stale."""
    pkg = ROOT / "code" / "cudabook"
    lst = listings.find("first_kernel/add_vectorized")
    runtime = {p.name for p in listings.helper_modules(lst)}
    assert runtime == {"__init__.py", "bench.py", "check.py", "compile.py", "gpu.py", "listing_cli.py", "lock.py"}
    present = {p.name for p in pkg.glob("*.py")}
    assert not runtime & TOOLING
    # Loaded only by the listings that import them, and hashed only into theirs
    # (directly, or through a chapter helper: attention_fp32 through _ref.py).
    # evidence (with gpu_state and comparison, which it imports): issue #45's
    # typed measurements, which no listing imports until the book is
    # re-recorded with them.
    optional = {"ncu.py", "bf16.py", "gpu_state.py", "comparison.py", "evidence.py"}
    assert not optional & runtime
    assert "ncu.py" in {p.name for p in listings.helper_modules(listings.find("global_memory/strided_copy"))}
    for user in ("softmax_norm/softmax", "matmul_tc/tc_gemm", "attention/attention_fp32"):
        assert "bf16.py" in {p.name for p in listings.helper_modules(listings.find(user))}, user
    assert present <= runtime | TOOLING | optional | {"roofline.py"}, (
        f"unclassified helper modules: {present - runtime - TOOLING - optional}")


def test_helper_package_imports_nothing_chapter_specific():
    pkg = ROOT / "code" / "cudabook"
    for ch in listings.chapters():
        for p in pkg.glob("*.py"):
            assert f"import {ch}" not in p.read_text() and f"from {ch}" not in p.read_text(), p


def test_torch_version_is_read_without_importing_torch(tmp_path, monkeypatch):
    """Records name torch's version in every run; reading it must not cost
    an import of torch, and must give torch.__version__ ("+cu130" and all),
    whether or not the listing imported torch."""
    import sys

    from cudabook import gpu

    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('torch was imported')\n")
    (pkg / "version.py").write_text("__all__ = ['__version__']\n__version__ = '9.8.7+cu999'\ncuda = '99.9'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert gpu.torch_version_string() == "9.8.7+cu999"
    assert "torch" not in sys.modules
    fake = type(sys)("torch")
    fake.__version__ = "9.8.7+cu999"
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert gpu.torch_version_string() == "9.8.7+cu999"


def test_ncu_csv_becomes_one_dict_per_launch():
    """ncu --csv writes one row per launch and metric, numbers perhaps with
    thousands separators, after its own ==PROF== lines."""
    from cudabook import ncu

    text = '''==PROF== Connected to process 4242 (/usr/bin/python3)
==PROF== Profiling "copy_strided" - 0: 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","127.0.0.1","copy_strided","1","7","(256, 1, 1)","(65537, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","524,289"
"0","4242","python3","127.0.0.1","copy_strided","1","7","(256, 1, 1)","(65537, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","2,097,155"
"1","4242","python3","127.0.0.1","copy_strided","1","7","(256, 1, 1)","(65537, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","524289"
"1","4242","python3","127.0.0.1","copy_strided","1","7","(256, 1, 1)","(65537, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","16777220"
==PROF== Disconnected from process 4242
'''
    rows = ncu.parse_csv(text)
    assert [r["id"] for r in rows] == [0, 1] and rows[0]["kernel"] == "copy_strided"
    assert rows[0][ncu.SECTORS] / rows[0][ncu.REQUESTS] == 2_097_155 / 524_289
    assert rows[1][ncu.SECTORS] == 16_777_220.0
    assert ncu.parse_csv("==PROF== nothing profiled\n") == []


FAKE_LISTING = '''"""A listing that needs no GPU: it checks that n is odd."""
import atexit
import os
import sys
from dataclasses import dataclass
sys.path.insert(0, {code!r})
import cudabook as cb
from cudabook import lock


@dataclass
class Size:                      # a dataclass in a listing needs its module in sys.modules
    n: int


def main(argv=None):
    args = cb.parse_args(argv, __doc__, n=3)
    size = Size(args.n)
    print("size", size.n)
    os.system("echo from a child")
    if size.n == 4:
        lock.exclusive()
        raise RuntimeError("four is right out")
    if size.n == 6:
        print("mode after a raise:", lock._state["mode"])
    if size.n == 7:
        atexit.register(os._exit, 3)
    if size.n == 9:
        os.abort()
    if size.n == 11:
        raise cb.gpu.Unavailable("no GPU for eleven")
    if size.n == 15:                 # a size that raises, leaving work whose error shows when waited for
        import types

        def synchronize():           # fails once, then the fake GPU is gone
            cb.gpu._GPU = None
            del sys.modules["pycuda"], sys.modules["pycuda.driver"]
            raise RuntimeError("the GPU's error, from size 15")

        driver = types.ModuleType("pycuda.driver")
        driver.Context = types.SimpleNamespace(synchronize=synchronize)
        sys.modules["pycuda"], sys.modules["pycuda.driver"] = types.ModuleType("pycuda"), driver
        sys.modules["pycuda"].driver = driver
        cb.gpu._GPU = "a context"
        raise ValueError("size 15 raised")
    cb.report_check(cb.expect("n is odd", size.n % 2 == 1, f"n = {{size.n}}", n=size.n))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
'''


def _run_sizes(tmp_path, *pairs, text=None):
    import subprocess
    import sys

    listing = tmp_path / "code" / "fake" / "odd.py"
    listing.parent.mkdir(parents=True)
    listing.write_text(text if text is not None else FAKE_LISTING.format(code=str(ROOT / "code")))
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, CUDABOOK_GPU_LOCK=str(tmp_path / "gpu.lock"))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "run_sizes.py"), str(listing), str(out), *pairs],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    return listing, out, r


def test_run_sizes_runs_each_size_as_its_own_command_would(tmp_path):
    """tests/run_sizes.py: one process, several sizes; each size's output
    (a child process's too), exit code and report are its own, and a size
    that fails or raises, holding the GPU lock, does not stop the next or
    leave the lock held."""
    _, out, r = _run_sizes(tmp_path, "1:11", "2:12", "4:14", "6:16", "5:15")
    assert r.returncode == 0, r.stderr
    runs = {n: json.loads((out / f"n{n}.run.json").read_text()) for n in (1, 2, 4, 6, 5)}
    assert [runs[n]["returncode"] for n in (1, 2, 4, 6, 5)] == [0, 1, 1, 1, 0]
    assert (out / "n1.stdout").read_text().startswith("size 1\nfrom a child\nok   n is odd: n = 1")
    assert "FAILED: 1 of 1 check(s)" in (out / "n2.stderr").read_text()
    assert "RuntimeError: four is right out" in (out / "n4.stderr").read_text()
    assert not (out / "n4.json").exists()
    assert "mode after a raise: shared" in (out / "n6.stdout").read_text()
    for n, seed in ((1, 11), (5, 15)):
        report = json.loads((out / f"n{n}.json").read_text())
        assert report["argv"] == ["--n", str(n), "--seed", str(seed)] and report["n"] == n
        assert report["passed"] and [c["n"] for c in report["checks"]] == [n]
    # A size that raised is waited for too: the error of its work is its
    # own, not the next size's.
    (tmp_path / "sync").mkdir()
    _, out, r = _run_sizes(tmp_path / "sync", "15:15", "1:11")
    assert [json.loads((out / f"n{n}.run.json").read_text())["returncode"] for n in (15, 1)] == [1, 0]
    assert "the GPU's error, from size 15" in (out / "n15.stderr").read_text()


def test_sizes_outcome_fails_a_crash_a_late_exit_and_a_partial_skip(tmp_path):
    """What the GPU test makes of run_sizes's files: every size's failure
    is named; a crash names the size it happened in and the ones it
    prevented; an exit status after the last size fails the group."""
    from gpu_harness import sizes_outcome

    def outcome(sub, *pairs, text=None):
        d = tmp_path / sub
        d.mkdir()
        listing, out, r = _run_sizes(d, *pairs, text=text)
        fake = listings.Listing(chapter="fake", name="odd", root=d)
        assert fake.py == listing
        seeds = {int(p.split(":")[0]): int(p.split(":")[1]) for p in pairs}
        return sizes_outcome(fake, out, seeds, r, 100_000)

    runs, failures, skipped = outcome("ok", "1:1", "3:3")
    assert [x["n"] for x in runs] == [1, 3] and not failures and not skipped
    runs, failures, _ = outcome("fail", "1:1", "2:2", "3:3")
    assert len(failures) == 1 and "--n 2 --seed 2 exited 1" in failures[0]
    assert [x["n"] for x in runs] == [1, 2, 3]
    runs, failures, _ = outcome("late", "1:1", "7:7")
    assert len(failures) == 1 and "exited 3 after the last" in failures[0]
    runs, failures, _ = outcome("crash", "1:1", "9:9", "3:3")
    assert [x["n"] for x in runs] == [1]
    assert "--n 9 --seed 9: the process died running it" in failures[0]
    assert "Fatal Python error: Aborted" in failures[0]
    assert "--n 3 --seed 3: not run" in failures[1]
    runs, failures, skipped = outcome("skip", "1:1", "11:11")
    assert skipped == ["SKIPPED: no GPU for eleven"] and "1 of 2 sizes were skipped" in failures[0]
    runs, failures, skipped = outcome("skip_all", "11:11")
    assert skipped and not failures and not runs
    # A listing that cannot even be imported: its traceback, once, and the
    # other sizes only named.
    runs, failures, _ = outcome("no_import", "1:1", "3:3", text="raise ImportError('no such module here')\n")
    assert not runs and len(failures) == 2
    assert "--n 1 --seed 1: not run, the process ended before its first size (exit 1)" in failures[0]
    assert "ImportError: no such module here" in failures[0]
    assert failures[1].endswith("--n 3 --seed 3: not run, the process ended before its first size")


def test_per_gpu_locks_let_gpus_work_side_by_side(tmp_path):
    """One lock a GPU: timers on different GPUs hold their locks at the same
    time (each waits, holding its own, until it sees the other's start: with
    one lock for both they would give up); a listing that needs both GPUs,
    started while they hold them, starts only after both have let go, and
    while it times, a check on either GPU waits.
    Waits on the log, not on time."""
    import subprocess
    import sys
    import time

    script = tmp_path / "worker.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'code')!r})\n"
        "from cudabook import lock\n"
        "name, path, wait_for = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
        "def say(w):\n    open(path, 'a').write(w + '\\n')\n"
        "def seen():\n    return set(open(path).read().split()) if os.path.exists(path) else set()\n"
        "say(name + '?')\n"
        "lock.shared()\n"
        "if name.startswith('m'):\n    lock.exclusive(machine=True)\n"
        "elif not name.startswith('r'):\n    lock.exclusive()\n"
        "say(name + '+')\n"
        "deadline = time.monotonic() + 30\n"
        "while not set(wait_for) <= seen():\n"
        "    if time.monotonic() > deadline:\n        sys.exit(3)\n"
        "    time.sleep(0.005)\n"
        "say(name + '-')\n"
        "lock.release()\n")
    log = tmp_path / "log"
    a, b = str(tmp_path / "gpu0.lock"), str(tmp_path / "gpu1.lock")

    def start(name, locks, *wait_for):
        env = dict(os.environ, CUDABOOK_GPU_LOCK=os.pathsep.join(locks), CUDABOOK_MACHINE_LOCKS=os.pathsep.join([a, b]))
        env.pop("CUDABOOK_GPU_LOCK_OWNER", None)
        return subprocess.Popen([sys.executable, str(script), name, str(log), *wait_for], env=env)

    def logged(*marks, procs, why):
        """Wait until the log holds every mark, while every process in procs runs."""
        while not (log.exists() and set(marks) <= set(log.read_text().split())):
            assert all(p.poll() is None for p in procs), why
            time.sleep(0.005)

    def finished(procs) -> list[str]:
        """Wait for procs to exit 0; the log's events, in order."""
        assert [p.wait(timeout=60) for p in procs] == [0] * len(procs)
        return log.read_text().split()

    # Each timer lets go only when the other holds its GPU and the
    # two-GPU listing has asked for both.
    procs = [start("0", [a], "1+", "B?"), start("1", [b], "0+", "B?")]
    logged("0+", "1+", procs=procs, why="the one-GPU timers could not overlap")
    procs.append(start("B", [a, b]))
    events = finished(procs)
    assert events.index("B+") > max(events.index("0-"), events.index("1-")), events

    # The other way round: while the two-GPU listing times, a check that
    # wants GPU 1 (shared) waits for it.
    log.unlink()
    procs = [start("C", [a, b], "r?")]
    logged("C+", procs=procs, why="the two-GPU timer stopped before it held both GPUs")
    procs.append(start("r", [b]))
    events = finished(procs)
    assert events.index("r+") > events.index("C-"), events

    # A CPU timing on GPU 0's worker (machine=True) waits for a check that
    # holds GPU 1 shared: the cores are the machine's.
    log.unlink()
    procs = [start("r", [b], "m?")]
    logged("r+", procs=procs, why="the check stopped before it held GPU 1")
    procs.append(start("m", [a]))
    events = finished(procs)
    assert events.index("m+") > events.index("r-"), events


def test_suite_places_workers_on_gpus():
    from cudabook import suite

    assert [suite.worker_gpu(f"gw{k}", 2) for k in range(5)] == [0, 1, 0, 1, 0]
    assert suite.worker_gpu(None, 4) == 0 and suite.worker_gpu("gw7", 1) == 0
    with pytest.raises(ValueError):
        suite.worker_gpu("gw0", 0)
    assert suite.visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 5"}) == ["2", "5"]
    assert suite.visible_gpus({suite.GPUS_VARIABLE: "0,1", "CUDA_VISIBLE_DEVICES": "3"}) == ["0", "1"]
    assert suite.visible_gpus({suite.GPUS_VARIABLE: ""}) == []
    assert suite.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert suite.min_gpus("MIN_GPUS = 2\n") == 2
    assert suite.min_gpus("x = 1\ndef f():\n    MIN_GPUS = 4\n") == 1      # module level only
    assert suite.min_gpus("MIN_GPUS: int = 3\n") == 3                    # annotated
    assert suite.min_gpus("MIN_GPUS = 2\nMIN_GPUS = 4\n") == 4             # the last, as Python runs it
    assert suite.module_constant("X: int\n", "X") is None                  # declared, never set
    with pytest.raises(ValueError):
        suite.min_gpus("MIN_GPUS = 0\n")
    assert suite.sanitize_children("SANITIZE_CHILDREN = True\n")
    assert not suite.sanitize_children("SANITIZE_CHILDREN = 1\n") and not suite.sanitize_children("x = 1\n")
    # The listings of Part IV (code/multi_gpu) say they need two GPUs, and
    # only they do.
    from conftest import LISTINGS

    for lst in LISTINGS:
        assert (suite.min_gpus(lst.py.read_text()) == 2) == (lst.chapter == "multi_gpu"), lst.id


def test_notebook_kernel_starts_under_the_lock_and_its_cells_lock_alone(tmp_path, monkeypatch):
    """notebooks.execute holds the GPU shared while Jupyter and the kernel
    start (their CPU work waits for any timing to end, as a listing's does),
    lets go once the kernel is ready, and starts the kernel without the
    owner mark, so that the listings its cells run take their own locks."""
    from cudabook import lock, notebooks

    monkeypatch.setenv("CUDABOOK_GPU_LOCK", str(tmp_path / "gpu.lock"))
    monkeypatch.delenv(lock.OWNER, raising=False)
    seen = {}

    class FakeClient:                      # nbclient's NotebookClient, as far as execute uses it
        def __init__(self, nb, on_notebook_start, **kwargs):
            self.nb, self.hook = nb, on_notebook_start

        def execute(self):
            seen["starting"] = (lock._state["mode"], os.environ.get(lock.OWNER))
            self.hook(notebook=self.nb)    # the kernel is ready
            seen["cells"] = lock._state["mode"]

    monkeypatch.setattr("nbclient.NotebookClient", FakeClient)
    nb = {"cells": [], "metadata": {"cudabook": {}}, "nbformat": 4, "nbformat_minor": 5}
    out = notebooks.execute(nb, tmp_path)
    assert seen == {"starting": ("shared", None), "cells": None}
    assert lock._state["mode"] is None and "executed" in out["metadata"]["cudabook"]


def test_notebook_execute_with_a_real_kernel(tmp_path, monkeypatch):
    """The same with nbclient and ipykernel: the hook is called, the cell
    runs, and the kernel does not see the executor as its lock's owner."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from cudabook import lock, notebooks

    monkeypatch.setenv("CUDABOOK_GPU_LOCK", str(tmp_path / "gpu.lock"))
    monkeypatch.delenv(lock.OWNER, raising=False)
    cell = {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
            "source": f"import os\nprint('owner:', os.environ.get({lock.OWNER!r}))\nprint(os.getcwd())"}
    nb = {"cells": [cell], "metadata": {"cudabook": {}, "kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                       "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    out = notebooks.execute(nb, tmp_path, timeout=120)
    text = out["cells"][0]["outputs"][0]["text"]
    assert ("".join(text) if isinstance(text, list) else text) == f"owner: None\n{tmp_path}\n"
    assert lock._state["mode"] is None


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets: other systems keep Jupyter's TCP ports")
def test_notebook_kernels_talk_over_sockets_of_their_own(tmp_path, monkeypatch):
    """Each execute starts its kernel on Unix sockets in a fresh folder, not
    on TCP ports: Jupyter picks a free port before the kernel binds it, so
    two notebooks started at once could pick the same one (the GPU suite
    saw a notebook fail with "ZMQError: Address already in use")."""
    pytest.importorskip("nbclient")
    from cudabook import lock, notebooks

    monkeypatch.setenv("CUDABOOK_GPU_LOCK", str(tmp_path / "gpu.lock"))
    seen = []

    class FakeClient:
        def __init__(self, nb, km, on_notebook_start, **kwargs):
            seen.append((km.transport, km.ip))
            self.hook = on_notebook_start

        def execute(self):
            self.hook()

    monkeypatch.setattr("nbclient.NotebookClient", FakeClient)
    nb = {"cells": [], "metadata": {"cudabook": {}}, "nbformat": 4, "nbformat_minor": 5}
    notebooks.execute(nb, tmp_path)
    notebooks.execute(nb, tmp_path)
    assert [t for t, _ in seen] == ["ipc", "ipc"], seen
    folders = [Path(ip).parent for _, ip in seen]
    assert folders[0] != folders[1] and not any(f.exists() for f in folders), seen


def test_every_environment_variable_is_in_contributing():
    """CONTRIBUTING's table of environment variables names exactly those the
    code, the tests and CI read (issue #45, item 10: one registry)."""
    import re

    pattern = re.compile(r"\b(CUDABOOK_[A-Z0-9_]+|REQUIRE_GPU)\b")
    read = set()
    for base in ("code", "tests", ".ci"):
        for f in (ROOT / base).rglob("*"):
            if f.is_file() and f.suffix in ("", ".py", ".sh", ".tmpl") and "__pycache__" not in f.parts:
                read |= set(pattern.findall(f.read_text(errors="replace")))
    text = (ROOT / "CONTRIBUTING.md").read_text()
    table = text[text.index("## Environment variables"):text.index("## The checks")]
    named = set(re.findall(r"^\| `(CUDABOOK_[A-Z0-9_]+|REQUIRE_GPU)=", table, re.M))
    assert read == named, (f"read but not in CONTRIBUTING's table: {sorted(read - named)}; "
                           f"in the table but read nowhere: {sorted(named - read)}")


def test_host_cpu_details_count_cores_not_hyperthreads():
    """Two logical CPUs on one core count as one physical core; the widest
    vector extension is named; a cpuinfo without core ids gives None, not 0."""
    from cudabook.gpu import host_cpu_details

    two_threads_one_core = ("processor: 0\nphysical id: 0\ncore id: 0\nflags: sse2 avx avx2\n\n"
                            "processor: 1\nphysical id: 0\ncore id: 0\nflags: sse2 avx avx2\n\n"
                            "processor: 2\nphysical id: 1\ncore id: 0\nflags: sse2 avx avx2\n")
    d = host_cpu_details(two_threads_one_core)
    assert d["host_physical_cores"] == 2 and d["host_simd"] == "AVX2"
    assert host_cpu_details("processor: 0\nflags: avx512f avx2\n")["host_physical_cores"] is None
    assert host_cpu_details("processor: 0\nFeatures: fp asimd\n")["host_simd"] == "NEON"
