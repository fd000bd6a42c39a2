"""Arrays of structures and structures of arrays: the same boxes, two layouts.

An object detector's boxes have eight float fields (corners, score, label,
image). Stored as an array of structures (AoS), each box is one 32-byte
record, exactly a sector; stored as a structure of arrays (SoA), each field
is its own array. Reading one field of every box, AoS makes each lane of a
warp touch its own sector and use 4 of its 32 bytes; SoA reads 32 useful
floats in 4 sectors. Reading four fields, AoS uses half of what it fetches.

Run:    python code/global_memory/aos_soa.py [--n N] [--seed S] [--bench]
Checks: score copied exactly (k = 0); area = (x2 - x1)(y2 - y1) within
        k = 3 (two subtractions and a product, each correctly rounded),
        against float64, in both layouts.
Bench:  at n = 33,554,467 boxes: useful GB/s of each kernel (the bytes the
        job needs: 8 per box for the score, 20 for the area) against the
        copy bandwidth and the ceiling the layout predicts (a whole 32-byte
        box read for AoS), beside PyTorch doing the same job on the AoS
        tensor (for the area, three kernels with two temporaries); from
        Nsight Compute, load requests per warp, sectors per request, and
        bytes read from device memory per box. area_aos4 reads the AoS
        corners as one float4.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
BLOCK = 256
FIELDS = 8                     # floats per box
KERNELS = ("score_aos", "score_soa", "area_aos", "area_soa", "area_aos4")
USEFUL = {"score": 8, "area": 20}  # bytes per box the job must move


def make_boxes(n: int, seed: int) -> np.ndarray:
    """n boxes as an (n, 8) float32 array: x1 < x2, y1 < y2, score in [0, 1)."""
    rng = np.random.default_rng(seed)
    b = np.empty((n, FIELDS), np.float32)
    b[:, 0] = rng.uniform(0, 1000, n)
    b[:, 1] = rng.uniform(0, 1000, n)
    b[:, 2] = b[:, 0] + rng.uniform(1, 200, n).astype(np.float32)
    b[:, 3] = b[:, 1] + rng.uniform(1, 200, n).astype(np.float32)
    b[:, 4] = rng.random(n, dtype=np.float32)
    b[:, 5] = rng.integers(0, 80, n)
    b[:, 6] = rng.integers(0, 32, n)
    b[:, 7] = 0.0
    return b


def load_kernels() -> dict:
    module = cb.compile(KERNEL_FILE)
    return {name: module.get_function(name) for name in KERNELS}


# --8<-- [start:launch]
def launch(kernels: dict, name: str, out, *inputs) -> None:
    """Run one of the kernels: the AoS ones take the (n, 8) box array,
    the SoA ones one (n,) array per field they read."""
    n = cb.check_size("out.size", out.size)
    cb.check_array("out", out, dtype=np.float32, shape=(n,), on_device=True)
    if "_aos" in name:
        (boxes,) = inputs
        cb.check_array("boxes", boxes, dtype=np.float32, shape=(n, FIELDS), on_device=True,
                       alignment=32)     # each box on a sector (area_aos4 reads a float4)
    else:
        for k, a in enumerate(inputs):
            cb.check_array(f"field {k}", a, dtype=np.float32, shape=(n,), on_device=True)
    grid = (cb.ceil_div(n, BLOCK), 1, 1)
    kernels[name](*[a.gpudata for a in inputs], out.gpudata, np.int32(n), block=(BLOCK, 1, 1), grid=grid)
# --8<-- [end:launch]


def on_device(boxes: np.ndarray):
    """The boxes in both layouts on the GPU: AoS (n, 8) and SoA (8 arrays)."""
    from pycuda import gpuarray

    aos = gpuarray.to_gpu(boxes)
    soa = [gpuarray.to_gpu(np.ascontiguousarray(boxes[:, f])) for f in range(FIELDS)]
    return aos, soa


def jobs(aos, soa):
    """(kernel, inputs) for each of the four kernels."""
    return {"score_aos": (aos,), "score_soa": (soa[4],),
            "area_aos": (aos,), "area_soa": (soa[0], soa[1], soa[2], soa[3]), "area_aos4": (aos,)}


#: Bytes per box each kernel must move if whole sectors are read: AoS reads
#: the 32-byte box, SoA only the fields; both write 4 bytes.
MOVED = {"score_aos": 36, "score_soa": 8, "area_aos": 36, "area_soa": 20, "area_aos4": 36}


def check_all(kernels, boxes, aos, soa, out) -> None:
    col = lambda f: boxes[:, f].astype(np.float64)  # noqa: E731  (one field at a time: n can be 2^27)
    refs = {"score": col(4), "area": (col(2) - col(0)) * (col(3) - col(1))}
    for name, inputs in jobs(aos, soa).items():
        cb.poison(out)
        launch(kernels, name, out, *inputs)
        job = name.split("_")[0]
        cb.report_check(cb.compare(name, out.get(), refs[job], k=0 if job == "score" else 3))


def ncu_child(n: int, seed: int) -> int:
    """Under Nsight Compute: each kernel once, in KERNELS order."""
    cb.init()
    kernels = load_kernels()
    from pycuda import gpuarray

    aos, soa = on_device(make_boxes(n, seed))
    out = gpuarray.empty(n, np.float32)
    for name, inputs in jobs(aos, soa).items():
        launch(kernels, name, out, *inputs)
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    return 0


def torch_jobs(boxes: np.ndarray):
    """What a PyTorch user holding the (n, 8) tensor would write."""
    torch = cb.torch_cuda()
    if torch is None:
        return {}
    t = torch.from_numpy(boxes).cuda()
    out = torch.empty(t.shape[0], device="cuda")
    return {"score": lambda: out.copy_(t[:, 4]),
            "area": lambda: torch.mul(t[:, 2] - t[:, 0], t[:, 3] - t[:, 1], out=out)}


def measure(kernels, boxes, aos, soa, out, seed: int) -> tuple[list[dict], dict]:
    from cudabook import ncu

    n = out.size
    rows = []
    for name, inputs in jobs(aos, soa).items():
        useful = USEFUL[name.split("_")[0]] * n
        t = cb.bench(lambda nm=name, ins=inputs: launch(kernels, nm, out, *ins), working_set_bytes=useful)
        rows.append({"kernel": name, "ms": t.median_ms, "gbs": useful / (t.median_ms * 1e6)})
    base = {}
    for job, fn in torch_jobs(boxes).items():
        t = cb.bench(fn, working_set_bytes=USEFUL[job] * n)
        base[job] = {"ms": t.median_ms, "gbs": USEFUL[job] * n / (t.median_ms * 1e6)}
    for row in rows:
        row["predicted_fraction"] = USEFUL[row["kernel"].split("_")[0]] / MOVED[row["kernel"]]
    counted = ncu.profile_or_note([str(Path(__file__).resolve()), "--ncu-child", str(n), str(seed)],
                                  kernel="regex:^(score|area)_(aos|soa|aos4)$",
                                  metrics=(*ncu.SECTORS_PER_REQUEST, ncu.DRAM_READ))
    if counted is None:
        return rows, base
    if [c["kernel"] for c in counted] != list(KERNELS):
        raise RuntimeError(f"ncu profiled {[c['kernel'] for c in counted]}, expected {list(KERNELS)}")
    for row, c in zip(rows, counted):
        row["requests_per_warp"] = c[ncu.REQUESTS] / -(-n // 32)
        row["sectors_per_request"] = ncu.ratio(c, ncu.SECTORS, ncu.REQUESTS)
        row["dram_bytes_read_per_box"] = c[ncu.DRAM_READ] / n
    return rows, base


def report(rows, base, copy_bw: float) -> None:
    print("kernel        ms    GB/s  % copy  predicted")
    for r in rows:
        print(f"{r['kernel']:10s} {r['ms']:6.3f} {r['gbs']:7.0f} {100 * r['gbs'] * 1e9 / copy_bw:6.1f}%"
              f" {100 * r['predicted_fraction']:9.1f}%")
    if all("sectors_per_request" in r for r in rows):
        print("kernel     requests/warp  sectors/request  DRAM B read/box")
        for r in rows:
            print(f"{r['kernel']:10s} {r['requests_per_warp']:13.2f}  {r['sectors_per_request']:15.2f}"
                  f"  {r['dram_bytes_read_per_box']:15.1f}")
    for job, b in base.items():
        print(f"PyTorch on the AoS tensor, {job}: {b['ms']:.3f} ms, {b['gbs']:,.0f} GB/s")
    by = {r["kernel"]: r for r in rows}
    cb.report_facts(rows=rows, torch=base, copy_gbs=copy_bw / 1e9,
                    score_soa_over_aos=by["score_aos"]["ms"] / by["score_soa"]["ms"],
                    area_soa_over_aos=by["area_aos"]["ms"] / by["area_soa"]["ms"])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 3 and argv[0] == "--ncu-child":
        return ncu_child(int(argv[1]), int(argv[2]))
    args = cb.parse_args(argv, __doc__, n=1_000_003, bench_n=33_554_467)
    cb.init()
    from pycuda import gpuarray

    kernels = load_kernels()
    boxes = make_boxes(args.n, args.seed)
    aos, soa = on_device(boxes)
    out = gpuarray.empty(args.n, np.float32)
    check_all(kernels, boxes, aos, soa, out)
    if args.bench:
        rows, base = measure(kernels, boxes, aos, soa, out, args.seed)
        report(rows, base, cb.ceiling())
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
