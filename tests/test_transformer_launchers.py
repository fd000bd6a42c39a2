"""Chapter 17's host side on the CPU: the layouts the kernels write (as the
.cu computes them) against what the checks assume, the float64 block
against a plain per-token definition, the product check's power to fail,
and every argument check of the launches, with stand-ins for the GPU
arrays and kernels (as tests/test_attention_launchers.py)."""

import math

import numpy as np
import pytest
import fakes
from fakes import FakeArray, FakeKernel

from cudabook.bf16 import from_bf16, to_bf16
from transformer import gpt2_block as gb


def recorder(kind: str = "mma"):
    """Fake kernels of one kind of product (and merge_heads); the dict says
    which kind the launches use, as load_kernels' does."""
    prefix = gb.PRODUCTS[kind].prefix
    kernels, calls = fakes.recorder([prefix + t for t in (*gb.TAILS.values(), "qkv")] + ["merge_heads"])
    kernels["products"] = kind
    return kernels, calls


@pytest.fixture
def maps(monkeypatch):
    """wgmma_gemm.tensor_map without the driver; the calls kept."""
    return fakes.fake_tensor_maps(monkeypatch, gb.wgmma_gemm, 0x7000000)


def arrays(*shapes):
    return fakes.laid_out(shapes)


@pytest.mark.parametrize("b,t,c,h", [(1, 1, 64, 1), (2, 5, 128, 2), (3, 7, 192, 3)])
def test_qkv_layout_is_what_the_check_undoes(b, t, c, h):
    """gemm_qkv's destination index (gpt2_block.cu, EPI_QKV), modelled
    element by element, is undone by check_steps' reshape."""
    m, d = b * t, c // h
    flat = np.arange(m * 3 * c).reshape(m, 3 * c)
    out = np.full(3 * m * c, -1)
    for r in range(m):
        for col in range(3 * c):
            which, head, dd = col // c, (col % c) // d, col % d
            seq, tok = r // t, r % t
            out[which * m * c + ((seq * h + head) * t + tok) * d + dd] = flat[r, col]
    assert (out >= 0).all()
    undone = out.reshape(3, b, h, t, d).transpose(1, 3, 0, 2, 4).reshape(m, 3 * c)
    np.testing.assert_array_equal(undone, flat)


@pytest.mark.parametrize("b,h,t,d", [(1, 1, 1, 8), (2, 3, 5, 16), (2, 12, 3, 64)])
def test_merge_heads_index_is_the_transpose(b, h, t, d):
    """merge_heads' source index (gpt2_block.cu), modelled, is the transpose
    the check compares with."""
    o = np.arange(b * h * t * d).reshape(b, h, t, d)
    y = np.empty(o.size, dtype=o.dtype)
    for e in range(o.size):
        dd, hd = e % d, e // d
        hh, bt = hd % h, hd // h
        tok, bb = bt % t, bt // t
        y[e] = o.ravel()[((bb * h + hh) * t + tok) * d + dd]
    np.testing.assert_array_equal(y.reshape(b * t, h * d), o.transpose(0, 2, 1, 3).reshape(b * t, h * d))


def test_block64_is_the_definition():
    """The float64 block, against a token-by-token loop of GPT-2's equations."""
    b, t, c, h = 2, 5, 16, 2
    d = c // h
    rng = np.random.default_rng(3)
    _, p = gb.random_params(c, rng)
    x = rng.standard_normal((b * t, c))
    got = gb.block64(x, p, b, t, c, h)

    def ln(v, g, bb):
        return (v - v.mean()) / math.sqrt(v.var() + gb.ln.EPS) * g + bb

    want = np.empty_like(x)
    for s in range(b):
        rows = x[s * t:(s + 1) * t]
        qkv = np.array([ln(r, p["ln1_g"], p["ln1_b"]) @ p["attn_wt"] + p["attn_b"] for r in rows])
        for i in range(t):
            o = np.empty(c)
            for hh in range(h):
                q = qkv[i, hh * d:(hh + 1) * d]
                ks = qkv[:i + 1, c + hh * d:c + (hh + 1) * d]
                vs = qkv[:i + 1, 2 * c + hh * d:2 * c + (hh + 1) * d]
                sc = ks @ q / math.sqrt(d)
                w = np.exp(sc - sc.max())
                o[hh * d:(hh + 1) * d] = (w / w.sum()) @ vs
            a = rows[i] + o @ p["proj_wt"] + p["proj_b"]
            hid = gb.gelu64(ln(a, p["ln2_g"], p["ln2_b"]) @ p["fc_wt"] + p["fc_b"])
            want[s * t + i] = a + hid @ p["proj2_wt"] + p["proj2_b"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tail", ["bias", "gelu", "residual"])
def test_product_check_passes_a_good_answer_and_fails_a_bad_one(tail, monkeypatch):
    rng = np.random.default_rng(5)
    m, k, n = 33, 64, 40
    a16 = to_bf16(rng.standard_normal((m, k), dtype=np.float32))
    w16 = to_bf16(0.1 * rng.standard_normal((k, n), dtype=np.float32))
    b16 = to_bf16(0.1 * rng.standard_normal(n, dtype=np.float32))
    r16 = to_bf16(rng.standard_normal((m, n), dtype=np.float32))
    v = from_bf16(a16).astype(np.float64) @ from_bf16(w16).astype(np.float64) + from_bf16(b16)
    ref = gb.gelu64(v) if tail == "gelu" else v + from_bf16(r16) if tail == "residual" else v
    good = to_bf16(ref.astype(np.float32))
    bad = good.copy()
    bad[7, 3] = to_bf16((from_bf16(bad[7:8, 3:4]) * (1 + 4 * 2.0**-8)).astype(np.float32))[0, 0]
    seen = []
    monkeypatch.setattr(gb.cb, "report_check", lambda r: seen.append(r))
    for got in (good, bad):
        gb.check_product("p", got, a16, w16, b16, tail, r16 if tail == "residual" else None)
    assert seen[0].passed and not seen[1].passed


def test_linear_checks_and_launches():
    kernels, calls = recorder()
    a, w, bias, out, res = arrays((300, 64), (64, 200), (200,), (300, 200), (300, 200))
    gb.linear(kernels, "residual", a, w, bias, out, res=res)
    key, grid, block, args, _ = calls[-1]
    assert key == "gemm_residual" and grid == (2, 3, 1) and block == (128, 1, 1)
    assert args[3] == res.gpudata and args[4] == out.gpudata and [int(x) for x in args[5:8]] == [300, 200, 64]
    gb.linear(kernels, "gelu", a, w, bias, out)
    assert calls[-1][0] == "gemm_gelu" and calls[-1][3][3] == out.gpudata
    with pytest.raises(ValueError, match="tail"):
        gb.linear(kernels, "relu", a, w, bias, out)
    with pytest.raises(ValueError, match="res"):
        gb.linear(kernels, "bias", a, w, bias, out, res=res)
    with pytest.raises(ValueError, match="res"):
        gb.linear(kernels, "residual", a, w, bias, out, res=FakeArray((300, 8), address=0x900000))
    with pytest.raises(ValueError, match="w_t"):
        gb.linear(kernels, "bias", a, FakeArray((63, 200), address=0x900000), bias, out)
    with pytest.raises(ValueError, match="multiples of 8"):
        a2, w2, b2, o2 = arrays((3, 12), (12, 8), (8,), (3, 8))
        gb.linear(kernels, "bias", a2, w2, b2, o2)
    with pytest.raises(TypeError, match="a: expected dtype uint16"):
        gb.linear(kernels, "bias", FakeArray((300, 64), np.float32, 0x900000), w, bias, out)
    with pytest.raises(ValueError, match="bias"):
        gb.linear(kernels, "bias", a, w, FakeArray((199,), address=0x900000), out)
    with pytest.raises(ValueError, match="out"):
        gb.linear(kernels, "bias", a, w, bias, FakeArray((300, 199), address=0x900000))
    with pytest.raises(ValueError, match="aligned"):
        gb.linear(kernels, "bias", FakeArray((300, 64), address=0x10008), w, bias, out)


def test_linear_launches_wgmma_products_with_tensor_maps(maps):
    """With wgmma products: one block of 384 threads per 128 x 256 tile, a
    tensor map for a (128 x 64 boxes) and for w_t (64 x 64), the dynamic
    shared memory wgmma_gemm asks for, and the same tail arguments."""
    kernels, calls = recorder("wgmma")
    a, w, bias, out, res = arrays((300, 64), (64, 520), (520,), (300, 520), (300, 520))
    gb.linear(kernels, "residual", a, w, bias, out, res=res)
    key, grid, block, args, kw = calls[-1]
    assert key == "wgmma_residual" and grid == (3 * 3, 1, 1) and block == (384, 1, 1)
    assert kw == {"shared_size": gb.wgmma_gemm.SHARED_BYTES}
    assert maps == [(a.gpudata, 300, 64, 128, 64), (w.gpudata, 64, 520, 64, 64)]
    assert args[:2] == (0x7000100, 0x7000200)
    assert args[2:5] == (bias.gpudata, res.gpudata, out.gpudata)
    assert [int(x) for x in args[5:]] == [300, 520, 64, 1, 8]


def test_a_dict_without_products_launches_rung_4():
    """ex1_unfused_tail's kernels name no kind of product: rung 4's."""
    kernels, calls = recorder()
    del kernels["products"]
    gb.linear(kernels, "gelu", *arrays((3, 8), (8, 16), (16,), (3, 16)))
    assert calls[-1][0] == "gemm_gelu"


def test_kinds_puts_the_one_the_launches_use_last():
    assert gb.kinds({"gemm_bias": 0, "wgmma_bias": 0, "products": "wgmma"}) == ["mma", "wgmma"]
    assert gb.kinds({"gemm_bias": 0, "wgmma_bias": 0, "products": "mma"}) == ["wgmma", "mma"]
    assert gb.kinds({"gemm_bias": 0}) == ["mma"]


def test_linear_qkv_checks_and_launches():
    kernels, calls = recorder()
    b, t, c, h = 2, 70, 128, 2
    a, w, bias, qkv = arrays((b * t, c), (c, 3 * c), (3 * c,), (3, b, h, t, c // h))
    gb.linear_qkv(kernels, a, w, bias, qkv)
    key, grid, _, args, _ = calls[-1]
    assert key == "gemm_qkv" and grid == (3, 2, 1)
    assert [int(x) for x in args[5:]] == [b * t, 3 * c, c, t, c // h]
    for bad in [(3, b, h, t + 1, c // h), (2, b, h, t, c // h), (3, b, h + 1, t, c // h)]:
        with pytest.raises(ValueError, match="qkv"):
            gb.linear_qkv(kernels, a, w, bias, FakeArray(bad, address=0x900000))


def test_merge_heads_checks_and_launches():
    kernels, calls = recorder()
    o, y = arrays((2, 3, 5, 64), (10, 192))
    gb.merge_heads(kernels, o, y)
    key, grid, block, args, _ = calls[-1]
    assert key == "merge_heads" and grid == (1, 1, 1) and [int(x) for x in args[2:]] == [2, 3, 5, 64]
    with pytest.raises(ValueError, match="multiple of 8"):
        gb.merge_heads(kernels, *arrays((2, 3, 5, 12), (10, 36)))
    with pytest.raises(ValueError, match="y"):
        gb.merge_heads(kernels, o, FakeArray((5, 384), address=0x900000))


def test_block_refuses_a_head_dimension_attention_lacks():
    with pytest.raises(ValueError, match="head dimensions"):
        gb.Block({}, np.zeros((1, 96), np.uint16), 1, 1, 96, 1)


def test_flops_count_every_product():
    b, t, c, h = 8, 1024, 768, 12
    f = gb.step_flops(b, t, c, h)
    assert f["c_attn"] + f["c_proj"] + f["c_fc"] + f["c_proj2"] == 2 * b * t * c * 12 * c
    assert f["attention"] == 4 * b * h * (c // h) * t * (t + 1) / 2



def fake_block(kind: str = "mma"):
    """A Block of B=1 T=3 C=64 H=1 on fake buffers (no GPU), and fake
    kernels of every step, with products of `kind`."""
    b, t, c, h = 1, 3, 64, 1
    blk = gb.Block.__new__(gb.Block)
    blk.shape, blk.attention = (b, t, c, h), "flash_d64_m2_n64"
    blk.x, blk.ln1, blk.ln2, blk.merged, blk.a, blk.y = arrays(*[(b * t, c)] * 6)
    blk.mean1, blk.rstd1, blk.mean2, blk.rstd2 = (FakeArray((b * t,), np.float32, 0x800000 + 4096 * i)
                                                  for i in range(4))
    blk.qkv, blk.o, blk.hid = (FakeArray(s, address=0x900000 + 0x10000 * i)
                               for i, s in enumerate([(3, b, h, t, c), (b, h, t, c), (b * t, 4 * c)]))
    names = ["ln1_g", "ln1_b", "attn_wt", "attn_b", "proj_wt", "proj_b", "ln2_g", "ln2_b",
             "fc_wt", "fc_b", "proj2_wt", "proj2_b"]
    shapes = [(c,), (c,), (c, 3 * c), (3 * c,), (c, c), (c,), (c,), (c,), (c, 4 * c), (4 * c,), (4 * c, c), (c,)]
    blk.p = {n: FakeArray(s, address=0x2000000 + 0x10000 * i) for i, (n, s) in enumerate(zip(names, shapes))}
    kernels, calls = recorder(kind)
    kernels["ln"] = {(stats, kind, dt, ch): FakeKernel("layernorm", calls)
                     for stats in gb.ln.STATS for kind, dt, ch in gb.ln._rows.register_kernels()}
    kernels["attention"] = {name: FakeKernel(name, calls) for name in gb.flash_bf16.VARIANTS}
    return blk, kernels, calls


def test_plan_keeps_one_launch_a_step_with_checked_arguments():
    """Block.plan runs each step's wrapper once against stand-ins and keeps
    the one prepared_call it makes; running the plan launches exactly those."""
    blk, kernels, calls = fake_block()
    plan = blk.plan(kernels)
    assert list(plan) == ["ln_1", "c_attn", "attention", "merge_heads", "c_proj", "ln_2", "c_fc", "c_proj2"]
    assert calls == []                                    # planning launches nothing
    for launch in plan.values():
        launch()
    assert [call[0] for call in calls] == ["layernorm", "gemm_qkv", "flash_d64_m2_n64", "merge_heads",
                                           "gemm_residual", "layernorm", "gemm_gelu", "gemm_residual"]
    assert calls[4][3][3] == blk.x.gpudata and calls[7][3][3] == blk.a.gpudata    # the residuals


def test_plan_with_wgmma_products(maps):
    """The plan keeps the kind of product the kernels name: the same steps,
    the wgmma kernels for the four products."""
    blk, kernels, calls = fake_block("wgmma")
    for launch in blk.plan(kernels).values():
        launch()
    assert [call[0] for call in calls] == ["layernorm", "wgmma_qkv", "flash_d64_m2_n64", "merge_heads",
                                           "wgmma_residual", "layernorm", "wgmma_gelu", "wgmma_residual"]


def test_step_bytes_count_each_launch():
    b, t, c, h = 8, 1024, 768, 12
    e, w = 2 * b * t * c, 2 * c * c
    got = gb.step_bytes(b, t, c, h)
    assert got["c_fc"] == e + 4 * w + 4 * e and got["merge_heads"] == 2 * e
    assert set(got) == set(gb.step_flops(b, t, c, h)) | {"ln_1", "ln_2", "merge_heads"}


def test_outputs_may_not_overlap_inputs():
    kernels, _ = recorder()
    a, w, bias, res = arrays((300, 64), (64, 64), (64,), (300, 64))
    with pytest.raises(ValueError, match="out: overlaps a"):
        gb.linear(kernels, "bias", a, w, bias, FakeArray((300, 64), address=a.gpudata))
    with pytest.raises(ValueError, match="out: overlaps res"):
        gb.linear(kernels, "residual", a, w, bias, FakeArray((300, 64), address=res.gpudata + 64), res=res)
    o = FakeArray((1, 2, 3, 64), address=0x900000)
    with pytest.raises(ValueError, match="y: overlaps o"):
        gb.merge_heads(kernels, o, FakeArray((3, 128), address=0x900000))
