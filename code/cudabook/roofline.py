"""How close a measured time is to what the hardware allows.

A kernel that must move B bytes through device memory and do F floating-point
operations cannot finish faster than max(B / bandwidth, F / peak FLOP/s).
We use *measured* ceilings: the device-to-device copy bandwidth of the same
run (`bench.copy_bandwidth`), and for arithmetic the peak of the FP32 units.
"""

from __future__ import annotations

# FP32 lanes per SM by compute capability (CUDA C++ Programming Guide,
# "Arithmetic Instructions" throughput table).
FP32_LANES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
                     (8, 9): 128, (9, 0): 128, (10, 0): 128, (12, 0): 128}


def fp32_peak_flops(compute_capability: tuple[int, int], sm_count: int, clock_hz: float) -> float | None:
    """Peak FP32 FLOP/s: lanes x SMs x 2 (a fused multiply-add is 2 FLOPs) x clock."""
    lanes = FP32_LANES_PER_SM.get(tuple(compute_capability))
    if lanes is None:
        return None
    return lanes * sm_count * 2 * clock_hz


def roofline(seconds: float, *, bytes_moved: int = 0, flops: int = 0,
             bandwidth: float | None = None, peak_flops: float | None = None) -> dict:
    """Achieved rates and the fraction of the binding ceiling.

    Returns achieved bytes/s and FLOP/s, the time floor, and `fraction`: the
    floor divided by the measured time (1.0 would be running at the limit).
    """
    if seconds <= 0:
        raise ValueError(f"seconds: expected > 0, got {seconds}")
    floors = {}
    if bytes_moved and bandwidth:
        floors["memory"] = bytes_moved / bandwidth
    if flops and peak_flops:
        floors["compute"] = flops / peak_flops
    bound = max(floors, key=floors.get) if floors else None
    floor = floors[bound] if bound else None
    return {
        "bytes_per_s": bytes_moved / seconds if bytes_moved else None,
        "flop_per_s": flops / seconds if flops else None,
        "bound": bound,
        "floor_s": floor,
        "fraction": floor / seconds if floor else None,
    }
