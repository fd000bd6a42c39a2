"""bfloat16 on the host, as bit patterns.

NumPy and PyCUDA have no bf16 type, so the listings that use it keep bf16
arrays as np.uint16 holding the bit patterns: the top half of a float32.

    from cudabook.bf16 import from_bf16, to_bf16
    a16 = to_bf16(a)          # float32 -> bf16 bits, round to nearest even
    a32 = from_bf16(a16)      # bf16 bits -> float32, exactly

Not imported by `cudabook/__init__.py`: only the listings that use bf16
load it (and only they are hashed with it).
"""

from __future__ import annotations

import numpy as np


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (np.uint16), round to nearest, ties
    to even: add 0x7FFF plus the lowest kept bit, keep the top 16 bits.
    (Finite inputs only: a NaN could round to infinity.)"""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def from_bf16(h: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (np.uint16) -> float32, exactly."""
    return (h.astype(np.uint32) << 16).view(np.float32)
