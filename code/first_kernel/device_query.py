"""Device query: the numbers of your GPU that this chapter talks about.

Prints the GPU's name and compute capability, how many streaming
multiprocessors (SMs) it has, the warp size, clocks, memory size and bus,
the L2 cache, and the shared memory and registers each SM and each block may
use. The memory bandwidth printed is the datasheet-style peak computed from
the memory clock and bus width; the vector-add listings measure the real one.

Run:    python code/first_kernel/device_query.py
Checks: the driver answered every attribute asked for (the GPU tests also
        compare these values with torch.cuda and nvidia-smi).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402


# --8<-- [start:query]
def query(device) -> dict:
    """Read the device's attributes through the CUDA driver API."""
    import pycuda.driver as cuda

    attr = cuda.device_attribute

    def get(name):
        # Some attributes are absent from older or newer CUDA versions.
        return device.get_attribute(getattr(attr, name)) if hasattr(attr, name) else None

    major, minor = device.compute_capability()
    facts = {
        "name": device.name(),
        "compute_capability": f"{major}.{minor}",
        "sm_count": get("MULTIPROCESSOR_COUNT"),
        "warp_size": get("WARP_SIZE"),
        "sm_clock_mhz": (get("CLOCK_RATE") or 0) / 1000,
        "memory_clock_mhz": (get("MEMORY_CLOCK_RATE") or 0) / 1000,
        "memory_bus_bits": get("GLOBAL_MEMORY_BUS_WIDTH"),
        "total_memory_bytes": device.total_memory(),
        "l2_bytes": get("L2_CACHE_SIZE"),
        "shared_memory_per_sm_bytes": get("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        "shared_memory_per_block_bytes": get("MAX_SHARED_MEMORY_PER_BLOCK"),
        "shared_memory_per_block_optin_bytes": get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        "registers_per_sm": get("MAX_REGISTERS_PER_MULTIPROCESSOR"),
        "registers_per_block": get("MAX_REGISTERS_PER_BLOCK"),
        "max_threads_per_block": get("MAX_THREADS_PER_BLOCK"),
        "max_threads_per_sm": get("MAX_THREADS_PER_MULTIPROCESSOR"),
        "max_blocks_per_sm": get("MAX_BLOCKS_PER_MULTIPROCESSOR"),
    }
    # Double data rate: two transfers per clock, bus width in bits / 8 bytes.
    if facts["memory_clock_mhz"] and facts["memory_bus_bits"]:
        facts["peak_memory_bandwidth_gbs"] = (
            2 * facts["memory_clock_mhz"] * 1e6 * facts["memory_bus_bits"] / 8 / 1e9)
    return facts
# --8<-- [end:query]


def show(facts: dict) -> None:
    mib = 1 << 20
    rows = [
        ("GPU", facts["name"]),
        ("compute capability", facts["compute_capability"]),
        ("streaming multiprocessors (SMs)", facts["sm_count"]),
        ("warp size (threads)", facts["warp_size"]),
        ("max SM clock", f"{facts['sm_clock_mhz']:.0f} MHz"),
        ("max memory clock", f"{facts['memory_clock_mhz']:.0f} MHz"),
        ("memory bus", f"{facts['memory_bus_bits']} bits"),
        ("device memory", f"{facts['total_memory_bytes'] / 2**30:.1f} GiB"),
        ("peak memory bandwidth (clock x bus)",
         f"{facts.get('peak_memory_bandwidth_gbs', 0):.0f} GB/s"),
        ("L2 cache", f"{facts['l2_bytes'] / mib:.1f} MiB"),
        ("shared memory per SM", f"{facts['shared_memory_per_sm_bytes'] // 1024} KiB"),
        ("shared memory per block", f"{facts['shared_memory_per_block_bytes'] // 1024} KiB "
                                    f"({facts['shared_memory_per_block_optin_bytes'] // 1024} KiB opt-in)"),
        ("32-bit registers per SM", facts["registers_per_sm"]),
        ("32-bit registers per block", facts["registers_per_block"]),
        ("max threads per block", facts["max_threads_per_block"]),
        ("max threads per SM", facts["max_threads_per_sm"]),
        ("max blocks per SM", facts["max_blocks_per_sm"]),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main(argv=None) -> int:
    cb.parse_args(argv, __doc__)
    gpu = cb.init()
    facts = query(gpu.device)
    show(facts)
    missing = [k for k, v in facts.items() if v is None]
    cb.report_check(cb.expect("every attribute read", not missing,
                              f"{len(facts) - len(missing)} of {len(facts)}"
                              + (f"; missing {missing}" if missing else "")))
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
