"""One operator, many GPUs: cudabook.bf16_matmul, dispatched by compute capability.

DRAFT for Part VI, chapter 2 (issue #42); not a listing: it has no GPU
record yet, and lives outside code/ until it has one.

The operator is C = A @ B with A (M x K), B (K x N) and C (M x N) bfloat16,
row-major, held as np.uint16 bit patterns (PyCUDA has no bf16 dtype), the
products accumulated in fp32 and C rounded to bf16 once: the contract of
chapter 12's wgmma_gemm and of cuBLAS's bf16 GEMM. Three paths implement
it, each with kernels and launchers the book already has (imported, not
copied):

  wgmma     chapter 12's wgmma_gemm (TMA + wgmma, sm_90a). Compute
            capability 9.0 only: the 'a' in sm_90a marks arch-specific
            instructions (wgmma, setmaxnreg) that no later GPU promises to
            have, so neither its SASS nor its PTX runs on 10.0 or 12.0.
            K and N multiples of 8 (TMA's 16-byte rows).
  mma       chapter 12's tc_mma_pipelined (mma.sync m16n8k16, ldmatrix,
            cp.async; fp32 C) and convert.cu's f32_to_bf16. Compute
            capability 8.0 and later, any shape: mma.sync is an ordinary
            (not 'a') instruction, so it runs on every later GPU, Blackwell
            (10.0, 12.0) included.
  portable  convert.cu's bf16_to_f32 on A and B, chapter 11's
            sgemm_double_buffer (fp32 CUDA cores), f32_to_bf16 on C. Any
            GPU the toolkit can compile for: nvcc 13.0's lowest target is
            sm_75 (CUDA 13 dropped Maxwell, Pascal and Volta), so a 7.0
            V100 has no path with this toolkit, and is told so.

The paths are tried in that order, the fastest first; select() returns the
first that this GPU runs *and* this shape suits (wgmma at K = 1,001 falls
to mma), with the reason each earlier one was passed over. A path can be
forced (path="mma", or CUDABOOK_GEMM_PATH=mma; the argument wins), so a
test can run every path a GPU has; forcing one this GPU cannot run is an
UnsupportedGpu error, as is a GPU that no path fits: a Python exception
that names the compute capability and the paths with what each needs,
never a crash. UnsupportedGpu is a cb.Unavailable, so a listing turns it
into exit 77 ("skipped"), as it does a missing GPU.

Two ways to get the kernels onto the GPU, one table:
  - from source (the book's way, cb.compile): each path's .cu file is
    compiled at run time for this GPU's own architecture (sm_90a for
    wgmma), so the code is native SASS for whatever GPU is there, a
    Blackwell one included, provided the local nvcc knows it;
  - from a prebuilt fat binary (fatbin.py: SASS for sm_75, sm_80 and
    sm_90a, PTX for compute_90): the driver picks the SASS this GPU can
    run, or JIT-compiles the PTX, by the rules in driver_pick(); what that
    image holds for this GPU decides which paths exist
    (select_from_image). A 7.5 GPU finds sm_75 code with no tensor-core
    kernels in it; a 10.0 or 12.0 GPU finds no SASS it can run and gets
    the compute_90 PTX, JIT-compiled at load, which has mma.sync but not
    wgmma.

Errors. Argument mistakes raise TypeError/ValueError whose message starts
with the operator's name and then the argument's ("cudabook.bf16_matmul:
b: expected 17 rows ..."). A kernel that faults does so after its launch
has returned (launches are asynchronous): the error surfaces at some later
synchronising call, far from its cause, and it is sticky (the context is
unusable afterwards). With debug=True or CUDABOOK_DEBUG_SYNC=1 the
operator synchronises after its launches and raises AsyncFault naming the
operator, the path and the shape, at the call that caused it. That costs
a full round trip to the GPU a call (gpu_checks.py measures it), so it is
off by default.

Importing this module needs NumPy only (the book's launchers import
PyCUDA when first called); the selection logic runs with no GPU at all.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
CODE = HERE.parents[4] / "code"
sys.path.insert(0, str(CODE))       # the helper package and chapters 11 and 12
import cudabook as cb  # noqa: E402
from matmul_fp32 import sgemm  # noqa: E402
from matmul_tc import tc_gemm, wgmma_gemm  # noqa: E402

OPERATOR = "cudabook.bf16_matmul"
ENV_PATH = "CUDABOOK_GEMM_PATH"
ENV_DEBUG = "CUDABOOK_DEBUG_SYNC"
CONVERT_FILE = HERE / "convert.cu"
#: The lowest compute capability nvcc 13.0 compiles for (nvcc --list-gpu-arch
#: starts at compute_75). A CUDA 12 toolkit goes down to 5.0; pass floor=.
TOOLKIT_FLOOR = (7, 5)
U_FP32, U_BF16 = 2.0**-24, 2.0**-8
CC = tuple[int, int]


class UnsupportedGpu(cb.Unavailable):
    """No path of the operator runs on this GPU (or the forced one does not)."""


class AsyncFault(RuntimeError):
    """A kernel of the operator failed after its launch returned (debug mode)."""


def cc_text(cc: CC) -> str:
    return f"{cc[0]}.{cc[1]} (sm_{cc[0]}{cc[1]})"


# ------------------------------------------------------- compatibility rules

# --8<-- [start:rules]
_TARGET = re.compile(r"^(sm|compute)_(\d+?)(\d)([af]?)$")


def parse_target(target: str) -> tuple[str, CC, str]:
    """"sm_90a" -> ("sass", (9, 0), "a"); "compute_90" -> ("ptx", (9, 0), "");
    "sm_100f" -> ("sass", (10, 0), "f"). The last digit is the minor version."""
    m = _TARGET.match(target)
    if not m:
        raise ValueError(f"target: expected sm_XY[a|f] or compute_XY[a|f], got {target!r}")
    kind = "sass" if m.group(1) == "sm" else "ptx"
    return kind, (int(m.group(2)), int(m.group(3))), m.group(4)


def runs_on(target: str, cc: CC) -> bool:
    """Can code built for `target` run on a GPU of compute capability cc?

    SASS (sm_XY): binary compatible within a major version, on the same or
    a higher minor: sm_80 runs on 8.0, 8.6, 8.9, never on 9.0 or 7.5.
    PTX (compute_XY): the driver JIT-compiles it for any GPU of compute
    capability X.Y or higher, later majors included: forward compatible.
    'a' (sm_90a, compute_90a): arch-specific features, for exactly X.Y,
    SASS and PTX alike; not forward compatible.
    'f' (sm_100f, CUDA 12.9+): family-specific, for X.Y and the later
    minors of the same major that share the family (10.0 and 10.3 for
    sm_100f): modelled here as same major, minor >= Y."""
    kind, t, suffix = parse_target(target)
    if suffix == "a":
        return cc == t
    if kind == "sass" or suffix == "f":
        return cc[0] == t[0] and cc[1] >= t[1]
    return cc >= t


def driver_pick(cc: CC, elf: list[str], ptx: list[str]) -> tuple[str, str] | None:
    """What the driver loads from a fat binary for a GPU of compute
    capability cc: ("sass", target) for the best SASS that runs there (the
    highest), else ("ptx", target) for the highest PTX it can JIT-compile,
    else None (cuModuleLoad fails: CUDA_ERROR_NO_BINARY_FOR_GPU)."""
    def key(t):
        _, v, suffix = parse_target(t)
        return v, suffix == "a"            # at equal versions, the arch-specific build
    sass = sorted((t for t in elf if runs_on(t, cc)), key=key)
    if sass:
        return "sass", sass[-1]
    jit = sorted((t for t in ptx if runs_on(t, cc)), key=key)
    return ("ptx", jit[-1]) if jit else None
# --8<-- [end:rules]


# ------------------------------------------------------------ the paths table

def _aligned_8(m: int, n: int, k: int) -> str | None:
    for name, size in (("a.shape[1] (K)", k), ("b.shape[1] (N)", n)):
        if size % 8:
            return (f"{name}: must be a multiple of 8 for the wgmma path (TMA reads rows "
                    f"that start on 16-byte boundaries), got {size:,}")
    return None


# --8<-- [start:table]
@dataclass(frozen=True)
class GemmPath:
    """One way to compute the operator: where it runs, which shapes it
    takes, what it is built for, the kernels it needs, its error bound."""
    name: str
    needs: str                                  # for error messages
    runs_on: Callable[[CC], bool]               # from source: does this GPU run it?
    kernels: tuple[str, ...]                    # the names it looks up in an image
    arch: Callable[[CC], str]                   # what cb.compile builds it for
    bound_k: Callable[[int], float]             # the book's accumulation bound, units of 2^-24
    shape_error: Callable[[int, int, int], str | None] = lambda m, n, k: None
    book: tuple = field(default=(), compare=False)   # the book's launchers it calls


def _own_arch(cc: CC) -> str:
    return "sm_%d%d" % cc


PATHS: tuple[GemmPath, ...] = (
    GemmPath("wgmma", "compute capability 9.0 exactly (sm_90a code runs on no other GPU)",
             lambda cc: cc == (9, 0), ("wgmma_gemm",),
             lambda cc: wgmma_gemm.ARCH, tc_gemm.bound_k, _aligned_8,
             book=(wgmma_gemm.wgmma_gemm,)),
    GemmPath("mma", "compute capability 8.0 or later (mma.sync bf16, ldmatrix, cp.async)",
             lambda cc: cc >= (8, 0), ("tc_mma_pipelined", "tc_mma_pipelined_unaligned", "f32_to_bf16"),
             _own_arch, tc_gemm.bound_k, book=(tc_gemm.tc_gemm,)),
    GemmPath("portable", "compute capability {floor} or later (the lowest this toolkit compiles for)",
             lambda cc: True, ("sgemm_double_buffer", "bf16_to_f32", "f32_to_bf16"),
             _own_arch, sgemm.bound_k, book=(sgemm.sgemm,)),
)
# --8<-- [end:table]


def _needs(path: GemmPath, floor: CC) -> str:
    return path.needs.format(floor=f"{floor[0]}.{floor[1]}")


def _menu(paths, floor: CC) -> str:
    return "; ".join(f"{p.name} (needs {_needs(p, floor)})" for p in paths)


def _runs(path: GemmPath, cc: CC, floor: CC) -> bool:
    return cc >= floor and path.runs_on(cc)


@dataclass(frozen=True)
class Choice:
    path: GemmPath
    why: list[str]          # one line for each path passed over, then the one taken
    forced: bool = False


def requested_path(path: str | None, paths=PATHS) -> str | None:
    """The forced path: the argument, else $CUDABOOK_GEMM_PATH, else None."""
    source = "path"
    if path is None:
        path, source = os.environ.get(ENV_PATH) or None, ENV_PATH
    if path is None:
        return None
    names = [p.name for p in paths]
    if path not in names:
        raise ValueError(f"{OPERATOR}: {source}: expected one of {', '.join(names)}, got {path!r}")
    return path


# --8<-- [start:select]
def select(cc: CC, m: int, n: int, k: int, *, path: str | None = None, floor: CC = TOOLKIT_FLOOR,
           paths=PATHS) -> Choice:
    """The path for a GPU of compute capability cc (kernels compiled from
    source for it) and an M x N x K product: the forced one if any, else
    the first in `paths` that runs here and suits the shape."""
    forced = requested_path(path, paths)
    if forced is not None:
        p = next(p for p in paths if p.name == forced)
        if not _runs(p, cc, floor):
            raise UnsupportedGpu(
                f"{OPERATOR}: path {forced!r} was forced, but it needs {_needs(p, floor)}, and this GPU "
                f"is compute capability {cc_text(cc)}; the paths: {_menu(paths, floor)}")
        bad = p.shape_error(m, n, k)
        if bad:
            raise ValueError(f"{OPERATOR}: {bad}")
        return Choice(p, [f"{forced}: forced"], forced=True)
    why = []
    for p in paths:
        if not _runs(p, cc, floor):
            why.append(f"{p.name}: not on {cc_text(cc)}: needs {_needs(p, floor)}")
            continue
        bad = p.shape_error(m, n, k)
        if bad:
            why.append(f"{p.name}: not at {m}x{n}x{k}: {bad}")
            continue
        why.append(f"{p.name}: runs on {cc_text(cc)}")
        return Choice(p, why)
    raise UnsupportedGpu(
        f"{OPERATOR}: no path runs on this GPU, compute capability {cc_text(cc)}; "
        f"the paths: {_menu(paths, floor)}")
# --8<-- [end:select]


# --8<-- [start:image]
@dataclass(frozen=True)
class Image:
    """What a fat binary holds: for each SASS or PTX target, its kernels'
    names (fatbin.contents() reads them with cuobjdump)."""
    elf: dict[str, frozenset[str]]
    ptx: dict[str, frozenset[str]]


def select_from_image(cc: CC, m: int, n: int, k: int, image: Image, *, path: str | None = None,
                      paths=PATHS) -> tuple[Choice, tuple[str, str]]:
    """As select(), for kernels loaded from a prebuilt image: the driver
    takes the code driver_pick() says, and a path exists where that code
    has all its kernels. Returns the choice and what the driver loads."""
    picked = driver_pick(cc, list(image.elf), list(image.ptx))
    have = [*image.elf, *image.ptx]
    if picked is None:
        raise UnsupportedGpu(
            f"{OPERATOR}: the image has no code for this GPU, compute capability {cc_text(cc)}: "
            f"it holds {', '.join(have)}; SASS runs on its own major version at the same or a "
            f"higher minor, PTX on its version and later, 'a' targets on their own version only")
    kind, target = picked
    names = (image.elf if kind == "sass" else image.ptx)[target]
    how = f"{target} {'SASS' if kind == 'sass' else 'PTX, JIT-compiled by the driver at load'}"
    forced = requested_path(path, paths)
    why = []
    for p in paths:
        if forced is not None and p.name != forced:
            continue
        missing = [name for name in p.kernels if name not in names]
        bad = p.shape_error(m, n, k)
        if forced is not None and missing:
            raise UnsupportedGpu(
                f"{OPERATOR}: path {forced!r} was forced, but this GPU, compute capability "
                f"{cc_text(cc)}, loads {how} from the image, which lacks {', '.join(missing)}")
        if forced is not None and bad:
            raise ValueError(f"{OPERATOR}: {bad}")
        if missing:
            why.append(f"{p.name}: not in {how}: no {', '.join(missing)}")
        elif bad:
            why.append(f"{p.name}: not at {m}x{n}x{k}: {bad}")
        else:
            why.append(f"{p.name}: in {how}")
            return Choice(p, why, forced=forced is not None), picked
    raise UnsupportedGpu(f"{OPERATOR}: this GPU, compute capability {cc_text(cc)}, loads {how} "
                         f"from the image, and no path has all its kernels there ({'; '.join(why)})")
# --8<-- [end:image]


# ------------------------------------------------------------ checks, bounds

# --8<-- [start:checks]
def check_args(a, b, c=None) -> tuple[int, int, int]:
    """(M, N, K) of c = a @ b, or TypeError/ValueError naming the operator
    and the argument. a, b (and c, when given) bf16 bit patterns
    (np.uint16), 2-D, C-contiguous device arrays on 16-byte boundaries;
    c M x N, apart from a and b."""
    try:
        cb.check_array("a", a, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
        cb.check_array("b", b, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
        m = cb.check_size("a.shape[0] (M)", a.shape[0], high=tc_gemm.MAX_DIM)
        k = cb.check_size("a.shape[1] (K)", a.shape[1], high=tc_gemm.MAX_DIM)
        if b.shape[0] != k:
            raise ValueError(f"b: expected {k:,} rows (a is {m:,} x {k:,}: the inner "
                             f"dimensions must agree), got shape {tuple(b.shape)}")
        n = cb.check_size("b.shape[1] (N)", b.shape[1], high=tc_gemm.MAX_DIM)
        if c is not None:
            cb.check_array("c", c, dtype=np.uint16, shape=(m, n), on_device=True, alignment=16)
            cb.check_separate("c", c, a=a, b=b)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{OPERATOR}: {e}") from None
    return m, n, k
# --8<-- [end:checks]


def bound(path: GemmPath, k_dim: int, scale: np.ndarray) -> tuple[float, np.ndarray]:
    """(k, scale) for cb.compare on C widened to float32: the path's fp32
    accumulation bound (its book listing's bound_k units of 2^-24 of
    |A| @ |B|), grown by C's rounding, plus that rounding, 2^-8 |C|
    (wgmma_gemm.bound's form, for any path)."""
    acc = path.bound_k(k_dim) * U_FP32 * (1 + U_BF16)
    return U_BF16 / U_FP32, scale * (acc / U_BF16)


def tolerance(path: GemmPath, k_dim: int, ref: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The same bound as an array: how far each element of C may be from ref."""
    kb, s = bound(path, k_dim, scale)
    return kb * U_FP32 * (np.abs(ref) + s)


# --------------------------------------------------------- the boundary check

def debug_sync(debug: bool | None = None) -> bool:
    if debug is not None:
        return bool(debug)
    return os.environ.get(ENV_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")


# --8<-- [start:boundary]
def at_boundary(what: str, launch: Callable[[], None], synchronize: Callable[[], None],
                errors: tuple, debug: bool) -> None:
    """Run launch() (the path's kernels, queued); a CUDA error it raises
    there and then is re-raised naming `what`. In debug mode, wait for the
    kernels and raise AsyncFault naming `what` if one of them failed: the
    error is then reported by the call that caused it, not by whichever
    call synchronises next."""
    try:
        launch()
    except errors as e:
        raise AsyncFault(f"{what}: the launch failed: {e}") from e
    if not debug:
        return
    try:
        synchronize()
    except errors as e:
        raise AsyncFault(
            f"{what}: a kernel failed after its launch returned: {e}. An error like this one is "
            "sticky: the CUDA context cannot be used again; restart the process "
            f"(found by {ENV_DEBUG}=1: every call of {OPERATOR} waits for its kernels)") from e
# --8<-- [end:boundary]


# ------------------------------------------------------------ the operator

class Bf16Matmul:
    """The operator on this machine's GPU: the GPU (cb.init()), each path's
    kernels loaded on first use, from source (cb.compile, the book's
    loaders) or from a fat binary's bytes (image=, with its contents)."""

    def __init__(self, *, image: bytes | None = None, contents: Image | None = None,
                 floor: CC = TOOLKIT_FLOOR):
        self.gpu = cb.init()
        self.cc = tuple(self.gpu.compute_capability)
        self.floor = floor
        self.image, self.contents = image, contents
        if (image is None) != (contents is None):
            raise ValueError("image, contents: give both (the bytes and what they hold) or neither")
        self._module = None
        self._kernels: dict[str, object] = {}

    def choose(self, m: int, n: int, k: int, path: str | None = None) -> Choice:
        if self.contents is not None:
            return select_from_image(self.cc, m, n, k, self.contents, path=path)[0]
        return select(self.cc, m, n, k, path=path, floor=self.floor)

    # kernels -------------------------------------------------------------
    def _get(self, name: str, signature: str):
        """A prepared kernel: from the image when there is one, else from
        the book's source files, compiled for this GPU."""
        if name in self._kernels:
            return self._kernels[name]
        if self.image is not None:
            import pycuda.driver as cuda
            if self._module is None:
                self._module = cuda.module_from_buffer(self.image)
            f = self._module.get_function(name)
        elif name == "wgmma_gemm":
            self._kernels[name] = wgmma_gemm.load_kernel(self.gpu)
            return self._kernels[name]
        elif name.startswith("tc_"):
            self._kernels.update(tc_gemm.load_kernels())
            return self._kernels[name]
        elif name.startswith("sgemm_"):
            self._kernels.update(sgemm.load_kernels())
            return self._kernels[name]
        else:
            f = cb.compile(CONVERT_FILE).get_function(name)
        if name == "wgmma_gemm":
            import pycuda.driver as cuda
            f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            wgmma_gemm.SHARED_BYTES)
        self._kernels[name] = f.prepare(signature)
        return self._kernels[name]

    def _convert(self, name: str, src, dst) -> None:
        n = src.size
        self._get(name, "PPq").prepared_call((cb.ceil_div(n, 256), 1, 1), (256, 1, 1),
                                             src.gpudata, dst.gpudata, np.int64(n))

    # launches ------------------------------------------------------------
    def launch(self, path: GemmPath, a, b, c) -> None:
        """The path's kernels, queued on the NULL stream, through the book's launchers."""
        from pycuda import gpuarray

        m, k = a.shape
        n = b.shape[1]
        if path.name == "wgmma":
            wgmma_gemm.wgmma_gemm(self._get("wgmma_gemm", "PPPiii"), a, b, c)
            return
        c32 = gpuarray.empty((m, n), np.float32)
        if path.name == "mma":
            kernels = {name: self._get(name, "PPPiii") for name in path.kernels[:2]}
            tc_gemm.tc_gemm(kernels, "tc_mma_pipelined", a, b, c32)
        else:
            a32, b32 = gpuarray.empty((m, k), np.float32), gpuarray.empty((k, n), np.float32)
            self._convert("bf16_to_f32", a, a32)
            self._convert("bf16_to_f32", b, b32)
            sgemm.sgemm({"sgemm_double_buffer": self._get("sgemm_double_buffer", "PPPiii")},
                        "sgemm_double_buffer", a32, b32, c32)
        self._convert("f32_to_bf16", c32, c)

    def __call__(self, a, b, c=None, *, path: str | None = None, debug: bool | None = None):
        """c = a @ b (c allocated when not given); returns c."""
        import pycuda.driver as cuda
        from pycuda import gpuarray

        m, n, k = check_args(a, b, c)
        choice = self.choose(m, n, k, path)
        if c is None:
            c = gpuarray.empty((m, n), np.uint16)
        at_boundary(f"{OPERATOR} (path {choice.path.name}, {m}x{n}x{k})",
                    lambda: self.launch(choice.path, a, b, c), cuda.Context.synchronize,
                    (cuda.Error,), debug_sync(debug))
        return c


_OP: Bf16Matmul | None = None


def bf16_matmul(a, b, c=None, *, path: str | None = None, debug: bool | None = None):
    """The operator, with its kernels compiled from source for this GPU."""
    global _OP
    if _OP is None:
        _OP = Bf16Matmul()
    return _OP(a, b, c, path=path, debug=debug)
