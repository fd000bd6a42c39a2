# NumPy emulation of decode_attention.cu's order of work (decode_split: chunks, 4 warps of 32 keys, base-2
# online softmax, the warps merged; decode_combine: the chunks merged), in float64, against the definition.
import numpy as np, math
LOG2E = 1.4426950408889634
def emulate(q, K, V, span, warps=4):
    G, D = q.shape; L = K.shape[0]; c = LOG2E / math.sqrt(D)
    qs = c * q
    parts = []
    for k0 in range(0, L, span):
        k1 = min(L, k0 + span)
        W = []
        for w in range(warps):
            m = np.full(G, -np.inf); l = np.zeros(G); acc = np.zeros((G, D))
            for base in range(k0 + w * 32, k1, 32 * warps):
                keys = np.arange(base, base + 32); valid = keys < k1
                s = np.where(valid[None, :], qs @ K[np.minimum(keys, L - 1)].T, -np.inf)   # (G, 32)
                m_new = np.maximum(m, s.max(1)); r = np.exp2(m - m_new)
                p = np.where(valid[None, :], np.exp2(s - m_new[:, None]), 0.0)
                l = l * r + p.sum(1); m = m_new; acc = acc * r[:, None]
                n = min(32, k1 - base)
                acc += p[:, :n] @ V[base:base + n]
            W.append((m, l, acc))
        mm = np.max([x[0] for x in W], axis=0)
        ll = np.zeros(G); oo = np.zeros((G, D))
        for m, l, acc in W:
            ok = np.isfinite(m); r = np.where(ok, np.exp2(np.where(ok, m, 0) - mm), 0)
            ll += l * r; oo += acc * r[:, None]
        parts.append((mm, ll, oo / ll[:, None]))
    m = np.max([x[0] for x in parts], axis=0)
    l = sum(x[1] * np.exp2(x[0] - m) for x in parts)
    return sum((x[1] * np.exp2(x[0] - m))[:, None] * x[2] for x in parts) / l[:, None]
rng = np.random.default_rng(0)
worst = 0
for G, D in ((1, 64), (4, 128), (8, 64)):
    for L in (1, 31, 255, 256, 257, 1000):
        for span in sorted({128, L, 256}):
            q = rng.standard_normal((G, D)); K = rng.standard_normal((L, D)); V = rng.standard_normal((L, D))
            s = q @ K.T / math.sqrt(D); p = np.exp(s - s.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
            worst = max(worst, np.abs(emulate(q, K, V, span) - p @ V).max())
print("worst difference from the definition:", worst)
