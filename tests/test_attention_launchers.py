"""Chapter 16's host side on the CPU: the float64 reference against the
definition, and every argument check and launch of the flash kernel, with
stand-ins for the GPU arrays and kernels (as tests/test_conv_launchers.py)."""

import math

import numpy as np
import pytest
import fakes
from fakes import FakeArray, FakeKernel

from attention import _ref
from cudabook.bf16 import from_bf16
from attention import flash_bf16 as fb


def recorder():
    return fakes.recorder(fb.VARIANTS)


def four(shape):
    """q, k, v, o one after another, on 256-byte boundaries."""
    return fakes.laid_out([shape] * 4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1, 64), (2, 3, 77, 64), (1, 2, 130, 128)])
def test_reference_is_the_definition(shape, causal):
    q, k, v = _ref.random_qkv(*shape, 4, np.random.default_rng(2), bf16=True)
    out, mag, smax = _ref.reference(q, k, v, causal)
    b, h, s, d = shape
    qf, kf, vf = (from_bf16(x).astype(np.float64) for x in (q, k, v))
    for i in np.ndindex(b, h):
        for r in range(s):
            keys = r + 1 if causal else s
            sc = qf[i][r] @ kf[i][:keys].T / math.sqrt(d)
            p = np.exp(sc - sc.max())
            p /= p.sum()
            np.testing.assert_allclose(out[i][r], p @ vf[i][:keys], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(mag[i][r], p @ np.abs(vf[i][:keys]), rtol=1e-10, atol=1e-12)
    size = max(float((np.abs(qf[i][r]) @ np.abs(kf[i][:(r + 1 if causal else s)]).T).max())
               for i in np.ndindex(b, h) for r in range(s)) / math.sqrt(d)
    assert math.isclose(smax, size, rel_tol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1, 64), (2, 3, 77, 64), (1, 2, 130, 128), (8, 16, 4000, 128)])
def test_every_variant_launches_a_grid_that_covers_the_queries(shape, causal):
    kernels, calls = recorder()
    q, k, v, o = four(shape)
    names = fb.variants_for(shape[3])
    for name in names:
        fb.attention(kernels, name, q, k, v, o, causal)
    assert [c[0] for c in calls] == names
    b, h, s, d = shape
    for name, grid, block, args, kw in calls:
        _, mt, bk = fb.VARIANTS[name]
        bq = 64 * mt
        assert block == (128, 1, 1) and grid[1:] == (b * h, 1)
        assert grid[0] * bq >= s > (grid[0] - 1) * bq
        assert args[:4] == (q.gpudata, k.gpudata, v.gpudata, o.gpudata)
        assert int(args[4]) == s and isinstance(args[4], np.int32)
        assert math.isclose(float(args[5]), fb.LOG2E / math.sqrt(d), rel_tol=1e-6)
        assert int(args[6]) == int(causal)
        assert kw["shared_size"] == (bq + 4 * bk) * d * 2 <= 227 * 1024


@pytest.mark.parametrize("change,error,match", [
    (lambda a: {"q": FakeArray(a["q"].shape, np.float32, a["q"].gpudata)}, TypeError,
     "q: expected dtype uint16"),
    (lambda a: {"name": "flash_d64_m1_n64"}, ValueError, "is for head dimension 64, got D = 128"),
    (lambda a: {"v": FakeArray((1, 2, 131, 128), address=a["v"].gpudata)}, ValueError,
     r"v: expected shape \(1, 2, 130, 128\)"),
    (lambda a: {"o": a["q"]}, ValueError, "o: overlaps q"),
    (lambda a: {"causal": 1}, TypeError, "causal: expected True or False"),
    (lambda a: {"name": "flash"}, ValueError, "name: expected one of"),
    (lambda a: {"k": FakeArray(a["k"].shape, address=a["k"].gpudata + 2)}, ValueError,
     "k: expected a device address aligned to 16"),
    (lambda a: {"q": FakeArray((1, 2, 130), address=a["q"].gpudata)}, ValueError, "q: expected 4-D"),
])
def test_bad_arguments_get_an_error_naming_them(change, error, match):
    q, k, v, o = four((1, 2, 130, 128))
    args = {"name": "flash_d128_m1_n64", "q": q, "k": k, "v": v, "o": o, "causal": False}
    args.update(change(args))
    kernels, calls = recorder()
    with pytest.raises(error, match=match):
        fb.attention(kernels, args.pop("name"), **args)
    assert calls == []


def test_too_many_heads_for_the_grid():
    q, k, v, o = four((65_536, 1, 1, 64))
    with pytest.raises(ValueError, match="B x H = 65,536 heads"):
        fb.attention(recorder()[0], "flash_d64_m1_n64", q, k, v, o)


from attention import attention_fp32 as af  # noqa: E402


def fp32_recorder():
    kernels, calls = fakes.recorder(("scores", "pv", "flash_fp32_d64", "flash_fp32_d128"))
    from softmax_norm import _rows, softmax
    keys = [(k, d, 0) for d in _rows.DTYPES for k in ("safe", "online")] + _rows.register_kernels()
    kernels["softmax"] = {key: FakeKernel(("softmax", key), calls) for key in keys}
    return kernels, calls


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1, 64), (2, 3, 77, 64), (1, 2, 130, 128), (8, 16, 4096, 128)])
def test_fp32_ways_launch_grids_that_cover_the_output(shape, causal):
    b, h, s, d = shape
    q, k, v, o, sc, p = fakes.laid_out([shape] * 4 + [(b, h, s, s)] * 2, np.float32)
    kernels, calls = fp32_recorder()
    af.attention(kernels, "flash_fp32", q, k, v, o, causal)
    af.attention(kernels, "three_kernel", q, k, v, o, causal, work=[sc, p])
    tiles = -(-s // 64)
    flash, scores, *soft, pv = calls
    assert flash[0] == f"flash_fp32_d{d}" and flash[1] == (tiles, b * h, 1) and flash[2] == (256, 1, 1)
    assert flash[4]["shared_size"] == (3 * 64 * (d + 1) + 64 * 65) * 4
    assert scores[0] == "scores" and scores[1] == (tiles, tiles, b * h)
    assert pv[0] == "pv" and pv[1] == (d // 64, tiles, b * h)
    # chapter 14's softmax over every row of scores, in calls of < 2^31 elements
    rows = [c[3][2] for c in soft]
    assert sum(int(r) for r in rows) == b * h * s
    assert all(int(r) * s <= 2**31 - 1 for r in rows)
    assert soft[0][3][0] == sc.gpudata and soft[0][3][1] == p.gpudata
    assert int(scores[3][-1]) == int(pv[3][-1]) == int(causal)


def test_fp32_three_kernel_needs_its_work_arrays():
    shape = (1, 1, 70, 64)
    q, k, v, o = (FakeArray(shape, np.float32, 0x10000 + i * 0x10000) for i in range(4))
    with pytest.raises(ValueError, match="work: three_kernel needs two"):
        af.attention(fp32_recorder()[0], "three_kernel", q, k, v, o)
    with pytest.raises(ValueError, match="head dimension D must be one of"):
        q2 = FakeArray((1, 1, 70, 32), np.float32, 0x10000)
        af.attention(fp32_recorder()[0], "flash_fp32", q2, q2, q2, o)
