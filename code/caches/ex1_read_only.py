"""Solution to exercise 1: what __restrict__ and __ldg change in a read.

read_staircase's read_sum declares its buffer `const uint4* __restrict__`,
a promise that nothing the kernel writes overlaps it. read_promise is
read_sum with its plain loop (one load a trip, unrolled by the compiler,
not by hand); read_plain drops the promise; read_ldg drops it too but
loads with __ldg; read_rolled keeps it but forbids unrolling its loop. The listing asks nvcc for the PTX of each
kernel and prints its loads: ld.global.nc, the read-only (non-coherent)
path, appears only where the promise or __ldg allows it. (Under --bench,
where cuobjdump is installed, it prints the machine instructions too.)
Then it times the four kernels on a buffer that the SMs' L1 caches hold
and on one that must come from HBM, and pointer_chase's chain with and
without the promise.

Run:    python code/caches/ex1_read_only.py [--seed S] [--bench]
Checks: every kernel's per-warp partials add up to passes x the buffer's
        sum modulo 2^32 (every warp's partial written),
        and every chain ends where the host's does (exact); each kernel's
        PTX loads are ld.global.nc exactly where __restrict__ or __ldg
        allow it.
Bench:  GB/s of the four read kernels at 24 MiB and 512 MiB (2 GiB read per
        measurement, as in read_staircase), each as a share of read_promise's,
        and cycles per dependent load of
        chase and chase_plain at 16 KiB (L1) and 4 MiB (L2).
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and the chapter's listings
import cudabook as cb  # noqa: E402
import pointer_chase as pc  # noqa: E402
import read_staircase as rs  # noqa: E402
from cudabook.compile import NVCC_FLAGS, nvcc_command  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
# Each kernel, the file it lives in, what it promises, and the load the promise allows.
READS = {"read_plain": (KERNEL_FILE, "none", "ld.global"),
         "read_promise": (KERNEL_FILE, "__restrict__", "ld.global.nc"),
         "read_ldg": (KERNEL_FILE, "__ldg", "ld.global.nc"),
         "read_rolled": (KERNEL_FILE, "__restrict__", "ld.global.nc")}
CHASES = {"chase_plain": (KERNEL_FILE, "none", "ld.global"),
          "chase": (pc.KERNEL_FILE, "__restrict__", "ld.global.nc")}
CHECK_SIZES = [(1 << 10) + 16, (20 << 20) + 16]    # bytes; the second gives each thread 4+ loads a pass
BUFFERS = {"l1": 24 << 20, "hbm": 512 << 20}        # in read_staircase's L1 plateau; 8x the L2
CHAINS = {"l1": 16 << 10, "l2": 4 << 20}            # pointer_chase's L1 and L2 steps


def load_kernels() -> tuple[dict, dict]:
    module = cb.compile(KERNEL_FILE)
    reads = {name: module.get_function(name).prepare("PqiP") for name in READS}
    chases = {"chase_plain": module.get_function("chase_plain").prepare("PIiiPPP"), "chase": pc.load_kernel()}
    return reads, chases


# --8<-- [start:solution]
def ptx_loads(cu_file: Path, arch: str) -> dict[str, list[str]]:
    """The global loads in the PTX of each kernel of cu_file, for example
    {"read_sum": ["ld.global.nc.v4.u32", ...]}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kernels.ptx"
        r = subprocess.run([cb.find_nvcc(), "--ptx", f"-arch={arch}", *NVCC_FLAGS, str(cu_file), "-o", str(out)],
                           capture_output=True, text=True, check=False)
        if r.returncode:
            raise cb.KernelCompileError(f"nvcc --ptx failed on {cu_file}:\n{r.stderr}")
        text = out.read_text()
    return {chunk.split("(", 1)[0].strip(): re.findall(r"\bld\.global[.\w]*", chunk)
            for chunk in text.split(".entry ")[1:]}


def sass_loads(cu_file: Path, arch: str) -> dict[str, list[str]] | None:
    """The same from the machine code (cuobjdump -sass), or None where
    cuobjdump is not installed."""
    nvcc = cb.find_nvcc()
    cuobjdump = shutil.which("cuobjdump") or str(Path(nvcc).parent / "cuobjdump")
    if not Path(cuobjdump).is_file():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernels.cubin"
        subprocess.run(nvcc_command(cu_file, arch, cubin, nvcc), capture_output=True, check=True)
        text = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return {chunk.split("\n", 1)[0].strip(): re.findall(r"\bLDG(?![A-Z])(?:\.\w+)*", chunk)
            for chunk in text.split("Function : ")[1:]}


def show_loads(arch: str, machine_code: bool) -> dict:
    """Print each kernel's loads (with machine_code, the SASS too) and check
    that the read-only path appears exactly where a promise allows it.
    Returns the PTX load counts."""
    kernels = {**READS, **CHASES}
    files = sorted({f for f, _, _ in kernels.values()})
    ptx = {k: v for f in files for k, v in ptx_loads(f, arch).items()}
    sass = [sass_loads(f, arch) for f in files] if machine_code else [None]
    sass = None if None in sass else {k: v for s in sass for k, v in s.items()}
    print("kernel        promise        PTX loads               SASS loads")
    for name, (_, promise, want) in kernels.items():
        forms = sorted(set(ptx[name]))
        paths = {"ld.global.nc" if ".nc" in f else "ld.global" for f in forms}
        machine = ", ".join(sorted(set(sass[name]))) if sass else "-"
        print(f"{name:12s}  {promise:13s}  {', '.join(forms) + f' x{len(ptx[name])}':22s}  {machine}")
        cb.report_check(cb.expect(f"{name}: loads are {want}", paths == {want}, ", ".join(forms)))
    return {f"ptx_loads_{name}": len(ptx[name]) for name in kernels}
# --8<-- [end:solution]


def read_check(kernels: dict, nbytes: int, passes: int, seed: int, sm_count: int) -> None:
    from pycuda import gpuarray

    host = np.random.default_rng(seed).integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    want = (passes * int(host.sum(dtype=np.uint64))) % 2**32
    x = gpuarray.to_gpu(host)
    for name, kernel in kernels.items():
        partials = gpuarray.empty(8 * sm_count * rs.BLOCK // 32, np.uint32)
        cb.poison(partials)                                     # a warp that writes nothing shows
        rs.read_sum(kernel, x, passes, partials, sm_count)
        got = rs.total(partials, x.size // 4, sm_count)
        cb.report_check(cb.expect(f"{name}: {nbytes:,} bytes x {passes}", got == want, f"GPU {got}, host {want}"))


def chase_cycles(kernel, name: str, nbytes: int, seed: int) -> float:
    """pointer_chase's measurement for one kernel: cycles per dependent load."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    chain, start = pc.make_chain(nbytes, seed)
    warm, steps = min(chain.size // pc.LINE, pc.WARM_MAX), pc.TIMED
    out = (gpuarray.empty(1, np.uint32), gpuarray.empty(1, np.int64), gpuarray.empty(1, np.int64))
    pc.chase(kernel, gpuarray.to_gpu(chain), start, warm, steps, out)
    cuda.Context.synchronize()
    got, want = int(out[0].get()[0]), pc.follow(chain, start, warm + steps)
    cb.report_check(cb.expect(f"{name}: chain end, {nbytes:,} bytes", got == want, f"GPU {got}, host {want}"))
    return int(out[1].get()[0]) / steps


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    reads, chases = load_kernels()
    facts = show_loads(gpu.arch, machine_code=args.bench)
    for k, nbytes in enumerate(CHECK_SIZES):
        read_check(reads, nbytes, 3, args.seed + k, gpu.sm_count)
    for name, kernel in chases.items():
        chase_cycles(kernel, name, 1 << 20, args.seed)
    if args.bench:
        from pycuda import gpuarray

        cb.gpu_alone()                                          # the chains time themselves
        for where, nbytes in BUFFERS.items():
            x = gpuarray.to_gpu(np.random.default_rng(args.seed).integers(0, 2**32, nbytes // 4, dtype=np.uint32))
            partials = gpuarray.empty(8 * gpu.sm_count * rs.BLOCK // 32, np.uint32)
            passes = max(1, rs.READ_PER_POINT // nbytes)
            for name, kernel in reads.items():
                t = cb.bench(lambda k=kernel, x=x, p=passes: rs.read_sum(k, x, p, partials, gpu.sm_count),
                             working_set_bytes=passes * nbytes)
                facts[f"{where}_{name}_gbs"] = passes * nbytes / (t.median_ms * 1e6)
            for name in reads:
                facts[f"{where}_{name}_share"] = facts[f"{where}_{name}_gbs"] / facts[f"{where}_read_promise_gbs"]
            del x
        for where, nbytes in CHAINS.items():
            for name, kernel in chases.items():                 # the same chain for both
                facts[f"{where}_{name}_cycles"] = chase_cycles(kernel, name, nbytes, args.seed)
        sizes = [f"{b >> 20} MiB" for b in BUFFERS.values()]
        print(f"L2: {gpu.l2_bytes / 2**20:.0f} MiB")
        print(f"kernel        {sizes[0]:>8} GB/s  share  {sizes[1]:>8} GB/s  share")
        for name in reads:
            print(f"{name:12s}  {facts[f'l1_{name}_gbs']:13,.0f}  {facts[f'l1_{name}_share']:5.2f}"
                  f"  {facts[f'hbm_{name}_gbs']:13,.0f}  {facts[f'hbm_{name}_share']:5.2f}")
        print("chain         16 KiB cycles/load  4 MiB cycles/load")
        for name in chases:
            print(f"{name:12s}  {facts[f'l1_{name}_cycles']:18.0f}  {facts[f'l2_{name}_cycles']:17.0f}")
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
