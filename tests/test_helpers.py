"""Unit tests of the helper package's logic, on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cudabook as cb
from cudabook import cli, records
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


def test_compare_passes_close_and_fails_far():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(1001)
    ok = cb.compare("x", ref.astype(np.float32), ref)
    assert ok.passed and 0 < ok.rel_err < 1e-7
    bad = ref.astype(np.float32)
    bad[700] += 1.0
    res = cb.compare("x", bad, ref)
    assert not res.passed and res.worst_index == 700
    assert "FAIL" in res.line() and "[700]" in res.line()


def test_compare_catches_unwritten_poisoned_elements():
    ref = np.arange(1.0, 101.0)
    out = ref.astype(np.float32)
    out[-1] = np.nan  # the last element was never written
    res = cb.compare("x", out, ref)
    assert not res.passed and res.nonfinite == 1 and res.worst_index == 99


def test_compare_uses_dtype_tolerance_and_checks_shape():
    ref = np.ones(8)
    assert cb.compare("x", np.ones(8, np.float32), ref).tol == 1e-6
    assert cb.compare("x", np.ones(8, np.float64), ref).tol == 1e-13
    with pytest.raises(ValueError, match="shape"):
        cb.compare("x", np.ones(7, np.float32), ref)


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
    assert args.n == 10 and args.seed == 0 and not args.bench
    assert cli.parse_args(["--bench"], "doc", n=10, bench_n=99).n == 99
    assert cli.parse_args(["--bench", "--n", "7"], "doc", n=10, bench_n=99).n == 7
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--describe"], "doc", n=10, bench_n=99)
    assert e.value.code == 0
    assert json.loads(capsys.readouterr().out) == {"sized": True, "bench": True}
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--n", "0"], "doc", n=10)
    assert e.value.code == 2


def test_finish_exit_code_and_json(tmp_path):
    out = tmp_path / "r.json"
    cli.parse_args(["--json", str(out)], "doc", n=4)
    cli.report_check(cb.compare("x", np.ones(4, np.float32), np.ones(4)))
    assert cli.finish() == 0
    rec = json.loads(out.read_text())
    assert rec["passed"] and rec["checks"][0]["rel_err"] == 0 and "--json" not in rec["argv"]
    cli.parse_args([], "doc", n=4)
    cli.report_check(cb.compare("x", np.zeros(4, np.float32), np.ones(4)))
    assert cli.finish() == 1


def test_run_turns_unavailable_into_skip(capsys):
    def main():
        raise cb.Unavailable("no NVIDIA GPU found")
    assert cli.run(main) == cb.EXIT_SKIPPED == 77
    assert capsys.readouterr().err.strip() == "SKIPPED: no NVIDIA GPU found"
    assert cli.run(lambda: 0) == 0


def test_helper_modules_are_all_classified():
    """A new helper module must be declared runtime (hashed into every GPU
    record) or tooling (not hashed), so records cannot silently miss code."""
    pkg = records.ROOT / "code" / "cudabook"
    present = {p.name for p in pkg.glob("*.py")}
    declared = set(records.RUNTIME_MODULES) | set(records.TOOLING_MODULES)
    assert present <= declared, f"unclassified helper modules: {present - declared}"
    assert set(records.RUNTIME_MODULES) <= present


def test_helper_package_imports_nothing_chapter_specific():
    pkg = records.ROOT / "code" / "cudabook"
    for ch in records.chapters():
        for p in pkg.glob("*.py"):
            assert f"import {ch}" not in p.read_text() and f"from {ch}" not in p.read_text(), p
