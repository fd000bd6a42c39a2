"""Solution to exercise 3: keep a small tensor in the L2 while others stream past.

An access-policy window asks the L2 to treat one range of addresses as
persisting: its lines live in a set-aside part of the L2 that ordinary
traffic cannot evict. PyCUDA has no call for it, so this listing calls the
CUDA driver itself (through ctypes, in the same context PyCUDA uses):
cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) sizes the set-aside, and
cuStreamSetAttribute(CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW) sets the
window on a stream, for every kernel launched into it afterwards.

The kernel is read_staircase's read_sum, one pass over the tensor. The
timing helper flushes the L2 before every repetition (it reads a buffer
twice the L2's size, outside the timed region): a large stream of other
data passes through the L2 between two reads, the situation a window is
for. A tensor half the set-aside's size is read with and without a window;
one twice its size, without a window, with hitRatio 1, and with hitRatio =
set-aside / window, as the Programming Guide advises.

Run:    python code/caches/ex3_l2_window.py [--seed S] [--bench]
Checks: the warps' partials add up to passes x the tensor's sum modulo
        2^32 (exact),
        with no window, with a window and with hitRatio 0.5; under --bench,
        the window makes the small tensor's reads faster beyond the spread
        of the timings: the 80th percentile of its times with a window
        below the 20th without (a timing check).
Bench:  GB/s of one read of each tensor after the L2 has been flushed, in
        each setting, with the 20th and 80th percentiles of its times; the
        set-aside and window limits the device reports; and, from the two
        sizes' medians without a window, the fixed part of a read's time
        (time = fixed + bytes / rate).
"""

import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and read_staircase
import cudabook as cb  # noqa: E402
import read_staircase as rs  # noqa: E402

MiB = 1 << 20
CHECK_BYTES = MiB + 16
# From cuda.h (CUDA 11.0 and later).
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE = 108
CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE = 109
CU_ACCESS_PROPERTY_STREAMING, CU_ACCESS_PROPERTY_PERSISTING = 1, 2


class AccessPolicyWindow(ctypes.Structure):                   # CUaccessPolicyWindow
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class StreamAttrValue(ctypes.Union):                          # CUstreamAttrValue: 64 bytes
    _fields_ = [("pad", ctypes.c_char * 64), ("accessPolicyWindow", AccessPolicyWindow)]


class Driver:
    """The few CUDA driver calls PyCUDA does not wrap, on PyCUDA's context."""

    def __init__(self):
        self.lib = None
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if self.lib is None:
            raise cb.Unavailable("the CUDA driver library (libcuda) could not be loaded")
        lib = self.lib
        lib.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        lib.cuStreamSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(StreamAttrValue)]
        lib.cuCtxResetPersistingL2Cache.argtypes = []
        lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: {(text.value or b'?').decode()} ({rc})")

    def device_attribute(self, attribute: int, ordinal: int = 0) -> int:
        dev, value = ctypes.c_int(), ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        self.call("cuDeviceGetAttribute", ctypes.byref(value), attribute, dev)
        return value.value

    def persisting_l2(self) -> int:
        value = ctypes.c_size_t()
        self.call("cuCtxGetLimit", ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return value.value


# --8<-- [start:solution]
def set_aside(drv: Driver, nbytes: int) -> int:
    """Set aside nbytes of the L2 for persisting lines (0: none); returns
    what the driver granted."""
    import pycuda.driver as cuda

    cuda.Context.synchronize()
    drv.call("cuCtxSetLimit", CU_LIMIT_PERSISTING_L2_CACHE_SIZE, nbytes)
    return drv.persisting_l2()


def set_window(drv: Driver, stream, x=None, hit_ratio: float = 1.0) -> None:
    """Ask the L2 to keep x's bytes (hit_ratio of its lines persisting, the
    rest streaming) for kernels launched into `stream` from now on; with
    x=None, remove the window and turn every persisting line back to normal."""
    value = StreamAttrValue()
    w = value.accessPolicyWindow
    if x is not None:
        if not 0.0 < hit_ratio <= 1.0:
            raise ValueError(f"hit_ratio: expected a share in (0, 1], got {hit_ratio}")
        w.base_ptr, w.num_bytes, w.hitRatio = int(x.gpudata), x.nbytes, hit_ratio
        w.hitProp, w.missProp = CU_ACCESS_PROPERTY_PERSISTING, CU_ACCESS_PROPERTY_STREAMING
    drv.call("cuStreamSetAttribute", stream.handle, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, ctypes.byref(value))
    if x is None:
        drv.call("cuCtxResetPersistingL2Cache")


def read_on(stream, kernel, x, passes: int, partials, sm_count: int) -> None:
    """read_staircase's read_sum, launched into `stream` (where the window is)."""
    cb.check_array("x", x, dtype=np.uint32, ndim=1, on_device=True, alignment=16)
    if x.size % 4:
        raise ValueError(f"x: size must be a multiple of 4 (16-byte loads), got {x.size:,}")
    cb.check_size("passes", passes)
    n4 = x.size // 4
    blocks = rs.grid(n4, sm_count)
    cb.check_array("partials", partials, dtype=np.uint32, ndim=1, on_device=True)
    if partials.size < blocks * rs.BLOCK // 32:
        raise ValueError(f"partials: expected at least {blocks * rs.BLOCK // 32:,} elements (one per warp), "
                         f"got {partials.size:,}")
    kernel.prepared_async_call((blocks, 1, 1), (rs.BLOCK, 1, 1), stream, x.gpudata, np.int64(n4),
                               np.int32(passes), partials.gpudata)
# --8<-- [end:solution]


def random_words(nbytes: int, seed: int):
    from pycuda import gpuarray

    host = np.random.default_rng(seed).integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    return host, gpuarray.to_gpu(host)


def check(drv, stream, kernel, seed: int, sm_count: int) -> None:
    """The sum is right with and without a window (a window changes where
    data is kept, never what a load returns)."""
    from pycuda import gpuarray

    host, x = random_words(CHECK_BYTES, seed)
    want = (3 * int(host.sum(dtype=np.uint64))) % 2**32
    for label, ratio in (("no window", None), ("window", 1.0), ("window, hitRatio 0.5", 0.5)):
        set_window(drv, stream)
        if ratio is not None:
            set_window(drv, stream, x, ratio)
        partials = gpuarray.empty(8 * sm_count * rs.BLOCK // 32, np.uint32)
        cb.poison(partials)
        read_on(stream, kernel, x, 3, partials, sm_count)
        stream.synchronize()
        got = rs.total(partials, x.size // 4, sm_count)
        cb.report_check(cb.expect(f"{label}: {CHECK_BYTES:,} bytes x 3", got == want, f"GPU {got}, host {want}"))


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    import pycuda.driver as cuda

    drv = Driver()
    most = drv.device_attribute(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE)
    window_max = drv.device_attribute(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE)
    if most == 0 or window_max == 0:
        raise cb.Unavailable("this GPU keeps no persisting lines in its L2 (compute capability 8.0 or "
                             "later, not in MIG mode, is needed)")
    kernel = rs.load_kernels()["read_sum"]
    stream = cuda.Stream()
    granted = set_aside(drv, most)
    try:
        print(f"L2: {gpu.l2_bytes / MiB:.0f} MiB; persisting set-aside: at most {most / MiB:.1f} MiB, "
              f"granted {granted / MiB:.1f} MiB; window: at most {window_max / MiB:.1f} MiB")
        check(drv, stream, kernel, args.seed, gpu.sm_count)
        if args.bench:
            cb.gpu_alone()
            from pycuda import gpuarray

            small = max(MiB, granted // 2 // MiB * MiB)             # fits the set-aside twice over
            large = min(2 * granted, window_max) // MiB * MiB       # does not fit it
            ratio = min(1.0, granted / large)                       # the share of the window that fits
            cases = {"small_none": ("small", None), "small_full": ("small", 1.0), "large_none": ("large", None),
                     "large_full": ("large", 1.0), "large_ratio": ("large", ratio)}
            tensors = {"small": random_words(small, args.seed)[1], "large": random_words(large, args.seed + 1)[1]}
            partials = gpuarray.empty(8 * gpu.sm_count * rs.BLOCK // 32, np.uint32)
            facts = {"l2_bytes": gpu.l2_bytes, "most_persisting_bytes": most, "granted_bytes": granted,
                     "window_max_bytes": window_max, "small_bytes": small, "large_bytes": large,
                     "hit_ratio": ratio}
            print("tensor          window                 GB/s   time (us): p20  median     p80")
            for key, (name, hit) in cases.items():
                x = tensors[name]
                set_window(drv, stream)
                if hit is not None:
                    set_window(drv, stream, x, hit)
                t = cb.bench(lambda x=x: read_on(stream, kernel, x, 1, partials, gpu.sm_count), working_set_bytes=x.nbytes)
                if not t.l2_flushed:
                    raise RuntimeError("cb.bench did not flush the L2 between reads: nothing streamed past")
                facts[f"{key}_gbs"] = x.nbytes / (t.median_ms * 1e6)
                facts[f"{key}_p20_us"], facts[f"{key}_p80_us"] = 1e3 * t.p20_ms, 1e3 * t.p80_ms
                window = "none" if hit is None else f"hitRatio {hit:.2f}"
                print(f"{name} {x.nbytes // MiB:4d} MiB   {window:20s} {facts[f'{key}_gbs']:7,.0f}"
                      f"             {facts[f'{key}_p20_us']:6.2f}  {1e3 * t.median_ms:6.2f}"
                      f"  {facts[f'{key}_p80_us']:6.2f}")
            for key in ("small_full", "large_full", "large_ratio"):
                facts[f"{key}_gain"] = facts[f"{key}_gbs"] / facts[f"{key.split('_')[0]}_none_gbs"]
            # Without a window both sizes come from HBM: time = fixed + bytes / rate.
            # Two sizes give the fixed part, the time a read of no bytes would take.
            t_small, t_large = (facts[f"{k}_bytes"] / (facts[f"{k}_none_gbs"] * 1e3) for k in ("small", "large"))
            facts["fixed_us"] = (t_small * large - t_large * small) / (large - small)
            print(f"without a window: {t_small:.2f} us for {small // MiB} MiB, {t_large:.2f} us for "
                  f"{large // MiB} MiB: a fixed {facts['fixed_us']:.2f} us + the bytes at "
                  f"{(large - small) / ((t_large - t_small) * 1e3):,.0f} GB/s")
            with_window, without = facts["small_full_p80_us"], facts["small_none_p20_us"]
            cb.report_check(cb.expect("the window speeds up the small tensor's reads beyond the timings' spread",
                                      with_window < without,
                                      f"{facts['small_full_gain']:.2f} times the rate without it; 80th percentile "
                                      f"with it {with_window:.2f} us, 20th without {without:.2f} us"), timing=True)
            cb.report_facts(**facts)
    finally:
        set_window(drv, stream)                                     # leave the L2 as we found it
        set_aside(drv, 0)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
