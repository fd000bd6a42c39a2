"""Chapter 14's launchers on the CPU: every argument check and launch shape,
with stand-ins for the GPU arrays and kernels.

The GPU suite runs these launchers for real; this test runs their host side
on a machine with no GPU, so that a mistake there (a wrong key, a bad
argument to a check) fails in CI instead of costing a GPU run.
"""

import numpy as np
import pytest
from fakes import FakeArray, FakeKernel

from softmax_norm import _rows, ex3_rmsnorm, layernorm, softmax


class Recorder(dict):
    """Kernels by key, as load_kernels() returns them; launches go to .calls."""

    def __init__(self, keys):
        self.calls = []
        super().__init__((key, FakeKernel(key, self.calls)) for key in keys)


SHAPES = [(1, 1), (3, 7), (64, 1025), (2, 4096), (2, 8192)]


@pytest.mark.parametrize("dt", list(_rows.DTYPES))
@pytest.mark.parametrize("rows,cols", [*SHAPES, (2, 20_000)])
def test_softmax_launches_every_kind_that_fits(dt, rows, cols):
    keys = [(k, d, 0) for d in _rows.DTYPES for k in softmax.TWO_PASS] + _rows.register_kernels()
    kernels = Recorder(keys)
    x, y = FakeArray((rows, cols), _rows.DTYPES[dt]), FakeArray((rows, cols), _rows.DTYPES[dt])
    softmax.softmax(kernels, x, y)
    kinds = [k for k in softmax.KINDS if softmax.fits(k, cols)]
    for kind in kinds:
        softmax.softmax(kernels, x, y, kind)
    assert kernels.calls[0][0][0] == softmax.pick(cols)
    assert [c[0][0] for c in kernels.calls[1:]] == kinds
    for key, grid, block, *_ in kernels.calls:
        if key[0] == "block":                    # a block per row, the row in its registers
            assert grid[0] == rows and block[0] * _rows.VEC[dt] * key[2] >= cols


def test_softmax_refuses_a_row_too_long_for_the_kind():
    x = FakeArray((2, 9000), np.float32)
    with pytest.raises(ValueError, match="at most 8192"):
        softmax.softmax(Recorder([]), x, x, "block")


@pytest.mark.parametrize("dt", list(_rows.DTYPES))
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_layernorm_and_rmsnorm_launch(dt, rows, cols):
    ln = Recorder([(s, *k) for s in layernorm.STATS for k in _rows.register_kernels()] + ["bwd", "column_sum"])
    rms = Recorder(_rows.register_kernels())
    x, g = FakeArray((rows, cols), _rows.DTYPES[dt]), FakeArray((cols,), _rows.DTYPES[dt])
    stat = FakeArray((rows,), np.float32)
    for stats in layernorm.STATS:
        layernorm.layernorm(ln, x, g, g, x, stat, stat, stats=stats)
    ex3_rmsnorm.rmsnorm(rms, x, g, x)
    if dt == "f32":
        blocks = layernorm.bwd_blocks(rows, 132)
        layernorm.layernorm_backward(ln, x, x, g, stat, stat, x, g, g, FakeArray((2, blocks, cols), np.float32))
        assert [c[0] for c in ln.calls[-3:]] == ["bwd", "column_sum", "column_sum"]
    assert len(rms.calls) == 1 and rms.calls[0][0][0] == _rows.kind_for(cols)


def test_layernorm_refuses_a_wrong_dtype():
    x = FakeArray((2, 64), np.float16)
    with pytest.raises(TypeError, match="x: expected float32 or bfloat16"):
        layernorm.layernorm(Recorder([]), x, x, x, x, x, x)
