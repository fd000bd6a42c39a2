"""Hardware counters from Nsight Compute (`ncu`), for listings that show
what the memory system did, not only how long it took.

    rows = ncu.profile([listing, "--ncu-child", ...], kernel="copy_strided",
                       metrics=ncu.SECTORS_PER_REQUEST)
    rows[0]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]

`profile` runs a command under ncu, which replays each launch of the named
kernel to read its counters, and returns one dict per launch in launch
order. ncu needs permission to read the GPU's counters (root, or the
driver's `NVreg_RestrictProfilingToAdminUsers=0`); without it, or without
ncu, it raises `Unavailable` with one line saying which.

Not imported by `cudabook/__init__.py`: only the listings that use it load
it (and only they are hashed with it).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .gpu import Unavailable

#: Global loads, counted in the L1/texture unit: 32-byte sectors fetched, and
#: requests (one per warp-wide load instruction). Their ratio is the number
#: of sectors one warp's load touches: 4 when 32 lanes read 32 consecutive floats.
SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
SECTORS_PER_REQUEST = (SECTORS, REQUESTS)
#: The same for global stores.
STORE_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
STORE_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
#: Sectors the L1 asked the L2 for (reads), and bytes device memory moved:
#: what the caches and HBM really did, which may differ from the sectors a
#: request touched (an L2 miss may fetch more than one sector from HBM).
L2_READ_SECTORS = "lts__t_sectors_srcunit_tex_op_read.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"


def find_ncu() -> str | None:
    """ncu from PATH, $CUDA_HOME/bin or /usr/local/cuda/bin."""
    found = shutil.which("ncu")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "bin" / "ncu").is_file():
            return str(Path(base) / "bin" / "ncu")
    return None


def parse_csv(text: str) -> list[dict]:
    """ncu's `--csv` report (one row per launch and metric) as one dict per
    launch, in launch order: {"id", "kernel", <metric>: float, ...}."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), len(lines))
    lines = [ln for ln in lines[start:] if ln.strip() and not ln.startswith("==")]
    launches: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if not row.get("ID") or not row.get("Metric Name"):
            continue
        launch = launches.setdefault(int(row["ID"]), {"id": int(row["ID"]), "kernel": row.get("Kernel Name", "")})
        value = row.get("Metric Value", "").replace(",", "")
        try:
            launch[row["Metric Name"]] = float(value)
        except ValueError:
            launch[row["Metric Name"]] = value
    return [launches[k] for k in sorted(launches)]


def profile(argv: list[str], *, kernel: str, metrics: tuple[str, ...], timeout: int = 600) -> list[dict]:
    """Run `python <argv>` under ncu, collecting `metrics` for every launch
    of the kernel named `kernel`; one dict per launch, in launch order."""
    from . import lock

    lock.exclusive()         # counters are read with the GPU alone (the child shares our hold)
    ncu = find_ncu()
    if ncu is None:
        raise Unavailable("ncu (Nsight Compute) not found: it ships with the CUDA toolkit")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        cmd = [ncu, "--csv", "--log-file", str(log), "--print-units", "base",
               "--clock-control", "none",        # measure the GPU as it runs, clocks untouched
               "--cache-control", "all",         # caches flushed before each launch: cold-cache counts
               "--target-processes", "all", "--kernel-name-base", "function",
               "--kernel-name", kernel, "--metrics", ",".join(metrics),
               sys.executable, *argv]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        text = log.read_text() if log.exists() else ""
    said = r.stdout + r.stderr + text
    if "ERR_NVGPUCTRPERM" in said:
        raise Unavailable("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): "
                          "run as root or allow profiling for all users in the NVIDIA driver")
    if r.returncode != 0:
        raise RuntimeError(f"ncu exited {r.returncode}:\n{said[-3000:]}")
    rows = parse_csv(text)
    if not rows:
        raise RuntimeError(f"ncu profiled no launch of {kernel}:\n{said[-3000:]}")
    missing = [m for m in metrics for r in rows if not isinstance(r.get(m), float)]
    if missing:
        raise RuntimeError(f"ncu reported no value for {sorted(set(missing))} (a metric this GPU "
                           f"does not have? `ncu --query-metrics` lists them):\n{said[-3000:]}")
    return rows


def profile_or_note(argv: list[str], *, kernel: str, metrics: tuple[str, ...]) -> list[dict] | None:
    """profile(), or None with one printed line saying why the counters are
    missing (no ncu, no permission), so a listing still reports its
    timings. Under the book's GPU suite (REQUIRE_GPU=1) a missing counter is
    an error instead."""
    try:
        return profile(argv, kernel=kernel, metrics=metrics)
    except Unavailable as e:
        if os.environ.get("REQUIRE_GPU") == "1":
            raise
        import textwrap

        print(textwrap.fill(f"(Nsight Compute counters not recorded: {e})", 80), flush=True)
        return None


def ratio(row: dict, num: str, den: str) -> float:
    """row[num] / row[den], with a clear error when the denominator is 0."""
    if not row.get(den):
        raise RuntimeError(f"ncu counted 0 for {den} in launch {row.get('id')} of {row.get('kernel')}")
    return row[num] / row[den]
