"""The training step's small kernels (training_kernels.cu), checked against NumPy.

Draft for Part IV ("A training step, end to end"), not yet run on a GPU:
run it from the repository root with PYTHONPATH=code on a CUDA machine.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part4_draft/training_kernels.py [--seed S]
Checks: split_heads and merge_qkv_grad, moves only: every element equal, at
        (B, H, T, D) = (1, 1, 1, 64), (2, 3, 77, 64), (2, 12, 130, 64);
        gelu_forward within 8 float32 units of the float64 GELU of the same
        bf16 input, plus one bf16 rounding; layernorm_bwd_add at C = 256,
        512, 768 and 1024 and rows 1, 33, 4,099: dres (which starts random)
        against float64 within (10 + C / 32) float32 units of the terms,
        plus one bf16 rounding, and dgamma, dbeta (after chapter 14's
        column_sum_f32 adds the blocks' shares) within their sums' bounds.
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
LN_WARPS = 8
U32, U_BF16 = 2.0**-24, 2.0**-8


def load_kernels():
    from softmax_norm import layernorm as ln

    m = cb.compile(KERNEL_FILE)
    k = {"split": m.get_function("split_heads").prepare("PPiiii"),
         "merge_qkv": m.get_function("merge_qkv_grad").prepare("PPPPiiii"),
         "gelu": m.get_function("gelu_forward").prepare("PPq")}
    for j in (1, 2, 3, 4):
        k["ln", j] = m.get_function(f"layernorm_bwd_add_j{j}").prepare("PPPPPPPPi")
    k["column_sum"] = ln.load_kernels()["column_sum"]
    k["embed_fwd"] = m.get_function("embed_forward").prepare("PPPPiii")
    k["f32_to_bf16"] = m.get_function("f32_to_bf16").prepare("PPq")
    k["bf16_to_f32"] = m.get_function("bf16_to_f32").prepare("PPq")
    return k


def _bf16(name, a, shape=None, ndim=None):
    cb.check_array(name, a, dtype=np.uint16, shape=shape, ndim=ndim, on_device=True, alignment=16)


def _grid(n8):
    return (min(cb.ceil_div(n8, 256), 65_535), 1, 1), (256, 1, 1)


def split_heads(k, y, o):
    """o (B, H, T, D) from y (B T, H D)."""
    _bf16("o", o, ndim=4)
    b, h, t, d = o.shape
    if d % 8:
        raise ValueError(f"o: D must be a multiple of 8, got {d}")
    _bf16("y", y, shape=(b * t, h * d))
    cb.check_size("o.size", o.size)
    k["split"].prepared_call(*_grid(o.size // 8), y.gpudata, o.gpudata, *map(np.int32, (b, h, t, d)))


def merge_qkv_grad(k, dq, dk, dv, dqkv):
    """dqkv (B T, 3 H D) from dq, dk, dv (B, H, T, D)."""
    _bf16("dq", dq, ndim=4)
    b, h, t, d = dq.shape
    if d % 8:
        raise ValueError(f"dq: D must be a multiple of 8, got {d}")
    for name, a in (("dk", dk), ("dv", dv)):
        _bf16(name, a, shape=dq.shape)
    _bf16("dqkv", dqkv, shape=(b * t, 3 * h * d))
    cb.check_size("dqkv.size", dqkv.size)
    k["merge_qkv"].prepared_call(*_grid(dqkv.size // 8), dq.gpudata, dk.gpudata, dv.gpudata, dqkv.gpudata,
                                 *map(np.int32, (b, h, t, d)))


def embed_forward(k, tok, wte, wpe, x, t: int) -> None:
    """x[r] = wte[tok[r]] + wpe[r % t]: tok (M,) int32 on the device (its
    range is the caller's: the kernel does not check it), wte (V, C) and
    wpe (>= t, C) bf16, x (M, C) bf16, C a multiple of 8."""
    cb.check_array("tok", tok, dtype=np.int32, ndim=1, on_device=True)
    _bf16("wte", wte, ndim=2)
    v, c = wte.shape
    if c % 8:
        raise ValueError(f"wte: C must be a multiple of 8, got {c}")
    _bf16("wpe", wpe, ndim=2)
    if wpe.shape[1] != c or wpe.shape[0] < t:
        raise ValueError(f"wpe: expected at least ({t}, {c}), got {tuple(wpe.shape)}")
    m = cb.check_size("tok.size", tok.size)
    _bf16("x", x, shape=(m, c))
    cb.check_size("x.size", x.size)
    cb.check_separate("x", x, wte=wte, wpe=wpe)
    k["embed_fwd"].prepared_call(*_grid(x.size // 8), tok.gpudata, wte.gpudata, wpe.gpudata, x.gpudata,
                                 np.int32(m), np.int32(t), np.int32(c))


def gelu_forward(k, pre, hid):
    _bf16("pre", pre)
    _bf16("hid", hid, shape=pre.shape)
    if pre.size % 8:
        raise ValueError(f"pre: the element count must be a multiple of 8, got {pre.size}")
    k["gelu"].prepared_call(*_grid(pre.size // 8), pre.gpudata, hid.gpudata, np.int64(pre.size // 8))


def layernorm_bwd_add(k, dy, x, gamma, mean, rstd, dres, dgamma, dbeta, partials):
    """dres += LayerNorm's dx; dgamma, dbeta (float32) from the blocks'
    shares in partials (float32, (2, blocks, C))."""
    _bf16("x", x, ndim=2)
    rows, c = x.shape
    if c % 256 or not 256 <= c <= 1024:
        raise ValueError(f"x: C must be 256, 512, 768 or 1024 (a warp's 8-element pieces), got {c}")
    _bf16("dy", dy, shape=(rows, c))
    _bf16("dres", dres, shape=(rows, c))
    _bf16("gamma", gamma, shape=(c,))
    for name, a in (("mean", mean), ("rstd", rstd)):
        cb.check_array(name, a, dtype=np.float32, shape=(rows,), on_device=True)
    for name, a in (("dgamma", dgamma), ("dbeta", dbeta)):
        cb.check_array(name, a, dtype=np.float32, shape=(c,), on_device=True)
    blocks = partials.shape[1] if partials.ndim == 3 else 0
    cb.check_array("partials", partials, dtype=np.float32, shape=(2, blocks, c), on_device=True)
    if not 1 <= blocks <= cb.ceil_div(rows, LN_WARPS):
        raise ValueError(f"partials: 1 to {cb.ceil_div(rows, LN_WARPS)} blocks for {rows} rows, got {blocks}")
    part_g, part_b = int(partials.gpudata), int(partials.gpudata) + 4 * blocks * c
    cb.check_separate("dres", dres, dy=dy, x=x, gamma=gamma)
    k["ln", c // 256].prepared_call((blocks, 1, 1), (32 * LN_WARPS, 1, 1), dy.gpudata, x.gpudata, gamma.gpudata,
                                    mean.gpudata, rstd.gpudata, dres.gpudata, part_g, part_b, np.int32(rows))
    for part, out in ((part_g, dgamma), (part_b, dbeta)):
        k["column_sum"].prepared_call((cb.ceil_div(c, 256), 1, 1), (256, 1, 1), part, out.gpudata,
                                      np.int32(blocks), np.int32(c))


def gelu64(v):
    return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))


def check_moves(k, rng):
    from pycuda import gpuarray

    for b, h, t, d in [(1, 1, 1, 64), (2, 3, 77, 64), (2, 12, 130, 64)]:
        y16 = to_bf16(rng.standard_normal((b * t, h * d)).astype(np.float32))
        o = gpuarray.empty((b, h, t, d), np.uint16)
        o.fill(np.uint16(0x7FC0))
        split_heads(k, gpuarray.to_gpu(y16), o)
        want = y16.reshape(b, t, h, d).transpose(0, 2, 1, 3)
        cb.report_check(cb.expect(f"split_heads {b}x{h}x{t}x{d}: every element", np.array_equal(o.get(), want),
                                  "equal" if np.array_equal(o.get(), want) else "differs"))
        parts = [to_bf16(rng.standard_normal((b, h, t, d)).astype(np.float32)) for _ in range(3)]
        out = gpuarray.empty((b * t, 3 * h * d), np.uint16)
        out.fill(np.uint16(0x7FC0))
        merge_qkv_grad(k, *(gpuarray.to_gpu(a) for a in parts), out)
        want = np.concatenate([a.transpose(0, 2, 1, 3).reshape(b * t, h * d) for a in parts], axis=1)
        same = np.array_equal(out.get(), want)
        cb.report_check(cb.expect(f"merge_qkv_grad {b}x{h}x{t}x{d}: every element", same,
                                  "equal" if same else "differs"))


def check_gelu(k, rng):
    from pycuda import gpuarray

    pre16 = to_bf16((3 * rng.standard_normal(1 << 16)).astype(np.float32))
    hid = gpuarray.empty_like(gpuarray.to_gpu(pre16))
    gelu_forward(k, gpuarray.to_gpu(pre16), hid)
    v = from_bf16(pre16).astype(np.float64)
    want = gelu64(v)
    bound = (8 * U32 * (np.abs(want) + np.abs(v)) + U_BF16 * np.abs(want)) / U32
    cb.report_check(cb.compare("gelu_forward", from_bf16(hid.get()), want, k=1, scale=bound))


def check_embed_and_casts(k, rng):
    """embed_forward exactly (one bf16 rounding of an exact float sum);
    the two conversions exactly (bf16 to float32 is exact, and back
    rounds to nearest, as NumPy's to_bf16)."""
    from pycuda import gpuarray

    v, t, c, b = 300, 37, 64, 3
    # Magnitudes in [0.5, 2): two of them add exactly in float32, so
    # rounding the float32 sum once is what the kernel's bf16 add does.
    draw = lambda *s: (rng.uniform(0.5, 2, s) * rng.choice([-1, 1], s)).astype(np.float32)  # noqa: E731
    wte16, wpe16 = to_bf16(draw(v, c)), to_bf16(draw(t, c))
    tok = rng.integers(0, v, b * t).astype(np.int32)
    x = gpuarray.empty((b * t, c), np.uint16)
    x.fill(np.uint16(0x7FC0))
    embed_forward(k, gpuarray.to_gpu(tok), gpuarray.to_gpu(wte16), gpuarray.to_gpu(wpe16), x, t)
    want = to_bf16(from_bf16(wte16)[tok] + from_bf16(wpe16)[np.arange(b * t) % t])
    same = np.array_equal(x.get(), want)
    cb.report_check(cb.expect("embed_forward: every element", same, "equal" if same else "differs"))
    a16 = to_bf16(rng.standard_normal(1001).astype(np.float32))
    f32 = gpuarray.empty(1001, np.float32)
    k["bf16_to_f32"].prepared_call(*_grid(1001), gpuarray.to_gpu(a16).gpudata, f32.gpudata, np.int64(1001))
    ok = np.array_equal(f32.get(), from_bf16(a16))
    cb.report_check(cb.expect("bf16_to_f32: exact", ok, "equal" if ok else "differs"))
    src = rng.standard_normal(1001).astype(np.float32)
    out = gpuarray.empty(1001, np.uint16)
    k["f32_to_bf16"].prepared_call(*_grid(1001), gpuarray.to_gpu(src).gpudata, out.gpudata, np.int64(1001))
    ok = np.array_equal(out.get(), to_bf16(src))
    cb.report_check(cb.expect("f32_to_bf16: rounded to nearest", ok, "equal" if ok else "differs"))


def check_layernorm(k, rng, sm_count):
    from pycuda import gpuarray

    for c in (256, 512, 768, 1024):
        for rows in (1, 33, 4099):
            x = from_bf16(to_bf16(rng.standard_normal((rows, c)).astype(np.float32))).astype(np.float64)
            dy = from_bf16(to_bf16(rng.standard_normal((rows, c)).astype(np.float32))).astype(np.float64)
            g = from_bf16(to_bf16((1 + 0.1 * rng.standard_normal(c)).astype(np.float32))).astype(np.float64)
            r0 = from_bf16(to_bf16(rng.standard_normal((rows, c)).astype(np.float32))).astype(np.float64)
            mean = x.mean(1)
            rstd = 1 / np.sqrt(x.var(1) + 1e-5)
            mean32, rstd32 = mean.astype(np.float32), rstd.astype(np.float32)
            xh = (x - mean32[:, None]) * rstd32[:, None]
            gy = dy * g
            dx = rstd32[:, None] * (gy - gy.mean(1, keepdims=True) - xh * (gy * xh).mean(1, keepdims=True))
            want = r0 + dx
            blocks = min(2 * sm_count, cb.ceil_div(rows, LN_WARPS))
            dev = {n: gpuarray.to_gpu(to_bf16(a.astype(np.float32))) for n, a in
                   (("dy", dy), ("x", x), ("g", g), ("dres", r0))}
            st = {n: gpuarray.to_gpu(a) for n, a in (("mean", mean32), ("rstd", rstd32))}
            dgam, dbet = gpuarray.empty(c, np.float32), gpuarray.empty(c, np.float32)
            part = gpuarray.empty((2, blocks, c), np.float32)
            layernorm_bwd_add(k, dev["dy"], dev["x"], dev["g"], st["mean"], st["rstd"], dev["dres"], dgam, dbet,
                              part)
            terms = np.abs(r0) + rstd32[:, None] * (np.abs(gy) + (1 + np.abs(xh)) * np.abs(gy).mean(1, keepdims=True)
                                                    * (1 + np.abs(xh).max(1, keepdims=True)))
            h = 10 + c / 32
            bound = (h * U32 * terms + U_BF16 * np.abs(want)) / U32
            tag = f"{rows}x{c}"
            cb.report_check(cb.compare(f"layernorm_bwd_add dres {tag}", from_bf16(dev["dres"].get()), want, k=1,
                                       scale=bound))
            chain = cb.ceil_div(rows, blocks * LN_WARPS) + LN_WARPS + blocks
            cb.report_check(cb.compare(f"dgamma {tag}", dgam.get(), (dy * xh).sum(0), k=chain + 4,
                                       scale=np.abs(dy * xh).sum(0)))
            cb.report_check(cb.compare(f"dbeta {tag}", dbet.get(), dy.sum(0), k=chain, scale=np.abs(dy).sum(0)))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    info = cb.init()
    k = load_kernels()
    rng = np.random.default_rng(args.seed)
    check_moves(k, rng)
    check_gelu(k, rng)
    check_embed_and_casts(k, rng)
    check_layernorm(k, rng, info.sm_count)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
