"""The book's command line, `python -m cudabook` (each listing's own command
line is listing_cli.py). What it prints for --help is USAGE and COMMANDS.

`doctor` gathers facts (nvidia-smi, nvcc, PyCUDA, a tiny kernel) and then
judges them in `diagnose`, which is pure logic so it can be tested without a
GPU. It prints one line per check, with a fix for each problem, and exits 0
only when every check passed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from . import listings, record
from .gpu import WINDOWS, find_nvcc


#: Each command: its usage line, what it does in a line, and more, as
#: `--help` shows them.
COMMANDS = {
    "doctor": ("python -m cudabook doctor", "is this machine ready to run the listings?",
               "One line per check (GPU, driver, nvcc, PyCUDA, a tiny kernel), with a fix for\n"
               "each problem; exits 0 only when every check passed."),
    "list": ("python -m cudabook list", "every listing, its chapter and the state of its GPU record",
             "A record is current, stale (the code changed since its GPU run) or missing."),
    "run": ("python -m cudabook run <chapter>/<listing> [args]", "run one listing",
            "For example first_kernel/add_vectorized --bench; the listing's own --help lists its\n"
            "arguments. It exits 0 when its answer is right, 1 when wrong, 77 when something\n"
            "it needs (GPU, driver, nvcc, PyCUDA) is missing."),
    "new": ("python -m cudabook new <chapter> <listing>", "scaffold a new listing",
            "Writes code/<chapter>/<listing>.cu and .py from the templates and prints the\n"
            "includes to paste into the chapter; CONTRIBUTING.md walks through the rest."),
    "verify": ("python -m cudabook verify [--stale] [pytest args]",
               "run the GPU suite and write the records",
               "Runs every listing's checks, sanitizer runs and timings on this GPU and writes a\n"
               "record for each; --stale: only what is not current. Other arguments go to\n"
               "pytest (-k <listing> for one)."),
    "compare-records": ("python -m cudabook compare-records <dir> [--band 0.1] [--facts]",
                        "do the records a GPU run wrote in <dir> reproduce the committed ones?",
                        "--band: how far a rate may move (default 0.1); --facts: also list the facts\n"
                        "that moved (the prose to re-read), without failing on them."),
}

USAGE = ("usage: python -m cudabook <command> [args]\n\n"
         + "\n".join(f"  {line}\n      {summary}" for line, summary, _ in COMMANDS.values())
         + "\n\npython -m cudabook <command> --help says more about one.")


def command_help(cmd: str) -> str:
    line, summary, more = COMMANDS[cmd]
    return f"usage: {line}\n\n{summary[0].upper() + summary[1:]}{'' if summary.endswith('?') else '.'}\n{more}"


@dataclass
class Check:
    ok: bool
    label: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        s = f"[{'ok' if self.ok else 'FAIL'}] {self.label}: {self.detail}"
        return s + (f"\n       fix: {self.fix}" if not self.ok and self.fix else "")


def _run(cmd: list[str]) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


TINY = r'''
# A tiny kernel through the same path the listings take (cudabook.compile).
import sys, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[1])
import cudabook as cb
cb.init()
from pycuda import gpuarray
cu = Path(tempfile.mkdtemp()) / "twice.cu"
cu.write_text('extern "C" __global__ void twice(float* x, int n)'
              '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }')
kernel = cb.compile(cu).get_function("twice")
x = np.arange(1000, dtype=np.float32)
g = gpuarray.to_gpu(x)
kernel(g.gpudata, np.int32(x.size), block=(128, 1, 1), grid=(8, 1))
print("OK" if np.array_equal(g.get(), 2 * x) else "WRONG")
'''


def gather() -> dict:
    """Collect the raw facts doctor judges. Every value may be None."""
    from pathlib import Path

    facts: dict = {"platform": sys.platform, "nvidia_smi": shutil.which("nvidia-smi")}
    if facts["nvidia_smi"]:
        rc, out = _run([facts["nvidia_smi"], "--query-gpu=name,compute_cap,driver_version",
                        "--format=csv,noheader"])
        facts["smi_query"] = out.strip() if rc == 0 else None
        facts["smi_query_error"] = None if rc == 0 else out.strip()
        rc, out = _run([facts["nvidia_smi"]])
        m = re.search(r"CUDA Version:\s*([\d.]+)", out)
        facts["driver_cuda"] = m.group(1) if m else None
    nvcc = find_nvcc()
    facts["nvcc"] = nvcc
    if nvcc:
        rc, out = _run([nvcc, "--version"])
        m = re.search(r"release ([\d.]+)", out)
        facts["nvcc_version"] = m.group(1) if m else None
        rc, out = _run([nvcc, "--list-gpu-arch"])
        facts["nvcc_archs"] = out.split() if rc == 0 else []
    try:
        import pycuda  # noqa: F401
        facts["pycuda"] = pycuda.VERSION_TEXT
        try:
            import pycuda.driver as cuda
            facts["pycuda_cuda"] = ".".join(str(v) for v in cuda.get_version()[:2])
        except ImportError as e:
            facts["pycuda_driver_error"] = str(e)
    except ImportError:
        facts["pycuda"] = None
    if facts.get("pycuda") and facts.get("smi_query"):
        code = str(Path(__file__).resolve().parents[1])
        rc, out = _run([sys.executable, "-c", TINY, code])
        facts["tiny_kernel"] = out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"
    return facts


def _ver(s: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", s or ""))[:2]


def diagnose(f: dict) -> list[Check]:
    """Judge the facts, in the order a reader should fix things."""
    checks: list[Check] = []
    if f.get("platform") == "win32":
        checks.append(Check(False, "system", *WINDOWS))
    if not f.get("nvidia_smi"):
        checks.append(Check(False, "NVIDIA GPU", "nvidia-smi not found",
                            "install the NVIDIA driver (it ships nvidia-smi); on Colab choose a GPU runtime"))
        return checks + _software(f, None)
    if not f.get("smi_query"):
        checks.append(Check(False, "NVIDIA GPU", f"nvidia-smi found no usable GPU ({f.get('smi_query_error')})",
                            "check that the GPU is visible (containers need --gpus all) and the driver is loaded"))
        return checks + _software(f, None)
    name, cc, driver = [x.strip() for x in f["smi_query"].splitlines()[0].split(",")]
    arch = "sm_" + cc.replace(".", "")
    checks.append(Check(True, "NVIDIA GPU", f"{name}, compute capability {cc} ({arch})"))
    if f.get("driver_cuda"):
        checks.append(Check(True, "driver", f"{driver}, supports CUDA up to {f['driver_cuda']}"))
    else:
        checks.append(Check(False, "driver", f"{driver}, but nvidia-smi did not say which CUDA it supports",
                            "update the NVIDIA driver"))
    return checks + _software(f, arch)


def _software(f: dict, arch: str | None) -> list[Check]:
    checks: list[Check] = []
    if not f.get("nvcc"):
        checks.append(Check(False, "nvcc", "not found",
                            "install the CUDA toolkit and put its bin/ on PATH, or "
                            "`pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-cuda-runtime nvidia-nvvm nvidia-cuda-cccl`"))
    else:
        detail = f"{f['nvcc']} (CUDA {f.get('nvcc_version')})"
        driver_cuda = f.get("driver_cuda")
        if driver_cuda and _ver(f.get("nvcc_version")) > _ver(driver_cuda):
            checks.append(Check(False, "nvcc", detail + f", newer than the driver's CUDA {driver_cuda}",
                                "update the driver, or use a CUDA toolkit no newer than the driver supports"))
        elif arch and "compute_" + arch[3:] not in f.get("nvcc_archs", []):
            checks.append(Check(False, "nvcc", detail + f", but it cannot compile for {arch}",
                                f"this GPU is newer than CUDA {f.get('nvcc_version')}: install a newer toolkit"))
        else:
            checks.append(Check(True, "nvcc", detail + (f", can compile for {arch}" if arch else "")))
    if not f.get("pycuda"):
        checks.append(Check(False, "PyCUDA", "not installed",
                            "on a machine with the CUDA toolkit: pip install -e \".[gpu]\""))
    elif f.get("pycuda_driver_error"):
        checks.append(Check(False, "PyCUDA", f"{f['pycuda']} installed, but the driver library did not load "
                            f"({f['pycuda_driver_error']})", "install the NVIDIA driver"))
    else:
        built, driver_cuda = f.get("pycuda_cuda"), f.get("driver_cuda")
        if built and driver_cuda and _ver(built) > _ver(driver_cuda):
            checks.append(Check(False, "PyCUDA", f"{f['pycuda']} built against CUDA {built}, newer than the "
                                f"driver's {driver_cuda}", "update the driver, or rebuild PyCUDA "
                                "against an older toolkit (pip install --no-binary pycuda pycuda)"))
        else:
            checks.append(Check(True, "PyCUDA", f"{f['pycuda']}, built against CUDA {built}"))
    if "tiny_kernel" in f:
        ok = f["tiny_kernel"] == "OK"
        checks.append(Check(ok, "tiny kernel", "compiled, launched, right answer" if ok else f["tiny_kernel"],
                            "" if ok else "read the error above; run a listing for the full message"))
    return checks


def doctor() -> int:
    checks = diagnose(gather())
    for c in checks:
        print(c.line())
    good = all(c.ok for c in checks)
    print("all good: python code/first_kernel/add_vectorized.py --bench" if good
          else "not ready: fix the first FAIL above, then run doctor again")
    return 0 if good else 1


def list_listings() -> int:
    width = max((len(lst.id) for lst in listings.discover()), default=10)
    for lst in listings.discover():
        state, rec = record.status(lst)
        text = record.badge_text(rec) if rec else ""
        print(f"{lst.id:<{width}}  {state:<8} {text}")
    return 0


def run_listing(name: str, args: list[str]) -> int:
    matches = [lst for lst in listings.discover() if name in (lst.id, lst.name)]
    if len(matches) != 1:
        print(f"no single listing called {name!r}; see `python -m cudabook list`", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(matches[0].py), *args])


def cpu_check_command(chapter: str, name: str) -> str:
    """The CPU checks of one new listing (CONTRIBUTING.md, step 4): the tests
    whose ids name it or its chapter, and the orphan check, whose id names
    neither. The site build is left out (it needs the record)."""
    return (f'python -m pytest -q tests/test_listings.py tests/test_compile.py tests/test_book.py '
            f'tests/test_records.py -k "{name} or {chapter} or orphan" '
            f'--deselect tests/test_book.py::test_site_builds_strict')


def new_listing(chapter: str, name: str, root=None) -> int:
    """Write code/<chapter>/<name>.cu and .py from the templates and print the
    include to paste into chapters/<chapter>/index.md. Everything else (tests,
    notebook, verification table) picks the listing up by itself; the
    freshness gate fails until it has been run on a GPU."""
    from pathlib import Path

    if root is None and not Path.cwd().resolve().is_relative_to(listings.ROOT.resolve()):
        # Checked before writing anything: an environment installed from one
        # clone would otherwise scaffold into that clone, not the one you are in.
        print(f"this Python's cudabook comes from {listings.ROOT}, not from the folder you are in "
              f"({Path.cwd()}), so `new` would write there. Run it from that checkout, or from "
              f"yours with PYTHONPATH=code (or after pip install -e \".[dev]\" in yours)", file=sys.stderr)
        return 2
    root = Path(root) if root else listings.ROOT
    for what, value in (("chapter", chapter), ("listing", name)):
        if not value.isidentifier():
            print(f"{what} must be a Python identifier such as my_{what}, got {value!r}", file=sys.stderr)
            return 2
        if value.startswith("_"):
            print(f"{what} {value!r}: a name starting with _ is a helper file, not a listing", file=sys.stderr)
            return 2
        if value == listings.HELPER_PACKAGE:
            print(f"{what} {value!r}: that name is the helper package's", file=sys.stderr)
            return 2
    exercise = listings.exercise_number(name)
    if name.startswith("broken_"):
        print(f"note: give {name}'s docstring the Expect: line a broken listing needs "
              "(CONTRIBUTING.md, 'A deliberately broken listing')", file=sys.stderr)
    elif exercise is not None:
        print(f"note: {name} is the solution to exercise {exercise}: its docstring starts "
              f"'Solution to exercise {exercise}: ...', its kernel is the section 'solution', "
              "and the chapter shows it in a collapsed admonition (CONTRIBUTING.md, 'Exercise solutions')",
              file=sys.stderr)
    code = root / "code" / chapter
    cu, py = code / f"{name}.cu", code / f"{name}.py"
    if cu.exists() or py.exists():
        print(f"{py} or {cu} exists already", file=sys.stderr)
        return 2
    templates = Path(__file__).with_name("templates")
    section = "solution" if exercise is not None else "kernel"
    title = f"Solution to exercise {exercise}" if exercise is not None else name.replace("_", " ").capitalize()
    fields = {"name": name, "chapter": chapter, "title": title, "section": section,
              "pad": " " * len(f'extern "C" __global__ void {name}(')}
    code.mkdir(parents=True, exist_ok=True)
    cu.write_text((templates / "listing.cu.tmpl").read_text().format(**fields))
    py.write_text((templates / "listing.py.tmpl").read_text().format(**fields))
    page = root / "chapters" / chapter / "index.md"
    print(f"wrote {cu.relative_to(root)} and {py.relative_to(root)} (in {root})")
    print(f"\npaste into {page.relative_to(root)}{'' if page.exists() else ' (create it, and add it to nav in mkdocs.yml)'}"
          f"{f', under exercise {exercise}' if exercise is not None else ''}:\n")
    blocks = [f'```cuda title="code/{chapter}/{name}.cu"\n--8<-- "code/{chapter}/{name}.cu:{section}"\n```',
              f'```python title="code/{chapter}/{name}.py"\n--8<-- "code/{chapter}/{name}.py:launch"\n```',
              f"<!-- cudabook:output {chapter}/{name} bench -->"]
    if exercise is not None:
        blocks = ['??? success "Solution"\n    Why the answer is what it is, in a few sentences.'] + [
            "\n".join("    " + line for line in b.splitlines()) for b in blocks]
    print("\n\n".join(blocks) + "\n")
    print("check it on the CPU (CONTRIBUTING.md, step 4; its record's check fails until a GPU has run it):")
    print(f"  {cpu_check_command(chapter, name)}")
    print("then, on a GPU machine: REQUIRE_GPU=1 python -m cudabook verify --stale")
    print(f"and commit code/{chapter}/{name}.*, results/{chapter}/{name}.json and chapters/{chapter}/{chapter}.ipynb")
    return 0


def compare_records(new_dir: str, band: float, facts: bool = False) -> int:
    """Compare the records a GPU run just wrote (under new_dir) with the
    committed ones: exit 1, naming each mismatch, unless every new record
    reproduces its committed one (see record.reproduces). facts: also list
    the facts that moved beyond the band (record.moved_facts), for the prose
    that cites them; those do not fail."""
    from pathlib import Path

    new_root = Path(new_dir)
    bad, seen, moved = [], 0, []
    for lst in listings.discover():
        new_path = new_root / lst.chapter / f"{lst.name}.json"
        if not new_path.exists():
            continue
        seen += 1
        new = record.from_dict(json.loads(new_path.read_text()), str(new_path))
        old = record.load(lst)
        if old is None:
            bad.append(f"{lst.id}: no committed record to compare with")
            continue
        bad += record.reproduces(new, old, band)
        moved += record.moved_facts(new, old, band) if facts else []
    for line in bad:
        print(line)
    if facts:
        print(f"{len(moved)} fact(s) moved beyond ±{100 * band:.0f}% (re-read the prose that cites them):")
        for line in moved:
            print("  " + line)
    print(f"{seen} record(s) compared, {len(bad)} mismatch(es) (band ±{100 * band:.0f}%)")
    return 1 if bad or not seen else 0


#: pytest plugins found in GPU images that the GPU suite does not use.
UNUSED_PLUGINS = ("benchmark", "cov", "jaxtyping", "anyio", "hypothesispytest")
#: pytest options whose value is the next argument (so not a test path).
VALUE_OPTIONS = ("-k", "-m", "-p", "-n", "-o", "-c", "--deselect", "--ignore", "--ignore-glob", "--durations",
                 "--maxfail", "--rootdir", "--basetemp", "--timeout", "--dist", "--maxschedchunk")


def named_tests(args: list[str]) -> list[str]:
    """The test files, folders and nodes among pytest arguments: those that
    name something under tests/ or a .py file, not an option's value."""
    out = []
    for i, a in enumerate(args):
        if a.startswith("-") or (i and args[i - 1] in VALUE_OPTIONS):
            continue
        if a.startswith("tests") or a.endswith(".py") or "::" in a:
            out.append(a)
    return out


def _within(node: str, paths: list[str]) -> bool:
    """Whether test node `node` is among what `paths` name (a node, its file or a folder above it)."""
    return any(node == p or (("::" not in p) and (node.split("::")[0] == p.rstrip("/")
                                                  or node.startswith(p.rstrip("/") + "/")))
               for p in paths)


def verify(args: list[str]) -> int:
    """The GPU suite in three passes over one staging folder (see tests/test_gpu.py):
    checks and sanitizer runs, then the timed tests, each on every core, then
    the timings of CPU code and of host-bound GPU work (listings.times_cpu,
    listings.times_host), one at a time with nothing beside them.
    Extra arguments (--stale, -k ...) go to every pass."""
    import os
    import tempfile
    import uuid

    env = dict(os.environ, CUDABOOK_STAGING=tempfile.mkdtemp(prefix="cudabook-staging-"))
    # The suite starts a thousand Python processes. Many GPU images set
    # PYTHONDONTWRITEBYTECODE, and then every one of them compiles NumPy (and
    # torch, for a baseline) from source again: 1.4 s instead of 0.6 s to run
    # a listing at n=1 on the H200 machine. The suite keeps compiled Python
    # in its own folder (PYTHONPYCACHEPREFIX, tests/gpu_harness.py).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The suite gives one hardware work queue to the processes that time
    # nothing (tests/test_gpu.py, CHECKS_ENV); the rest, timings included,
    # must have the default, whatever the machine's image exports.
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    env["CUDABOOK_RUN"] = uuid.uuid4().hex          # the passes share what conftest works out once
    cores = str(max(2, os.cpu_count() or 2))
    # Tests come longest first (conftest.py); one test at a time to each
    # worker, so that the longest are spread over the workers, not queued
    # on the first one in a batch.
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--maxschedchunk=1"]
    # Only the files that hold GPU tests are collected, and pytest plugins the
    # suite does not use are not loaded (a GPU image may have many): each
    # pass's sixteen workers each start pytest and collect.
    base += [a for p in UNUSED_PLUGINS for a in ("-p", f"no:{p}")]
    paths = named_tests(args)
    files = [] if paths else sorted(f"tests/{f.name}" for f in (listings.ROOT / "tests").glob("test_gpu*.py"))
    first = subprocess.call(base + ["-m", "gpu and not timed", "-n", cores, *files, *args], env=env,
                            cwd=listings.ROOT)
    # As many workers as cores here too. A timing waits for every listing
    # that holds the GPU shared to finish or to queue for its own timing, and
    # listings that start meanwhile wait behind it (cudabook/lock.py). So the
    # pass goes in waves: inputs and checks side by side, then the timings
    # one by one. Fewer workers make more waves: with eight, the timings of
    # Part I held the GPU for 60 s of a 144 s pass (H200, 2026-12-01).
    # A listing that times CPU code (time_cpu) comes last, alone: its timing
    # holds every GPU's lock, but processes the suite starts do work before
    # they take any lock (Python's start-up and imports, pytest's workers), and
    # a call on every core waits for its slowest thread. In one run "Why GPUs"
    # recorded PyTorch's GELU of 65,537 elements at 6 ms; the run before, 0.03 ms.
    # So does a listing that times work the host issues op by op (an eager
    # PyTorch module, listings.times_host): in one run the eager GPT-2 block
    # took 0.50 ms in one process and 0.33 ms in two others, at one shape.
    alone = [f"tests/test_gpu.py::test_benchmark[{lst.id}]"
             for lst in listings.discover() if listings.times_cpu(lst) or listings.times_host(lst)]
    if paths:                                   # only those among the tests asked for
        alone = [node for node in alone if _within(node, paths)]
    second = subprocess.call(base + ["-m", "gpu and timed", "-n", cores, *files,
                                     *[a for node in alone for a in ("--deselect", node)], *args],
                             env=env, cwd=listings.ROOT)
    rest = [a for a in args if a not in paths]  # the third pass names its tests itself
    third = (subprocess.call(base + ["-m", "gpu and timed", "-n", "1", *alone, *rest], env=env, cwd=listings.ROOT)
             if alone else 5)
    ok = {0, 5}  # 5: nothing selected (e.g. --stale with everything current)
    bad = [code for code in (first, second, third) if code not in ok]
    return bad[0] if bad else 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in COMMANDS and rest[:1] in (["-h"], ["--help"]):
        print(command_help(cmd))
        return 0
    if cmd == "doctor":
        return doctor()
    if cmd == "list":
        return list_listings()
    if cmd == "run" and rest:
        return run_listing(rest[0], rest[1:])
    if cmd == "new" and len(rest) == 2:
        return new_listing(*rest)
    if cmd == "verify":
        return verify(rest)
    if cmd == "compare-records" and rest:
        band = float(rest[rest.index("--band") + 1]) if "--band" in rest else record.NOISE_BAND
        return compare_records(rest[0], band, facts="--facts" in rest)
    if cmd in COMMANDS:
        print(f"python -m cudabook {cmd}: wrong arguments: {' '.join(rest) or '(none)'}\n", file=sys.stderr)
        print(command_help(cmd), file=sys.stderr)
    else:
        print(f"unknown command: {cmd}\n", file=sys.stderr)
        print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
