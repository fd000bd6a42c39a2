# NumPy emulation of sample_topk.cu in float32 (keys, the two-histogram
# select, the threads' runs, the serial scan, the crossing), run through
# sample_topk.py's own checks: the checks pass it, and a kernel that drops
# the ties at the threshold or forgets the temperature fails them.
import contextlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "code"))
import sample_topk as st  # noqa: E402
from cudabook.bf16 import from_bf16, to_bf16  # noqa: E402
import cudabook as cb  # noqa: E402

T = 256


def keys_of(bits):
    b = np.where(bits == 0x8000, 0, bits).astype(np.uint32)      # -0 is +0, as the kernel
    return np.where(b & 0x8000, ~b & 0xFFFF, b | 0x8000)


def value_of(key):
    bits = np.where(key & 0x8000, key & 0x7FFF, ~key & 0xFFFF).astype(np.uint16)
    return from_bf16(bits)


def kth(keys, k):
    hist = np.bincount(keys >> 8, minlength=256)
    acc, b = 0, 255
    while b > 0 and acc + hist[b] < k:
        acc += hist[b]; b -= 1
    need, prefix = k - acc, b
    hist = np.bincount(keys[(keys >> 8) == prefix] & 0xFF, minlength=256)
    acc, b = 0, 255
    while b > 0 and acc + hist[b] < need:
        acc += hist[b]; b -= 1
    return (prefix << 8) | b


def emulate_row(bits, u, k, temperature, variant=""):
    keys = keys_of(bits)
    v = len(keys)
    m = np.float32(value_of(keys.max()))
    thr = kth(keys, k)
    inv = np.float32(1 / temperature) if variant != "no temperature" else np.float32(1)
    kept = keys > thr if variant == "drop ties" else keys >= thr
    w = np.where(kept, np.exp((value_of(keys).astype(np.float32) - m) * inv).astype(np.float32), np.float32(0))
    per = -(-v // T)
    runs = [np.float32(0)] * T
    for t in range(T):
        s = np.float32(0)
        for j in range(t * per, min(v, t * per + per)):
            s = np.float32(s + w[j])
        runs[t] = s
    start, s = [], np.float32(0)
    for x in runs:
        start.append(s); s = np.float32(s + x)
    total = s                                                     # the scan's own total, as the kernel
    goal = np.float32(np.float32(u) * total)
    for t in range(T):
        nxt = start[t + 1] if t + 1 < T else total
        if start[t] <= goal < nxt:
            s, pick = start[t], -1
            for j in range(t * per, min(v, t * per + per)):
                if not kept[j] or w[j] == 0:
                    continue
                pick = j; s = np.float32(s + w[j])
                if s > goal:
                    break
            return pick
    return -1


@contextlib.contextmanager
def captured():
    """The checks' verdicts, in order, instead of reports."""
    verdicts, real = [], cb.report_check
    cb.report_check = lambda r, **_: verdicts.append(r.passed) or r.passed
    try:
        yield verdicts
    finally:
        cb.report_check = real


def trial(variant):
    rng = np.random.default_rng(0)
    with captured() as verdicts:
        for v, k, temp in ((7, 5, 0.7), (1000, 50, 1.0), (1000, 1000, 0.7), (3000, 1, 1.0)):
            x16 = to_bf16((2 * rng.standard_normal((16, v))).astype(np.float32))
            u = st.draw_u(rng, 16)
            picks = np.array([emulate_row(x16[r], u[r], k, temp, variant) for r in range(16)])
            st.check_draws(f"V={v}", picks, u, from_bf16(x16).astype(np.float64), k, temp)
        # stratified, one row
        v, k, n = 300, 300, 4096
        x16 = to_bf16((2 * rng.standard_normal(v)).astype(np.float32))
        u = ((np.arange(n) + 0.5) / n).astype(np.float32)
        picks = np.array([emulate_row(x16, uu, k, 1.0, variant) for uu in u])
        kept, cum = st.reference(from_bf16(x16).astype(np.float64)[None], k, 1.0)
        prob = np.diff(np.concatenate([[0.0], cum[0]])) / cum[0, -1]
        worst = np.abs(np.bincount(picks, minlength=v) - n * prob).max()
        verdicts.append(bool(worst <= 2))
    return verdicts


print("the kernel's algorithm:", trial(""))
print("ties dropped at the threshold:", trial("drop ties"))
print("temperature forgotten:", trial("no temperature"))


# Top-p: the kernel's nucleus path replayed in float32 (sorted by key then
# index, serial sums in thread 0), through sample_topk.check_nucleus.
def emulate_nucleus(bits, u, k, temperature, top_p, variant=""):
    keys = keys_of(bits)
    m = np.float32(value_of(keys.max()))
    thr = kth(keys, k)
    idx = np.where(keys >= thr)[0]
    order = idx[np.lexsort((idx, -keys[idx].astype(np.int64)))]
    w = np.exp((value_of(keys[order]).astype(np.float32) - m) * np.float32(1 / temperature)).astype(np.float32)
    total = np.float32(0)
    for x in w:
        total = np.float32(total + x)
    cum, c = np.float32(0), len(w) - 1
    for i, x in enumerate(w):
        cum = np.float32(cum + x)
        if cum >= np.float32(top_p) * total:
            c = i
            break
    if variant == "nucleus one short":
        c = max(0, c - 1)
        cum = np.float32(sum(w[:c + 1]))
    goal = np.float32(np.float32(u) * cum)
    s, pick = np.float32(0), order[0]
    for i in range(c + 1):
        pick = order[i]
        s = np.float32(s + w[i])
        if s > goal:
            break
    return pick


def trial_nucleus(variant):
    rng = np.random.default_rng(1)
    with captured() as verdicts:
        for v, k, p in ((7, 7, 0.5), (1000, 50, 0.9), (3000, 200, 0.5)):
            x16 = to_bf16((2 * rng.standard_normal((32, v))).astype(np.float32))
            u = st.draw_u(rng, 32)
            picks = np.array([emulate_nucleus(x16[r], u[r], k, 0.8, p, variant) for r in range(32)])
            st.check_nucleus(f"V={v}", picks, u, from_bf16(x16).astype(np.float64), k, 0.8, p)
    return verdicts


print("top-p, the kernel's algorithm:", trial_nucleus(""))
print("top-p, the nucleus one token short:", trial_nucleus("nucleus one short"))
