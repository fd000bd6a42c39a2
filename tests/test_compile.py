"""Every kernel compiles with nvcc, with the flags the helper uses at run
time, for sm_80 and sm_90, and ptxas reports no spills. A kernel file that
uses one architecture's own instructions (Hopper's wgmma: sm_90a) says so
in a line `// cudabook: arch <arch> ...`, and is compiled for the
architectures it names: one alone (wgmma_gemm.cu), or several, where the
file keeps such code behind `#ifdef __CUDA_ARCH_FEAT_SM90_ALL`
(gpt2_block.cu).

Needs no GPU: nvcc comes from the CUDA toolkit or from PyPI
(`pip install -e ".[dev]"` installs nvidia-cuda-nvcc and the header
wheels beside it). The first test says which one compiled, and with
CUDABOOK_EXPECT_NVCC=pypi (`.ci/run` sets it, after hiding the machine's
own toolkit) it fails unless the compiler, its tools and every CUDA header
came from the wheels the README installs.
A kernel that must spill says so, with the reason, in a line
`// cudabook: allow-spills <why>` in its .cu file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import LISTINGS

from cudabook.compile import nvcc_command
from cudabook.gpu import find_nvcc

KERNELS = [lst for lst in LISTINGS if lst.cu is not None]
ARCHS = ["sm_80", "sm_90"]


def archs_of(listing) -> list[str]:
    """The architectures a kernel file is built for: its `cudabook: arch`
    line's, else ARCHS."""
    m = re.search(r"//[ \t]*cudabook:[ \t]*arch((?:[ \t]+sm_\w+)+)", listing.cu.read_text())
    return m.group(1).split() if m else ARCHS


BUILDS = [(lst, arch) for lst in KERNELS for arch in archs_of(lst)]


@pytest.fixture(scope="module")
def nvcc():
    path = find_nvcc()
    assert path, "nvcc not found: run `pip install -e \".[dev]\"` (installs nvidia-cuda-nvcc)"
    return path


#: Every CUDA header a kernel file includes (a test below keeps this list
#: whole), and one they need in turn.
CUDA_HEADERS = ["cuda/atomic", "cuda_bf16.h", "cuda_fp16.h", "mma.h",
                "nv/target"]          # nv/target: what cuda_fp16.h itself needs
HOST_HEADERS = {"cstdio", "cstdlib", "stdint.h"}


def included_headers() -> set[str]:
    """The <...> headers the kernel files include."""
    found = set()
    for lst in KERNELS:
        found |= set(re.findall(r"#include\s*<([^>]+)>", lst.cu.read_text()))
    return found


def test_every_included_header_is_known():
    """A kernel that includes a new CUDA header adds it to CUDA_HEADERS,
    so the test below proves where that header comes from too."""
    unknown = included_headers() - set(CUDA_HEADERS) - HOST_HEADERS
    assert not unknown, f"add {sorted(unknown)} to CUDA_HEADERS (or HOST_HEADERS) in tests/test_compile.py"


def test_the_compiler_tools_and_headers_come_from_one_install(nvcc, tmp_path):
    """nvcc, the tools it runs (cicc, ptxas) and the CUDA headers it finds
    all come from the install that nvcc belongs to; under
    CUDABOOK_EXPECT_NVCC=pypi, that install is the PyPI wheels in this
    Python's site-packages. A missing header wheel then fails here, where
    a machine's own toolkit would have filled the gap unseen."""
    cu = tmp_path / "probe.cu"
    cu.write_text("".join(f"#include <{h}>\n" for h in CUDA_HEADERS) + "__global__ void probe() {}\n")
    dry = subprocess.run([nvcc, "--dryrun", "--cubin", "-arch=sm_90", str(cu), "-o", str(tmp_path / "p.cubin")],
                         capture_output=True, text=True, timeout=300)
    setting = dict(re.findall(r"^#\$ (_HERE_|CICC_PATH|PATH)=(.*)$", dry.stdout + dry.stderr, flags=re.M))
    assert "_HERE_" in setting, f"nvcc --dryrun does not say where nvcc is:\n{dry.stderr}"
    install = Path(setting["_HERE_"]).resolve().parent          # bin/..
    print(f"nvcc: {nvcc} (its install: {install})")
    tools = {"cicc": Path(setting["CICC_PATH"]) / "cicc", "ptxas": shutil.which("ptxas", path=setting["PATH"])}
    for tool, path in tools.items():
        assert path and Path(path).resolve().is_relative_to(install), \
            f"nvcc runs {tool} from {path}, not from {install} (nvcc's own install)"
    deps = subprocess.run([nvcc, "-M", "-arch=sm_90", *_flags(), str(cu)], capture_output=True, text=True,
                          timeout=300)
    assert deps.returncode == 0, f"{nvcc} cannot find the kernels' headers:\n{deps.stderr}"
    paths = [Path(p).resolve() for p in deps.stdout.replace("\\\n", " ").split()[1:]]
    for header in CUDA_HEADERS:
        where = [p for p in paths if p.as_posix().endswith("/" + header)]
        assert where, f"nvcc -M did not list <{header}>"
        assert all(p.is_relative_to(install) for p in where), \
            f"<{header}> came from {where[0]}, not from {install} (nvcc's own install)"
    expected = os.environ.get("CUDABOOK_EXPECT_NVCC", "")
    if expected == "pypi":
        site = Path(sysconfig.get_paths()["purelib"]).resolve()
        assert install.is_relative_to(site), \
            f"nvcc is {nvcc}, not the PyPI wheel in {site}: is a CUDA toolkit still visible on this machine?"
    else:
        assert expected == "", f"CUDABOOK_EXPECT_NVCC={expected!r}: the one value it takes is 'pypi'"


def _flags() -> list[str]:
    from cudabook.compile import NVCC_FLAGS

    return [f for f in NVCC_FLAGS if f != "-lineinfo"]


def parse_ptxas(report: str) -> dict[str, dict]:
    """{kernel: {registers, stack, spill_stores, spill_loads}} from -Xptxas=-v output."""
    out, current = {}, None
    for line in report.splitlines():
        m = re.search(r"Function properties for (\w+)", line) or \
            re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = out.setdefault(m.group(1), {})
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current is not None:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current is not None:
            current["registers"] = int(m.group(1))
    return out


def test_parse_ptxas():
    sample = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers"""
    assert parse_ptxas(sample) == {"k": {"stack": 8, "spill_stores": 4, "spill_loads": 4, "registers": 255}}


@pytest.mark.parametrize("listing, arch", BUILDS, ids=[f"{lst.id}-{arch}" for lst, arch in BUILDS])
def test_compiles_without_spills(listing, arch, nvcc, tmp_path):
    cmd = nvcc_command(listing.cu, arch, tmp_path / "k.cubin", nvcc=nvcc)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"nvcc failed on {listing.cu}:\n{r.stderr}"
    kernels = parse_ptxas(r.stdout + r.stderr)
    assert kernels, f"no ptxas report for {listing.cu}:\n{r.stderr}"
    bounds = r'(?:__launch_bounds__\([^)]*\)\s+)?'
    # Kernels declared in the open; a macro's body (a #define and its
    # continued lines) names a parameter, not a kernel.
    source = re.sub(r'^[ \t]*#[ \t]*define(?:[^\n]*\\\n)*[^\n]*', '', listing.cu.read_text(), flags=re.M)
    declared = re.findall(r'extern "C"\s+__global__\s+' + bounds + r'void\s+' + bounds + r'(\w+)\s*\(',
                          source)
    assert set(declared) <= set(kernels), f"ptxas did not report {set(declared) - set(kernels)}"
    if "cudabook: allow-spills" in listing.cu.read_text():
        return
    for name, info in kernels.items():
        assert info.get("spill_stores", 0) == 0 and info.get("spill_loads", 0) == 0, \
            f"{listing.cu.name}:{name} spills on {arch}: {info}"


@pytest.mark.parametrize("listing", [lst for lst in KERNELS if len(archs_of(lst)) == 1],
                         ids=lambda lst: lst.id)
def test_arch_marker_is_what_the_listing_compiles_for(listing):
    """A kernel file built for one architecture alone (its `cudabook: arch`
    line) is compiled for that one by its host program too."""
    arch = archs_of(listing)[0]
    assert f'ARCH = "{arch}"' in listing.py.read_text(), \
        f"{listing.py.name}: compiles {listing.cu.name} for {arch}? say ARCH = \"{arch}\""


def test_arch_marker_is_read_with_one_or_several_architectures(tmp_path):
    class L:
        cu = tmp_path / "k.cu"
    L.cu.write_text("// x\n// cudabook: arch sm_80 sm_90 sm_90a\n")
    assert archs_of(L) == ["sm_80", "sm_90", "sm_90a"]
    L.cu.write_text("// cudabook: arch sm_90a\n// (wgmma ...)\n")
    assert archs_of(L) == ["sm_90a"]
    L.cu.write_text("// no marker\n")
    assert archs_of(L) == ARCHS


@pytest.mark.parametrize("arch", ARCHS)
def test_the_timers_l2_flush_compiles(arch, nvcc, tmp_path):
    """cudabook.bench reads a buffer to empty the L2 with a kernel of its
    own, compiled at run time like the listings' kernels."""
    from cudabook.bench import _FLUSH_SOURCE

    cu = tmp_path / "flush.cu"
    cu.write_text(_FLUSH_SOURCE)
    r = subprocess.run(nvcc_command(cu, arch, tmp_path / "k.cubin", nvcc=nvcc), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"nvcc failed on bench's flush kernel:\n{r.stderr}"
    info = parse_ptxas(r.stdout + r.stderr).get("cudabook_read_all")
    assert info is not None and info.get("spill_stores", 0) == 0, r.stdout + r.stderr


def _locked(path) -> bool:
    """Does some open file description hold an flock on `path`?"""
    import fcntl

    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_a_source_is_compiled_and_loaded_under_its_own_lock(monkeypatch):
    """PyCUDA writes a new cubin into its cache with a plain write, so two
    listings compiling one kernel file at once could load half a cubin.
    compile_source holds the source's lock around PyCUDA's compile and
    load; another source's lock stays free."""
    import importlib
    import sys
    import types

    comp = importlib.import_module("cudabook.compile")   # the package's `compile` is the function
    gpu = importlib.import_module("cudabook.gpu")

    seen = []

    def fake_module(source, options, arch, no_extern_c, include_dirs):
        seen.append((_locked(comp.lock_path(source, arch)), _locked(comp.lock_path(source + "//", arch))))
        return "module"

    compiler = types.ModuleType("pycuda.compiler")
    compiler.SourceModule = fake_module
    driver = types.ModuleType("pycuda.driver")
    driver.CompileError = type("CompileError", (Exception,), {})
    monkeypatch.setitem(sys.modules, "pycuda", types.ModuleType("pycuda"))
    monkeypatch.setitem(sys.modules, "pycuda.compiler", compiler)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setattr(gpu, "_import_pycuda", lambda: driver)
    monkeypatch.setattr(comp, "init", lambda: types.SimpleNamespace(arch="sm_90"))
    monkeypatch.setattr(comp, "ensure_nvcc_on_path", lambda: "nvcc")

    assert comp.compile_source("__global__ void k() {}", "a test kernel")._module == "module"
    assert seen == [(True, False)]
    assert not _locked(comp.lock_path("__global__ void k() {}", "sm_90"))
