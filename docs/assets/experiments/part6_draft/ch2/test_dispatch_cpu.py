"""Part VI chapter 2 draft: the operator's dispatch, errors and fat binary,
tested without a GPU (a fake device is a compute capability; fake arrays
carry dtype, shape, strides, flags and an address). The build test needs
nvcc (skipped without), the listing tests cuobjdump too ($CUOBJDUMP).

    python -m pytest docs/assets/experiments/part6_draft/ch2/test_dispatch_cpu.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as d  # noqa: E402
import fatbin  # noqa: E402

# --------------------------------------------------------------- selection

#: What each GPU gets with kernels compiled from source for it, and why.
EXPECTED = {
    (7, 0): None,          # V100: nvcc 13.0 compiles nothing for sm_70 (CUDA 13 dropped Volta)
    (7, 5): "portable",    # T4: no bf16 mma.sync (sm_80+), so CUDA cores
    (8, 0): "mma",         # A100
    (8, 6): "mma",         # RTX 30xx, A40
    (8, 9): "mma",         # L4, L40S, RTX 40xx: no wgmma (not 9.0)
    (9, 0): "wgmma",       # H100, H200
    (10, 0): "mma",        # B200: sm_90a code runs on 9.0 alone; mma.sync is not arch-specific
    (12, 0): "mma",        # RTX 50xx: the same
}


@pytest.mark.parametrize("cc", EXPECTED, ids=lambda cc: f"cc{cc[0]}{cc[1]}")
def test_each_gpu_gets_its_path(cc, monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    want = EXPECTED[cc]
    if want is None:
        with pytest.raises(d.UnsupportedGpu) as e:
            d.select(cc, 1024, 1024, 1024)
        msg = str(e.value)
        assert d.OPERATOR in msg and "7.0 (sm_70)" in msg
        for p in d.PATHS:
            assert p.name in msg
        assert "7.5 or later" in msg
        return
    choice = d.select(cc, 1024, 1024, 1024)
    assert choice.path.name == want
    assert choice.why[-1].startswith(f"{want}: runs on {cc[0]}.{cc[1]}")
    assert len(choice.why) == [p.name for p in d.PATHS].index(want) + 1   # each faster path said why not


def test_an_older_toolkit_floor_gives_volta_the_portable_path(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    assert d.select((7, 0), 64, 64, 64, floor=(5, 0)).path.name == "portable"


def test_unsupported_is_a_skip_not_a_crash():
    assert issubclass(d.UnsupportedGpu, d.cb.Unavailable)


def test_wgmma_falls_to_mma_where_the_shape_does_not_suit(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    for m, n, k in [(33, 31, 1001), (33, 1001, 32), (1, 9, 8)]:
        c = d.select((9, 0), m, n, k)
        assert c.path.name == "mma" and "multiple of 8" in c.why[0]
    assert d.select((9, 0), 1, 8, 8).path.name == "wgmma"


@pytest.mark.parametrize("name", ["wgmma", "mma", "portable"])
def test_every_path_can_be_forced_on_hopper(name, monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    assert d.select((9, 0), 64, 64, 64, path=name).path.name == name
    monkeypatch.setenv(d.ENV_PATH, name)
    c = d.select((9, 0), 64, 64, 64)
    assert c.path.name == name and c.forced


def test_the_argument_beats_the_environment(monkeypatch):
    monkeypatch.setenv(d.ENV_PATH, "portable")
    assert d.select((9, 0), 64, 64, 64, path="mma").path.name == "mma"


def test_forcing_a_path_the_gpu_lacks_names_its_cc(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    with pytest.raises(d.UnsupportedGpu, match=r"'wgmma' was forced.*9\.0 exactly.*10\.0 \(sm_100\)"):
        d.select((10, 0), 64, 64, 64, path="wgmma")
    with pytest.raises(d.UnsupportedGpu, match=r"'mma' was forced.*7\.5 \(sm_75\)"):
        d.select((7, 5), 64, 64, 64, path="mma")


def test_forcing_wgmma_at_a_bad_shape_names_the_argument(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    with pytest.raises(ValueError, match=r"^cudabook\.bf16_matmul: b\.shape\[1\] \(N\): must be a multiple of 8"):
        d.select((9, 0), 64, 30, 64, path="wgmma")


def test_an_unknown_path_names_where_it_came_from(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    with pytest.raises(ValueError, match=r"^cudabook\.bf16_matmul: path: expected one of wgmma, mma, portable"):
        d.select((9, 0), 8, 8, 8, path="tensor")
    monkeypatch.setenv(d.ENV_PATH, "wmma")
    with pytest.raises(ValueError, match=r"CUDABOOK_GEMM_PATH: expected one of .* got 'wmma'"):
        d.select((9, 0), 8, 8, 8)


def test_teeth_a_table_without_the_mma_path_fails_the_expectations(monkeypatch):
    """The table is what the expectations test: without mma, 8.x, 10.0 and
    12.0 fall to portable, and forcing mma is an unknown path."""
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    short = tuple(p for p in d.PATHS if p.name != "mma")
    wrong = [cc for cc, want in EXPECTED.items() if want and d.select(cc, 64, 64, 64, paths=short).path.name != want]
    assert wrong == [(8, 0), (8, 6), (8, 9), (10, 0), (12, 0)]
    with pytest.raises(ValueError):
        d.select((8, 0), 64, 64, 64, path="mma", paths=short)


def test_teeth_a_wgmma_path_that_claimed_blackwell_would_be_caught(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    greedy = (dataclasses.replace(d.PATHS[0], runs_on=lambda cc: cc >= (9, 0)), *d.PATHS[1:])
    assert d.select((10, 0), 64, 64, 64, paths=greedy).path.name != EXPECTED[(10, 0)]


def test_the_table_calls_the_books_launchers_not_copies():
    from matmul_fp32 import sgemm
    from matmul_tc import tc_gemm, wgmma_gemm

    by = {p.name: p for p in d.PATHS}
    assert by["wgmma"].book == (wgmma_gemm.wgmma_gemm,) and by["wgmma"].arch((9, 0)) == wgmma_gemm.ARCH
    assert by["mma"].book == (tc_gemm.tc_gemm,) and "tc_mma_pipelined" in by["mma"].kernels
    assert by["portable"].book == (sgemm.sgemm,) and "sgemm_double_buffer" in by["portable"].kernels
    assert set(by["mma"].kernels[:2]) == {"tc_mma_pipelined", tc_gemm.UNALIGNED}
    assert [p.name for p in d.PATHS] == ["wgmma", "mma", "portable"]     # fastest first


# ------------------------------------------------------ compatibility rules

@pytest.mark.parametrize("target, cc, ok", [
    ("sm_80", (8, 0), True), ("sm_80", (8, 6), True), ("sm_80", (8, 9), True),
    ("sm_86", (8, 0), False),                       # not backward: a lower minor
    ("sm_80", (9, 0), False), ("sm_90", (10, 0), False),   # SASS never crosses a major
    ("sm_75", (8, 0), False),
    ("compute_80", (8, 6), True), ("compute_80", (9, 0), True), ("compute_90", (12, 0), True),
    ("compute_90", (8, 9), False),                  # PTX is forward compatible only
    ("sm_90a", (9, 0), True), ("sm_90a", (10, 0), False),
    ("compute_90a", (9, 0), True), ("compute_90a", (10, 0), False),   # 'a' PTX too
    ("sm_100f", (10, 3), True), ("sm_100f", (12, 0), False),
])
def test_compatibility_rules(target, cc, ok):
    assert d.runs_on(target, cc) is ok


def test_parse_target():
    assert d.parse_target("sm_90a") == ("sass", (9, 0), "a")
    assert d.parse_target("compute_120") == ("ptx", (12, 0), "")
    assert d.parse_target("sm_100f") == ("sass", (10, 0), "f")
    with pytest.raises(ValueError, match="^target:"):
        d.parse_target("sm90")


def test_driver_prefers_sass_then_the_newest_ptx():
    elf, ptx = ["sm_75", "sm_80", "sm_90a"], ["compute_80", "compute_90"]
    assert d.driver_pick((8, 6), elf, ptx) == ("sass", "sm_80")
    assert d.driver_pick((9, 0), elf, ptx) == ("sass", "sm_90a")
    assert d.driver_pick((10, 0), elf, ptx) == ("ptx", "compute_90")
    assert d.driver_pick((8, 6), ["sm_90a"], ptx) == ("ptx", "compute_80")
    assert d.driver_pick((7, 0), elf, ptx) is None


#: A fat image as fatbin.GENCODES builds it (the build test checks this is what nvcc gives).
TC = {"tc_mma_pipelined", "tc_mma_pipelined_unaligned"}
SG = {"sgemm_double_buffer", "bf16_to_f32", "f32_to_bf16"}
IMAGE = d.Image({"sm_75": frozenset(SG), "sm_80": frozenset(SG | TC), "sm_90a": frozenset(SG | TC | {"wgmma_gemm"})},
                {"compute_90": frozenset(SG | TC)})
FROM_IMAGE = {(7, 5): ("sm_75", "portable"), (8, 0): ("sm_80", "mma"), (8, 6): ("sm_80", "mma"),
              (8, 9): ("sm_80", "mma"), (9, 0): ("sm_90a", "wgmma"), (10, 0): ("compute_90", "mma"),
              (12, 0): ("compute_90", "mma")}


@pytest.mark.parametrize("cc", FROM_IMAGE, ids=lambda cc: f"cc{cc[0]}{cc[1]}")
def test_selection_from_the_fat_image(cc, monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    choice, picked = d.select_from_image(cc, 4096, 4096, 4096, IMAGE)
    assert (picked[1], choice.path.name) == FROM_IMAGE[cc]
    assert picked[0] == ("ptx" if cc[0] >= 10 else "sass")


def test_from_the_image_volta_is_told_what_the_image_holds(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    with pytest.raises(d.UnsupportedGpu, match=r"7\.0 \(sm_70\).*sm_75, sm_80, sm_90a, compute_90"):
        d.select_from_image((7, 0), 64, 64, 64, IMAGE)


def test_forcing_wgmma_on_blackwell_from_the_image_says_what_is_missing(monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    with pytest.raises(d.UnsupportedGpu, match=r"10\.0 \(sm_100\), loads compute_90 PTX.*lacks wgmma_gemm"):
        d.select_from_image((10, 0), 64, 64, 64, IMAGE, path="wgmma")
    with pytest.raises(d.UnsupportedGpu, match=r"sm_75 SASS.*lacks tc_mma_pipelined"):
        d.select_from_image((7, 5), 64, 64, 64, IMAGE, path="mma")


# ------------------------------------------------------------ argument errors

class FakeArray:
    """What cb.check_array reads of a GPUArray."""

    def __init__(self, shape, dtype=np.uint16, address=1 << 20, contiguous=True):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.gpudata = address
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        self.strides = tuple(np.empty(shape, dtype=self.dtype).strides)
        self.flags = type("F", (), {"c_contiguous": contiguous})()


def arrays(m=33, n=31, k=17):
    return FakeArray((m, k), address=1 << 20), FakeArray((k, n), address=2 << 20), FakeArray((m, n), address=3 << 20)


def test_good_arguments_give_the_shape():
    a, b, c = arrays()
    assert d.check_args(a, b, c) == (33, 31, 17) and d.check_args(a, b) == (33, 31, 17)


@pytest.mark.parametrize("mistake, kind, pattern", [
    (lambda a, b, c: (a.__setattr__("dtype", np.dtype(np.float32)), (a, b, c))[1], TypeError, r"a: expected dtype uint16"),
    (lambda a, b, c: (FakeArray((17, 31, 1)), b, c) and (a, FakeArray((17, 31, 1), address=2 << 20), c), ValueError,
     r"b: expected 2-D"),
    (lambda a, b, c: (a, FakeArray((16, 31), address=2 << 20), c), ValueError, r"b: expected 17 rows"),
    (lambda a, b, c: (a, b, FakeArray((33, 30), address=3 << 20)), ValueError, r"c: expected shape \(33, 31\)"),
    (lambda a, b, c: (a, b, FakeArray((33, 31), address=(3 << 20) + 8)), ValueError, r"c: expected a device address aligned to 16"),
    (lambda a, b, c: (a, b, FakeArray((33, 31), address=(1 << 20) + 64)), ValueError, r"c: overlaps a"),
    (lambda a, b, c: (a, FakeArray((17, 31), address=2 << 20, contiguous=False), c), ValueError, r"b: expected a C-contiguous"),
    (lambda a, b, c: (np.zeros((33, 17), np.uint16), b, c), TypeError, r"a: expected a device array"),
    (lambda a, b, c: (FakeArray((0, 17)), b, c), ValueError, r"a\.shape\[0\] \(M\): expected 1 <="),
])
def test_each_argument_mistake_names_the_operator_and_the_argument(mistake, kind, pattern):
    a, b, c = mistake(*arrays())
    with pytest.raises(kind, match=r"^cudabook\.bf16_matmul: " + pattern):
        d.check_args(a, b, c)


# ---------------------------------------------------------- the debug boundary

class FakeCudaError(Exception):
    pass


def test_debug_sync_names_the_operator_at_the_faulting_call():
    calls = []

    def sync():
        calls.append("sync")
        raise FakeCudaError("an illegal memory access was encountered")

    with pytest.raises(d.AsyncFault, match=r"^cudabook\.bf16_matmul \(path mma, 33x31x17\): a kernel failed "
                                           r"after its launch returned: an illegal memory access.*sticky"):
        d.at_boundary("cudabook.bf16_matmul (path mma, 33x31x17)", lambda: calls.append("launch"), sync,
                      (FakeCudaError,), debug=True)
    assert calls == ["launch", "sync"]


def test_normal_mode_does_not_wait():
    calls = []
    d.at_boundary("op", lambda: calls.append("launch"), lambda: calls.append("sync"), (FakeCudaError,), debug=False)
    assert calls == ["launch"]


def test_a_launch_error_is_named_in_either_mode():
    def bad():
        raise FakeCudaError("too many resources requested for launch")

    for debug in (False, True):
        with pytest.raises(d.AsyncFault, match=r"^op: the launch failed: too many resources"):
            d.at_boundary("op", bad, lambda: None, (FakeCudaError,), debug=debug)


def test_other_exceptions_pass_through_unwrapped():
    def bad():
        raise ValueError("a: wrong")

    with pytest.raises(ValueError, match="^a: wrong$"):
        d.at_boundary("op", bad, lambda: None, (FakeCudaError,), debug=True)


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("0", False), ("", False), (None, False)])
def test_debug_mode_from_the_environment(value, on, monkeypatch):
    if value is None:
        monkeypatch.delenv(d.ENV_DEBUG, raising=False)
    else:
        monkeypatch.setenv(d.ENV_DEBUG, value)
    assert d.debug_sync() is on
    assert d.debug_sync(True) is True and d.debug_sync(False) is False


# -------------------------------------------------------------------- bounds

def test_each_paths_bound_is_its_listings_and_the_portable_one_is_tighter():
    from matmul_fp32 import sgemm
    from matmul_tc import tc_gemm, wgmma_gemm

    by = {p.name: p for p in d.PATHS}
    scale = np.array([3.0, 100.0])
    kw, sw = wgmma_gemm.bound(1000, scale)
    k, s = d.bound(by["wgmma"], 1000, scale)
    assert k == kw and np.allclose(s, sw)
    assert by["portable"].bound_k is sgemm.bound_k and by["mma"].bound_k is tc_gemm.bound_k
    ref = np.array([1.0, -50.0])
    assert np.all(d.tolerance(by["portable"], 1000, ref, scale) < d.tolerance(by["mma"], 1000, ref, scale))


# ---------------------------------------------------------------- the fat binary

needs_nvcc = pytest.mark.skipif(fatbin.find_nvcc() is None, reason="nvcc not found")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if fatbin.find_nvcc() is None:
        pytest.skip("nvcc not found")
    out = tmp_path_factory.mktemp("fat") / "gemm_fat.fatbin"
    report = fatbin.build(out)
    return out, report


@needs_nvcc
def test_the_build_line_has_one_gencode_a_target():
    line = fatbin.nvcc_command(Path("x.fatbin"))
    assert "-fatbin" in line and sum(a.startswith("-gencode=") for a in line) == len(fatbin.GENCODES)
    assert "-gencode=arch=compute_90a,code=sm_90a" in line
    assert "-gencode=arch=compute_90,code=compute_90" in line


@needs_nvcc
def test_ptxas_compiled_each_path_for_each_target_without_new_spills(built):
    _, report = built
    res = fatbin.ptxas_resources(report)
    want = {("sm_75", k) for k in SG} | {("sm_80", k) for k in SG | TC} | \
           {("sm_90a", k) for k in SG | TC | {"wgmma_gemm"}} | {("compute_90", k) for k in ()}
    assert want <= set(res), sorted(want - set(res))
    assert ("sm_75", "tc_mma_pipelined") not in res and ("sm_80", "wgmma_gemm") not in res
    spills = {key for key, r in res.items() if key[1] in SG | TC | {"wgmma_gemm"}
              and (r.get("spill_stores") or r.get("spill_loads"))}
    # Found by this draft: on sm_75 (Turing), sgemm_double_buffer spills under its
    # __launch_bounds__(256, 2) (the book's compile test builds sm_80 and sm_90 only).
    assert spills == {("sm_75", "sgemm_double_buffer")}, spills


needs_cuobjdump = pytest.mark.skipif(fatbin.find_cuobjdump() is None,
                                     reason="cuobjdump not found (set CUOBJDUMP)")


@needs_cuobjdump
def test_cuobjdump_lists_the_expected_sass_and_ptx(built):
    out, _ = built
    elf, ptx = fatbin.listing(out)
    assert elf == ["sm_75", "sm_80", "sm_90a"] and ptx == ["compute_90"]


@needs_cuobjdump
def test_each_target_holds_the_kernels_the_dispatch_expects(built, monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    out, _ = built
    image = fatbin.contents(out)
    for target, names in IMAGE.elf.items():
        assert names <= image.elf[target], (target, names - image.elf[target])
    assert "wgmma_gemm" in image.elf["sm_90a"] and "wgmma_gemm" not in image.ptx["compute_90"]
    assert not TC & image.elf["sm_75"]
    for cc, (target, path) in FROM_IMAGE.items():
        choice, picked = d.select_from_image(cc, 4096, 4096, 4096, image)
        assert (picked[1], choice.path.name) == (target, path)


@needs_cuobjdump
def test_teeth_an_image_without_ptx_leaves_blackwell_without_a_path(tmp_path, monkeypatch):
    monkeypatch.delenv(d.ENV_PATH, raising=False)
    out = tmp_path / "nopx.fatbin"
    fatbin.build(out, fatbin.GENCODES[:3], source=fatbin.HERE / "convert.cu")
    image = fatbin.contents(out)
    assert not image.ptx
    with pytest.raises(d.UnsupportedGpu, match=r"10\.0 \(sm_100\)"):
        d.select_from_image((10, 0), 64, 64, 64, image)
