"""Decoding's products: 1 to 8 tokens times a weight matrix, at the speed weights stream from memory.

Draft for Part V ("Serving a model"), not yet a listing, and not yet run on
a GPU: run it from the repository root with PYTHONPATH=code. y = x W^T
for x (B, K) bf16, B = 1, 2, 4 or 8, and W (N, K) in one of three formats:
bf16; int8 with a float32 scale a row (weight-only quantisation, per
output channel); FP8 E4M3 with a scale a row. One warp a row of W.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part5_draft/gemv.py [--seed S] [--bench]
Checks: every format and B, at (N, K) = (1, 8), (33, 72), (33, 4104),
        (768, 3072), (3072, 768), (4096, 4096): first with whole numbers (x and bf16 W
        from {-2, ..., 2}; int8 codes from {-127, ..., 127} (with a scale a
        row, or a scale a group of 128, a different power of 2 for each
        group; K = 4,224 for those) and FP8 codes
        from {-8, ..., 8}, every one exact in E4M3; scales powers of 2), so
        every float32 sum is exact and y must be the exact product rounded
        once to bf16, element for element; then x ~ N(0, 1), W ~ N(0, 0.02^2)
        quantised as a server would (scale = max |row| / 127 or / 448),
        each y within K float32 units of the sum of |x w| plus one bf16
        rounding, against float64 of the same quantised weights.
        Quantisation's own error (the quantised product against the bf16
        one, norm-wise) is kept as a fact, not a check.
        Then x's rows unit vectors: y's rows are columns of W, exact, so
        one wrong weight shows (a sum of thousands can hide it).
Bench:  B = 1 and 8 at (N, K) = (4096, 4096) and GPT-2 small's c_fc (3072,
        768) and c_proj (768, 3072), each timed as a chain of distinct
        matrices of the shape (256 MiB in all, more than 4 times the L2),
        as a decode step runs its products: each format's GB/s (the
        weights, their scales, x and y) against the copy bandwidth of the
        same run; bf16 in alternation with torch.nn.functional.linear over
        the same chain (the call a PyTorch user makes; cuBLAS picks its
        kernel). Target (issue
        #41): bf16 at B = 1 at least 0.85 of the copy bandwidth at each
        shape.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
ROWS = 4
BATCHES = (1, 2, 4, 8)
FORMATS = ("bf16", "int8", "fp8", "int8g")     # int8g: int8 with a scale a group of GROUP weights
GROUP = 128
SHAPES = [(1, 8), (33, 72), (33, 4104), (768, 3072), (3072, 768), (4096, 4096)]   # 4104: a last partial round of loads
BENCH = [(4096, 4096), (3072, 768), (768, 3072)]
TARGET = 0.85
U32, U_BF16 = 2.0**-24, 2.0**-8
E4M3_MAX = 448.0


def load_kernels():
    module = cb.compile(KERNEL_FILE)
    k = {}
    for b in BATCHES:
        k["bf16", b] = module.get_function(f"gemv_bf16_b{b}").prepare("PPPii")
        for f in ("int8", "fp8", "int8g"):
            k[f, b] = module.get_function(f"gemv_{f}_b{b}").prepare("PPPPii")
    return k


# --8<-- [start:launch]
def gemv(kernels, fmt: str, x, w, y, scale=None) -> None:
    """y = x @ W.T: x (B, K) bf16 (uint16 bit patterns), B in 1, 2, 4, 8;
    w (N, K) bf16 (uint16), int8 (int8) or FP8 E4M3 (uint8 codes), with
    scale (N,) float32 for the last two; y (B, N) bf16. K a multiple of 8."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: expected one of {FORMATS}, got {fmt!r}")
    cb.check_array("x", x, dtype=np.uint16, ndim=2, on_device=True, alignment=16)
    b, k = x.shape
    if b not in BATCHES:
        raise ValueError(f"x: the batch must be one of {BATCHES}, got {b}")
    if k % 8:
        raise ValueError(f"x: K must be a multiple of 8 (16-byte pieces), got {k}")
    dtype = {"bf16": np.uint16, "int8": np.int8, "fp8": np.uint8, "int8g": np.int8}[fmt]
    cb.check_array("w", w, dtype=dtype, ndim=2, on_device=True, alignment=16)
    n = cb.check_size("w.shape[0] (N)", w.shape[0])
    if w.shape[1] != k:
        raise ValueError(f"w: expected (N, {k}), got {tuple(w.shape)}")
    cb.check_array("y", y, dtype=np.uint16, shape=(b, n), on_device=True)
    cb.check_separate("y", y, x=x, w=w, scale=scale)
    grid, block = (cb.ceil_div(n, ROWS), 1, 1), (32 * ROWS, 1, 1)
    if fmt == "bf16":
        if scale is not None:
            raise ValueError("scale: bf16 weights take none")
        kernels[fmt, b].prepared_call(grid, block, x.gpudata, w.gpudata, y.gpudata, np.int32(n), np.int32(k))
    else:
        if fmt == "int8g" and k % GROUP:
            raise ValueError(f"x: K must be a multiple of {GROUP} for a scale a group, got {k}")
        shape = (n, k // GROUP) if fmt == "int8g" else (n,)
        cb.check_array("scale", scale, dtype=np.float32, shape=shape, on_device=True)
        kernels[fmt, b].prepared_call(grid, block, x.gpudata, w.gpudata, scale.gpudata, y.gpudata, np.int32(n),
                                      np.int32(k))
# --8<-- [end:launch]


# FP8 E4M3: the codes of the values a float32 rounds to, and back (for the host side).
def _e4m3_table() -> np.ndarray:
    vals = np.zeros(256)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 7
        if e == 15 and m == 7:
            vals[c] = np.nan
        elif e == 0:
            vals[c] = (m / 8) * 2.0**-6
        else:
            vals[c] = (1 + m / 8) * 2.0 ** (e - 7)
        vals[c] *= -1 if s else 1
    return vals


E4M3 = _e4m3_table()
_FINITE = np.where(np.isfinite(E4M3))[0]


_ORDER = _FINITE[np.argsort(E4M3[_FINITE], kind="stable")]
_ORDER = _ORDER[np.r_[True, np.diff(E4M3[_ORDER]) != 0]]      # one code a value (+0 for 0)
_SORTED = E4M3[_ORDER]


def to_e4m3(a: np.ndarray) -> np.ndarray:
    """Round to the nearest E4M3 value, as codes (a tie, which the checks
    never meet, goes to the larger value). Within the format's range."""
    flat = np.asarray(a, np.float64).reshape(-1)
    hi = np.clip(np.searchsorted(_SORTED, flat), 1, len(_SORTED) - 1)
    lo = hi - 1
    pick = np.where(flat - _SORTED[lo] < _SORTED[hi] - flat, lo, hi)
    return _ORDER[pick].astype(np.uint8).reshape(np.shape(a))


def quantise(w: np.ndarray, fmt: str):
    """(codes, scale, the dequantised weights in float64) of w (N, K)."""
    if fmt == "bf16":
        w16 = to_bf16(w.astype(np.float32))
        return w16, None, from_bf16(w16).astype(np.float64)
    if fmt == "int8g":
        n, k = w.shape
        g = w.reshape(n, k // GROUP, GROUP)
        top = np.abs(g).max(axis=2)
        top[top == 0] = 1
        scale = (top / 127).astype(np.float32)
        q = np.clip(np.rint(g / scale[..., None]), -127, 127).astype(np.int8)
        return q.reshape(n, k), scale, (q.astype(np.float64) * scale[..., None]).reshape(n, k)
    top = np.abs(w).max(axis=1)
    top[top == 0] = 1
    if fmt == "int8":
        scale = (top / 127).astype(np.float32)
        q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
        return q, scale, q.astype(np.float64) * scale[:, None]
    scale = (top / E4M3_MAX).astype(np.float32)
    q = to_e4m3(w / scale[:, None])
    return q, scale, E4M3[q] * scale[:, None]


def exact_weights(n, k, fmt, rng):
    """Whole-number codes and a power-of-2 scale: every product exact."""
    if fmt == "bf16":
        w16 = to_bf16(rng.integers(-2, 3, (n, k)).astype(np.float32))
        return w16, None, from_bf16(w16).astype(np.float64)
    if fmt == "int8g":                               # powers of 2 that differ from group to group
        scale = (2.0 ** -rng.integers(4, 9, (n, k // GROUP))).astype(np.float32)
        q = rng.integers(-127, 128, (n, k)).astype(np.int8)
        return q, scale, q.astype(np.float64) * np.repeat(scale, GROUP, axis=1)
    scale = np.full(n, 2.0**-6, np.float32)
    if fmt == "int8":
        q = rng.integers(-127, 128, (n, k)).astype(np.int8)
        return q, scale, q.astype(np.float64) * scale[:, None]
    q = to_e4m3(rng.integers(-8, 9, (n, k)).astype(np.float64))
    return q, scale, E4M3[q] * scale[:, None]


def run(kernels, fmt, b, n, k, rng, exact):
    from pycuda import gpuarray

    x16 = to_bf16((rng.integers(-2, 3, (b, k)) if exact else rng.standard_normal((b, k))).astype(np.float32))
    if exact:
        q, scale, w64 = exact_weights(n, k, fmt, rng)
    else:
        q, scale, w64 = quantise(0.02 * rng.standard_normal((n, k)), fmt)
    xg, wg = gpuarray.to_gpu(x16), gpuarray.to_gpu(q)
    sg = gpuarray.to_gpu(scale) if scale is not None else None
    yg = gpuarray.empty((b, n), np.uint16)
    yg.fill(np.uint16(0x7FC0))                      # bf16 NaN: every output must be written
    gemv(kernels, fmt, xg, wg, yg, sg)
    x64 = from_bf16(x16).astype(np.float64)
    want = x64 @ w64.T
    got = from_bf16(yg.get())
    tag = f"{fmt} B={b} N={n} K={k}"
    if exact:
        cb.report_check(cb.compare(f"{tag} whole numbers", got.astype(np.float64),
                                   from_bf16(to_bf16(want.astype(np.float32))).astype(np.float64), k=0))
    else:
        bound = k * U32 * (np.abs(x64) @ np.abs(w64).T) + U_BF16 * np.abs(want)
        cb.report_check(cb.compare(f"{tag} random", got, want, k=1, scale=bound / U32))
    return xg, wg, sg, yg, w64, x64


def check_columns(kernels, fmt, n, k, rng):
    """x's rows unit vectors e_j: y's rows are columns of the dequantised W,
    each one product, exact in bf16 for whole-number codes and power-of-2
    scales: one wrong weight shows, which a sum of thousands can hide."""
    from pycuda import gpuarray

    b = min(8, k)
    cols = rng.choice(k, b, replace=False)
    x = np.zeros((b, k), np.float32)
    x[np.arange(b), cols] = 1
    q, scale, w64 = exact_weights(n, k, fmt, rng)
    yg = gpuarray.empty((b, n), np.uint16)
    yg.fill(np.uint16(0x7FC0))
    gemv(kernels, fmt, gpuarray.to_gpu(to_bf16(x)), gpuarray.to_gpu(q), yg,
         gpuarray.to_gpu(scale) if scale is not None else None)
    cb.report_check(cb.compare(f"{fmt} N={n} K={k}: rows of W through unit x", from_bf16(yg.get()).astype(np.float64),
                               w64[:, cols].T, k=0))


def quantisation_error(rng, n=768, k=3072) -> dict:
    """How far the int8 and FP8 products are from the bf16 one (norm-wise,
    float64, the same x and the same underlying weights)."""
    w = 0.02 * rng.standard_normal((n, k))
    x = from_bf16(to_bf16(rng.standard_normal((1, k)).astype(np.float32))).astype(np.float64)
    base = x @ quantise(w, "bf16")[2].T
    return {f"{f}_rel_err_vs_bf16": float(np.linalg.norm(x @ quantise(w, f)[2].T - base) / np.linalg.norm(base))
            for f in ("int8", "fp8", "int8g")}


CHAIN_BYTES = 256 << 20        # a chain of distinct weight matrices, over 4 times the L2


def bench(kernels, seed) -> dict:
    """A decode step runs its products back to back over distinct weights.
    One product of 4.7 MB lasts about a microsecond at memory speed, less
    than a launch's ramp, so each is timed as a chain: R matrices of the
    shape, distinct, R x their bytes > 4 times the L2, one call a chain,
    ours and PyTorch's the same way."""
    import torch
    from pycuda import gpuarray

    rng = np.random.default_rng(seed)
    ceiling = ("device-to-device copy", cb.ceiling())
    facts = {}
    for n, k in BENCH:
        for b in (1, 8):
            times = {}
            for fmt in FORMATS:
                xg, wg, sg, yg, _, _ = run(kernels, fmt, b, n, k, rng, exact=False)
                reps = max(1, CHAIN_BYTES // wg.nbytes)
                ws = [wg] + [gpuarray.to_gpu(wg.get()) for _ in range(reps - 1)]      # distinct copies
                nbytes = reps * (wg.nbytes + (sg.nbytes if sg is not None else 0) + xg.nbytes + yg.nbytes)
                base = None
                if fmt == "bf16":
                    tx = torch.from_numpy(from_bf16(xg.get())).cuda().to(torch.bfloat16)
                    tws = [torch.from_numpy(from_bf16(w.get())).cuda().to(torch.bfloat16) for w in ws]
                    base = ("torch.nn.functional.linear(x, W), the same chain",
                            lambda tx=tx, tws=tws: [torch.nn.functional.linear(tx, tw) for tw in tws])

                def chain(fmt=fmt, xg=xg, ws=ws, sg=sg, yg=yg):
                    for w in ws:
                        gemv(kernels, fmt, xg, w, yg, sg)
                m = evidence.benchmark(f"gemv {fmt} B={b} {n}x{k}, a chain of {reps}", chain,
                                       bytes_moved=nbytes, ceiling=ceiling, baseline=base)
                times[fmt] = m.timing.median_ms
                facts[f"{fmt}_b{b}_{n}x{k}_of_copy"] = m.fraction_of_ceiling
                if base is not None:
                    facts[f"bf16_b{b}_{n}x{k}_over_torch"] = m.baseline.ratio
                del ws
            for f in ("int8", "fp8", "int8g"):
                facts[f"{f}_speedup_b{b}_{n}x{k}"] = times["bf16"] / times[f]
    met = all(facts[f"bf16_b1_{n}x{k}_of_copy"] >= TARGET for n, k in BENCH)
    print(f"target: bf16 at B = 1 >= {TARGET} of the copy bandwidth at every shape: {'met' if met else 'MISSED'}")
    facts.update(target=TARGET, target_met=met)
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for fmt in FORMATS:
        for b in BATCHES:
            for n, k in SHAPES:
                if fmt == "int8g" and k % GROUP:
                    continue                     # a scale a group needs whole groups: K = 4224 stands in
                for exact in (True, False):
                    run(kernels, fmt, b, n, k, rng, exact)
        if fmt == "int8g":
            for b in BATCHES:
                for exact in (True, False):
                    run(kernels, fmt, b, 33, 4224, rng, exact)   # 33 groups: a last partial round of loads
    for fmt in FORMATS:
        for n, k in ((33, 4224 if fmt == "int8g" else 4104), (4096, 4096)):
            check_columns(kernels, fmt, n, k, rng)
    facts = quantisation_error(rng)
    if args.bench:
        facts.update(bench(kernels, args.seed))
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
