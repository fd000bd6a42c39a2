"""Experiment (not a listing): time the chapter kernel's candidates side by
side with SDPA on one GPU, each checked against float64 first.

Run there:  python3 wip/attn_bench.py [--quick]
Candidates: old_* (the kernel of commit d295c71, as first tried), flash_*
(the listing now: copy offsets and ldmatrix addresses worked out once, the
mask only on edge tiles), and wip/flash_exp.cu's lazy_* (skip O's rescale
unless a row's max grows past 2^8 in weight), w8* (8 warps a block),
*3/*2 (launch bounds asking for 3 or 2 blocks an SM).
pipe* (S of the next key tile issued before the softmax of this one; one barrier a tile).
"""

import math
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code"))
import cudabook as cb  # noqa: E402
from attention import _ref  # noqa: E402
from attention import flash_bf16 as fb  # noqa: E402

LOG2E = 1.4426950408889634


def parse(name):
    m = re.search(r"d(\d+)_m(\d)_n(\d+)", name)
    warps = 8 if name.startswith("w8") else 4
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), warps


def load():
    import pycuda.driver as cuda

    kernels = {}
    for path, prefix in ((ROOT / "wip/flash_old.cu", "old_"), (ROOT / "code/attention/flash_bf16.cu", ""),
                         (ROOT / "wip/flash_exp.cu", "")):
        module = cb.compile(path)
        for line in path.read_text().splitlines():
            m = re.match(r"FLASH\((\d+), (\d), (\d+)\)", line)
            x = re.match(r"X(?:FLASH|PIPE)\((\w+),", line)
            if m:
                sym = f"flash_d{m.group(1)}_m{m.group(2)}_n{m.group(3)}"
            elif x:
                sym = x.group(1)
            else:
                continue
            d, mt, bk, warps = parse(sym)
            smem = (16 * mt * warps + 4 * bk) * d * 2
            f = module.get_function(sym)
            f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            kernels[prefix + sym] = (f.prepare("PPPPifi"), d, mt, bk, warps, smem)
    return kernels


def launch(k, q, kk, v, o, causal):
    f, d, mt, bk, warps, smem = k
    b, h, s, _ = q.shape
    bq = 16 * mt * warps
    f.prepared_call((cb.ceil_div(s, bq), b * h, 1), (32 * warps, 1, 1), q.gpudata, kk.gpudata, v.gpudata,
                    o.gpudata, np.int32(s), np.float32(LOG2E / math.sqrt(d)), np.int32(causal),
                    shared_size=smem)


def check(kernels, shape, causal, rng, torch):
    from pycuda import gpuarray

    b, h, s, d, qs = shape
    q16, k16, v16 = _ref.random_qkv(b, h, s, d, qs, rng, bf16=True)
    ref, mag, smax = _ref.reference(q16, k16, v16, causal, torch)
    kb = _ref.bound_k(s, d, smax, u_out=_ref.U_BF16, u_p=_ref.U_BF16)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
    og = gpuarray.empty(q16.shape, np.uint16)
    for name, k in kernels.items():
        if k[1] != d:
            continue
        cb.poison(og)
        launch(k, qg, kg, vg, og, causal)
        got = _ref.from_bf16(og.get())
        cb.report_check(cb.compare(f"{name} {b}x{h}x{s}x{d}{' causal' if causal else ''}", got, ref,
                                   k=kb * _ref.U_BF16 / _ref.U_FP32, scale=mag))


def main():
    quick = "--quick" in sys.argv
    gpu = cb.init()
    torch = cb.torch_cuda()
    kernels = load()
    print(f"{gpu.name}: {len(kernels)} kernels")
    rng = np.random.default_rng(7)
    for shape in [(1, 1, 1, 64, 1), (1, 2, 130, 128, 1), (2, 2, 257, 64, 16), (1, 1, 1000, 128, 1),
                  (1, 3, 200, 64, 1)]:
        for causal in (False, True):
            check(kernels, shape, causal, rng, torch)
    from pycuda import gpuarray

    for b, h, s, d, causal in [(8, 16, 4096, 128, False), (8, 16, 4096, 64, False)] + \
            ([] if quick else [(8, 16, 4096, 128, True), (8, 16, 4000, 128, False)]):
        q16, k16, v16 = _ref.random_qkv(b, h, s, d, 1, np.random.default_rng(1), bf16=True)
        qg, kg, vg = (gpuarray.to_gpu(x) for x in (q16, k16, v16))
        og = gpuarray.empty(q16.shape, np.uint16)
        work = _ref.flops(b, h, s, d, causal)
        ws = 4 * q16.nbytes
        sdpa = fb.sdpa_times(torch, q16, k16, v16, causal, ws, 300.0)
        print(f"S={s} D={d}{' causal' if causal else ''}")
        for n, ms in sdpa.items():
            print(f"  SDPA {n:18s} {ms:8.3f} ms {work / ms / 1e9:7.1f} TFLOP/s")
        best = min(sdpa.values())
        for name, k in kernels.items():
            if k[1] != d:
                continue
            t = cb.bench(lambda k=k: launch(k, qg, kg, vg, og, causal), working_set_bytes=ws,
                         budget_ms=300.0).median_ms
            print(f"  {name:22s} {t:8.3f} ms {work / t / 1e9:7.1f} TFLOP/s {100 * best / t:6.1f}% of fastest"
                  f" {100 * sdpa.get('flash', float('nan')) / t:6.1f}% of flash", flush=True)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
