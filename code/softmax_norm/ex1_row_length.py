"""Solution to exercise 1: which softmax kernel is fastest at which row length.

The same 2^26 float32 logits (256 MiB), cut into rows of 128 to 65,536
columns, go through every kernel of softmax.py that can take the row:
softmax_warp up to 1,024 columns, softmax_block up to 8,192, softmax_safe,
softmax_online and softmax_online_chunk at every length, and torch.softmax beside them. Only
the row length changes; the bytes do not. The table at the end shows
where softmax.py's pick() switches from a warp to a block to the online
kernel, and what is left past 8,192 columns, where no register kernel
holds the row. No new kernel: all come from softmax.py.

Run:    python code/softmax_norm/ex1_row_length.py [--seed S] [--bench]
Checks: every kernel that fits, float32 and bf16, at 5 rows of each
        length (under compute-sanitizer 3x100, 2x1030 and 1x8200), every
        element, with softmax.py's check() and bound. Under --bench, at
        2^26 elements per length, every element of each timed output is
        checked to be written (finite, where the poison is NaN), and every
        element of every 32nd row against float64 with the same bound (a
        float64 reference of all 2^26 elements per kernel and length would
        take longer than the timing).
Bench:  at each length, GB/s of each kernel that fits (2^26 x 4 bytes read
        and as many written) as a share of the copy bandwidth, and
        torch.softmax(x, dim=-1) on the same data.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from softmax_norm import softmax  # noqa: E402

LENGTHS = (128, 512, 1024, 2048, 4096, 8192, 16384, 65536)
TOTAL = 2**26                               # float32 elements at every length
CHECK_ROWS = 5                              # rows per length in the plain run
SANITIZER_SHAPES = [(3, 100), (2, 1030), (1, 8200)]
STEP = 32                                   # under --bench, every STEP-th row against float64


# --8<-- [start:solution]
def sweep(kernels, seed: int) -> list[dict]:
    """Time every kernel that fits, and torch.softmax, at each row length;
    one row of the table (shares of the copy bandwidth) per length."""
    from pycuda import gpuarray

    x = softmax.inputs(1, TOTAL, "f32", np.random.default_rng(seed))[0].ravel()
    xg = gpuarray.to_gpu(x)
    yg = gpuarray.empty_like(xg)
    torch = cb.torch_cuda()
    tx = torch.from_numpy(x).cuda() if torch is not None else None
    table = []
    for cols in LENGTHS:
        rows = TOTAL // cols
        xs, ys = xg.reshape(rows, cols), yg.reshape(rows, cols)      # the same bytes, new rows
        x64 = x.reshape(rows, cols)[::STEP].astype(np.float64)
        ref = softmax.reference(x64)
        picked = softmax.pick(cols)
        base = None
        if tx is not None:
            base = (softmax.BASELINE, lambda t=tx.view(rows, cols): torch.softmax(t, dim=-1))
        row = {"cols": cols, "rows": rows, "picked": picked}
        print(f"rows of {cols:,} ({rows:,} rows); pick() chooses {picked}:")
        for kind in (k for k in softmax.KINDS if softmax.fits(k, cols)):
            cb.poison(ys)
            softmax.softmax(kernels, xs, ys, kind)
            y = ys.get()
            written = int(np.isfinite(y).sum())
            cb.report_check(cb.expect(f"{kind} {rows}x{cols}: every element written", written == y.size,
                                      f"{written:,} of {y.size:,} finite"))
            softmax.check(f"{kind} {rows}x{cols}, 1 row in {STEP}", y[::STEP], x64, ref, kind, "f32")
            b = cb.benchmark(f"softmax_{kind} {cols}", lambda kind=kind: softmax.softmax(kernels, xs, ys, kind),
                             bytes_moved=2 * x.nbytes, baseline=base if kind == picked else None)
            row[kind] = b.fraction_of_ceiling
            if b.baseline is not None:
                row["torch"] = b.baseline.bytes_per_s / b.ceiling_bytes_per_s
        row["fastest"] = max((k for k in softmax.KINDS if k in row), key=row.get)
        table.append(row)
    return table
# --8<-- [end:solution]


def show(table: list[dict]) -> dict:
    """Print the table; return the facts the record keeps."""
    names = [*softmax.KINDS, "torch"]
    print("share of the copy bandwidth, 2^26 float32 elements at every row length:")
    widths = [max(7, len(n)) for n in names]
    print(f"{'cols':>6s} " + " ".join(f"{n:>{w}s}" for n, w in zip(names, widths)) + "  pick()   fastest")
    facts = {"rows": table}
    for row in table:
        cells = " ".join(f"{100 * row[n]:{w - 1}.1f}%" if n in row else f"{'-':>{w}s}" for n, w in zip(names, widths))
        print(f"{row['cols']:6d} {cells}  {row['picked']:7s}  {row['fastest']}")
        for n in names:
            if n in row:
                facts[f"{n}_{row['cols']}_of_copy"] = row[n]
        facts[f"picked_{row['cols']}"] = row["picked"]
        facts[f"fastest_{row['cols']}"] = row["fastest"]
    return facts


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = softmax.load_kernels()
    rng = np.random.default_rng(args.seed)
    shapes = SANITIZER_SHAPES if os.environ.get("CUDABOOK_SANITIZER") else [(CHECK_ROWS, c) for c in LENGTHS]
    for rows, cols in shapes:
        softmax.check_shape(kernels, rows, cols, rng)
    if args.bench:
        cb.report_facts(baseline=softmax.BASELINE, **show(sweep(kernels, args.seed)))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
