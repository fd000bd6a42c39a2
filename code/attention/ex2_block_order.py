"""Solution to exercise 2: which causal query tiles should go first?

With a causal mask, query tile t needs t + 1 tiles of keys: the last tile
of a head does S / BQ times the work of the first. The chapter's kernel
hands block 0 the last tile (the GPU starts blocks roughly in the order of
their index), so the long tiles start first and the short ones fill the
gaps at the end. ex2_block_order.cu compiles the same kernel with the
natural order, block b on tile b. This listing times both.

Run:    python code/attention/ex2_block_order.py [--seed S] [--bench]
Checks: the natural-order kernel against float64 attention
        (flash_bf16.py's bound), causal, at B = 1, H = 2, S = 1000, D = 128
        (under compute-sanitizer S = 130), and under --bench at each shape.
Bench:  causal, B = 8, H = 16, D = 128, S = 1024 and 4096: ms and
        TFLOP/s of each order.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from cudabook.bf16 import from_bf16  # noqa: E402
from attention import _ref, flash_bf16  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
NATURAL, LONG_FIRST = "flash_d128_m2_n64_natural", "flash_d128_m2_n64"
CHECK, SANITIZER = (1, 2, 1000, 128), (1, 1, 130, 128)
BENCH = [(8, 16, 1024, 128), (8, 16, 4096, 128)]


def load_kernels() -> dict:
    import pycuda.driver as cuda

    module = cb.compile(KERNEL_FILE)
    kernels = {}
    for name in (NATURAL, LONG_FIRST):
        f = module.get_function(name)
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        flash_bf16.shared_bytes(LONG_FIRST))
        kernels[name] = f.prepare("PPPPifi")
    return kernels


# --8<-- [start:solution]
def run(kernels, name: str, qg, kg, vg, og) -> None:
    """The chapter's launcher, with the natural-order kernel put in its place."""
    flash_bf16.attention({LONG_FIRST: kernels[name]}, LONG_FIRST, qg, kg, vg, og, causal=True)


def check(kernels, shape, seed, torch=None):
    from pycuda import gpuarray

    q, k, v = _ref.random_qkv(*shape, 1, np.random.default_rng(seed), bf16=True)
    ref, mag, smax = _ref.reference(q, k, v, True, torch)
    bound = _ref.bound_k(shape[2], shape[3], smax, u_out=_ref.U_BF16, u_p=_ref.U_BF16)
    qg, kg, vg = (gpuarray.to_gpu(x) for x in (q, k, v))
    og = gpuarray.empty(q.shape, np.uint16)
    cb.poison(og)
    run(kernels, NATURAL, qg, kg, vg, og)
    cb.report_check(cb.compare(f"natural order {'x'.join(map(str, shape))} causal",
                               from_bf16(og.get()), ref,
                               k=bound * _ref.U_BF16 / _ref.U_FP32, scale=mag))
    return qg, kg, vg, og


def time_orders(kernels, shape, seed, budget_ms) -> dict:
    qg, kg, vg, og = check(kernels, shape, seed, cb.torch_cuda())
    work = _ref.flops(*shape, True)
    s = shape[2]
    facts = {}
    for name, label in ((LONG_FIRST, "long_first"), (NATURAL, "natural")):
        t = cb.bench(lambda name=name: run(kernels, name, qg, kg, vg, og),
                     working_set_bytes=4 * qg.nbytes, budget_ms=budget_ms)
        facts[f"{label}_s{s}_ms"] = t.median_ms
        facts[f"{label}_s{s}_tflops"] = work / (t.median_ms * 1e-3) / 1e12
        print(f"S = {s}, {label.replace('_', ' ')}: {t.median_ms:.3f} ms, "
              f"{facts[f'{label}_s{s}_tflops']:.1f} TFLOP/s")
    facts[f"gain_s{s}"] = facts[f"natural_s{s}_ms"] / facts[f"long_first_s{s}_ms"]
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = load_kernels()
    check(kernels, SANITIZER if os.environ.get("CUDABOOK_SANITIZER") else CHECK, args.seed)
    if args.bench:
        facts = {}
        for shape in BENCH:
            facts.update(time_orders(kernels, shape, args.seed, args.budget_ms))
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
