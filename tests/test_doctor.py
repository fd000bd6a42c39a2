"""`python -m cudabook doctor`: its judgement, fed made-up facts for each
failure a reader can meet (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from cudabook.book_cli import diagnose, main

GOOD = {
    "nvidia_smi": "/usr/bin/nvidia-smi", "smi_query": "NVIDIA H200, 9.0, 580.159.04",
    "driver_cuda": "13.0", "nvcc": "/usr/local/cuda/bin/nvcc", "nvcc_version": "13.0",
    "nvcc_archs": ["compute_75", "compute_80", "compute_90", "compute_100"],
    "pycuda": "2026.1", "pycuda_cuda": "13.0", "tiny_kernel": "OK",
}


def _fails(facts):
    return [(c.label, c.detail) for c in diagnose(facts) if not c.ok]


def test_all_good():
    checks = diagnose(GOOD)
    assert all(c.ok for c in checks)
    assert [c.label for c in checks] == ["NVIDIA GPU", "driver", "nvcc", "PyCUDA", "tiny kernel"]
    assert "sm_90" in checks[0].detail and "can compile for sm_90" in checks[2].detail


@pytest.mark.parametrize("change,label,words", [
    ({"nvidia_smi": None}, "NVIDIA GPU", "nvidia-smi not found"),
    ({"smi_query": None, "smi_query_error": "No devices were found"}, "NVIDIA GPU", "No devices"),
    ({"driver_cuda": None}, "driver", "did not say"),
    ({"nvcc": None}, "nvcc", "not found"),
    ({"nvcc_archs": ["compute_75", "compute_80"]}, "nvcc", "cannot compile for sm_90"),
    ({"nvcc_version": "13.4"}, "nvcc", "newer than the driver"),
    ({"pycuda": None}, "PyCUDA", "not installed"),
    ({"pycuda_driver_error": "libcuda.so.1: cannot open"}, "PyCUDA", "driver library"),
    ({"pycuda_cuda": "13.2"}, "PyCUDA", "newer than the driver"),
    ({"tiny_kernel": "WRONG"}, "tiny kernel", "WRONG"),
    ({"platform": "win32"}, "system", "native Windows"),
])
def test_each_failure_is_named_with_a_fix(change, label, words):
    facts = dict(GOOD, **change)
    fails = _fails(facts)
    assert any(lab == label and words in det for lab, det in fails), fails
    assert all(c.fix for c in diagnose(facts) if not c.ok)


def test_no_gpu_still_checks_the_software():
    checks = diagnose({"nvidia_smi": None, "nvcc": "/x/nvcc", "nvcc_version": "13.0", "pycuda": None})
    assert [c.label for c in checks] == ["NVIDIA GPU", "nvcc", "PyCUDA"]


def test_doctor_exits_nonzero_on_this_gpu_less_machine_or_zero_when_ready():
    r = subprocess.run([sys.executable, "-m", "cudabook", "doctor"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "code")})
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith(("[ok] NVIDIA GPU", "[FAIL] NVIDIA GPU"))
    assert (r.returncode == 0) == all(not ln.startswith("[FAIL]") for ln in lines)


def test_list_and_run(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "first_kernel/add_vectorized" in out and "current" in out
    assert main(["run", "no_such_listing"]) == 2


def test_help_lists_the_commands_for_a_reader(capsys):
    """--help is for the reader: each command with what it does, not the
    module's notes on how it works."""
    from cudabook.book_cli import COMMANDS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(line in out for line, _, _ in COMMANDS.values())
    assert "diagnose" not in out and "pure logic" not in out


@pytest.mark.parametrize("cmd", ["doctor", "list", "run", "new", "verify", "compare-records"])
def test_each_command_has_its_own_help(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m cudabook {cmd}")


def test_wrong_arguments_name_the_command_and_show_its_usage(capsys):
    assert main(["new", "first_kernel"]) == 2
    err = capsys.readouterr().err
    assert "python -m cudabook new: wrong arguments: first_kernel" in err
    assert "usage: python -m cudabook new <chapter> <listing>" in err
    assert main(["frob"]) == 2
    assert "unknown command: frob" in capsys.readouterr().err
