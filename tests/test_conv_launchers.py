"""Chapter 15's host side on the CPU: the float64 reference against a plain
loop, and every argument check and launch of conv2d() with stand-ins for
the GPU arrays and kernels.

The GPU suite runs the kernels for real; this test catches a host-side
mistake (a wrong grid, a reshape, a bad check) before it costs a GPU run.
"""

import fakes
import numpy as np
import pytest
from fakes import FakeKernel

from conv import conv2d


def FakeArray(shape, dtype=np.float32, address=0x10000):
    """tests/fakes.py's stand-in, float32 unless told (as this chapter's arrays are)."""
    return fakes.FakeArray(shape, dtype, address)


def recorder():
    kernels, calls = fakes.recorder(("conv_direct", "conv_implicit", "im2col"))
    kernels["sgemm"] = {"sgemm_double_buffer": FakeKernel("sgemm", calls)}
    return kernels, calls


def loop_conv(x, w, stride, pad):
    """The definition, one output at a time (tiny shapes only)."""
    n, h, wd, c = x.shape
    r, s, _, k = w.shape
    p, q = conv2d.out_size(h, wd, r, s, stride, pad)
    y = np.zeros((n, p, q, k))
    for i in np.ndindex(n, p, q):
        for dr in range(r):
            for ds in range(s):
                hh, ww = i[1] * stride - pad + dr, i[2] * stride - pad + ds
                if 0 <= hh < h and 0 <= ww < wd:
                    y[i] += x[i[0], hh, ww].astype(np.float64) @ w[dr, ds].astype(np.float64)
    return y


@pytest.mark.parametrize("shape", conv2d.SHAPES[:7] + conv2d.SANITIZER_SHAPES)
def test_reference_is_the_definition(shape):
    n, h, w, c, k, r, s, stride, pad = shape
    x, wt = conv2d.random_layer(n, h, w, c, k, r, s, np.random.default_rng(1))
    ref, scale = conv2d.reference(x, wt, stride, pad)
    want = loop_conv(x, wt, stride, pad)
    assert ref.shape == (want.size // k, k)
    np.testing.assert_allclose(ref, want.reshape(-1, k), rtol=1e-12, atol=1e-12)
    assert (scale >= np.abs(ref) - 1e-9).all()


def arrays(shape, address=0x10000):
    n, h, w, c, k, r, s, stride, pad = shape
    p, q = conv2d.out_size(h, w, r, s, stride, pad)
    x, wt, y, col = fakes.laid_out([(n, h, w, c), (r, s, c, k), (n, p, q, k), (n * p * q, r * s * c)],
                                   np.float32, address)
    return x, wt, y, col, n * p * q


@pytest.mark.parametrize("shape", conv2d.SHAPES + list(conv2d.BENCH_LAYERS.values()))
def test_every_rung_launches_a_grid_that_covers_the_output(shape):
    kernels, calls = recorder()
    x, w, y, col, m = arrays(shape)
    k, kg = shape[4], shape[5] * shape[6] * shape[3]
    for name in conv2d.RUNGS:
        conv2d.conv2d(kernels, name, x, w, y, shape[7], shape[8], col=col)
    assert [c[0] for c in calls] == ["conv_direct", "im2col", "sgemm", "conv_implicit"]
    direct, cols, gemm, implicit = calls
    # direct: threadIdx.x along K, y along pixels; blockIdx.x along pixels
    assert direct[2] == (32, 8, 1)
    assert direct[1][0] * 8 >= m > (direct[1][0] - 1) * 8
    assert direct[1][1] * 32 >= k > (direct[1][1] - 1) * 32
    # the struct ConvShape: N H W C K R S P Q stride pad, as int32
    n, h, wd, c, _, r, s, stride, pad = shape
    p, q = conv2d.out_size(h, wd, r, s, stride, pad)
    assert [int(v) for v in direct[3][3:]] == [n, h, wd, c, k, r, s, p, q, stride, pad]
    assert all(isinstance(v, np.int32) for v in direct[3][3:])
    # im2col: a warp per row of col (M of them), 8 warps a block
    assert cols[2] == (256, 1, 1) and cols[1] == (-(-m // 8), 1, 1)
    assert cols[3][:2] == (x.gpudata, col.gpudata)
    # the GEMM: col (M x Kg) @ w (Kg x K) -> y (M x K), 128 x 128 tiles
    assert gemm[1] == (-(-k // 128), -(-m // 128), 1)
    assert gemm[3][:3] == (col.gpudata, w.gpudata, y.gpudata)
    assert [int(v) for v in gemm[3][3:]] == [m, k, kg]
    # implicit: 128 pixels x 128 channels a block, blockIdx.x along pixels
    assert implicit[1] == (-(-m // 128), -(-k // 128), 1) and implicit[2] == (256, 1, 1)


BASE = (2, 7, 9, 3, 5, 3, 3, 1, 1)


@pytest.mark.parametrize("change,error,match", [
    (lambda a: {"x": FakeArray(a["x"].shape, np.float64)}, TypeError, "x: expected dtype float32"),
    (lambda a: {"w": FakeArray((3, 3, 4, 5), address=a["w"].gpudata)}, ValueError,
     "w: expected 3 input channels"),
    (lambda a: {"w": FakeArray((3, 3, 3), address=a["w"].gpudata)}, ValueError, "w: expected 4-D"),
    (lambda a: {"y": FakeArray((2, 7, 9, 4), address=a["y"].gpudata)}, ValueError,
     r"y: expected shape \(2, 7, 9, 5\)"),
    (lambda a: {"y": a["x"]}, ValueError, "y: expected shape|y: overlaps x"),
    (lambda a: {"stride": 0}, ValueError, "stride: expected 1 <= stride"),
    (lambda a: {"pad": -1}, ValueError, "pad: expected 0 <= pad"),
    (lambda a: {"stride": 1.5}, TypeError, "stride: expected an integer"),
    (lambda a: {"pad": 0, "w": FakeArray((9, 3, 3, 5), address=a["w"].gpudata)}, ValueError,
     "does not fit"),
    (lambda a: {"name": "winograd"}, ValueError, "name: expected one of direct, im2col, implicit"),
    (lambda a: {"name": "im2col", "col": None}, ValueError, "col: the im2col rung needs"),
    (lambda a: {"name": "im2col", "col": FakeArray((10, 27), address=a["col"].gpudata)},
     ValueError, "col: expected shape"),
    (lambda a: {"name": "im2col", "col": FakeArray(a["col"].shape, address=a["y"].gpudata)},
     ValueError, "col: overlaps y"),
    (lambda a: {"x": FakeArray(a["x"].shape, address=a["x"].gpudata + 4)}, ValueError,
     "x: expected a device address aligned to 16"),
])
def test_bad_arguments_get_an_error_naming_them(change, error, match):
    x, w, y, col, _ = arrays(BASE)
    args = {"name": "implicit", "x": x, "w": w, "y": y, "stride": 1, "pad": 1, "col": col}
    args.update(change(args))
    kernels, calls = recorder()
    with pytest.raises(error, match=match):
        conv2d.conv2d(kernels, args.pop("name"), **args)
    assert calls == []


def test_overlapping_output_is_refused():
    x, w, y, col, _ = arrays((1, 4, 4, 4, 4, 1, 1, 1, 0))
    with pytest.raises(ValueError, match="y: overlaps x"):
        conv2d.conv2d(recorder()[0], "direct", x, w, FakeArray(y.shape, address=x.gpudata))


def test_too_many_output_channels_for_the_grid():
    shape = (1, 3, 3, 1, 65_535 * 32 + 1, 1, 1, 1, 0)
    x, w, y, col, _ = arrays(shape)
    with pytest.raises(ValueError, match="w: K = 2,097,121 output channels need 65,536 blocks"):
        conv2d.conv2d(recorder()[0], "direct", x, w, y)


def test_im2col_rung_refuses_more_pixels_than_its_gemm_takes_before_launching():
    shape = (256, 182, 182, 4, 8, 1, 1, 1, 0)          # N P Q = 8,479,744 > 65,535 x 128
    x, w, y, col, _ = arrays(shape)
    kernels, calls = recorder()
    with pytest.raises(ValueError, match=r"x: the im2col rung's GEMM takes at most 8,388,480 "
                                         r"output pixels \(N P Q\), got 8,479,744"):
        conv2d.conv2d(kernels, "im2col", x, w, y, col=col)
    assert calls == []
    conv2d.conv2d(kernels, "implicit", x, w, y)        # the implicit rung takes it
    assert [c[0] for c in calls] == ["conv_implicit"]
