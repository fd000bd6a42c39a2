"""One operator, many GPUs: a fat binary with every path, built, listed, loaded.

DRAFT for Part VI, chapter 2 (issue #42); not a listing yet.

The book compiles each kernel file at run time for the GPU it finds
(cb.compile), so it never ships machine code. A library cannot ask its
users for nvcc: it ships a *fat binary*, one file holding the same kernels
compiled for several targets, and the driver picks one at load time:

  -gencode arch=compute_75,code=sm_75     SASS for Turing (7.5): the portable path only
  -gencode arch=compute_80,code=sm_80     SASS for 8.0, which also runs on 8.6, 8.7, 8.9
                                          (same major, same or higher minor)
  -gencode arch=compute_90a,code=sm_90a   SASS for 9.0 alone, with wgmma ('a': arch-specific)
  -gencode arch=compute_90,code=compute_90  PTX, for what comes later: the driver
                                          JIT-compiles it for 10.0, 12.0 and any
                                          GPU newer than 9.0; no wgmma in it

gemm_fat.cu includes the book's three kernel files and convert.cu, so the
image holds exactly the kernels the listings run. A GPU that matches none
of these (7.0 with this image, or with CUDA 13's nvcc at all) gets
CUDA_ERROR_NO_BINARY_FOR_GPU from cuModuleLoad; dispatch.select_from_image
says so first, in words.

What PTX costs: a GPU with no SASS of its own in the image (Blackwell,
here) waits at load while the driver compiles the PTX, every kernel of the
module, with an optimising ptxas of its own; the driver keeps the result
in its compute cache (~/.nv/ComputeCache, CUDA_CACHE_PATH,
CUDA_CACHE_MAXSIZE), so the wait is once a machine, until the driver or
the image changes. CUDA_CACHE_DISABLE=1 turns that cache off: time_loads()
measures the cold JIT that way, against loading SASS. PTX also needs a
driver at least as new as the toolkit that wrote it (a CUDA 13.0 PTX
fails on a 12.x driver with CUDA_ERROR_UNSUPPORTED_PTX_VERSION), where
SASS from a 13.x toolkit loads on any 13.x driver (minor version
compatibility).

Run:    python fatbin.py                build, list (cuobjdump), ptxas's registers/spills
        python fatbin.py --gpu          and on a GPU: load it, time PTX JIT against SASS
        (cuobjdump: next to nvcc, on PATH, or named by $CUOBJDUMP)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dispatch  # noqa: E402  (also puts code/ on sys.path)
import cudabook as cb  # noqa: E402
from cudabook.gpu import find_nvcc  # noqa: E402

FAT_CU = HERE / "gemm_fat.cu"
# --8<-- [start:gencodes]
GENCODES = [("compute_75", "sm_75"), ("compute_80", "sm_80"), ("compute_90a", "sm_90a"),
            ("compute_90", "compute_90")]
# --8<-- [end:gencodes]


def nvcc_command(out: Path, gencodes=GENCODES, source: Path = FAT_CU, nvcc: str = "nvcc",
                 kind: str = "-fatbin") -> list[str]:
    """The nvcc line: the book's flags, the include folders (code/ for the
    book's files, this folder for convert.cu), one -gencode a target, and
    ptxas's resource report."""
    gen = [f"-gencode=arch={arch},code={code}" for arch, code in gencodes]
    return [nvcc, kind, *cb.NVCC_FLAGS, "-Xptxas=-v", f"-I{dispatch.CODE}", f"-I{HERE}", *gen,
            str(source), "-o", str(out)]


def build(out: Path, gencodes=GENCODES, source: Path = FAT_CU, kind: str = "-fatbin") -> str:
    """Build the image; returns ptxas's report (stderr + stdout)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise cb.Unavailable("nvcc not found")
    r = subprocess.run(nvcc_command(out, gencodes, source, nvcc, kind), capture_output=True, text=True,
                       timeout=900)
    if r.returncode:
        raise cb.KernelCompileError(f"nvcc failed:\n{r.stderr}")
    return r.stdout + r.stderr


def find_cuobjdump() -> str | None:
    """$CUOBJDUMP, else beside nvcc, else on PATH. (The PyPI nvcc wheel has
    none: it is in nvidia-cuda-cuobjdump.)"""
    named = os.environ.get("CUOBJDUMP")
    if named and os.access(named, os.X_OK):
        return named
    nvcc = find_nvcc()
    if nvcc:
        beside = Path(nvcc).parent / "cuobjdump"
        if beside.is_file():
            return str(beside)
    return shutil.which("cuobjdump")


def _cuobjdump(args: list[str], image: Path) -> str:
    tool = find_cuobjdump()
    if tool is None:
        raise cb.Unavailable("cuobjdump not found: set CUOBJDUMP, or install the CUDA toolkit's "
                             "(pip install nvidia-cuda-cuobjdump)")
    return subprocess.run([tool, *args, str(image)], capture_output=True, text=True, check=True).stdout


# --8<-- [start:listing]
def listing(image: Path) -> tuple[list[str], list[str]]:
    """The image's SASS targets and PTX targets, as `cuobjdump --list-elf
    --list-ptx` says: ELF "x.sm_90a.cubin" is SASS for sm_90a; PTX
    "x.sm_90.ptx" is PTX for compute_90 (cuobjdump names it sm_)."""
    text = _cuobjdump(["--list-elf", "--list-ptx"], image)
    elf = re.findall(r"^ELF file\s+\d+:\s+\S*?\.(sm_\w+)\.cubin", text, re.M)
    ptx = ["compute_" + a for a in re.findall(r"^PTX file\s+\d+:\s+\S*?\.sm_(\w+)\.ptx", text, re.M)]
    return elf, ptx


def contents(image: Path) -> dispatch.Image:
    """Each target's kernels: SASS from `cuobjdump -res-usage` (a line
    "arch = sm_80", then one "Function name:" a kernel), PTX from
    `cuobjdump -ptx` (its .entry lines)."""
    elf: dict[str, set] = {}
    arch = None
    for line in _cuobjdump(["-res-usage"], image).splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
            elf.setdefault(arch, set())
        m = re.match(r"\s*Function (\w+):", line)
        if m and arch:
            elf[arch].add(m.group(1))
    ptx: dict[str, set] = {}
    for section in re.split(r"Fatbin ptx code:", _cuobjdump(["-ptx"], image))[1:]:
        m = re.search(r"^\s*arch = sm_(\w+)", section, re.M)
        ptx["compute_" + m.group(1)] = set(re.findall(r"\.entry\s+(\w+)\s*\(", section))
    listed_elf, listed_ptx = listing(image)
    elf = {k: v for k, v in elf.items() if k in listed_elf}   # -res-usage also names the PTX's arch
    assert sorted(elf) == sorted(listed_elf) and sorted(ptx) == sorted(listed_ptx), (elf, ptx)
    return dispatch.Image({k: frozenset(v) for k, v in elf.items()},
                          {k: frozenset(v) for k, v in ptx.items()})
# --8<-- [end:listing]


def ptxas_resources(report: str) -> dict[tuple[str, str], dict[str, int]]:
    """ptxas -v, read: (arch, kernel) -> registers, spill stores and loads
    (bytes), stack frame. ptxas names each function, then its figures."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    key = None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for '(\w+)'", line)
        if m:
            key = (m.group(2), m.group(1))
            out[key] = {}
            continue
        if key is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[key].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[key]["registers"] = int(m.group(1))
    return out


# ------------------------------------------------------------- on a GPU only

#: The kernel each load timing launches once: bf16_to_f32 with n = 0 (no
#: memory touched), so "first launch" is the launch and nothing else.
PROBE = "bf16_to_f32"


def _child(image: str) -> None:
    """In a fresh process (the environment decides the cache and the
    loading mode before cuInit): time load, lookup and the first launch."""
    import numpy as np

    t0 = time.perf_counter()
    gpu = cb.init()
    import pycuda.driver as cuda

    cuda.Context.synchronize()
    t1 = time.perf_counter()
    module = cuda.module_from_file(image)
    t2 = time.perf_counter()
    f = module.get_function(PROBE)
    t3 = time.perf_counter()
    f(np.intp(0), np.intp(0), np.int64(0), block=(32, 1, 1), grid=(1, 1))
    cuda.Context.synchronize()
    t4 = time.perf_counter()
    print(json.dumps({"gpu": gpu.name, "cc": list(gpu.compute_capability), "init_s": t1 - t0,
                      "load_s": t2 - t1, "get_function_s": t3 - t2, "first_launch_s": t4 - t3}))


def time_loads(folder: Path, reps: int = 5) -> list[dict]:
    """Build, for this GPU, a SASS-only image (sm_XY, or sm_90a on 9.0) and a
    PTX-only one (compute_80: every path but wgmma), each of gemm_fat.cu's
    kernels; load each in fresh processes under CUDA_CACHE_DISABLE=1 (cold
    JIT every time), with eager and lazy module loading, and the PTX one
    also with a fresh compute cache (first load fills it, second reads it).
    Median of `reps` processes for each."""
    import statistics

    gpu = cb.init()
    own = "sm_90a" if gpu.compute_capability == (9, 0) else gpu.arch
    images = {"sass": folder / "sass.cubin", "ptx": folder / "ptx.fatbin"}
    build(images["sass"], [(own.replace("sm_", "compute_"), own)], kind="-cubin")
    build(images["ptx"], [("compute_80", "compute_80")])
    cases = []
    for loading in ("EAGER", "LAZY"):
        for name in ("sass", "ptx"):
            cases.append((f"{name}, {loading.lower()}, cache off", images[name],
                          {"CUDA_MODULE_LOADING": loading, "CUDA_CACHE_DISABLE": "1"}, False))
    cache = folder / "ComputeCache"
    cases.append(("ptx, eager, cache cold then warm", images["ptx"],
                  {"CUDA_MODULE_LOADING": "EAGER", "CUDA_CACHE_DISABLE": "0",
                   "CUDA_CACHE_PATH": str(cache)}, True))
    rows = []
    for label, image, env, fresh_cache in cases:
        runs = []
        for _ in range(reps):
            if fresh_cache:
                shutil.rmtree(cache, ignore_errors=True)
            for attempt in range(2 if fresh_cache else 1):
                r = subprocess.run([sys.executable, __file__, "--child-load", str(image)],
                                   env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
                if r.returncode:
                    raise RuntimeError(f"{label}: the child failed:\n{r.stderr}")
                runs.append((attempt, json.loads(r.stdout.strip().splitlines()[-1])))
        for attempt in sorted({a for a, _ in runs}):
            got = [x for a, x in runs if a == attempt]
            row = {"case": label + ("" if not fresh_cache else (", cold" if attempt == 0 else ", warm")),
                   **{k: statistics.median(x[k] for x in got)
                      for k in ("load_s", "get_function_s", "first_launch_s")}}
            rows.append(row)
            print(f"  {row['case']:38s} load {1e3 * row['load_s']:9.2f} ms   get_function "
                  f"{1e3 * row['get_function_s']:8.2f} ms   first launch {1e3 * row['first_launch_s']:8.2f} ms")
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child-load"]:
        _child(argv[1])
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gemm_fat.fatbin"
        t0 = time.perf_counter()
        report = build(out)
        print(f"built {out.name}: {out.stat().st_size:,} bytes in {time.perf_counter() - t0:.1f} s")
        print(_cuobjdump(["--list-elf", "--list-ptx"], out).rstrip())
        image = contents(out)
        for target, names in (*image.elf.items(), *image.ptx.items()):
            print(f"  {target:12s} {len(names):2d} kernels; paths: "
                  + ", ".join(p.name for p in dispatch.PATHS if set(p.kernels) <= names))
        res = ptxas_resources(report)
        for (arch, kernel), r in sorted(res.items()):
            if kernel in {k for p in dispatch.PATHS for k in p.kernels}:
                print(f"  ptxas {arch:8s} {kernel:28s} {r.get('registers', '?'):>4} registers, "
                      f"{r.get('spill_stores', 0)} B spill stores, {r.get('spill_loads', 0)} B spill loads")
        for cc in [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]:
            try:
                choice, picked = dispatch.select_from_image(cc, 4096, 4096, 4096, image)
                print(f"  CC {cc[0]}.{cc[1]}: loads {picked[1]} ({picked[0]}), path {choice.path.name}")
            except dispatch.UnsupportedGpu as e:
                print(f"  CC {cc[0]}.{cc[1]}: {e}")
        if "--gpu" in argv:
            import pycuda.driver as cuda

            cb.init()
            module = cuda.module_from_buffer(out.read_bytes())   # the whole fat image, as a library ships it
            print(f"loaded the fat image on {cb.init().name}: {PROBE} found: "
                  f"{module.get_function(PROBE) is not None}")
            time_loads(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(cb.run(main))
