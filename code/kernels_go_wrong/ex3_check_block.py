"""Solution to exercise 3: refuse a block size the kernel cannot launch.

A launch with too many threads per block fails only when it reaches the
driver, with an error ("invalid argument") that does not say which argument.
This wrapper around fixed_oob.py's launch asks first: the device's
MAX_BLOCK_DIM_X and the kernel's own MAX_THREADS_PER_BLOCK (which can be
lower than the device's 1024 for a kernel that needs many registers), and
raises an error that names `block` before anything is launched.

Run:    python code/kernels_go_wrong/ex3_check_block.py
Checks: block sizes 32, 100, 256 and 1024 launch and match the float64
        reference (every element, as fixed_oob.py checks it); 0, 1025, 2048 and 256.0 raise
        ValueError or TypeError naming `block`, and nothing is launched.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and fixed_oob next to this file
import cudabook as cb  # noqa: E402
import fixed_oob  # noqa: E402

N = 100_003


# --8<-- [start:solution]
def check_block(kernel, block) -> int:
    """The number of threads per block, if `kernel` can launch with it here."""
    import pycuda.driver as cuda

    if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
        raise TypeError(f"block: expected an integer, got {type(block).__name__}")
    device = cuda.Context.get_device()
    limit = min(device.get_attribute(cuda.device_attribute.MAX_BLOCK_DIM_X),
                kernel.get_attribute(cuda.function_attribute.MAX_THREADS_PER_BLOCK))
    if not 1 <= block <= limit:
        raise ValueError(f"block: expected 1 <= block <= {limit} for this kernel on this GPU, got {block}")
    return int(block)


def average3_checked(kernel, x, y, block):
    return fixed_oob.average3(kernel, x, y, block=check_block(kernel, block))
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__)
    x = np.random.default_rng(args.seed).standard_normal(N, dtype=np.float32)
    cb.init()
    from pycuda import gpuarray

    kernel = fixed_oob.load_kernel()
    x_gpu = gpuarray.to_gpu(x)
    y_gpu = gpuarray.empty_like(x_gpu)
    for block in (32, 100, 256, 1024):
        cb.poison(y_gpu)
        average3_checked(kernel, x_gpu, y_gpu, block)
        cb.report_check(fixed_oob.check(y_gpu.get(), x, f"block = {block}"))
    for block in (0, 1025, 2048, 256.0):
        try:
            average3_checked(kernel, x_gpu, y_gpu, block)
            seen, ok = "launched: no error raised", False
        except (TypeError, ValueError) as e:
            seen, ok = f"{type(e).__name__}: {e}", str(e).startswith("block:")
        cb.report_check(cb.expect(f"block = {block!r} refused", ok, seen))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
