"""Chapter 12's Hopper listing on the CPU: the launch wrapper's checks and
grid, with stand-ins for the GPU arrays and the kernel (tests/fakes.py),
and the constants the host shares with wgmma_gemm.cu."""

import re

import numpy as np
import pytest
import fakes
from fakes import FakeArray, FakeKernel

from matmul_tc import wgmma_gemm as wg


@pytest.fixture
def maps(monkeypatch):
    """tensor_map without the driver; the calls kept."""
    return fakes.fake_tensor_maps(monkeypatch, wg, 0x900000)


def three(m, n, k, c_dtype=np.uint16):
    a, b = fakes.laid_out([(m, k), (k, n)])
    c = FakeArray((m, n), c_dtype, (b.gpudata + b.nbytes + 511) // 256 * 256)
    return a, b, c


@pytest.mark.parametrize("m, n, k", [(1, 8, 8), (128, 256, 64), (129, 264, 72),
                                     (4097, 3000, 1032)])
def test_one_block_per_tile_and_maps_of_the_right_boxes(maps, m, n, k):
    calls = []
    a, b, c = three(m, n, k)
    wg.wgmma_gemm(FakeKernel("wgmma_gemm", calls), a, b, c)
    (_, grid, block, args, kw), = calls
    assert grid == (-(-m // wg.BM) * -(-n // wg.BN), 1, 1)
    assert block == (wg.THREADS, 1, 1)
    assert kw == {"shared_size": wg.SHARED_BYTES}
    assert args[2] == c.gpudata and [int(x) for x in args[3:]] == [m, n, k]
    assert maps == [(a.gpudata, m, k, wg.BM, wg.BK), (b.gpudata, k, n, wg.BK, 64)]
    assert args[:2] == (0x900100, 0x900200)


@pytest.mark.parametrize("change, error, match", [
    (lambda a, b, c: (a, b, FakeArray(c.shape, np.float32, c.gpudata)), TypeError, "c"),
    (lambda a, b, c: (FakeArray(a.shape, np.float32, a.gpudata), b, c), TypeError, "a"),
    (lambda a, b, c: (a, FakeArray((b.shape[0] + 8, b.shape[1]), np.uint16, b.gpudata), c),
     ValueError, "b: expected 64 rows"),
    (lambda a, b, c: (a, b, FakeArray((c.shape[0], c.shape[1] + 8), np.uint16, c.gpudata)),
     ValueError, "c"),
    (lambda a, b, c: (a, b, FakeArray(c.shape, np.uint16, b.gpudata)), ValueError, "overlaps b"),
    (lambda a, b, c: (FakeArray(a.shape, np.uint16, a.gpudata + 2), b, c), ValueError, "a"),
])
def test_bad_arguments_get_an_error_naming_them(maps, change, error, match):
    a, b, c = change(*three(130, 264, 64))
    with pytest.raises(error, match=match):
        wg.wgmma_gemm(FakeKernel("wgmma_gemm", []), a, b, c)


@pytest.mark.parametrize("m, n, k, name", [(16, 16, 20, r"a\.shape\[1\] \(K\)"),
                                           (16, 12, 16, r"b\.shape\[1\] \(N\)")])
def test_k_and_n_must_be_multiples_of_8_for_tma(maps, m, n, k, name):
    a, b, c = three(m, n, k)
    with pytest.raises(ValueError, match=name + ".*multiple of 8.*tc_gemm"):
        wg.wgmma_gemm(FakeKernel("wgmma_gemm", []), a, b, c)
    assert maps == []


def test_host_constants_are_the_kernel_files():
    """BM, BN, BK, STAGES and THREADS as wgmma_gemm.cu defines them, and
    the shared memory the launch asks for is what the kernel uses and what
    compute capability 9.0 allows a block (227 KB)."""
    src = wg.KERNEL_FILE.read_text()
    const = {k: int(v) for k, v in re.findall(r"\b(BM|BN|BK|STAGES|CONSUMERS) = (\d+)", src)}
    assert (const["BM"], const["BN"], const["BK"], const["STAGES"]) == (wg.BM, wg.BN, wg.BK,
                                                                      wg.STAGES)
    assert wg.THREADS == 128 * (1 + const["CONSUMERS"])
    stages = wg.STAGES * (wg.BM + wg.BN) * wg.BK * 2
    assert wg.SHARED_BYTES == stages + 2 * wg.STAGES * 8 + 1024 <= 227 * 1024


def test_bound_covers_the_bf16_rounding_and_the_sums():
    """For C within u_bf16 |s| of an fp32 sum s that is itself within the
    ladder's bound of the exact product, the bound passes C; a C one more
    bf16 ulp off does not."""
    k_dim, ref, scale = 1024, np.array([3.0, -100.0]), np.array([40.0, 900.0])
    kb, s = wg.bound(k_dim, scale)
    allowed = kb * wg.U_FP32 * (np.abs(ref) + s)
    acc = wg.tc_gemm.bound_k(k_dim) * wg.U_FP32 * scale
    assert np.all(allowed >= wg.U_BF16 * (np.abs(ref) + acc) + acc)
    assert np.all(allowed < 2 * wg.U_BF16 * np.abs(ref) + acc * 2)
