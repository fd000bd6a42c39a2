"""A CNN layer's convolution three ways: direct, im2col + GEMM, implicit GEMM.

X is N x H x W x C (channels last), the weights are R x S x C x K, the
output Y is N x P x Q x K, all float32, with any stride >= 1 and zero
padding >= 0 (see conv2d.cu). direct: a thread per output element, the
whole sum from global memory. im2col: a kernel writes the (N P Q) x (R S C)
matrix of input patches, then chapter 11's best rung (sgemm_double_buffer)
multiplies it by the weights, seen as an (R S C) x K matrix. implicit: the
same GEMM loop reading its A tile straight from X, so the patch matrix is
never written.

Run:    python code/conv/conv2d.py [--seed S] [--bench]
Checks: every rung against a float64 NumPy convolution, element by
        element, at the shapes in SHAPES (1 x 1 images, 3 channels, strides
        of 2, 5 x 5, 7 x 7 and 3 x 5 filters, a 1 x 1 filter with stride 2,
        K not a multiple of 4, a last slice of the sum of 4, several tiles
        in every direction; under compute-sanitizer, SANITIZER_SHAPES), and
        under --bench at each benchmark layer. Bound: each output is a dot
        product of length Kg = R S C summed by Kg fused multiply-adds, so
        |error| <= gamma_Kg * (|X| conv |W|): k = Kg / (1 - Kg u) + 1 and
        scale = the convolution of |X| with |W| in float64, as for
        chapter 11's product.
Bench:  four layers at batch 32 (BENCH_LAYERS): a 3 x 3 layer with 256
        channels in and out at 56 x 56 (the target's), ResNet-50's 1 x 1
        squeeze and expand at 56 x 56 (256 -> 64, 64 -> 256 channels) and
        its stem (7 x 7, stride 2, 3 -> 64 channels at 224 x 224). Each
        rung is one typed entry (cudabook.evidence): ms, TFLOP/s (2 N P Q
        K R S C flops) and share of the FP32 FMA peak (chapter 10's FMA
        chains, timed in this run). The baseline is cuDNN through
        F.conv2d in float32 (torch.backends.cudnn.conv.fp32_precision =
        "ieee": TF32 off; cudnn.benchmark on with benchmark_limit = 0, so
        cuDNN times every algorithm it has and keeps the fastest), on the
        same data, in both of PyTorch's layouts (NCHW and channels_last),
        each an entry of its own with the kernels the profiler saw; the
        faster layout is then timed in alternation with the implicit rung
        (the ladder's best), ABBA rounds, and the share of cuDNN is the
        median of the rounds' ratios (for the other rungs, their time
        against cuDNN's pooled time). For im2col, its two kernels apart:
        the first against the device-to-device copy (timed in this run)
        as if it only read X once and wrote the patch matrix, the GEMM
        against the FMA peak. Two more rows, library only, on the tensor
        cores: cuDNN with TF32 on (fp32_precision = "tf32") in NCHW, and
        cuDNN in bf16 in channels_last, against chapter 12's tensor-core
        ceiling (tc_gemm.tensor_core_ceiling: cuBLAS bf16 at 8192^3,
        timed in this run), each with its ratio to our best rung.
        Target: the implicit rung >= 50% of cuDNN on the 3 x 3 layer
        (judged by the entry, against the median ratio). The direct rung
        is timed with the smallest budget.
"""

import functools
import os
import sys
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from matmul_fp32 import sgemm  # noqa: E402
from matmul_tc.tc_gemm import tensor_core_ceiling  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
RUNGS = ("direct", "im2col", "implicit")
SLOW = {"direct"}
#: The rung timed in alternation with cuDNN, and judged against the target.
BEST = "implicit"
#: rung: (threads per block, (output pixels, output channels) per block)
BLOCKS = {"direct": ((32, 8, 1), (8, 32)),          # threadIdx.x along K, y along pixels
          "implicit": ((256, 1, 1), (128, 128))}    # an 8 x 8 tile of Y per thread
IM2COL_BLOCK = (256, 1, 1)
MAX_DIM = 2**31 - 1 - 256          # M = N P Q and Kg = R S C index int rows and columns
MAX_SIDE = 2**29                   # H + 2 pad and W + 2 pad (a row outside the image
                                   # is marked by h = -2^30 in conv2d.cu)
MAX_GRID_Y = 65_535
#: (N, H, W, C, K, R, S, stride, pad)
SHAPES = [
    (1, 1, 1, 1, 1, 1, 1, 1, 0),          # one pixel, one channel
    (2, 7, 9, 3, 5, 3, 3, 1, 1),          # 3 channels: the scalar path
    (3, 13, 11, 8, 12, 3, 3, 2, 1),       # stride 2
    (1, 17, 19, 5, 7, 5, 5, 1, 2),        # 5 x 5, odd channels
    (2, 10, 10, 16, 33, 1, 1, 1, 0),      # 1 x 1, K not a multiple of 4
    (1, 9, 9, 4, 4, 3, 3, 1, 0),          # no padding
    (1, 23, 23, 3, 64, 7, 7, 2, 3),       # a stem: 7 x 7, stride 2
    (2, 30, 30, 64, 130, 3, 3, 1, 1),     # several tiles of pixels and of K
    (3, 14, 14, 260, 68, 3, 3, 1, 1),     # R S C = 2340: a last slice of 4 on the float4 path
    (1, 9, 11, 8, 12, 3, 5, 1, 2),        # R != S
    (2, 14, 14, 64, 128, 1, 1, 2, 0),     # 1 x 1, stride 2 (a projection shortcut)
    (2, 20, 20, 64, 132, 3, 3, 1, 1),     # float4 path, a partial last tile of filters
]
#: Under compute-sanitizer: small, but with partial tiles in M and K, and
#: both the float4 and the scalar path.
SANITIZER_SHAPES = [(1, 1, 1, 1, 1, 1, 1, 1, 0), (2, 7, 9, 3, 5, 3, 3, 1, 1),
                    (1, 12, 12, 4, 132, 3, 3, 1, 1), (1, 9, 10, 8, 12, 3, 3, 2, 1)]
#: name: (N, H, W, C, K, R, S, stride, pad). The 3 x 3 layer is the target's;
#: the 1 x 1 pair is a ResNet-50 bottleneck's squeeze and expand at 56 x 56;
#: the stem is ResNet-50's first layer, on 224 x 224 RGB images.
BENCH_LAYERS = {
    "3x3": (32, 56, 56, 256, 256, 3, 3, 1, 1),
    "1x1_squeeze": (32, 56, 56, 256, 64, 1, 1, 1, 0),
    "1x1_expand": (32, 56, 56, 64, 256, 1, 1, 1, 0),
    "stem": (32, 224, 224, 3, 64, 7, 7, 2, 3),
}
TARGET_LAYER, TARGET = "3x3", 0.50
BASELINE = "cuDNN fp32 (F.conv2d, TF32 off, cudnn.benchmark on)"
FMA_PEAK = "FP32 FMA peak (chapter 10's FMA chains, this run)"
#: The slow rung: a budget of 1 ms (at least 3 repetitions) instead of the run's.
SLOW_TIMER = functools.partial(cb.bench, warmup_ms=1.0, min_reps=3)
U = 2.0**-24                        # float32 unit roundoff


def out_size(h: int, w: int, r: int, s: int, stride: int, pad: int) -> tuple[int, int]:
    """P, Q: the output pixels a filter of R x S finds, stepping by stride
    over the padded image."""
    return (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1


def patches(x: np.ndarray, r: int, s: int, stride: int, pad: int) -> np.ndarray:
    """The patch matrix A (im2col), in float64: row (n, p, q) holds the
    R x S x C input values under the filter at output pixel (p, q)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    win = sliding_window_view(xp, (r, s), axis=(1, 2))[:, ::stride, ::stride]  # N P Q C R S
    n, p, q = win.shape[:3]
    return win.transpose(0, 1, 2, 4, 5, 3).reshape(n * p * q, -1)


def reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Y and |X| conv |W| in float64, as (N P Q) x K matrices, an image at a
    time (the patch matrix of a batch of big images would not fit)."""
    r, s, c, k = w.shape
    w64 = w.astype(np.float64).reshape(r * s * c, k)
    ys, scales = [], []
    for img in x:
        a = patches(img[None], r, s, stride, pad)
        ys.append(a @ w64)
        scales.append(np.abs(a) @ np.abs(w64))
    return np.concatenate(ys), np.concatenate(scales)


def bound_k(kg: int) -> float:
    """gamma_Kg / u + 1: Kg roundings of a chain of FMAs, plus the reference's."""
    return kg / (1 - kg * U) + 1


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    fmt = "PPP" + "i" * 11             # X, Wt, Y (or X, Col, unused), then struct ConvShape
    kernels = {name: module.get_function(name).prepare(fmt)
               for name in ("conv_direct", "conv_implicit")}
    kernels["im2col"] = module.get_function("im2col").prepare("PP" + "i" * 11)
    kernels["sgemm"] = sgemm.load_kernels()
    return kernels


# --8<-- [start:launch]
def conv2d(kernels, name: str, x, w, y, stride: int = 1, pad: int = 0, col=None) -> None:
    """y = the convolution of x with w, by the rung `name`. x: N x H x W x C,
    w: R x S x C x K, y: N x P x Q x K, all C-contiguous float32 GPUArrays
    on 16-byte boundaries; y must not overlap x or w. The im2col rung also
    needs `col`, a float32 workspace of (N P Q) x (R S C)."""
    if name not in RUNGS:
        raise ValueError(f"name: expected one of {', '.join(RUNGS)}, got {name!r}")
    cb.check_array("x", x, dtype=np.float32, ndim=4, on_device=True, alignment=16)
    cb.check_array("w", w, dtype=np.float32, ndim=4, on_device=True, alignment=16)
    n, h, wd, c = (cb.check_size(f"x.shape[{i}] ({d})", x.shape[i], high=MAX_DIM)
                   for i, d in enumerate("NHWC"))
    r, s, wc, k = (cb.check_size(f"w.shape[{i}] ({d})", w.shape[i], high=MAX_DIM)
                   for i, d in enumerate("RSCK"))
    if wc != c:
        raise ValueError(f"w: expected {c:,} input channels in w.shape[2] (R x S x C x K, "
                         f"as x has C = {c:,}), got shape {tuple(w.shape)}")
    stride = cb.check_size("stride", stride)
    pad = cb.check_size("pad", pad, low=0, high=MAX_SIDE)
    if h + 2 * pad > MAX_SIDE or wd + 2 * pad > MAX_SIDE:
        raise ValueError(f"x: a padded image of {h + 2 * pad:,} x {wd + 2 * pad:,} is more "
                         f"than the {MAX_SIDE:,} a side may have")
    p, q = out_size(h, wd, r, s, stride, pad)
    if p < 1 or q < 1:
        raise ValueError(f"w: a {r} x {s} filter does not fit in x's {h} x {wd} image "
                         f"padded by {pad}: no output pixel")
    m = cb.check_size("N P Q (output pixels)", n * p * q, high=MAX_DIM)
    kg = cb.check_size("R S C (terms per output)", r * s * c, high=MAX_DIM)
    cb.check_array("y", y, dtype=np.float32, shape=(n, p, q, k), on_device=True, alignment=16)
    cb.check_separate("y", y, x=x, w=w)
    shape = [np.int32(v) for v in (n, h, wd, c, k, r, s, p, q, stride, pad)]
    if name in ("direct", "implicit"):           # blockIdx.x along pixels, y along K
        block, per_block = BLOCKS[name]
        grid = (cb.ceil_div(m, per_block[0]), cb.ceil_div(k, per_block[1]), 1)
        if grid[1] > MAX_GRID_Y:
            raise ValueError(f"w: K = {k:,} output channels need {grid[1]:,} blocks of "
                             f"{per_block[1]} in y, more than the {MAX_GRID_Y:,} a grid allows")
        kernels[f"conv_{name}"].prepared_call(grid, block, x.gpudata, w.gpudata, y.gpudata,
                                              *shape)
    else:
        if cb.ceil_div(m, 128) > MAX_GRID_Y:        # chapter 11's GEMM puts M along grid y
            raise ValueError(f"x: the im2col rung's GEMM takes at most {MAX_GRID_Y * 128:,} "
                             f"output pixels (N P Q), got {m:,}; the implicit rung takes more")
        if col is None:
            raise ValueError(f"col: the im2col rung needs a workspace of {m:,} x {kg:,} floats")
        cb.check_array("col", col, dtype=np.float32, shape=(m, kg), on_device=True, alignment=16)
        cb.check_separate("col", col, x=x, w=w, y=y)
        im2col(kernels, x, col, shape)
        sgemm.sgemm(kernels["sgemm"], "sgemm_double_buffer", col, w.reshape(kg, k),
                    y.reshape(m, k))


def im2col(kernels, x, col, shape: list) -> None:
    """The first of the im2col rung's two kernels, on checked arguments: a
    warp per row of col. shape: the ConvShape fields, N H W C K R S P Q
    stride pad, as int32."""
    m = int(shape[0]) * int(shape[7]) * int(shape[8])         # < 2^31: fits the grid's x
    blocks = cb.ceil_div(m, IM2COL_BLOCK[0] // 32)
    kernels["im2col"].prepared_call((blocks, 1, 1), IM2COL_BLOCK, x.gpudata, col.gpudata, *shape)
# --8<-- [end:launch]


def random_layer(n, h, w, c, k, r, s, rng) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((n, h, w, c), dtype=np.float32)
    wt = rng.standard_normal((r, s, c, k), dtype=np.float32)
    return x, wt


def label(name: str, layer: tuple) -> str:
    n, h, w, c, k, r, s, stride, pad = layer
    return f"{name} N{n} {h}x{w}x{c} -> K{k} {r}x{s}/{stride} pad {pad}"


class Layer:
    """One layer's data, on the host and on the GPU."""

    def __init__(self, x: np.ndarray, w: np.ndarray, stride: int, pad: int):
        from pycuda import gpuarray

        (n, h, wd, c), (r, s, _, k) = x.shape, w.shape
        self.shape = (n, h, wd, c, k, r, s, stride, pad)
        self.x, self.w, self.stride, self.pad = x, w, stride, pad
        p, q = out_size(h, wd, r, s, stride, pad)
        self.m, self.kg, self.k = n * p * q, r * s * c, k
        self.x_gpu, self.w_gpu = gpuarray.to_gpu(x), gpuarray.to_gpu(w)
        self.y_gpu = gpuarray.empty((n, p, q, k), np.float32)
        self.col_gpu = None                       # the im2col workspace, made when needed
        self.flops = 2 * self.m * k * self.kg
        self.shape_args = [np.int32(v) for v in (n, h, wd, c, k, r, s, p, q, stride, pad)]

    @classmethod
    def random(cls, layer: tuple, rng) -> "Layer":
        """A layer (N, H, W, C, K, R, S, stride, pad) of standard normal values."""
        n, h, w, c, k, r, s, stride, pad = layer
        return cls(*random_layer(n, h, w, c, k, r, s, rng), stride, pad)

    def workspace(self):
        """The im2col rung's patch matrix, allocated on first use."""
        if self.col_gpu is None:
            from pycuda import gpuarray

            self.col_gpu = gpuarray.empty((self.m, self.kg), np.float32)
        return self.col_gpu

    def run(self, kernels, name: str) -> None:
        if name == "im2col":
            self.workspace()
        conv2d(kernels, name, self.x_gpu, self.w_gpu, self.y_gpu, self.stride, self.pad,
               col=self.col_gpu)

    def check(self, kernels, rungs=RUNGS) -> None:
        """Each rung in `rungs` against the float64 convolution."""
        ref, scale = reference(self.x, self.w, self.stride, self.pad)
        for name in rungs:
            cb.poison(self.y_gpu)
            if name == "im2col":
                self.workspace()
                cb.poison(self.col_gpu)             # an element im2col misses cannot pass
            self.run(kernels, name)
            out = self.y_gpu.get().reshape(self.m, self.k)
            cb.report_check(cb.compare(label(name, self.shape), out, ref, k=bound_k(self.kg),
                                       scale=scale))


def use_cudnn(torch, fp32_precision: str = "ieee") -> None:
    """cuDNN as the baseline runs it: "ieee" is FP32 arithmetic, as ours
    ("tf32": TF32 on the tensor cores); benchmark mode with no limit, so
    the first call of each shape times every algorithm and keeps the
    fastest. Only PyTorch's newer precision switches are set: reading the
    older allow_tf32 after them raises."""
    torch.backends.cudnn.conv.fp32_precision = fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.benchmark_limit = 0


def cudnn_call(torch, layer: Layer, fmt: str, dtype=None):
    """F.conv2d on the layer's data in NCHW (fmt "nchw") or channels_last
    ("nhwc"), float32 or `dtype`; called once here, so that benchmark mode
    has chosen its algorithm before anything is timed."""
    import torch.nn.functional as F

    mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
    x = torch.from_numpy(layer.x).cuda().permute(0, 3, 1, 2).contiguous()      # NCHW
    w = torch.from_numpy(layer.w).cuda().permute(3, 2, 0, 1).contiguous()      # K C R S
    if dtype is not None:
        x, w = x.to(dtype), w.to(dtype)
    x, w = x.contiguous(memory_format=mf), w.contiguous(memory_format=mf)

    def call():
        return F.conv2d(x, w, stride=layer.stride, padding=layer.pad)
    call()
    torch.cuda.synchronize()
    return call


def cudnn_times(torch, layer: Layer, budget_ms: float, working_set: int) -> dict:
    """F.conv2d on the same data, in NCHW and in channels_last, float32
    with TF32 off: ms each."""
    use_cudnn(torch)
    return {fmt: cb.bench(cudnn_call(torch, layer, fmt), working_set_bytes=working_set,
                          budget_ms=budget_ms).median_ms for fmt in ("nchw", "nhwc")}


def tensor_core_rows(torch, layer: Layer, key: str, working_set: int, tc_roof: tuple[str, float]) -> dict:
    """cuDNN on the tensor cores, library only: TF32 on in NCHW, and bf16 in
    channels_last. Entries of their own (no rung of ours does this
    arithmetic), named by the kernels they ran. tc_roof: (name, FLOP/s),
    tensor_core_ceiling's."""
    rows = {}
    for row, fmt, dtype, precision, ws in (("tf32", "nchw", None, "tf32", working_set),
                                           ("bf16", "nhwc", torch.bfloat16, "ieee", working_set // 2)):
        use_cudnn(torch, precision)
        try:
            rows[row] = evidence.benchmark(
                f"cuDNN {row.upper() if row == 'tf32' else row} {fmt.upper()} {key}",
                cudnn_call(torch, layer, fmt, dtype), flops=layer.flops, working_set_bytes=ws,
                ceiling=tc_roof)
        finally:
            use_cudnn(torch)                        # back to FP32 arithmetic
    return rows


def bench_layer(kernels, key: str, shape: tuple, seed: int, budget_ms: float, peak: float,
                copy: float, tc_roof: tuple[str, float] | None = None) -> dict:
    """Check, then time, every rung and cuDNN on one layer (typed entries),
    and print a table of them. Returns the facts for the record."""
    layer = Layer.random(shape, np.random.default_rng(seed))
    layer.check(kernels)
    working_set = 4 * (layer.x.size + layer.w.size + layer.m * layer.k)
    col_bytes = 4 * layer.m * layer.kg
    fma = (FMA_PEAK, peak)
    n, h, w, c, k, r, s, stride, pad = shape
    print(f"{key}: N={n}, {h}x{w}x{c} -> {k} channels, {r}x{s} filter, stride {stride}, "
          f"pad {pad}: {layer.flops / 1e9:,.1f} GFLOP")
    torch = cb.torch_cuda()
    cudnn, calls, facts = {}, {}, {}
    if torch is not None:
        use_cudnn(torch)
        for fmt in ("nchw", "nhwc"):
            calls[fmt] = cudnn_call(torch, layer, fmt)
            cudnn[fmt] = evidence.benchmark(f"cuDNN fp32 {fmt.upper()} {key}", calls[fmt],
                                            flops=layer.flops, working_set_bytes=working_set,
                                            ceiling=fma)
            facts[f"cudnn_{fmt}_{key}_ms"] = cudnn[fmt].timing.median_ms
            facts[f"cudnn_{fmt}_{key}_tflops"] = cudnn[fmt].flops_per_s / 1e12
    rows = {}
    for name in RUNGS:
        def fn(name=name):
            layer.run(kernels, name)

        extra = {"budget_ms": 1.0, "timer": SLOW_TIMER} if name in SLOW else {}
        if name == BEST and cudnn:
            fmt = min(cudnn, key=lambda f: cudnn[f].timing.median_ms)
            extra["baseline"] = (f"cuDNN fp32 {fmt.upper()}", calls[fmt])
            if key == TARGET_LAYER:
                extra["targets"] = {"baseline": TARGET}
        rows[name] = evidence.benchmark(
            f"{name} {key}", fn, flops=layer.flops,
            working_set_bytes=working_set + (2 * col_bytes if name == "im2col" else 0), ceiling=fma,
            **extra)
    # where im2col's time goes: its two kernels apart. The first reads X at
    # least once and writes Col: against the copy, as if it did only that.
    least_bytes = 4 * layer.x.size + col_bytes
    t_col = evidence.benchmark(
        f"im2col kernel {key}", lambda: im2col(kernels, layer.x_gpu, layer.col_gpu, layer.shape_args),
        bytes_moved=least_bytes, ceiling=("device-to-device copy", copy))
    t_gemm = evidence.benchmark(
        f"im2col's GEMM {key}", lambda: sgemm.sgemm(kernels["sgemm"], "sgemm_double_buffer", layer.col_gpu,
                                                  layer.w_gpu.reshape(layer.kg, layer.k),
                                                  layer.y_gpu.reshape(layer.m, layer.k)),
        flops=layer.flops, working_set_bytes=working_set + col_bytes, ceiling=fma)
    ours = rows[BEST]
    base = ours.baseline.timing.median_ms if ours.baseline is not None else None
    print(f"{key}, the entries above in one table:")
    print(f"{'rung':16s} {'ms':>10s} {'TFLOP/s':>9s} {'% of cuDNN':>11s} {'% of FMA peak':>14s}")
    for name, m in rows.items():
        ms = m.timing.median_ms
        of = None
        if base:                   # the alternated rung: the rounds' median; the rest: against the pooled time
            of = ours.baseline.ratio if name == BEST else base / ms
        share = f"{100 * of:10.1f}%" if of is not None else f"{'-':>11s}"
        print(f"{name:16s} {ms:10.3f} {m.flops_per_s / 1e12:9.2f} {share} "
              f"{100 * m.fraction_of_ceiling:13.1f}%")
        facts[f"{name}_{key}_ms"] = ms
        facts[f"{name}_{key}_tflops"] = m.flops_per_s / 1e12
        facts[f"{name}_{key}_of_peak"] = m.fraction_of_ceiling
        if of is not None:
            facts[f"{name}_{key}_of_cudnn"] = of
    if base:
        for fmt, m in cudnn.items():
            ms = m.timing.median_ms
            print(f"{'cuDNN ' + fmt.upper():16s} {ms:10.3f} {m.flops_per_s / 1e12:9.2f} "
                  f"{100 * base / ms:10.1f}% {100 * m.fraction_of_ceiling:13.1f}%")
        print(f"  cuDNN: {BASELINE}; alternated with {BEST}: {ours.baseline.name}")
        facts[f"cudnn_{key}_ms"] = base
        facts[f"cudnn_{key}_tflops"] = ours.baseline.flops_per_s / 1e12
    least = least_bytes / copy * 1e3
    print(f"  im2col's two kernels: im2col {t_col.timing.median_ms:.3f} ms (writes "
          f"{col_bytes / 1e6:,.0f} MB; at the copy's rate, X in and Col out take "
          f"{least:.3f} ms), GEMM {t_gemm.timing.median_ms:.3f} ms")
    facts.update({f"im2col_kernel_{key}_ms": t_col.timing.median_ms, f"gemm_{key}_ms": t_gemm.timing.median_ms,
                  f"im2col_kernel_{key}_of_copy": t_col.fraction_of_ceiling,
                  f"col_{key}_mb": col_bytes / 1e6, f"gflop_{key}": layer.flops / 1e9})
    best = max(rows, key=lambda name: rows[name].flops_per_s)
    facts[f"best_{key}"] = best
    if base and key == TARGET_LAYER:
        share = ours.baseline.ratio if best == BEST else base / rows[best].timing.median_ms
        facts.update(best_of_cudnn=share, target=TARGET, target_met=ours.targets.met["baseline"])
    if torch is not None and tc_roof is not None:
        for row, m in tensor_core_rows(torch, layer, key, working_set, tc_roof).items():
            over = m.flops_per_s / rows[best].flops_per_s
            print(f"  cuDNN {row} on tensor cores: {m.flops_per_s / 1e12:.1f} TFLOP/s, "
                  f"{over:.2f} times our best rung ({best})")
            facts.update({f"cudnn_{row}_{key}_ms": m.timing.median_ms,
                          f"cudnn_{row}_{key}_tflops": m.flops_per_s / 1e12,
                          f"cudnn_{row}_{key}_over_best": over})
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for shape in SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else SHAPES:
        Layer.random(shape, rng).check(kernels)
    if args.bench:
        from roofline.intensity_sweep import fp32_roof

        print(f"{gpu.name}: {gpu.sm_count} SMs")
        peak = fp32_roof(gpu)
        print(f"{FMA_PEAK}: {peak / 1e12:.1f} TFLOP/s")
        copy = cb.ceiling()
        print(f"copy bandwidth (this run): {copy / 1e12:.2f} TB/s, read + written")
        facts = {"baseline": BASELINE, "fma_peak_tflops": peak / 1e12, "copy_tbps": copy / 1e12}
        torch, tc_roof = cb.torch_cuda(), None
        if torch is not None:
            use_cudnn(torch)
            print(f"cuDNN {torch.backends.cudnn.version()} (PyTorch {torch.__version__}), "
                  f"cudnn.conv.fp32_precision = {torch.backends.cudnn.conv.fp32_precision!r}, "
                  f"benchmark_limit = {torch.backends.cudnn.benchmark_limit}")
            facts["cudnn_version"] = torch.backends.cudnn.version()
            tc_roof = tensor_core_ceiling(None, args.seed, args.budget_ms)
            facts.update(tc_ceiling=tc_roof[0], tc_ceiling_tflops=tc_roof[1] / 1e12)
        for key, shape in BENCH_LAYERS.items():
            facts.update(bench_layer(kernels, key, shape, args.seed, args.budget_ms, peak, copy, tc_roof))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
