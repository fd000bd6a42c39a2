import numpy as np, math, sys
from attention_fragments import Smem, mma, reference, LOG2E
def offs(warp, ROW):
    a, bn, bk = [], [], []
    for lane in range(32):
        x = lane % 8
        a.append((warp*16 + lane%16)*ROW + (((lane//16) ^ x)*16))
        bn.append(((lane//16)*8 + x)*ROW + ((((lane//8)%2) ^ x)*16))
        bk.append((((lane//8)%2)*8 + x)*ROW + (((lane//16) ^ x)*16))
    return a, bn, bk
def dq_block(Q, K, V, dO, lse2, delta, dQ, S, D, c, scale, causal, bx):
    BK = BQ = 64; NT = 8; DT = D//8; ROW = 2*D
    sm = Smem((2*BQ + 2*BK)*ROW); Qs = 0; dOs = BQ*ROW; Ks = dOs + BQ*ROW; Vs = Ks + BK*ROW
    q0 = bx*BQ
    sm.load_tile(Qs, Q, q0, BQ, D, S); sm.load_tile(dOs, dO, q0, BQ, D, S)
    kv_end = min(S, q0 + BQ) if causal else S
    dq = [[[[0.0]*4 for _ in range(32)] for _ in range(DT)] for _ in range(4)]
    for k0 in range(0, kv_end, BK):
        sm.load_tile(Ks, K, k0, BK, D, S); sm.load_tile(Vs, V, k0, BK, D, S)
        for warp in range(4):
            a_off, bn_off, bk_off = offs(warp, ROW)
            s = [[[0.0]*4 for _ in range(32)] for _ in range(NT)]
            dp = [[[0.0]*4 for _ in range(32)] for _ in range(NT)]
            for ks in range(D//16):
                aq = sm.ldsm([Qs + (o ^ (32*ks)) for o in a_off], False)
                ao = sm.ldsm([dOs + (o ^ (32*ks)) for o in a_off], False)
                for n in range(0, NT, 2):
                    bk = sm.ldsm([Ks + (o ^ (32*ks)) + n*8*ROW for o in bn_off], False)
                    bv = sm.ldsm([Vs + (o ^ (32*ks)) + n*8*ROW for o in bn_off], False)
                    mma(s[n], aq, [r[0] for r in bk], [r[1] for r in bk]); mma(s[n+1], aq, [r[2] for r in bk], [r[3] for r in bk])
                    mma(dp[n], ao, [r[0] for r in bv], [r[1] for r in bv]); mma(dp[n+1], ao, [r[2] for r in bv], [r[3] for r in bv])
            for lane in range(32):
                g, t = lane//4, lane%4
                for h in range(2):
                    query = q0 + warp*16 + g + 8*h
                    lse = lse2[query] if query < S else 0.0; dl = delta[query] if query < S else 0.0
                    for n in range(NT):
                        for e in range(2):
                            key = k0 + n*8 + 2*t + e
                            masked = key >= S or query >= S or (causal and key > query)
                            p = 0.0 if masked else 2.0**(s[n][lane][2*h+e]*c - lse)
                            dp[n][lane][2*h+e] = p*(dp[n][lane][2*h+e] - dl)
            for kk in range(BK//16):
                a = [[(dp[2*kk][l][0], dp[2*kk][l][1]), (dp[2*kk][l][2], dp[2*kk][l][3]),
                      (dp[2*kk+1][l][0], dp[2*kk+1][l][1]), (dp[2*kk+1][l][2], dp[2*kk+1][l][3])] for l in range(32)]
                for d in range(0, DT, 2):
                    b = sm.ldsm([Ks + kk*16*ROW + (o ^ (16*d)) for o in bk_off], True)
                    mma(dq[warp][d], a, [r[0] for r in b], [r[1] for r in b]); mma(dq[warp][d+1], a, [r[2] for r in b], [r[3] for r in b])
    for warp in range(4):
        for lane in range(32):
            g, t = lane//4, lane%4
            for h in range(2):
                query = q0 + warp*16 + g + 8*h
                if query >= S: continue
                for d in range(DT):
                    dQ[query, 8*d+2*t] = dq[warp][d][lane][2*h]*scale; dQ[query, 8*d+2*t+1] = dq[warp][d][lane][2*h+1]*scale
def lse_block(Q, K, lse2o, S, D, c, causal, bx):
    BK = BQ = 64; NT = 8; ROW = 2*D
    sm = Smem((BQ+BK)*ROW); Qs = 0; Ks = BQ*ROW; q0 = bx*BQ
    sm.load_tile(Qs, Q, q0, BQ, D, S)
    kv_end = min(S, q0 + BQ) if causal else S
    m = [[[-np.inf]*2 for _ in range(32)] for _ in range(4)]; l = [[[0.0]*2 for _ in range(32)] for _ in range(4)]
    for k0 in range(0, kv_end, BK):
        sm.load_tile(Ks, K, k0, BK, D, S)
        for warp in range(4):
            a_off, bn_off, _ = offs(warp, ROW)
            s = [[[0.0]*4 for _ in range(32)] for _ in range(NT)]
            for ks in range(D//16):
                a = sm.ldsm([Qs + (o ^ (32*ks)) for o in a_off], False)
                for n in range(0, NT, 2):
                    b = sm.ldsm([Ks + (o ^ (32*ks)) + n*8*ROW for o in bn_off], False)
                    mma(s[n], a, [r[0] for r in b], [r[1] for r in b]); mma(s[n+1], a, [r[2] for r in b], [r[3] for r in b])
            for h in range(2):
                mx = [0]*32; 
                for lane in range(32):
                    g, t = lane//4, lane%4; row = q0 + warp*16 + g + 8*h
                    mm = m[warp][lane][h]
                    for n in range(NT):
                        for e in range(2):
                            key = k0 + n*8 + 2*t + e
                            if key >= S or (causal and key > row): s[n][lane][2*h+e] = -np.inf
                            mm = max(mm, s[n][lane][2*h+e])
                    mx[lane] = mm
                mx = [max(mx[(l//4)*4:(l//4)*4+4]) for l in range(32)]
                sums = []
                for lane in range(32):
                    base = 0.0 if mx[lane] == -np.inf else mx[lane]*c
                    sums.append(sum(2.0**(s[n][lane][2*h+e]*c - base) for n in range(NT) for e in range(2)))
                sums = [sum(sums[(l//4)*4:(l//4)*4+4]) for l in range(32)]
                for lane in range(32):
                    base = 0.0 if mx[lane] == -np.inf else mx[lane]*c
                    mo = m[warp][lane][h]
                    l[warp][lane][h] = l[warp][lane][h]*(1.0 if mx[lane] == mo else 2.0**(mo*c - base)) + sums[lane]
                    m[warp][lane][h] = mx[lane]
    for warp in range(4):
        for lane in range(32):
            g, t = lane//4, lane%4
            if t: continue
            for h in range(2):
                row = q0 + warp*16 + g + 8*h
                if row < S: lse2o[row] = m[warp][lane][h]*c + math.log2(l[warp][lane][h])
S, D, causal = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
rng = np.random.default_rng(1)
Q, K, V, dO = (rng.standard_normal((S, D)) for _ in range(4))
lse2, delta, rdq, rdk, rdv = reference(Q, K, V, dO, causal)
c = LOG2E/math.sqrt(D)
dQ = np.full((S, D), np.nan); l2 = np.full(S, np.nan)
for bx in range((S+63)//64):
    dq_block(Q, K, V, dO, lse2, delta, dQ, S, D, c, 1/math.sqrt(D), causal, bx)
    lse_block(Q, K, l2, S, D, c, causal, bx)
print(S, D, causal, "dQ pass", np.abs(dQ - rdq).max(), "lse2", np.abs(l2 - lse2).max())
