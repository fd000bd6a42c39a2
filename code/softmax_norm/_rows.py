"""What the row kernels of this chapter share on the host side.

softmax.py, layernorm.py and ex3_rmsnorm.py launch kernels built from
_rows.cuh: a row of float32 or bf16 held in registers by a warp (rows up to
1,024 elements) or by a block (up to 8,192), each thread holding CHUNKS
pieces of 16 bytes. This module knows those sizes, picks the launch for a
row length, and checks the arguments every launcher shares.
"""

import numpy as np

import cudabook as cb

DTYPES = {"f32": np.float32, "bf16": np.uint16}     # bf16 as its bit patterns
VEC = {"f32": 4, "bf16": 8}                 # elements in 16 bytes
ROUND = 1024                                # _rows.cuh's ROUND: elements a block holds per 16 bytes a thread
WARP_ROW_MAX, BLOCK_ROW_MAX = 1024, 8192    # the longest rows the register kernels hold
ROW_MAX = {"warp": WARP_ROW_MAX, "block": BLOCK_ROW_MAX}
CHUNKS = (1, 2, 4, 8)                       # the CHUNKS each kernel is specialised for
WARPS_THREADS = 256                         # threads of a block of warps (one row per warp)
U_FP32, U_BF16 = 2.0**-24, 2.0**-8
MAX_ELEMENTS = 2**31 - 1


def group(kind: str, dt: str) -> int:
    """Threads that share a row: a warp, or a block of ROUND / (elements in
    16 bytes) threads (_rows.cuh's row_threads: 256 for float32, 128 for bf16)."""
    return 32 if kind == "warp" else ROUND // VEC[dt]


def register_kernels():
    """(kind, dtype, chunks) of every register kernel the .cu files build:
    those whose CHUNKS pieces a thread fit the kind's longest row."""
    return [(kind, dt, c) for kind in ROW_MAX for dt in DTYPES for c in CHUNKS
            if c * VEC[dt] * group(kind, dt) <= ROW_MAX[kind]]


def chunks_for(kind: str, dt: str, cols: int) -> int:
    """16-byte pieces a thread holds: the smallest power of two that holds the row."""
    need = cb.ceil_div(cols, VEC[dt] * group(kind, dt))
    return 1 << (need - 1).bit_length()


def kind_for(cols: int) -> str:
    """A warp per row while a warp's registers hold the row, else a block."""
    return "warp" if cols <= WARP_ROW_MAX else "block"


def launch_shape(kind: str, dt: str, rows: int) -> tuple[int, int]:
    """(blocks, threads): blocks of 8 warps, a row each, or a block per row."""
    if kind == "warp":
        return cb.ceil_div(rows, WARPS_THREADS // 32), WARPS_THREADS
    return rows, group(kind, dt)


def dtype_key(name: str, arr) -> str:
    """"f32" or "bf16" for an array of float32 or bf16 bit patterns."""
    dt = {np.dtype(v): k for k, v in DTYPES.items()}.get(np.dtype(arr.dtype))
    if dt is None:
        raise TypeError(f"{name}: expected float32 or bfloat16 bit patterns (uint16), got {arr.dtype}")
    return dt


def rows_cols(x, high: int = MAX_ELEMENTS) -> tuple[int, int]:
    """(rows, cols) of a 2-D device array x, at most `high` columns."""
    cb.check_array("x", x, ndim=2, on_device=True)
    rows = cb.check_size("x.shape[0] (rows)", x.shape[0])
    cols = cb.check_size("x.shape[1] (cols)", x.shape[1], high=high)
    cb.check_size("x.size", x.size, high=MAX_ELEMENTS)
    return rows, cols


def vec_ok(cols: int, dt: str, *arrays) -> int:
    """1 if every row starts on a 16-byte boundary in every array, so the
    kernel may read and write 16 bytes at a time; else 0."""
    return int(cols % VEC[dt] == 0 and all(int(a.gpudata) % 16 == 0 for a in arrays))


def to_torch(torch, a: np.ndarray):
    """A host array (float32, or bf16 bit patterns) on the GPU as a torch tensor."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(a).cuda()
