"""Checking inputs before a launch, and outputs after it.

`check_array` guards a launch wrapper: a wrong dtype, shape, stride or size
becomes a Python error that names the argument, instead of a crash or silent
garbage on the GPU. `poison` fills an output with NaN before the launch, so an
element the kernel forgot to write cannot pass. `compare` measures the
relative error against a float64 reference and reports the worst element.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

# Relative-error tolerances by the precision of the arithmetic.
TOLERANCE = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-13, np.dtype(np.float16): 1e-3}


def check_array(name: str, arr, *, dtype=None, ndim: int | None = None,
                shape: tuple | None = None, contiguous: bool = True,
                on_device: bool = False, alignment: int | None = None) -> None:
    """Raise TypeError/ValueError naming `name` unless `arr` fits.

    Works on NumPy arrays and PyCUDA GPUArrays (anything with dtype, shape,
    strides and flags). on_device: `arr` must be a GPUArray (has .gpudata).
    alignment: the device address must be a multiple of this many bytes
    (16 for float4 loads).
    """
    for attr in ("dtype", "shape"):
        if not hasattr(arr, attr):
            raise TypeError(f"{name}: expected an array, got {type(arr).__name__}")
    if on_device and not hasattr(arr, "gpudata"):
        raise TypeError(f"{name}: expected a device array (pycuda.gpuarray.GPUArray), "
                        f"got {type(arr).__module__}.{type(arr).__name__}")
    if dtype is not None and np.dtype(arr.dtype) != np.dtype(dtype):
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype)}, got {np.dtype(arr.dtype)}")
    if ndim is not None and len(arr.shape) != ndim:
        raise ValueError(f"{name}: expected {ndim}-D array, got shape {tuple(arr.shape)}")
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(arr.shape)}")
    if contiguous and not arr.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array, got strides {tuple(arr.strides)}")
    if alignment is not None and on_device and int(arr.gpudata) % alignment:
        raise ValueError(f"{name}: expected a device address aligned to {alignment} bytes, "
                         f"got {int(arr.gpudata):#x}")


def check_size(name: str, n, *, low: int = 1, high: int = 2**31 - 1) -> int:
    """An element count that a kernel's int index can address."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(n).__name__}")
    if not low <= int(n) <= high:
        raise ValueError(f"{name}: expected {low} <= {name} <= {high}, got {int(n)}")
    return int(n)


def poison(gpu_array) -> None:
    """Fill a device array with all-ones bytes: NaN for float32 and float64,
    -1 for signed integers. An output element the kernel never writes then
    fails the check instead of passing by luck."""
    import pycuda.driver as cuda

    if gpu_array.nbytes:
        cuda.memset_d8(gpu_array.gpudata, 0xFF, gpu_array.nbytes)


@dataclass
class CheckResult:
    name: str
    n: int
    rel_err: float  # ||out - ref|| / ||ref||
    tol: float
    passed: bool
    worst_index: int | None = None
    worst_got: float | None = None
    worst_expected: float | None = None
    nonfinite: int = 0
    detail: str | None = None  # for expect(): what was observed

    def line(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        if self.detail is not None:
            return f"{mark} {self.name}: {self.detail}"
        s = f"{mark} {self.name}: n={self.n:,} rel_err={self.rel_err:.3e} (tol {self.tol:.0e})"
        if self.worst_index is not None:
            s += (f", worst at [{self.worst_index}]: got {self.worst_got!r}, "
                  f"expected {self.worst_expected!r}")
        if self.nonfinite:
            s += f", {self.nonfinite} element(s) NaN/inf"
        return s

    def as_dict(self) -> dict:
        return asdict(self)


def compare(name: str, out, ref, tol: float | None = None, n: int | None = None) -> CheckResult:
    """Relative error ||out - ref|| / ||ref|| in float64, worst element, NaNs.

    `tol` defaults to TOLERANCE for out's dtype. Passes only if every element
    is finite and the relative error is within tol. `n`: the problem size the
    check covers when it is not out.size (a sum of n inputs has one output).
    """
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"{name}: output shape {out.shape} != reference shape {ref.shape}")
    if tol is None:
        tol = TOLERANCE.get(out.dtype, 1e-6)
    o = out.astype(np.float64).ravel()
    r = ref.ravel()
    diff = o - r
    finite = np.isfinite(o)
    nonfinite = int(o.size - np.count_nonzero(finite))
    ref_norm = float(np.linalg.norm(r))
    err_norm = float(np.linalg.norm(np.where(finite, diff, 0.0)))
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    if nonfinite:
        rel = float("inf")
    worst = None
    if o.size:
        # worst element: first non-finite one, else the largest relative deviation
        if nonfinite:
            worst = int(np.argmin(finite))
        else:
            scaled = np.abs(diff) / np.maximum(np.abs(r), np.finfo(np.float64).tiny)
            worst = int(np.argmax(scaled))
    passed = nonfinite == 0 and rel <= tol
    return CheckResult(
        name=name, n=int(o.size if n is None else n), rel_err=rel, tol=tol, passed=bool(passed),
        worst_index=worst,
        worst_got=None if worst is None else float(o[worst]),
        worst_expected=None if worst is None else float(r[worst]),
        nonfinite=nonfinite,
    )


def expect(name: str, condition: bool, observed: str, n: int = 1) -> CheckResult:
    """A check that is a yes/no observation rather than a numeric comparison,
    e.g. "the error surfaced at synchronize" or "every SM ran a block".
    `observed` says what was seen, whether or not it passed."""
    return CheckResult(name=name, n=n, rel_err=0.0 if condition else float("inf"), tol=0.0,
                       passed=bool(condition), detail=observed)
