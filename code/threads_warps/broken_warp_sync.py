"""BROKEN ON PURPOSE: lanes of a warp share data with no __syncwarp().

The rotate kernel of warp_sync.py, without the __syncwarp() between each
lane's write to shared memory and its read of the next lane's slot. Run
plainly, it usually prints "ok": the lanes of a warp often do run together.
Nothing promises it, since each lane has its own program counter, and
racecheck sees the unordered write and read inside the warp.

Expect: compute-sanitizer --tool racecheck reports "Race reported between" a write and a read of s[next] in rotate.

Run:    compute-sanitizer --tool racecheck python code/threads_warps/broken_warp_sync.py --n 1027
        (plainly: python code/threads_warps/broken_warp_sync.py [--n N] [--seed S])
Checks: y against warp_sync.py's reference, exactly (k=0). It passes or
        fails by luck.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from threads_warps.warp_sync import check_rotate, load_kernels  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, n=1027)
    x = np.random.default_rng(args.seed).standard_normal(args.n, dtype=np.float32)
    cb.init()
    cb.report_check(check_rotate(load_kernels(KERNEL_FILE)["rotate"], x))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
