# (Written by a review helper on 2026-12-07; run: python3 attention_fragments.py S D causal)
# Emulate bwd_kv_body / bwd_dq_body / lse_body fragment logic for one head, float64, no bf16 rounding.
import numpy as np, math
LOG2E = 1.4426950408889634

def swz(D, row, chunk): return row * D + ((chunk ^ (row & 7)) * 8)

class Smem:
    def __init__(self, nbytes): self.m = np.zeros(nbytes // 2)
    def load_tile(self, base, X, row0, rows, D, S):   # TileCopy semantic: swizzled, zero fill
        for r in range(rows):
            for c in range(D // 8):
                off = base + 2 * swz(D, r, c)
                vals = X[row0 + r, c*8:(c+1)*8] if row0 + r < S else np.zeros(8)
                self.m[off//2: off//2 + 8] = vals
    def ldsm(self, addrs, trans):
        # addrs: 32 byte addresses; returns regs[lane][j] = (lo, hi)
        out = [[None]*4 for _ in range(32)]
        for j in range(4):
            mat = np.array([self.m[addrs[8*j + r]//2: addrs[8*j + r]//2 + 8] for r in range(8)])
            for i in range(32):
                if not trans: out[i][j] = (mat[i//4, 2*(i%4)], mat[i//4, 2*(i%4)+1])
                else:         out[i][j] = (mat[2*(i%4), i//4], mat[2*(i%4)+1, i//4])
        return out

def mma(d, a, b0, b1):
    # d[lane] 4 floats; a[lane] 4 pairs; b0,b1[lane] pairs
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        A[g, 2*t:2*t+2] = a[l][0]; A[g+8, 2*t:2*t+2] = a[l][1]
        A[g, 8+2*t:8+2*t+2] = a[l][2]; A[g+8, 8+2*t:8+2*t+2] = a[l][3]
        B[2*t:2*t+2, g] = b0[l]; B[8+2*t:8+2*t+2, g] = b1[l]
    C = A @ B
    for l in range(32):
        g, t = l // 4, l % 4
        d[l][0] += C[g, 2*t]; d[l][1] += C[g, 2*t+1]; d[l][2] += C[g+8, 2*t]; d[l][3] += C[g+8, 2*t+1]

def kv_block(Q, K, V, dO, lse2, delta, dQacc, dK, dV, S, D, c, scale, causal, bx):
    BK = BQ = 64; NQ = 8; DT = D // 8; ROW = 2 * D
    sm = Smem((2*BK + 2*BQ) * ROW + BK*BQ*2)
    Ks, Vs = 0, BK*ROW; Qs = Vs + BK*ROW; dOs = Qs + BQ*ROW; dSs = dOs + BQ*ROW
    k0 = bx * BK
    sm.load_tile(Ks, K, k0, BK, D, S); sm.load_tile(Vs, V, k0, BK, D, S)
    dv = [[[[0.0]*4 for _ in range(32)] for _ in range(DT)] for _ in range(4)]
    dk = [[[[0.0]*4 for _ in range(32)] for _ in range(DT)] for _ in range(4)]
    def offs(warp):
        a_off, bn_off, bk_off = [], [], []
        for lane in range(32):
            x = lane % 8
            a_off.append((warp*16 + lane%16)*ROW + (((lane//16) ^ x)*16))
            bn_off.append(((lane//16)*8 + x)*ROW + ((((lane//8)%2) ^ x)*16))
            bk_off.append((((lane//8)%2)*8 + x)*ROW + (((lane//16) ^ x)*16))
        return a_off, bn_off, bk_off
    q_first = (k0 // BQ) * BQ if causal else 0
    for q0 in range(q_first, S, BQ):
        sm.load_tile(Qs, Q, q0, BQ, D, S); sm.load_tile(dOs, dO, q0, BQ, D, S)
        stats = [lse2[q0+i] if q0+i < S else 0.0 for i in range(BQ)] + [delta[q0+i] if q0+i < S else 0.0 for i in range(BQ)]
        for warp in range(4):
            a_off, bn_off, bk_off = offs(warp)
            s = [[[0.0]*4 for _ in range(32)] for _ in range(NQ)]
            dp = [[[0.0]*4 for _ in range(32)] for _ in range(NQ)]
            for ks in range(D // 16):
                ak = sm.ldsm([Ks + (o ^ (32*ks)) for o in a_off], False)
                av = sm.ldsm([Vs + (o ^ (32*ks)) for o in a_off], False)
                for n in range(0, NQ, 2):
                    bq = sm.ldsm([Qs + (o ^ (32*ks)) + n*8*ROW for o in bn_off], False)
                    bo = sm.ldsm([dOs + (o ^ (32*ks)) + n*8*ROW for o in bn_off], False)
                    mma(s[n], ak, [r[0] for r in bq], [r[1] for r in bq])
                    mma(s[n+1], ak, [r[2] for r in bq], [r[3] for r in bq])
                    mma(dp[n], av, [r[0] for r in bo], [r[1] for r in bo])
                    mma(dp[n+1], av, [r[2] for r in bo], [r[3] for r in bo])
            for lane in range(32):
                g, t = lane//4, lane%4
                for h in range(2):
                    key = k0 + warp*16 + g + 8*h
                    for n in range(NQ):
                        for e in range(2):
                            qi = n*8 + 2*t + e; query = q0 + qi
                            masked = key >= S or query >= S or (causal and key > query)
                            p = 0.0 if masked else 2.0 ** (s[n][lane][2*h+e]*c - stats[qi])
                            s[n][lane][2*h+e] = p
                            dp[n][lane][2*h+e] = p * (dp[n][lane][2*h+e] - stats[BQ+qi])
            for kk in range(BQ // 16):
                ap = [[(s[2*kk][l][0], s[2*kk][l][1]), (s[2*kk][l][2], s[2*kk][l][3]),
                       (s[2*kk+1][l][0], s[2*kk+1][l][1]), (s[2*kk+1][l][2], s[2*kk+1][l][3])] for l in range(32)]
                as_ = [[(dp[2*kk][l][0], dp[2*kk][l][1]), (dp[2*kk][l][2], dp[2*kk][l][3]),
                        (dp[2*kk+1][l][0], dp[2*kk+1][l][1]), (dp[2*kk+1][l][2], dp[2*kk+1][l][3])] for l in range(32)]
                for d in range(0, DT, 2):
                    bo = sm.ldsm([dOs + kk*16*ROW + (o ^ (16*d)) for o in bk_off], True)
                    bq = sm.ldsm([Qs + kk*16*ROW + (o ^ (16*d)) for o in bk_off], True)
                    mma(dv[warp][d], ap, [r[0] for r in bo], [r[1] for r in bo])
                    mma(dv[warp][d+1], ap, [r[2] for r in bo], [r[3] for r in bo])
                    mma(dk[warp][d], as_, [r[0] for r in bq], [r[1] for r in bq])
                    mma(dk[warp][d+1], as_, [r[2] for r in bq], [r[3] for r in bq])
                for lane in range(32):
                    g, t = lane//4, lane%4
                    for h in range(2):
                        r = warp*16 + g + 8*h
                        for half in range(2):
                            col = kk*16 + half*8 + 2*t
                            addr = dSs + 2*swz(BQ, r, col//8) + 2*(col%8)
                            v = as_[lane][2*half] if h == 0 else as_[lane][2*half+1]
                            sm.m[addr//2] = v[0]; sm.m[addr//2+1] = v[1]
        # barrier; dQ
        for warp in range(4):
            _, _, bk_off = offs(warp)
            dq = [[[0.0]*4 for _ in range(32)] for _ in range(DT)]
            for kk in range(BK // 16):
                addrs = []
                for lane in range(32):
                    x = lane % 8
                    r = kk*16 + (lane//16)*8 + x; chunk = warp*2 + (lane//8)%2
                    addrs.append(dSs + 2*swz(BQ, r, chunk))
                a = sm.ldsm(addrs, True)
                for d in range(0, DT, 2):
                    b = sm.ldsm([Ks + kk*16*ROW + (o ^ (16*d)) for o in bk_off], True)
                    mma(dq[d], a, [r[0] for r in b], [r[1] for r in b])
                    mma(dq[d+1], a, [r[2] for r in b], [r[3] for r in b])
            for lane in range(32):
                g, t = lane//4, lane%4
                for h in range(2):
                    query = q0 + warp*16 + g + 8*h
                    if query >= S: continue
                    for d in range(DT):
                        dQacc[query, 8*d + 2*t] += dq[d][lane][2*h]
                        dQacc[query, 8*d + 2*t + 1] += dq[d][lane][2*h+1]
    for warp in range(4):
        for lane in range(32):
            g, t = lane//4, lane%4
            for h in range(2):
                key = k0 + warp*16 + g + 8*h
                if key >= S: continue
                for d in range(DT):
                    dK[key, 8*d+2*t] = dk[warp][d][lane][2*h]*scale; dK[key, 8*d+2*t+1] = dk[warp][d][lane][2*h+1]*scale
                    dV[key, 8*d+2*t] = dv[warp][d][lane][2*h]; dV[key, 8*d+2*t+1] = dv[warp][d][lane][2*h+1]

def reference(q, k, v, do, causal):
    d = q.shape[-1]; S = q.shape[0]
    sc = q @ k.T / math.sqrt(d)
    if causal: sc = np.where(np.tril(np.ones((S, S), bool)), sc, -np.inf)
    m = sc.max(-1, keepdims=True); e = np.exp(sc - m); l = e.sum(-1, keepdims=True)
    p = e / l; o = p @ v
    lse2 = ((m + np.log(l))[:, 0]) * LOG2E
    dv = p.T @ do; dp = do @ v.T; delta = (do * o).sum(-1, keepdims=True)
    ds = p * (dp - delta)
    return lse2, delta[:, 0], ds @ k / math.sqrt(d), ds.T @ q / math.sqrt(d), dv

if __name__ == "__main__":
    import sys
    S, D, causal = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    rng = np.random.default_rng(0)
    Q, K, V, dO = (rng.standard_normal((S, D)) for _ in range(4))
    lse2, delta, rdq, rdk, rdv = reference(Q, K, V, dO, causal)
    c = LOG2E / math.sqrt(D); scale = 1 / math.sqrt(D)
    dQacc = np.zeros((S, D)); dK = np.full((S, D), np.nan); dV = np.full((S, D), np.nan)
    for bx in range((S + 63) // 64):
        kv_block(Q, K, V, dO, lse2, delta, dQacc, dK, dV, S, D, c, scale, causal, bx)
    dQ = dQacc * scale
    for name, got, want in (("dQ", dQ, rdq), ("dK", dK, rdk), ("dV", dV, rdv)):
        print(S, D, causal, name, np.nanmax(np.abs(got - want)) if not np.isnan(got).any() else "NaN!", np.abs(want).max())
