"""A bandwidth meter: how fast bytes move between RAM and VRAM, and within VRAM.

Times five kinds of copy, each of 256 MiB, with CUDA events: host to
device (H2D) and device to host (D2H) from ordinary pageable host memory and
from pinned (page-locked) host memory, and device to device (D2D). Each rate
is the median of as many copies as fit in 100 ms, and at least 10. Compares the first
four with the nominal peak of the link between CPU and GPU (PCIe generation
and width, as nvidia-smi reports them) and D2D with the peak of the GPU's
memory (memory clock x bus width).

Run:    python code/ram_vram/bandwidth_meter.py [--seed S]
Checks: every copy delivers exactly the bytes that were sent (a round trip
        through each kind of host memory, compared bit for bit).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

NBYTES = 256 << 20
# GB/s per lane, after line encoding, by PCIe generation (PCI-SIG): gens 1-2
# use 8b/10b, 3 and later 128b/130b; gen 6 is FLIT-mode, quoted at 8 GB/s.
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def link_nominal():
    """(generation, width, GB/s per direction) of the GPU's PCIe link, or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    r = subprocess.run([smi, "--id=0", "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    try:
        gen, width = (int(v) for v in r.stdout.strip().split(","))
    except ValueError:
        return None
    return gen, width, PCIE_LANE_GBS.get(gen, 0) * width


def hbm_nominal(device):
    import pycuda.driver as cuda

    a = cuda.device_attribute
    clock_khz = device.get_attribute(a.MEMORY_CLOCK_RATE)
    bus_bits = device.get_attribute(a.GLOBAL_MEMORY_BUS_WIDTH)
    return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9  # two transfers per clock


# --8<-- [start:measure]
def measure(copy, nbytes):
    """GB/s of `copy()`, which moves nbytes, from the median of many runs."""
    t = cb.bench(copy, working_set_bytes=nbytes)
    return nbytes / (t.median_ms * 1e-3) / 1e9


def buffers(nbytes=NBYTES, seed=0):
    """The same data in pageable and in pinned host memory, and two device buffers."""
    import pycuda.driver as cuda

    rng = np.random.default_rng(seed)
    pageable = rng.standard_normal(nbytes // 4, dtype=np.float32)  # ordinary NumPy memory
    pinned = cuda.pagelocked_empty(pageable.size, np.float32)  # page-locked: the GPU can DMA it
    pinned[:] = pageable
    return pageable, pinned, cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)


def meter(pageable, pinned, dev_a, dev_b):
    """GB/s of each kind of copy, between these buffers."""
    import pycuda.driver as cuda

    nbytes = pageable.nbytes
    return {
        "h2d_pageable": measure(lambda: cuda.memcpy_htod(dev_a, pageable), nbytes),
        "h2d_pinned": measure(lambda: cuda.memcpy_htod(dev_a, pinned), nbytes),
        "d2h_pageable": measure(lambda: cuda.memcpy_dtoh(pageable, dev_a), nbytes),
        "d2h_pinned": measure(lambda: cuda.memcpy_dtoh(pinned, dev_a), nbytes),
        # D2D reads and writes every byte: count both, as for any kernel.
        "d2d": 2 * measure(lambda: cuda.memcpy_dtod(dev_b, dev_a, nbytes), nbytes),
    }
# --8<-- [end:measure]


def round_trips(seed):
    """Correctness: fresh data sent through pageable and through pinned host
    memory to the GPU, across it, and back, compared bit for bit. In buffers
    of its own, before the timing: it measures nothing, so it need not keep
    the machine from other work."""
    import pycuda.driver as cuda

    sent = np.random.default_rng(seed).standard_normal(NBYTES // 4, dtype=np.float32)
    dev_a, dev_b = cuda.mem_alloc(NBYTES), cuda.mem_alloc(NBYTES)
    for name, host in (("pageable", np.empty_like(sent)),
                       ("pinned", cuda.pagelocked_empty(sent.size, np.float32))):
        host[:] = sent
        cuda.memcpy_htod(dev_a, host)
        cuda.memcpy_dtod(dev_b, dev_a, NBYTES)
        host[:] = np.nan
        cuda.memcpy_dtoh(host, dev_b)
        cb.report_check(cb.compare(f"round trip through {name} memory", host, sent, k=0))
    dev_a.free()
    dev_b.free()


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    gpu = cb.init()

    link = link_nominal()               # asked before the machine is ours: it measures nothing
    hbm = hbm_nominal(gpu.device)
    round_trips(args.seed + 1)
    bufs = buffers(seed=args.seed)      # made, like the check, before the machine is ours
    cb.gpu_alone()                      # it measures the hardware: nothing else may run
    results = meter(*bufs)

    facts = {f"{k}_gbs": v for k, v in results.items()}
    print(f"{'copy (256 MiB)':<16}{'GB/s':>10}  share of nominal")
    for k, v in results.items():
        peak = hbm if k == "d2d" else (link[2] if link else None)
        share = f"{100 * v / peak:5.1f}% of {peak:,.0f} GB/s" if peak else "(link unknown)"
        print(f"{k:<16}{v:10.1f}  {share}")
    print(f"pinned over pageable: H2D {results['h2d_pinned'] / results['h2d_pageable']:.1f}x, "
          f"D2H {results['d2h_pinned'] / results['d2h_pageable']:.1f}x")
    if link:
        print(f"link: PCIe gen {link[0]} x{link[1]}, nominal {link[2]:.1f} GB/s each way")
        facts.update(pcie_gen=link[0], pcie_width=link[1], link_nominal_gbs=link[2],
                     h2d_pinned_share=results["h2d_pinned"] / link[2],
                     d2h_pinned_share=results["d2h_pinned"] / link[2])
    print(f"HBM: nominal {hbm:,.0f} GB/s (memory clock x bus width)")
    facts.update(hbm_nominal_gbs=hbm, d2d_share=results["d2d"] / hbm,
                 d2d_over_h2d_pinned=results["d2d"] / results["h2d_pinned"])
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
