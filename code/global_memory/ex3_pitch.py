"""Solution to exercise 3: pad the rows of an odd-width matrix to a pitch.

A row-major 16,384 x 3,001 float32 matrix has rows 12,004 bytes long, so
most rows start part-way into a sector, and only every fourth row starts
on the 16-byte boundary a float4 load needs. Padding each row to a pitch
of 3,008 floats (12,032 bytes, a multiple of 128) starts every row on a
cache line. Three versions, one change at a time: scalar loads on the
packed rows (rows_columns' scale_x_cols), scalar loads on the padded rows,
and float4 loads on the padded rows.

Run:    python code/global_memory/ex3_pitch.py [--seed S] [--bench]
Checks: b = alpha * a within k = 1 over the real columns, all three
        versions; a float4 launch on the packed rows is refused on the host.
Bench:  useful GB/s (8 bytes per real element) of each version against the
        copy bandwidth, beside torch.mul on the packed matrix.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))      # and rows_columns
import cudabook as cb  # noqa: E402
import rows_columns as rc  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
ROWS, COLS = 16_384, 3_001
PITCH = 3_008                  # floats: the next multiple of 32 (128 bytes)
ALPHA = np.float32(1.5)


def load_kernel():
    return cb.compile(KERNEL_FILE).get_function("scale_pitched4")


# --8<-- [start:launch]
def scale_pitched4(kernel, a, b, cols: int, alpha=ALPHA) -> None:
    """b = alpha * a for a (rows, pitch) float32 array whose first `cols`
    columns are the matrix; pitch must be a multiple of 4 floats."""
    cb.check_array("a", a, dtype=np.float32, ndim=2, on_device=True, alignment=16)
    rows, pitch = a.shape
    cb.check_array("b", b, dtype=np.float32, shape=(rows, pitch), on_device=True, alignment=16)
    if pitch % 4:
        raise ValueError(f"a: a pitch of {pitch} floats is not a multiple of 4; "
                         "rows would not start on the 16-byte boundary float4 loads need")
    cb.check_size("cols", cols, high=pitch)
    grid = (cb.ceil_div(pitch // 4, 32), cb.ceil_div(rows, 8), 1)
    kernel(a.gpudata, b.gpudata, np.int32(rows), np.int32(pitch // 4), np.float32(alpha),
           block=(32, 8, 1), grid=grid)
# --8<-- [end:launch]


def padded(host: np.ndarray, pitch: int) -> np.ndarray:
    out = np.zeros((host.shape[0], pitch), np.float32)
    out[:, :host.shape[1]] = host
    return out


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    from pycuda import gpuarray

    kernels, k4 = rc.load_kernels(), load_kernel()
    host = np.random.default_rng(args.seed).standard_normal((ROWS, COLS), dtype=np.float32)
    ref = float(ALPHA) * host.astype(np.float64)
    a, b = gpuarray.to_gpu(host), gpuarray.empty((ROWS, COLS), np.float32)
    ap, bp = gpuarray.to_gpu(padded(host, PITCH)), gpuarray.empty((ROWS, PITCH), np.float32)
    versions = {"scalar, packed rows": lambda: rc.scale(kernels, "scale_x_cols", a, b),
                "scalar, padded rows": lambda: rc.scale(kernels, "scale_x_cols", ap, bp),
                "float4, padded rows": lambda: scale_pitched4(k4, ap, bp, COLS)}
    for name, fn in versions.items():
        out = b if "packed" in name else bp
        cb.poison(out)
        fn()
        cb.report_check(cb.compare(name, out.get()[:, :COLS], ref, k=1))
    try:
        scale_pitched4(k4, a, b, COLS)
        refused = "it ran"
    except ValueError as e:
        refused = f"ValueError: {e}"
    cb.report_check(cb.expect("float4 on packed rows refused", refused.startswith("ValueError"), refused))
    if args.bench:
        useful = 8 * ROWS * COLS
        copy_bw = cb.ceiling()
        rows = []
        for name, fn in versions.items():
            t = cb.bench(fn, working_set_bytes=useful)
            rows.append({"version": name, "ms": t.median_ms, "gbs": useful / (t.median_ms * 1e6)})
        torch = cb.torch_cuda()
        if torch is not None:
            ta = torch.from_numpy(host).cuda()
            tb = torch.empty_like(ta)
            t = cb.bench(lambda: torch.mul(ta, float(ALPHA), out=tb), working_set_bytes=useful)
            rows.append({"version": "torch.mul, packed", "ms": t.median_ms, "gbs": useful / (t.median_ms * 1e6)})
        print(f"{ROWS:,} x {COLS:,} float32, pitch {PITCH:,}")
        for r in rows:
            print(f"{r['version']:22s} {r['ms']:7.3f} ms {r['gbs']:7.0f} GB/s "
                  f"{100 * r['gbs'] * 1e9 / copy_bw:5.1f}% of copy")
        cb.report_facts(rows=rows, copy_gbs=copy_bw / 1e9)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
