"""Chapter 16's shared host code: random Q, K, V (float32 or bf16 bit
patterns), the float64 reference, the FLOP count and the error bound.

Bound. Every kernel here computes, for each query row, scores s_j = q.k_j /
sqrt(D) (sums of D products, in fp32), weights p_j = exp(s_j - m) and
O = sum_j p_j v_j / sum_j p_j (sums of up to S terms, in fp32). Measured
against float64 attention of the same inputs, an element of O is off by
at most about
    u32 (S + 16) (|O| + P|V|)          the fp32 sums and the exp (a few ulp)
  + 2 D u32 smax (|O| + P|V|)          a score off by D u32 |q|.|k_j| / sqrt(D)
                                       moves its weight by that, relatively
  + u_out |O| + u_p P|V|               rounding O to the output's type, and
                                       each p_j to the type of P V's inputs
where P|V| = sum_j p_j |v_j| / sum_j p_j (the weights applied to |V|) and
smax = the largest |q|.|k_j| / sqrt(D) of the head (|q| meaning the
vector of absolute values). bound_k turns that into compare()'s k, in
units of the output's u, with scale = P|V|.
"""

import math

import numpy as np

from cudabook.bf16 import from_bf16, to_bf16

U_FP32, U_BF16 = 2.0**-24, 2.0**-8


def random_qkv(b: int, h: int, s: int, d: int, q_scale: float, rng, bf16: bool):
    """Q, K, V of B x H x S x D, standard normal (Q times q_scale): float32,
    or (bf16) bf16 bit patterns."""
    shape = (b, h, s, d)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    q *= np.float32(q_scale)
    return tuple(to_bf16(x) for x in (q, k, v)) if bf16 else (q, k, v)


def values(x: np.ndarray) -> np.ndarray:
    """An input's values as float32: bf16 bit patterns are widened."""
    return from_bf16(x) if x.dtype == np.uint16 else x


def reference(q, k, v, causal: bool, torch=None) -> tuple[np.ndarray, np.ndarray, float]:
    """Attention in float64 of the inputs (float32 or bf16 bit patterns):
    O and P|V| as B x H x S x D, and the largest |q|.|k| / sqrt(D) (see the
    module's docstring). A head at a time; on the GPU in float64 through
    `torch` when given (the benchmark shapes), else NumPy."""
    b, h, s, d = q.shape
    q, k, v = (values(x).reshape(b * h, s, d) for x in (q, k, v))
    out, mag, smax = np.empty((b * h, s, d)), np.empty((b * h, s, d)), 0.0
    lib = np if torch is None else torch
    mask = np.triu(np.ones((s, s), dtype=bool), 1) if causal else None
    if torch is not None and causal:
        mask = torch.from_numpy(mask).cuda()
    for i in range(b * h):
        if torch is None:
            qi, ki, vi = (x[i].astype(np.float64) for x in (q, k, v))
        else:
            qi, ki, vi = (torch.from_numpy(x[i]).cuda().double() for x in (q, k, v))
        sc = qi @ ki.T / math.sqrt(d)
        size = lib.abs(qi) @ lib.abs(ki).T / math.sqrt(d)
        if causal:
            sc[mask] = -math.inf
            size[mask] = 0.0
        smax = max(smax, float(size.max()))
        e = lib.exp(sc - sc.max(1, keepdims=True) if torch is None else sc - sc.amax(1, keepdim=True))
        p = e / e.sum(1, keepdims=True) if torch is None else e / e.sum(1, keepdim=True)
        o, m = p @ vi, p @ lib.abs(vi)
        out[i], mag[i] = (o, m) if torch is None else (o.cpu().numpy(), m.cpu().numpy())
    return out.reshape(b, h, s, d), mag.reshape(b, h, s, d), smax


def bound_k(s: int, d: int, smax: float, u_out: float, u_p: float) -> float:
    """compare()'s k for an output of unit roundoff u_out, with scale = P|V|
    (see the module's docstring): every term as a multiple of u_out."""
    fp32 = U_FP32 * (s + 16 + 2 * d * smax)
    return (fp32 + u_out + u_p) / u_out


def flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    """The two products' FLOPs, 2 S S D each a head; causal: the S (S + 1) / 2
    scores that count (as FlashAttention's papers count them)."""
    return 4 * b * h * d * (s * (s + 1) / 2 if causal else s * s)
