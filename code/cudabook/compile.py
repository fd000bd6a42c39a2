"""Compiling a listing's `.cu` file for the GPU in this machine.

One set of nvcc flags, used both at run time (through PyCUDA) and by the
compile tests that run without a GPU, so what CI checks is what runs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from .gpu import Unavailable, ensure_nvcc_on_path, init

#: Flags for every listing kernel. -lineinfo lets compute-sanitizer and
#: Nsight Compute name source lines without slowing the code.
NVCC_FLAGS = ["-O3", "-lineinfo", "-std=c++17"]


#: What the compiler gave each kernel a listing looked up, by kernel name:
#: registers a thread, local memory a thread (where spilled registers and
#: arrays the compiler could not keep in registers go), static shared memory
#: a block. listing_cli.finish() keeps it in the run's facts as
#: "kernel_resources".
RESOURCES: dict[str, dict[str, int]] = {}


class KernelCompileError(RuntimeError):
    """nvcc rejected a listing's kernel file."""


def resources(function) -> dict[str, int]:
    """A loaded kernel's registers, local bytes and static shared bytes,
    as the driver reports them (ptxas's figures, from the cubin)."""
    return {"registers": int(function.num_regs), "local_bytes": int(function.local_size_bytes),
            "shared_bytes": int(function.shared_size_bytes)}


class Module:
    """A loaded module, as PyCUDA's SourceModule, that notes each kernel's
    resources (see RESOURCES) when it is looked up."""

    def __init__(self, module):
        self._module = module

    def get_function(self, name: str):
        function = self._module.get_function(name)
        RESOURCES[name] = resources(function)
        return function

    def __getattr__(self, attr):
        return getattr(self._module, attr)


def nvcc_command(cu_file: str | Path, arch: str, out: str | Path, nvcc: str = "nvcc") -> list[str]:
    """The nvcc command line that builds `cu_file` for `arch` (e.g. "sm_90"),
    with ptxas's resource report (registers, spills) switched on."""
    return [nvcc, "--cubin", f"-arch={arch}", *NVCC_FLAGS, "-Xptxas=-v", str(cu_file), "-o", str(out)]


def compile(cu_file: str | Path, arch: str | None = None):
    """Compile a `.cu` file with PyCUDA for this device's architecture and
    return the loaded module (`module.get_function("name")`).

    Kernel files declare their kernels `extern "C"` themselves, so the names
    you look up are the names in the file. Each kernel looked up is noted
    in RESOURCES, which the run's report keeps.
    """
    gpu = _ready()                    # a missing GPU or PyCUDA is said first
    path = Path(cu_file).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"kernel file not found: {path}")
    # The #line directive makes nvcc, compute-sanitizer and ncu name the real
    # file (PyCUDA compiles a temporary copy).
    return _compile(f'#line 1 "{path}"\n' + path.read_text(), str(path), arch or gpu.arch,
                    include_dirs=[str(path.parent)])


def compile_source(source: str, name: str, arch: str | None = None, include_dirs=()):
    """compile() for CUDA source held in a string; `name` says what it is
    in an error."""
    gpu = _ready()
    return _compile(source, name, arch or gpu.arch, include_dirs)


def _ready():
    """PyCUDA imported, its context made and nvcc found: this GPU's info."""
    from .gpu import _import_pycuda

    _import_pycuda()
    gpu = init()
    ensure_nvcc_on_path()
    return gpu


def _compile(source: str, name: str, arch: str, include_dirs):
    """Compile and load `source` for `arch`, one process at a time."""
    from pycuda.compiler import SourceModule
    from pycuda.driver import CompileError

    cache_dir = os.environ.get("PYCUDA_CACHE_DIR")
    if cache_dir:  # PyCUDA creates only its default cache folder
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    try:
        with one_at_a_time(source, arch):
            return Module(SourceModule(
                source,
                options=list(NVCC_FLAGS),
                arch=arch,
                no_extern_c=True,
                include_dirs=list(include_dirs),
            ))
    except CompileError as e:
        log = (getattr(e, "stderr", None) or "").strip() or str(e)
        if "Unsupported gpu architecture" in log or "is not defined for option 'gpu-architecture'" in log:
            raise Unavailable(
                f"this nvcc does not know {arch} (the GPU's architecture): "
                "install a newer CUDA toolkit"
            ) from None
        raise KernelCompileError(f"nvcc could not compile {name}:\n{log}") from None
    except FileNotFoundError as e:
        if Path(str(e.filename)).name == "nvcc":
            raise Unavailable(f"nvcc could not be run: {e}") from None
        raise


def lock_path(source: str, arch: str) -> Path:
    """The lock file of one source compiled for one architecture (in a
    folder of the temporary directory that belongs to this user)."""
    key = hashlib.sha256("\0".join([source, arch, *NVCC_FLAGS]).encode()).hexdigest()[:24]
    return _lock_folder() / f"{key}.lock"


@cache
def _lock_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"cudabook-compile-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def one_at_a_time(source: str, arch: str):
    """Hold this source's compile lock: one process at a time compiles it,
    or loads it from PyCUDA's cache. PyCUDA writes a new cubin into its
    cache with a plain write, so a second process that found the file
    while the first was still writing it loaded half a cubin, and failed
    (seen in the GPU suite, with 16 listings sharing one kernel file). The
    second process now waits, then finds the whole file. Different sources
    do not wait for each other. Where there is no fcntl (Windows), nothing
    is locked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path(source, arch), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
