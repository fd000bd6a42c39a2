"""Checking inputs before a launch, and outputs after it.

`check_array` guards a launch wrapper: a wrong dtype, shape, stride or size
becomes a Python error that names the argument, instead of a crash or silent
garbage on the GPU; `check_separate` does the same for an output that
shares memory with an input. `poison` fills an output with NaN before the launch, so an
element the kernel forgot to write cannot pass. `compare` checks every element
of an output against a float64 reference, within a bound derived from the
dtype's unit roundoff, and reports the worst elements.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

#: Unit roundoff u of each floating-point type: a correctly rounded operation
#: returns the exact result times (1 + d) with |d| <= u (half an ulp of 1).
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

#: Compare this many elements a step. Each step works in three float64
#: arrays of its own (256 KiB each) and a mask, made once per compare, so a
#: step's passes stay in a core's L2 and only the output and reference come
#: from main memory, once. On one thread: the GPU suite runs a listing on
#: every core.
_CHUNK = 1 << 15


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


def overlaps(x, y) -> bool:
    """Do arrays x and y share any byte? Two device arrays (anything with
    .gpudata and .nbytes) by their address ranges, two NumPy arrays by
    their memory bounds; a device array and a host array never do."""
    on_device = hasattr(x, "gpudata"), hasattr(y, "gpudata")
    if on_device == (True, True):
        p, q = int(x.gpudata), int(y.gpudata)
        return p < q + y.nbytes and q < p + x.nbytes
    if on_device == (False, False):
        return np.may_share_memory(x, y)
    return False


def check_separate(name: str, out, **inputs) -> None:
    """Raise ValueError naming `name` if the output `out` shares memory with
    one of `inputs` (given by name; None is skipped): a kernel that writes
    an output while other blocks still read its inputs needs them apart."""
    for other, x in inputs.items():
        if x is not None and overlaps(out, x):
            raise ValueError(f"{name}: overlaps {other}; the launch needs {name} in memory "
                             f"of its own, apart from {other}")


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


def unit_roundoff(dtype) -> float:
    """u for a dtype (or its name): 2**-24 for float32."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff known for {name}; integers compare exactly (k=0)")
    return UNIT_ROUNDOFF[name]


@dataclass
class Element:
    """One element of a compared output: where, what came out, what was
    expected, and the bound it had to meet."""
    index: int
    got: float
    expected: float
    bound: float


@dataclass
class CheckResult:
    """What a check found. For `compare`: every element i must satisfy
    |got_i - ref_i| <= k * u * (|ref_i| + scale_i); `worst_ratio` is the
    largest |got_i - ref_i| / bound_i (1.0 is exactly on the bound) and
    `worst` the elements nearest to failing (or failing), worst first.
    For `expect`: `detail` says what was observed."""
    name: str
    n: int
    passed: bool
    k: float = 0.0
    u: float = 0.0
    scaled: bool = False        # was a per-element scale (absolute part) given?
    worst_ratio: float = 0.0
    outside: int = 0            # elements outside their bound (NaN and inf included)
    nonfinite: int = 0
    norm_rel_err: float = 0.0   # ||got - ref|| / ||ref||, shown beside the check, never instead of it
    worst: list[Element] = field(default_factory=list)
    detail: str | None = None

    def line(self) -> str:
        """The line a listing prints: the same text the record keeps."""
        mark = "ok  " if self.passed else "FAIL"
        head = f"{mark} {self.name}:"
        if self.detail is not None:
            return _fit(head, self.detail)
        bound = "exact" if self.k == 0 else f"k={self.k:g}"
        body = f"n={self.n:,}, {bound}, "
        if self.outside:
            body += f"{self.outside:,} outside the bound"
            if self.nonfinite:
                body += f" ({self.nonfinite:,} NaN/inf)"
        else:
            body += f"worst {self.worst_ratio:.2f} of bound"
        if self.worst:
            body += f" at [{self.worst[0].index}]"
        s = _fit(head, body + f", norm err {self.norm_rel_err:.1e}")
        if not self.passed:
            for e in self.worst:
                s += f"\n       [{e.index}] got {e.got!r}, expected {e.expected!r}, bound {e.bound:.2e}"
        return s

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        d = dict(d)
        d["worst"] = [Element(**e) for e in d.get("worst", [])]
        return cls(**d)


LINE = 80      # a check's line is wrapped to this width (a terminal's, and the book's output blocks)
INDENT = " " * 7


def _fit(head: str, body: str) -> str:
    """`head body` on one line if it fits in LINE characters, else the body
    on indented lines below the head."""
    if len(head) + 1 + len(body) <= LINE:
        return f"{head} {body}"
    import textwrap

    lines = textwrap.wrap(body, LINE - len(INDENT), break_long_words=False, break_on_hyphens=False)
    return "\n".join([head] + [INDENT + ln for ln in lines])


def compare(name: str, out, ref, *, k: float = 1, scale=None, n: int | None = None,
            show: int = 3) -> CheckResult:
    """Check every element: |out_i - ref_i| <= k * u * (|ref_i| + scale_i).

    u is the unit roundoff of out's dtype (2**-24 for float32). k says how
    many unit roundoffs an element may be off by: about the number of
    rounded operations behind it (a correctly rounded +, *, / or sqrt costs
    1; a math function accurate to 2 ulp costs 4), or for a sum, the length
    of its longest chain of additions (worst case) or a few times its square
    root (random rounding). k = 0 demands exact equality.
    scale (optional, a number or one per element): the size of the terms
    that were rounded, for where they cancel and |ref| alone would be too
    small a yardstick (e.g. sum(|x_i|) for a sum of x_i).
    n: the problem size the check covers when it is not out.size.
    NaN or inf in out fails, whatever the bound. The norm-wise relative
    error is reported beside the element check, never instead of it.

    Big outputs are compared a chunk at a time (_CHUNK elements); the
    answer, ties among the worst elements included, does not depend on
    the chunk size.
    """
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"{name}: output shape {out.shape} != reference shape {ref.shape}")
    u = unit_roundoff(out.dtype) if k else 0.0
    if scale is not None:          # a number, or an array (any float dtype) that broadcasts to ref
        scale = np.asarray(scale)
        scale = float(scale) if scale.ndim == 0 else np.broadcast_to(scale, ref.shape).ravel()
    o, r = out.ravel(), ref.ravel()
    step = max(1, min(_CHUNK, o.size))
    work = _Work(np.empty(step), np.empty(step), np.empty(step), np.empty(step, dtype=bool))
    total = _Part(0.0, 0, 0, 0.0, 0.0, [])
    for lo in range(0, o.size, step):
        beat = total.candidates[-1][0] if show and len(total.candidates) == show else None
        part = _compare_chunk(o, r, scale, k * u, (lo, min(lo + step, o.size)), show, work, beat)
        if part is None:
            raise ValueError(f"{name}: the reference has NaN or inf values")
        total = _Part(max(total.worst_ratio, part.worst_ratio), total.outside + part.outside,
                      total.nonfinite + part.nonfinite, total.err2 + part.err2, total.ref2 + part.ref2,
                      sorted(total.candidates + part.candidates, key=lambda c: (-c[0], c[1]))[:show])
    norm = math.sqrt(total.err2) / math.sqrt(total.ref2) if total.ref2 > 0 else math.sqrt(total.err2)
    if total.nonfinite:
        norm = math.inf
    return CheckResult(
        name=name, n=int(o.size if n is None else n), passed=total.outside == 0, k=float(k), u=u,
        scaled=scale is not None, worst_ratio=total.worst_ratio, outside=total.outside,
        nonfinite=total.nonfinite, norm_rel_err=norm,
        worst=[Element(i, g, e, b) for _, i, g, e, b in total.candidates])


@dataclass
class _Part:
    """What one chunk of a compare found (or all chunks so far)."""
    worst_ratio: float
    outside: int
    nonfinite: int
    err2: float
    ref2: float
    candidates: list      # (ratio, index, got, expected, bound), worst first, at most `show`


@dataclass
class _Work:
    """A compare's work arrays, one chunk long, made once."""
    diff: np.ndarray
    ratio: np.ndarray
    square: np.ndarray
    mask: np.ndarray


def _compare_chunk(o, r, scale, ku: float, span: tuple[int, int], show: int, work: _Work,
                   beat: float | None) -> _Part | None:
    """One chunk of compare(): None if its reference is not finite. Its
    worst elements are looked for only where they could beat `beat`, the
    `show`-th worst ratio of the chunks before it (which have the lower
    indices, so they win ties)."""
    lo, hi = span
    m = hi - lo
    exp, diff, ratio, mask = r[lo:hi], work.diff[:m], work.ratio[:m], work.mask[:m]
    np.subtract(o[lo:hi], exp, out=diff)  # in float64, as out.astype(float64) - exp would be
    np.abs(diff, out=diff)
    if ku:
        _bounds(ku, exp, scale if scale is None or isinstance(scale, float) else scale[lo:hi],
                out=ratio)                # the bound, then (in place) the ratio
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(diff, ratio, out=ratio)   # 0/0 (exact where the bound is 0) and NaN come out NaN
    else:
        np.equal(diff, 0, out=mask)
        np.copyto(ratio, np.inf)
        ratio[mask] = 0.0
    top = float(ratio.max())
    nonfinite, finite = 0, None
    if not math.isfinite(top):            # rare: sort out inf and NaN element by element
        if not np.isfinite(exp).all():
            return None
        finite = np.isfinite(o[lo:hi])
        nonfinite = int(m - np.count_nonzero(finite))
        np.isnan(ratio, out=mask)
        ratio[mask] = 0.0                 # 0/0: exact where nothing may differ
        ratio[~finite] = np.inf           # a NaN or inf output fails whatever its bound
        top = float(ratio.max())
    # (A NaN or inf in the reference makes its element's ratio NaN or inf, so
    # a chunk that took neither branch has a finite reference.)
    outside = 0
    if top > 1.0:
        np.greater(ratio, 1.0, out=mask)
        outside = int(np.count_nonzero(mask))
    if finite is not None:
        diff[~finite] = 0.0
    # Squares summed by NumPy, not np.dot: a BLAS dot of a chunk this size
    # wakes the BLAS library's threads, one a core, for every chunk. With
    # a listing on every core (the GPU suite) the checks at n = 2**27 + 7
    # then took over 20 times as long (H200 machine, 2026-12-02); three
    # compares of 2**25 elements on two cores, 1.6 to 6.1 s against 0.14
    # to 0.21 s.
    square = work.square[:m]
    err2 = float(np.multiply(diff, diff, out=square).sum())
    ref2 = float(np.multiply(exp, exp, out=square).sum())
    candidates = []
    if beat is None or top > beat:
        # The `show` largest ratios, ties going to the lowest index.
        near = np.arange(m)
        for f in (0.999, 0.9, 0.5) if m > show else ():
            near = np.flatnonzero(ratio >= f * top)    # usually a handful near the top: cheap
            if len(near) >= show:
                break
        if m > show and not show <= len(near) <= 4096:
            cut = float(ratio[np.argpartition(ratio, -show)[-show:]].min())
            near = np.concatenate([np.flatnonzero(ratio > cut), np.flatnonzero(ratio == cut)[:show]])
        pick = near[np.lexsort((near, -ratio[near]))][:show]
        got = o[lo:hi]
        candidates = [(float(ratio[j]), lo + int(j), float(got[j]), float(exp[j]),
                       _bound(ku, exp[j], scale if scale is None or isinstance(scale, float)
                              else scale[lo + j])) for j in pick]
    return _Part(top, outside, nonfinite, err2, ref2, candidates)


def _bounds(ku: float, expected, scale, out: np.ndarray) -> np.ndarray:
    """Each element's bound, ku * (|expected| + scale), into `out` (float64).
    The one formula for a chunk's bounds and for one element's (_bound)."""
    np.abs(expected, out=out)
    if scale is not None:
        out += scale
    out *= ku
    return out


def _bound(ku: float, expected, scale) -> float:
    """One element's bound, by the formula of the chunk's bounds."""
    if not ku:
        return 0.0
    one = np.array([expected], dtype=np.float64)
    return float(_bounds(ku, one, None if scale is None else np.float64(scale), out=one)[0])


def expect(name: str, condition: bool, observed: str, n: int = 1) -> CheckResult:
    """A check that is a yes/no observation rather than a numeric comparison,
    e.g. "the error surfaced at synchronize" or "every SM ran a block".
    `observed` says what was seen, whether or not it passed."""
    return CheckResult(name=name, n=n, passed=bool(condition), detail=observed)
