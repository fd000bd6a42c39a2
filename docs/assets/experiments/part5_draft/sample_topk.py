"""Sampling the next token with temperature and top-k, one block a row, no sort.

Draft for Part V ("Serving a model"), not yet a listing, and not yet run on
a GPU: run it from the repository root with PYTHONPATH=code. For each row
of bf16 logits and its uniform number u: the tokens at or above the k-th
largest logit (ties kept), weights exp((x - max) / T), and the first token
whose running sum of weights, in index order, passes u times the total.

Run:    PYTHONPATH=code python3 docs/assets/experiments/part5_draft/sample_topk.py [--seed S] [--bench]
Checks: V = 1, 7, 256, 1,000 and 50,257, k = 1, 5, 50 and V, T = 0.7 and 1,
        64 rows of logits ~ N(0, 2^2) in bf16 each with a random u: the token
        drawn is kept, and its interval of the running sum, in float64,
        holds u times the total, to within the float32 roundings of the
        kernel's sums ((2 V / 256 + 256 + 16) units of the total), the
        last two rows with u = 0 and u = 1 - 2^-24; then one row
        4,096 times with u = (i + 1/2) / 4,096: every token drawn
        within 2 of 4,096 times its probability (a stratified draw: any
        wrong weight or threshold shows). Philox4x32-10 on the device
        against Random123's known answers and the host's twin, bit for bit
        (1,003 counters and keys); draws with u made on the device from a
        seed and a step, checked with the host twin's u. Top-p inside
        the top k (k = 7, 50 and 512, p = 0.5 and 0.9): every draw in the
        nucleus, sorted by logit then index, and where u falls in its
        running sum, to within the float32 roundings at its edge.
Bench:  64 rows of GPT-2's 50,257 logits, k = 50, T = 0.8: time against
        what a PyTorch user writes (torch.topk, softmax of the top k over T,
        torch.multinomial, the index mapped back), timed in alternation, and
        the logits' GB/s against the copy bandwidth of the same run.
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import cudabook as cb  # noqa: E402
from cudabook import evidence  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
THREADS, MAX_V = 256, 65536
U32 = 2.0**-24


def load_kernels():
    import pycuda.driver as cuda

    module = cb.compile(KERNEL_FILE)
    k = {}
    for name, sig in (("sample_topk", "PPPiiff"), ("sample_topk_philox", "PIIIPiiff")):
        f = module.get_function(name)
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, 2 * MAX_V)
        k[name] = f.prepare(sig)
    k["kat"] = module.get_function("philox_kat").prepare("PPPi")
    return k


# --8<-- [start:philox]
def philox4x32_10(ctr: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The host's twin of the kernel's Philox4x32-10: ctr (n, 4) and key
    (n, 2) uint32 in, (n, 4) uint32 out, the same words bit for bit."""
    c = [ctr[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = key[:, 0].astype(np.uint64), key[:, 1].astype(np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & mask, (k1 + np.uint64(0xBB67AE85)) & mask
    return np.stack(c, axis=1).astype(np.uint32)


def philox_uniform(seed: int, rows: int, step: int) -> np.ndarray:
    """The u the kernel draws for each row at this step: counter (row,
    step, 0, 0), key (the seed's low and high words), the first word's top
    24 bits over 2^24."""
    ctr = np.zeros((rows, 4), np.uint32)
    ctr[:, 0], ctr[:, 1] = np.arange(rows), step
    key = np.tile(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32), (rows, 1))
    return ((philox4x32_10(ctr, key)[:, 0] >> 8).astype(np.float64) / 2**24).astype(np.float32)
# --8<-- [end:philox]


# Random123's known answers for Philox4x32-10 (its kat_vectors file).
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


# --8<-- [start:launch]
def sample(kernels, logits, u, out, k: int, temperature: float, seed: int | None = None, step: int = 0,
           top_p: float = 1.0) -> None:
    """out[r] = the token drawn from row r of logits (B, V) bf16 (uint16),
    V <= 65,536, with u (B,) float32 in [0, 1), or, with u None and a
    seed (0 <= seed < 2^64), u drawn on the device by Philox at counter
    (r, step); out (B,) int32; the top k logits (ties at the k-th kept),
    temperature > 0; top_p in (0, 1]: below 1, the draw is from the
    nucleus of the top k (k <= 512; a row whose ties at the k-th push the
    kept count past 1,024 gets -2)."""
    cb.check_array("logits", logits, dtype=np.uint16, ndim=2, on_device=True)
    b = cb.check_size("logits rows", logits.shape[0], high=2**31 - 1)
    v = cb.check_size("logits columns (V)", logits.shape[1], high=MAX_V)
    if (u is None) == (seed is None):
        raise ValueError("u, seed: give one of them")
    if u is not None:
        cb.check_array("u", u, dtype=np.float32, shape=(b,), on_device=True)
    elif not 0 <= seed < 2**64 or not 0 <= step < 2**32:
        raise ValueError(f"seed, step: 0 <= seed < 2^64 and 0 <= step < 2^32, got {seed}, {step}")
    cb.check_array("out", out, dtype=np.int32, shape=(b,), on_device=True)
    cb.check_size("k", k, high=v)
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature: a finite number above 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: in (0, 1], got {top_p}")
    if top_p < 1 and k > 512:
        raise ValueError(f"k: at most 512 with top_p below 1 (the nucleus is sorted in 1,024 places), got {k}")
    tail = (np.int32(v), np.int32(k), np.float32(1 / temperature), np.float32(top_p))
    if u is not None:
        kernels["sample_topk"].prepared_call((b, 1, 1), (THREADS, 1, 1), logits.gpudata, u.gpudata, out.gpudata,
                                             *tail, shared_size=2 * v)
    else:
        kernels["sample_topk_philox"].prepared_call(
            (b, 1, 1), (THREADS, 1, 1), logits.gpudata, np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32),
            np.uint32(step), out.gpudata, *tail, shared_size=2 * v)
# --8<-- [end:launch]


def reference(x64, k, temperature):
    """Per row: the kept mask, and the running sum of weights (float64)."""
    kth = -np.sort(-x64, axis=1)[:, k - 1:k]
    kept = x64 >= kth
    w = np.where(kept, np.exp((x64 - x64.max(1, keepdims=True)) / temperature), 0.0)
    return kept, np.cumsum(w, axis=1)


def check_draws(tag, picks, u, x64, k, temperature):
    kept, cum = reference(x64, k, temperature)
    b, v = x64.shape
    total = cum[:, -1]
    per = math.ceil(v / THREADS)
    tol = (2 * per + THREADS + 16) * U32 * total    # the walk's additions and the goal's, in float32
    rows = np.arange(b)
    ok_range = (picks >= 0) & (picks < v)
    p = np.clip(picks, 0, v - 1)
    lo = np.where(p > 0, cum[rows, p - 1], 0.0)
    goal = u.astype(np.float64) * total
    good = ok_range & kept[rows, p] & (lo - tol <= goal) & (goal <= cum[rows, p] + tol)
    bad = np.where(~good)[0]
    cb.report_check(cb.expect(f"{tag}: every draw kept and where u falls", bad.size == 0,
                              "all" if bad.size == 0 else
                              f"{bad.size} of {b} rows wrong, e.g. row {bad[0]}: token {picks[bad[0]]}"))


def draw_u(rng, b: int) -> np.ndarray:
    """b uniform numbers in [0, 1) as float32 (which can round up to 1, so
    capped below it), the last two the ends: 0 and 1 - 2^-24, the first and
    the last token drawn."""
    u = np.minimum(rng.random(b).astype(np.float32), np.float32(1 - 2**-24))
    u[-2:] = (0.0, 1 - 2**-24)
    return u


def check_nucleus(tag, picks, u, x64, k, temperature, top_p):
    """Top-p draws: the token is in the nucleus (the fewest of the top k,
    by logit then index, whose weights reach top_p of theirs), and where u
    falls in the nucleus's running sum in that order; the nucleus's edge
    and the sums to within the kernel's float32 roundings."""
    kept, _ = reference(x64, k, temperature)
    wrong = []
    for r in range(len(picks)):
        idx = np.where(kept[r])[0]
        order = idx[np.lexsort((idx, -x64[r, idx]))]          # logit descending, then index
        w = np.exp((x64[r, order] - x64[r].max()) / temperature)
        cum = np.cumsum(w)
        tol = (len(order) + 16) * U32
        c_lo = int(np.searchsorted(cum, top_p * cum[-1] * (1 - tol)))
        c_hi = min(len(order) - 1, int(np.searchsorted(cum, top_p * cum[-1] * (1 + tol))))
        where = np.where(order == picks[r])[0]
        ok = False
        if where.size:
            pos = int(where[0])
            lo = cum[pos - 1] if pos else 0.0
            ok = any(pos <= c and lo - tol * cum[c] <= u[r] * cum[c] <= cum[pos] + tol * cum[c]
                     for c in range(c_lo, c_hi + 1))
        if not ok:
            wrong.append(r)
    cb.report_check(cb.expect(f"{tag} top-p {top_p}: every draw in the nucleus and where u falls", not wrong,
                              "all" if not wrong else f"{len(wrong)} rows wrong, e.g. row {wrong[0]}: {picks[wrong[0]]}"))


def run_nucleus(kernels, b, v, k, temperature, top_p, rng):
    from pycuda import gpuarray

    x16 = to_bf16((2 * rng.standard_normal((b, v))).astype(np.float32))
    u = draw_u(rng, b)
    out = gpuarray.empty(b, np.int32)
    out.fill(np.int32(-1))
    sample(kernels, gpuarray.to_gpu(x16), gpuarray.to_gpu(u), out, k, temperature, top_p=top_p)
    check_nucleus(f"V={v} k={k} T={temperature}", out.get(), u, from_bf16(x16).astype(np.float64), k, temperature,
                  top_p)


def run_rows(kernels, b, v, k, temperature, rng):
    from pycuda import gpuarray

    x16 = to_bf16((2 * rng.standard_normal((b, v))).astype(np.float32))
    u = draw_u(rng, b)
    xg, ug = gpuarray.to_gpu(x16), gpuarray.to_gpu(u)
    out = gpuarray.empty(b, np.int32)
    out.fill(np.int32(-1))                           # a row not written shows as -1
    sample(kernels, xg, ug, out, k, temperature)
    check_draws(f"V={v} k={k} T={temperature}", out.get(), u, from_bf16(x16).astype(np.float64), k, temperature)
    return xg, ug, out


def run_stratified(kernels, v, k, temperature, rng, n=4096):
    from pycuda import gpuarray

    x16 = to_bf16((2 * rng.standard_normal((1, v))).astype(np.float32))
    xg = gpuarray.to_gpu(np.repeat(x16, n, axis=0))
    u = ((np.arange(n) + 0.5) / n).astype(np.float32)
    out = gpuarray.empty(n, np.int32)
    out.fill(np.int32(-1))
    sample(kernels, xg, gpuarray.to_gpu(u), out, k, temperature)
    picks = out.get()
    kept, cum = reference(from_bf16(x16).astype(np.float64), k, temperature)
    prob = np.diff(np.concatenate([[0.0], cum[0]])) / cum[0, -1]
    counts = np.bincount(np.clip(picks, 0, v - 1), minlength=v) * (picks >= 0).all()
    worst = float(np.abs(counts - n * prob).max())
    cb.report_check(cb.expect(f"stratified V={v} k={k} T={temperature}: counts within 2 of {n} p", worst <= 2,
                              f"worst {worst:.2f}"))


def bench(kernels, seed):
    import torch

    rng = np.random.default_rng(seed)
    b, v, k, t = 64, 50257, 50, 0.8
    xg, ug, out = run_rows(kernels, b, v, k, t, rng)
    tx = torch.from_numpy(from_bf16(xg.get())).cuda().to(torch.bfloat16)

    def torch_sample():
        vals, idx = torch.topk(tx, k, dim=-1)
        probs = torch.softmax(vals.float() / t, dim=-1)
        return idx.gather(-1, torch.multinomial(probs, 1))

    evidence.benchmark(f"sample top-{k} B={b} V={v}", lambda: sample(kernels, xg, ug, out, k, t),
                       bytes_moved=xg.nbytes, ceiling=("device-to-device copy", cb.ceiling()),
                       baseline=("torch.topk, softmax, torch.multinomial", torch_sample))


def check_philox(kernels, rng):
    """The device's Philox against Random123's known answers and the host's
    twin, bit for bit; then draws by device-made u against the host's u."""
    from pycuda import gpuarray

    ctr = np.array([c for c, _, _ in KAT], np.uint32)
    key = np.array([k for _, k, _ in KAT], np.uint32)
    want = np.array([w for _, _, w in KAT], np.uint32)
    more_c = rng.integers(0, 2**32, (1000, 4), dtype=np.uint64).astype(np.uint32)
    more_k = rng.integers(0, 2**32, (1000, 2), dtype=np.uint64).astype(np.uint32)
    cs, ks = np.concatenate([ctr, more_c]), np.concatenate([key, more_k])
    out = gpuarray.empty((len(cs), 4), np.uint32)
    kernels["kat"].prepared_call((cb.ceil_div(len(cs), 256), 1, 1), (256, 1, 1), gpuarray.to_gpu(cs).gpudata,
                                 gpuarray.to_gpu(ks).gpudata, out.gpudata, np.int32(len(cs)))
    got = out.get()
    host = philox4x32_10(cs, ks)
    cb.report_check(cb.expect("Philox4x32-10: Random123's known answers", np.array_equal(got[:3], want),
                              "equal" if np.array_equal(got[:3], want) else "differ"))
    cb.report_check(cb.expect("Philox4x32-10: device and host twin on 1,000 random (counter, key)",
                              np.array_equal(got, host), "bit for bit" if np.array_equal(got, host) else "differ"))
    seed, b, v, k, t = 0x0123456789ABCDEF, 64, 50257, 50, 0.8
    x16 = to_bf16((2 * rng.standard_normal((b, v))).astype(np.float32))
    xg, outg = gpuarray.to_gpu(x16), gpuarray.empty(b, np.int32)
    for step in (0, 1):
        outg.fill(np.int32(-1))
        sample(kernels, xg, None, outg, k, t, seed=seed, step=step)
        check_draws(f"seeded draw, step {step}", outg.get(), philox_uniform(seed, b, step),
                    from_bf16(x16).astype(np.float64), k, t)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    rng = np.random.default_rng(args.seed)
    for v in (1, 7, 256, 1000, 50257):
        for k in sorted({1, min(5, v), min(50, v), v}):
            for t in (0.7, 1.0):
                run_rows(kernels, 64, v, k, t, rng)
    for v, k in ((256, 256), (1000, 50), (50257, 50)):
        run_stratified(kernels, v, k, 1.0, rng)
    for v, k in ((7, 7), (1000, 50), (50257, 50), (50257, 512)):
        for top_p in (0.5, 0.9):
            run_nucleus(kernels, 64, v, k, 0.8, top_p, rng)
    check_philox(kernels, rng)
    if args.bench:
        bench(kernels, args.seed)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
