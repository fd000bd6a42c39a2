"""Occupancy: predicted by hand, confirmed by the driver, measured in GB/s.

A memory-bound kernel (y = a * x + b, grid-stride, one load in flight per
thread) is launched with block sizes from 32 to 1,024 threads and with 0,
24, 48 or 100 KB of dynamic shared memory per block, memory it does not use
but that the SM must set aside. For every configuration the listing
predicts how many blocks fit on one SM twice: with the formula of the
chapter (limits from threads, blocks, registers and shared memory, read
from the device's attributes and the kernel's register count), and with the
CUDA driver's own occupancy calculator,
cuOccupancyMaxActiveBlocksPerMultiprocessor, called through ctypes.
Each configuration is launched with exactly that many blocks per SM: one
full wave, every block resident from start to end. So the occupancy is the
only thing that differs between two launches, not the number of blocks the
block scheduler must start (at most 32 per SM).

Run:    python code/threads_warps/occupancy_sweep.py [--n N] [--seed S] [--bench]
Checks: the formula agrees with the driver for every configuration; the
        kernel's register count as PyCUDA and the driver see it agree; y from
        the lowest- and highest-occupancy configurations against a float64
        NumPy a * x + b, every element within 2 roundings of its terms (k=2,
        scale |a x| + |b|).
Bench:  GB/s of every configuration at n = 2**27 (bytes = 8n), beside its
        predicted occupancy and its bytes in flight; a table and the best and
        worst cases in facts.
"""

import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
KERNEL = "axpb"
BLOCK_SIZES = [32, 64, 128, 256, 512, 1024]
SHARED_KB = [0, 24, 48, 100]        # dynamic shared memory per block, KiB
A, B = np.float32(1.5), np.float32(-0.25)

# Not device attributes: fixed by the architecture (CUDA occupancy calculator,
# cuda_occupancy.h) for compute capability 7.0 to 12.x.
REG_ALLOC_UNIT = 256    # registers are given to a warp in chunks of 256
SUB_PARTITIONS = 4      # the register file is split among an SM's 4 warp schedulers
SMEM_ALLOC_UNIT = 128   # shared memory is given to a block in chunks of 128 bytes (cc 8.x+)


def reference(x):
    y = np.multiply(x, np.float64(A), dtype=np.float64)
    y += np.float64(B)
    return y


def round_up(x, unit):
    return cb.ceil_div(x, unit) * unit


# --8<-- [start:limits]
def sm_limits(gpu):
    """What one SM offers, as the driver reports it."""
    import pycuda.driver as cuda

    a = cuda.device_attribute
    get = gpu.device.get_attribute
    return dict(warp_size=get(a.WARP_SIZE),
                threads=get(a.MAX_THREADS_PER_MULTIPROCESSOR),       # 2,048 on an H200
                blocks=get(a.MAX_BLOCKS_PER_MULTIPROCESSOR),         # 32
                registers=get(a.MAX_REGISTERS_PER_MULTIPROCESSOR),   # 65,536
                shared=get(a.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),  # 233,472 (228 KB)
                reserved=get(a.RESERVED_SHARED_MEMORY_PER_BLOCK))    # 1,024 per block
# --8<-- [end:limits]


# --8<-- [start:formula]
def predict(sm, num_regs, static_shared, block, dynamic_shared):
    """Blocks of `block` threads that fit on one SM, and which limit binds."""
    warps = cb.ceil_div(block, sm["warp_size"])               # a block takes whole warps
    regs_per_warp = round_up(num_regs * sm["warp_size"], REG_ALLOC_UNIT)
    warps_by_regs = (sm["registers"] // SUB_PARTITIONS // regs_per_warp) * SUB_PARTITIONS
    shared = round_up(static_shared + dynamic_shared + sm["reserved"], SMEM_ALLOC_UNIT)
    limits = {
        "threads": (sm["threads"] // sm["warp_size"]) // warps,
        "blocks": sm["blocks"],
        "registers": warps_by_regs // warps,
        "shared memory": sm["shared"] // shared,
    }
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter
# --8<-- [end:formula]


# --8<-- [start:driver]
class DriverOccupancy:
    """The CUDA driver's occupancy calculator for one kernel of a cubin,
    through ctypes (PyCUDA does not wrap it). Uses the current context."""

    def __init__(self, cubin: bytes, name: str, max_dynamic_shared: int):
        c = ctypes
        self.lib = lib = c.CDLL("libcuda.so.1")               # the driver PyCUDA uses too
        lib.cuGetErrorName.argtypes = [c.c_int, c.POINTER(c.c_char_p)]
        lib.cuModuleLoadData.argtypes = [c.POINTER(c.c_void_p), c.c_char_p]
        lib.cuModuleGetFunction.argtypes = [c.POINTER(c.c_void_p), c.c_void_p, c.c_char_p]
        lib.cuFuncSetAttribute.argtypes = [c.c_void_p, c.c_int, c.c_int]
        lib.cuFuncGetAttribute.argtypes = [c.POINTER(c.c_int), c.c_int, c.c_void_p]
        lib.cuOccupancyMaxActiveBlocksPerMultiprocessor.argtypes = [
            c.POINTER(c.c_int), c.c_void_p, c.c_int, c.c_size_t]
        lib.cuModuleUnload.argtypes = [c.c_void_p]
        self.module, self.func = c.c_void_p(), c.c_void_p()
        self._ok(lib.cuModuleLoadData(c.byref(self.module), cubin), "cuModuleLoadData")
        self._ok(lib.cuModuleGetFunction(c.byref(self.func), self.module, name.encode()),
                 "cuModuleGetFunction")
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # needed above 48 KB
        self._ok(lib.cuFuncSetAttribute(self.func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        max_dynamic_shared), "cuFuncSetAttribute")

    def _ok(self, result: int, call: str) -> None:
        if result != 0:                                       # CUDA_SUCCESS
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"{call} failed: {(name.value or b'?').decode()} ({result})")

    def num_regs(self) -> int:
        CU_FUNC_ATTRIBUTE_NUM_REGS = 4
        v = ctypes.c_int()
        self._ok(self.lib.cuFuncGetAttribute(ctypes.byref(v), CU_FUNC_ATTRIBUTE_NUM_REGS, self.func),
                 "cuFuncGetAttribute")
        return v.value

    def blocks_per_sm(self, block: int, dynamic_shared: int) -> int:
        v = ctypes.c_int()
        self._ok(self.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(v), self.func, block, dynamic_shared),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return v.value

    def close(self) -> None:
        self._ok(self.lib.cuModuleUnload(self.module), "cuModuleUnload")
# --8<-- [end:driver]


def cubin_for(gpu) -> bytes:
    """The kernel compiled the way cb.compile does it, as cubin bytes."""
    from pycuda.compiler import compile as nvcc_compile

    path = KERNEL_FILE.resolve()
    source = f'#line 1 "{path}"\n' + path.read_text()
    return nvcc_compile(source, options=list(cb.NVCC_FLAGS), arch=gpu.arch, no_extern_c=True,
                        include_dirs=[str(path.parent)])


def launch(kernel, x, y, block, shared_bytes, grid):
    """y = a * x + b with `grid` blocks of `block` threads, each asking for
    shared_bytes of dynamic shared memory."""
    cb.check_array("x", x, dtype=np.float32, ndim=1, on_device=True)
    n = cb.check_size("x.size", x.size)
    cb.check_array("y", y, dtype=np.float32, shape=(n,), on_device=True)
    grid = cb.check_size("grid", grid)
    kernel.prepared_call((grid, 1, 1), (block, 1, 1), x.gpudata, y.gpudata,
                         A, B, np.int32(n), shared_size=shared_bytes)


def check(name, y, x):
    scale = np.multiply(np.abs(x), np.float64(abs(A)), dtype=np.float64)
    scale += abs(float(B))
    return cb.compare(name, y, reference(x), k=2, scale=scale)


def configurations(sm, num_regs, static_shared, driver):
    rows = []
    for kb in SHARED_KB:
        for block in BLOCK_SIZES:
            blocks, limiter = predict(sm, num_regs, static_shared, block, 1024 * kb)
            warps = blocks * cb.ceil_div(block, sm["warp_size"])
            rows.append(dict(block=block, shared_kb=kb, blocks_per_sm=blocks, limiter=limiter,
                             warps_per_sm=warps, occupancy=warps / (sm["threads"] // sm["warp_size"]),
                             driver_blocks_per_sm=driver.blocks_per_sm(block, 1024 * kb)))
    return rows


# --8<-- [start:bench]
def measure(rows, kernel, x, y, sm_count):
    """Add each configuration's bandwidth (GB/s, 8 bytes per element) to its
    row, launched as one full wave: blocks_per_sm blocks on every SM."""
    for r in rows:
        grid = r["driver_blocks_per_sm"] * sm_count
        t = cb.bench(lambda r=r: launch(kernel, x, y, r["block"], 1024 * r["shared_kb"], grid),
                     working_set_bytes=8 * x.size, budget_ms=40)
        r["grid"] = grid
        r["gbs"] = 8 * x.size / (t.median_ms * 1e-3) / 1e9
        r["bytes_in_flight_per_sm"] = 4 * r["warps_per_sm"] * 32   # one 4-byte load per thread
# --8<-- [end:bench]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=2**27)
    n = args.n
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, n).astype(np.float32)

    gpu = cb.init()
    import pycuda.driver as cuda
    from pycuda import gpuarray

    kernel = cb.compile(KERNEL_FILE).get_function(KERNEL)
    max_shared = 1024 * max(SHARED_KB)
    kernel.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, max_shared)
    kernel.prepare("PPffi")
    driver = DriverOccupancy(cubin_for(gpu), KERNEL, max_shared)
    sm = sm_limits(gpu)

    regs = kernel.num_regs
    # Under compute-sanitizer (CUDABOOK_SANITIZER, set by the book's test suite)
    # the driver sees an instrumented kernel, with more registers: the
    # comparisons with the driver are printed but not enforced (timing=True).
    cb.report_check(cb.expect("registers per thread: PyCUDA = driver", regs == driver.num_regs(),
                              f"{regs} and {driver.num_regs()}", n=n), timing=True)
    rows = configurations(sm, regs, kernel.shared_size_bytes, driver)
    driver.close()
    differ = [r for r in rows if r["blocks_per_sm"] != r["driver_blocks_per_sm"]]
    cb.report_check(cb.expect("blocks per SM: formula = driver, every configuration", not differ,
                              f"{len(rows) - len(differ)} of {len(rows)} agree"
                              + "".join(f"; {r['block']} threads, {r['shared_kb']} KB: formula "
                                        f"{r['blocks_per_sm']}, driver {r['driver_blocks_per_sm']}"
                                        for r in differ[:4]), n=n), timing=True)

    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    for r in (min(rows, key=lambda r: r["occupancy"]), max(rows, key=lambda r: r["occupancy"])):
        cb.poison(y_gpu)
        launch(kernel, x_gpu, y_gpu, r["block"], 1024 * r["shared_kb"], r["driver_blocks_per_sm"] * gpu.sm_count)
        cb.report_check(check(f"y = a*x + b ({r['block']} threads, {r['shared_kb']} KB)", y_gpu.get(), x))

    print(f"{gpu.name}, per SM: {sm['threads']} threads, {sm['blocks']} blocks, "
          f"{sm['registers']:,} registers,\n  {sm['shared']:,} B shared memory "
          f"({sm['reserved']} B reserved per block);\n  kernel: {regs} registers per thread")
    if args.bench:
        measure(rows, kernel, x_gpu, y_gpu, gpu.sm_count)
    print(f"{'threads':>7} {'shared':>7} {'blocks/SM':>9} {'warps/SM':>8} {'occup.':>6}  limited by"
          + ("      GB/s" if args.bench else ""))
    for r in rows:
        print(f"{r['block']:>7} {r['shared_kb']:>4} KB {r['blocks_per_sm']:>9} {r['warps_per_sm']:>8} "
              f"{100 * r['occupancy']:>5.1f}%  {r['limiter']:<13}"
              + (f" {r['gbs']:7.0f}" if args.bench else ""))
    facts = dict(num_regs=regs, configurations=len(rows), table=rows,
                 sm_threads=sm["threads"], sm_blocks=sm["blocks"], sm_registers=sm["registers"],
                 sm_shared=sm["shared"], reserved_shared=sm["reserved"])
    if args.bench:
        best = max(rows, key=lambda r: r["gbs"])
        worst = min(rows, key=lambda r: r["gbs"])
        enough = min((r for r in rows if r["gbs"] >= 0.9 * best["gbs"]), key=lambda r: r["occupancy"])
        for name, r in (("best", best), ("worst", worst), ("enough", enough)):
            facts.update({f"{name}_gbs": r["gbs"], f"{name}_occupancy": r["occupancy"],
                          f"{name}_block": r["block"], f"{name}_shared_kb": r["shared_kb"]})
        full = next(r for r in rows if r["block"] == 256 and r["shared_kb"] == 0)
        cb.benchmark("axpb, 256 threads, 0 KB", lambda: launch(kernel, x_gpu, y_gpu, 256, 0, full["grid"]),
                     bytes_moved=8 * n)
    cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
