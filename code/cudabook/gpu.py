"""Finding the GPU: driver, device, primary context and the CUDA compiler.

Everything that can be missing on a reader's machine is found here, and a
missing piece raises `Unavailable` with one line that says what is missing and
how to fix it. Listings turn that into exit code 77 ("skipped") via `cli.run`.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from . import lock

#: Exit code of a listing that could not run because something is missing.
#: 77 is the code autotools and meson use for "skipped".
EXIT_SKIPPED = 77


class Unavailable(RuntimeError):
    """Something the listing needs (GPU, driver, nvcc, PyCUDA) is missing."""


def ceil_div(a: int, b: int) -> int:
    """Smallest integer q with q * b >= a: how many blocks cover a items."""
    return -(-a // b)


def find_nvcc() -> str | None:
    """Path of nvcc: from PATH, from $CUDA_HOME, or from the PyPI wheel
    `nvidia-cuda-nvcc` (site-packages/nvidia/cu13/bin)."""
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    purelib = Path(sysconfig.get_paths()["purelib"])
    candidates += sorted(purelib.glob("nvidia/cu*/bin/nvcc"), reverse=True)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def ensure_nvcc_on_path() -> str:
    """PyCUDA calls `nvcc` by name; make sure that name resolves."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise Unavailable(
            "nvcc not found: install the CUDA toolkit (and put its bin/ on PATH) "
            "or run `pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-cuda-runtime nvidia-nvvm`"
        )
    bindir = str(Path(nvcc).parent)
    if shutil.which("nvcc") != nvcc:
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return nvcc


@dataclass(frozen=True)
class Gpu:
    """The device a listing runs on, with the facts the records need."""

    device: object  # pycuda.driver.Device
    context: object  # pycuda.driver.Context (the device's primary context)
    index: int  # the device's ordinal among the visible GPUs
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    total_memory: int
    cuda_driver: str  # CUDA version the driver supports, e.g. "13.0"

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability


_GPU: Gpu | None = None


def _driver_library() -> str | None:
    """Why the NVIDIA driver's library (libcuda) cannot be loaded, or None
    if it can. Without it no CUDA program runs, whatever else is installed."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return None
        except OSError as e:
            why = str(e)
    return why


#: What a listing and `doctor` say on native Windows: what is wrong, and what to do.
WINDOWS = ("native Windows: the book's code runs on Linux (it loads libcuda.so.1 and uses POSIX "
           "file locks)", "run it under WSL2 (NVIDIA's CUDA on WSL), or on Colab")


def _import_pycuda():
    """PyCUDA's driver module, or Unavailable naming what is missing first:
    Linux, the NVIDIA driver (no GPU here), then PyCUDA."""
    if sys.platform == "win32":
        raise Unavailable(f"{WINDOWS[0]}; on Windows, {WINDOWS[1]}")
    try:
        import pycuda  # noqa: F401
    except ImportError:
        missing = _driver_library()
        if missing is not None:
            raise Unavailable(
                "no NVIDIA driver on this machine (libcuda could not be loaded), so no GPU to run on; "
                "run the listings on a machine with an NVIDIA GPU and its driver, or on Colab "
                "(PyCUDA is not installed either)"
            ) from None
        raise Unavailable(
            "PyCUDA is not installed: on a machine with an NVIDIA driver and nvcc, "
            "run `pip install -e \".[gpu]\"` (it builds PyCUDA from source)"
        ) from None
    try:
        import pycuda.driver as cuda
    except ImportError as e:  # libcuda.so.1 missing: no driver
        raise Unavailable(
            f"PyCUDA is installed but the NVIDIA driver library could not be loaded ({e}); "
            "install the NVIDIA driver, or use a machine with an NVIDIA GPU"
        ) from None
    return cuda


def init(device: int | None = None) -> Gpu:
    """Initialise CUDA once and make a device's primary context current:
    device 0, or `device` (a process of a multi-GPU listing names its own;
    the first call decides, and a later call naming another device is an
    error).

    The primary context is the one the CUDA runtime (and so PyTorch and CuPy)
    uses, so arrays and kernels from all of them can be mixed in one process.
    Set CUDA_VISIBLE_DEVICES to choose another GPU.
    """
    global _GPU
    if _GPU is not None:
        if device is not None and device != _GPU.index:
            raise RuntimeError(f"init(device={device}): this process already runs on GPU {_GPU.index}")
        return _GPU
    cuda = _import_pycuda()
    lock.shared()
    try:
        cuda.init()
    except cuda.Error as e:
        text = str(e)
        if "INSUFFICIENT_DRIVER" in text.upper() or "driver version is insufficient" in text:
            raise Unavailable(
                f"the NVIDIA driver is too old for this PyCUDA build ({text}); update the driver"
            ) from None
        raise Unavailable(f"no usable NVIDIA GPU: cuInit failed ({text})") from None
    count = cuda.Device.count()
    if count == 0:
        raise Unavailable("no NVIDIA GPU found (cuda.Device.count() == 0)")
    index = device or 0
    if not 0 <= index < count:
        raise Unavailable(f"GPU {index} was asked for; this machine has {count} (0 to {count - 1})")
    dev = cuda.Device(index)
    ctx = dev.retain_primary_context()
    ctx.push()
    import atexit

    def _pop():
        try:
            from pycuda.tools import clear_context_caches

            ctx.pop()
            clear_context_caches()
        except Exception:  # the context may already be gone at exit
            pass

    atexit.register(_pop)
    attr = cuda.device_attribute
    major, minor = divmod(cuda.get_driver_version(), 1000)
    _GPU = Gpu(
        device=dev,
        context=ctx,
        index=index,
        name=dev.name(),
        compute_capability=dev.compute_capability(),
        sm_count=dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
        l2_bytes=dev.get_attribute(attr.L2_CACHE_SIZE),
        total_memory=dev.total_memory(),
        cuda_driver=f"{major}.{minor // 10}",
    )
    return _GPU


def gpu_alone() -> None:
    """Say that this listing measures the hardware (bandwidth, block
    scheduling): when a test suite shares the GPU between listings, it gets
    the GPU, and the machine (every GPU's lock: host copies share its memory
    and PCIe), to itself from now until finish()."""
    init()
    lock.exclusive(machine=True)


def environment() -> dict:
    """Versions of everything that took part in a run, for the GPU record."""
    import platform

    import numpy

    env = {"python": platform.python_version(), "numpy": numpy.__version__,
           "host_cpu": host_cpu(), "host_cores": os.cpu_count(), **host_cpu_details()}
    try:
        import pycuda

        env["pycuda"] = pycuda.VERSION_TEXT
    except ImportError:
        pass
    if _GPU is not None:
        g = _GPU
        env.update(
            gpu=g.name,
            compute_capability=f"{g.compute_capability[0]}.{g.compute_capability[1]}",
            cuda=g.cuda_driver,
            sm_count=g.sm_count,
        )
    # The machine's GPUs: the suite says how many it saw (a listing it runs
    # sees only its own); run alone, the listing counts what it sees.
    machine = os.environ.get("CUDABOOK_MACHINE_GPUS")
    if machine and machine.isdigit():
        env["gpu_count"] = int(machine)
    elif _GPU is not None:
        import pycuda.driver as cuda

        env["gpu_count"] = cuda.Device.count()
    env["driver"] = _nvidia_driver_version()
    nvcc = find_nvcc()
    if nvcc:
        import subprocess

        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        release = [ln for ln in out.splitlines() if "release" in ln]
        env["nvcc"] = release[0].split("release", 1)[1].strip() if release else "unknown"
    torch_version = torch_version_string()
    if torch_version:
        env["torch"] = torch_version
    return env


def torch_version_string() -> str | None:
    """torch.__version__ (e.g. "2.11.0+cu130"), without importing torch
    (seconds) when it is not loaded yet: it is in torch/version.py. The
    package metadata is no substitute: it may lack the "+cu130" part."""
    import importlib.util
    import re
    import sys

    loaded = sys.modules.get("torch")
    if loaded is not None:
        return str(getattr(loaded, "__version__", "unknown"))
    spec = importlib.util.find_spec("torch")       # finds the package without running it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        version_py = Path(folder) / "version.py"
        if version_py.is_file():
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py.read_text(), re.M)
            if m:
                return m.group(1)
    return None


def host_cpu() -> str:
    """The host processor's model name, e.g. for a CPU baseline's label."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def host_cpu_details(cpuinfo: str | None = None) -> dict:
    """What a CPU baseline ran on, beyond the model name: host_cores (in
    environment()) counts logical CPUs, os.cpu_count(), which counts each
    hyperthread; host_physical_cores counts cores (distinct (physical id,
    core id) pairs in /proc/cpuinfo; None where it does not say, as in some
    virtual machines), host_usable_cpus the logical CPUs this process may
    run on, and host_simd the widest vector extension the CPU reports
    (AVX-512: 16 float32 lanes; AVX2: 8; NEON: 4)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    cores, flags, physical, core = set(), set(), None, None
    for line in cpuinfo.splitlines() + [""]:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "physical id":
            physical = value
        elif key == "core id":
            core = value
        elif key in ("flags", "Features"):
            flags.update(value.split())
        elif not line.strip():                      # the end of one logical CPU's paragraph
            if physical is not None and core is not None:
                cores.add((physical, core))
            physical = core = None
    simd = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"),
                                         ("sse2", "SSE2"), ("asimd", "NEON")) if flag in flags), None)
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {"host_physical_cores": len(cores) or None, "host_usable_cpus": usable, "host_simd": simd}


def _nvidia_driver_version() -> str | None:
    p = Path("/proc/driver/nvidia/version")
    if p.exists():
        for word in p.read_text().split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    smi = shutil.which("nvidia-smi")
    if smi:
        import subprocess

        r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0]
    return None
