"""Solution to exercise 2: move the L1 step by giving the SRAM to shared memory.

The L1 cache and shared memory of an SM are one block of SRAM, split for
each kernel. This listing runs pointer_chase's kernel, unchanged, four
ways: as the chapter did; with the hint cudaFuncAttributePreferredShared-
MemoryCarveout at 50% and at 100% of the most shared memory an SM can have;
and with a request for 200 KiB of dynamic shared memory per block, which
the kernel never touches but the SM must set aside. Compute capability 9.0
splits the SRAM only at a few sizes (0, 8, 16, 32, 64, 100, 132, 164, 196
or 228 KB of shared memory, Programming Guide), and a block also takes
1 KiB the system reserves, so the L1 keeps at most 248, 124, 28 and 28 KiB
of the 256 KB. The chain's step from L1 to L2 latency should follow.

Run:    python code/caches/ex2_carveout.py [--seed S] [--bench]
Checks: every chain ends where the host's does (exact), in every setting;
        under --bench, the largest chain served at the L1's latency is
        smaller with 200 KiB of shared memory than without (a timing check).
Bench:  chains of 16 to 256 KiB in each setting: cycles per dependent load,
        and the largest chain within 1.5x of the L1's latency, against the
        most the L1 can keep.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and pointer_chase
import cudabook as cb  # noqa: E402
import pointer_chase as pc  # noqa: E402

# Each setting: dynamic shared memory per block (KiB), and the carve-out hint
# (percent of the SM's most shared memory; None leaves the driver's default).
SETTINGS = {"default": (0, None), "hint50": (0, 50), "hint100": (0, 100), "shared200": (200, None)}
SWEEP_KIB = (16, 24, 32, 48, 64, 96, 112, 128, 160, 192, 224, 256)
CHECK_KIB = (16, 256)
SRAM_KIB = 256                                                # L1 + shared memory per SM, Hopper whitepaper
CARVEOUTS_KIB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)  # compute capability 9.0


# --8<-- [start:solution]
def load_kernel(shared_kib: int, hint: int | None):
    """A fresh copy of pointer_chase's kernel (so no setting carries over to
    the next), set up for one setting."""
    import pycuda.driver as cuda

    kernel = pc.load_kernel()
    if hint is not None:                                      # a hint: the driver may choose otherwise
        kernel.set_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, hint)
    if shared_kib << 10 > 48 << 10:                           # above 48 KB a kernel must opt in
        kernel.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_kib << 10)
    return kernel


def chase_with_shared(kernel, chain_gpu, start: int, warm: int, steps: int, out, shared_bytes: int,
                      limit: int) -> None:
    """pointer_chase's launch, with shared_bytes of dynamic shared memory
    set aside for the block (the kernel does not use it): an order."""
    cb.check_array("chain", chain_gpu, dtype=np.uint32, ndim=1, on_device=True)
    cb.check_size("warm", warm, low=0)
    cb.check_size("steps", steps)
    cb.check_size("shared_bytes", shared_bytes, low=0, high=limit)
    if not 0 <= start < chain_gpu.size:
        raise ValueError(f"start: expected an index below {chain_gpu.size:,}, got {start}")
    last, cycles, ns = out
    kernel.prepared_call((1, 1, 1), (1, 1, 1), chain_gpu.gpudata, np.uint32(start), np.int32(warm),
                         np.int32(steps), last.gpudata, cycles.gpudata, ns.gpudata, shared_size=shared_bytes)


def l1_at_most(shared_kib: int, hint: int | None, reserved_kib: int, max_shared_kib: int) -> int:
    """The most the L1 can keep (compute capability 9.0): the SRAM less the
    smallest carve-out that holds the block's shared memory and, if the
    driver follows the hint, the hinted share."""
    need = max(shared_kib + reserved_kib, (hint or 0) * max_shared_kib / 100)
    return SRAM_KIB - min(c for c in CARVEOUTS_KIB if c >= need)


def largest_at_l1(cycles: dict[int, float], l1_cycles: float) -> int:
    """The largest chain (KiB) before the first one slower than 1.5x the
    L1's latency: the last size the L1 still served."""
    fit = 0
    for kib in sorted(cycles):
        if cycles[kib] > 1.5 * l1_cycles:
            break
        fit = kib
    return fit
# --8<-- [end:solution]


def run_one(kernel, kib: int, setting: str, seed: int, limit: int) -> float:
    """One chain of kib KiB in one setting: cycles per dependent load."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    chain, start = pc.make_chain(kib << 10, seed)
    warm, steps = min(chain.size // pc.LINE, pc.WARM_MAX), pc.TIMED
    out = (gpuarray.empty(1, np.uint32), gpuarray.empty(1, np.int64), gpuarray.empty(1, np.int64))
    chase_with_shared(kernel, gpuarray.to_gpu(chain), start, warm, steps, out, SETTINGS[setting][0] << 10, limit)
    cuda.Context.synchronize()
    got, want = int(out[0].get()[0]), pc.follow(chain, start, warm + steps)
    cb.report_check(cb.expect(f"chain end, {kib} KiB, {setting}", got == want, f"GPU {got}, host {want}"))
    return int(out[1].get()[0]) / steps


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    import pycuda.driver as cuda

    get, attr = gpu.device.get_attribute, cuda.device_attribute
    limit = get(attr.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    reserved_kib = get(attr.RESERVED_SHARED_MEMORY_PER_BLOCK) // 1024
    max_shared_kib = get(attr.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) // 1024
    settings = {s: v for s, v in SETTINGS.items() if v[0] << 10 <= limit}
    if len(settings) < len(SETTINGS):
        print(f"this GPU allows at most {limit // 1024} KiB of shared memory per block: "
              f"skipping {[s for s in SETTINGS if s not in settings]}")
    kernels = {s: load_kernel(*v) for s, v in settings.items()}
    for s, kernel in kernels.items():
        for kib in CHECK_KIB:
            run_one(kernel, kib, s, args.seed, limit)
    if args.bench:
        cb.gpu_alone()                                        # the chains time themselves
        cycles = {s: {kib: run_one(kernels[s], kib, s, args.seed + k, limit) for k, kib in enumerate(SWEEP_KIB)}
                  for s in settings}
        l1 = min(min(c.values()) for c in cycles.values())
        fit = {s: largest_at_l1(cycles[s], l1) for s in settings}
        bound = {s: l1_at_most(*settings[s], reserved_kib, max_shared_kib) for s in settings} \
            if gpu.compute_capability == (9, 0) else {}
        print(f"{'setting':22s}" + "".join(f"{s:>10}" for s in settings))
        print(f"{'L1 at most (KiB)':22s}" + "".join(f"{bound.get(s, '?'):>10}" for s in settings))
        print("working set           cycles per dependent load")
        for kib in SWEEP_KIB:
            print(f"{f'{kib} KiB':>11}{'':11s}" + "".join(f"{cycles[s][kib]:10.0f}" for s in settings))
        print(f"{'largest at L1 (KiB)':22s}" + "".join(f"{fit[s]:>10}" for s in settings))
        facts = {f"fit_kib_{s}": fit[s] for s in settings} | {f"bound_kib_{s}": b for s, b in bound.items()}
        if "shared200" in settings:
            cb.report_check(cb.expect("200 KiB of shared memory moves the L1 step down",
                                      fit["shared200"] < fit["default"],
                                      f"{fit['default']} KiB by default, {fit['shared200']} KiB"), timing=True)
        hints = [s for s in settings if settings[s][1] is not None]
        if bound and hints:
            followed = all(fit[s] <= bound[s] for s in hints)
            facts["hint_verdict"] = "followed" if followed else "did not follow"
            print(f"the driver {facts['hint_verdict']} the carve-out hints")
        cb.report_facts(**facts, l1_cycles=l1, reserved_kib=reserved_kib, max_shared_kib=max_shared_kib,
                        rows=[{"kib": kib, **{s: cycles[s][kib] for s in settings}} for kib in SWEEP_KIB])
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
