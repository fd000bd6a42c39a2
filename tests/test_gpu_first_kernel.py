"""GPU checks specific to the chapter "Your first kernel".

- The device query agrees with torch.cuda and nvidia-smi.
- Each vector-add wrapper turns a wrong dtype, shape, layout, alignment or
  non-device argument into a Python error that names the argument.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from gpu_harness import ROOT, gpu_ready, lock_env, run_listing, skip_or_fail  # noqa: F401

from cudabook import listings
from cudabook.gpu import EXIT_SKIPPED

pytestmark = pytest.mark.gpu

QUERY = listings.find("first_kernel/device_query")
ADDS = ["add_one_per_thread", "add_grid_stride", "add_vectorized"]


def test_device_query_agrees_with_torch_and_nvidia_smi(tmp_path, gpu_ready):
    out = tmp_path / "q.json"
    r = run_listing(QUERY, "--json", str(out))
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip())
    assert r.returncode == 0, r.stderr
    facts = json.loads(out.read_text())["facts"]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        skip_or_fail("torch with CUDA is not installed, so there is nothing to compare the query with")
    else:
        p = torch.cuda.get_device_properties(0)
        assert facts["name"] == p.name
        assert facts["compute_capability"] == f"{p.major}.{p.minor}"
        assert facts["sm_count"] == p.multi_processor_count
        assert facts["total_memory_bytes"] == p.total_memory
        assert facts["l2_bytes"] == p.L2_cache_size
        assert facts["warp_size"] == getattr(p, "warp_size", 32)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        skip_or_fail("nvidia-smi is not installed, so there is nothing to compare the query with")
    else:
        q = subprocess.run([smi, "--id=0", "--query-gpu=name,memory.total,clocks.max.sm,clocks.max.memory",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True)
        assert q.returncode == 0, q.stderr
        name, mem_mib, sm_mhz, mem_mhz = [x.strip() for x in q.stdout.splitlines()[0].split(",")]
        assert facts["name"] == name
        # nvidia-smi's memory.total may leave out memory the driver reserves.
        assert abs(facts["total_memory_bytes"] / 2**20 - float(mem_mib)) / float(mem_mib) < 0.02
        assert abs(facts["sm_clock_mhz"] - float(sm_mhz)) <= 1
        assert abs(facts["memory_clock_mhz"] - float(mem_mhz)) <= 1


BAD_INPUTS = r"""
import json, sys
sys.path[:0] = ["code", "code/first_kernel"]
import importlib
import numpy as np
import cudabook as cb
cb.init()
from pycuda import gpuarray
mod = importlib.import_module(sys.argv[1])
kernel = mod.load_kernel()
n = 1001
good = lambda: gpuarray.to_gpu(np.ones(n, np.float32))
cases = {
    "a dtype": lambda: mod.add(kernel, gpuarray.to_gpu(np.ones(n, np.float64)), good(), good()),
    "b shape": lambda: mod.add(kernel, good(), gpuarray.to_gpu(np.ones(n + 1, np.float32)), good()),
    "a 2-D": lambda: mod.add(kernel, gpuarray.to_gpu(np.ones((n, 2), np.float32)), good(), good()),
    "b strided": lambda: mod.add(kernel, good(), gpuarray.to_gpu(np.ones(2 * n, np.float32))[::2], good()),
    "a on host": lambda: mod.add(kernel, np.ones(n, np.float32), good(), good()),
    "out misaligned": lambda: mod.add(kernel, good(), good(), gpuarray.to_gpu(np.ones(n + 1, np.float32))[1:]),
}
out = {}
for name, call in cases.items():
    try:
        call()
        cb.init().context.synchronize()
        out[name] = None
    except (TypeError, ValueError) as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


@pytest.mark.parametrize("name", ADDS)
def test_bad_inputs_name_the_argument(name, gpu_ready):
    r = subprocess.run([sys.executable, "-c", BAD_INPUTS, name], capture_output=True, text=True,
                       cwd=ROOT, timeout=300, env=dict(os.environ, **lock_env()))
    if r.returncode == EXIT_SKIPPED:
        skip_or_fail(r.stderr.strip())
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for case, err in got.items():
        arg = case.split()[0]
        if case == "out misaligned" and name != "add_vectorized":
            assert err is None, f"{name}: a 4-byte-aligned out is fine for scalar loads, got {err}"
            continue
        assert err is not None, f"{name}: {case} was accepted"
        assert err.split(": ", 1)[1].startswith(f"{arg}:"), f"{name}: {case}: error does not name '{arg}': {err}"
