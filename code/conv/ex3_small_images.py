"""Solution to exercise 3: the last layers have too few pixels.

Deep in a ResNet the images are 7 x 7 and the channels 512: a 3 x 3 layer
there does 2 * 49 * 512 * 512 * 9 FLOPs an image, as much work per image
as a 56 x 56 layer with 64 channels, but its output has only 49 N
pixels. conv_implicit gives each block 128 pixels and 128 channels, so a
batch of N images makes ceil(49 N / 128) * 4 blocks, and a GPU holds a
fixed number of them at once (the listing works it out from the
kernel's registers and shared memory and the GPU's limits). This
listing sweeps N and prints the blocks beside the speed, ours and
cuDNN's, in the same run.

Run:    python code/conv/ex3_small_images.py [--seed S] [--bench]
Checks: conv_implicit against the float64 convolution (conv2d.py's
        bound) at N = 1 and 3 (under compute-sanitizer a 7 x 7 image with
        16 -> 24 channels), and under --bench at every N timed.
Bench:  N = 1, 2, 8, 32, 128 at 7 x 7, C = K = 512, 3 x 3, pad 1: ms,
        TFLOP/s, blocks against the GPU's resident-block slots, and
        cuDNN (conv2d.py's baseline, the faster of its two layouts).
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from conv import conv2d  # noqa: E402

DEEP = (7, 7, 512, 512, 3, 3, 1, 1)          # H, W, C, K, R, S, stride, pad
BATCHES, CHECK_BATCHES = (1, 2, 8, 32, 128), (1, 3)
SANITIZER_LAYER = (1, 7, 7, 16, 24, 3, 3, 1, 1)
BLOCK_THREADS = 256


# --8<-- [start:solution]
def slots(kernels, gpu) -> int:
    """Blocks of conv_implicit the GPU holds at once: per SM, as many as its
    registers allow (ptxas gives the kernel 128 a thread), its shared
    memory allows and its thread limit allows, whichever is fewest."""
    import pycuda.driver as cuda

    f, attr = kernels["conv_implicit"], cuda.device_attribute
    sm = {a: gpu.device.get_attribute(getattr(attr, a)) for a in
          ("MAX_REGISTERS_PER_MULTIPROCESSOR", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
           "MAX_THREADS_PER_MULTIPROCESSOR")}
    per_sm = min(sm["MAX_REGISTERS_PER_MULTIPROCESSOR"] // (f.num_regs * BLOCK_THREADS),
                 sm["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"] // f.shared_size_bytes,
                 sm["MAX_THREADS_PER_MULTIPROCESSOR"] // BLOCK_THREADS)
    return gpu.sm_count * per_sm


def sweep(kernels, gpu, seed: int, budget_ms: float) -> dict:
    torch = cb.torch_cuda()
    held = slots(kernels, gpu)
    print(f"{gpu.sm_count} SMs hold {held} blocks of conv_implicit at once")
    print(f"{'N':>4s} {'blocks':>7s} {'of slots':>9s} {'ms':>9s} {'TFLOP/s':>8s} "
          f"{'cuDNN':>8s} {'% of cuDNN':>11s}")
    facts = {"slots": held}
    for n in BATCHES:
        layer = conv2d.Layer.random((n, *DEEP), np.random.default_rng(seed))
        layer.check(kernels, rungs=("implicit",))
        blocks = cb.ceil_div(layer.m, 128) * cb.ceil_div(layer.k, 128)
        ws = 4 * (layer.x.size + layer.w.size + layer.m * layer.k)
        t = cb.bench(lambda layer=layer: layer.run(kernels, "implicit"), working_set_bytes=ws,
                     budget_ms=budget_ms)
        rate = layer.flops / (t.median_ms * 1e-3) / 1e12
        facts.update({f"blocks_n{n}": blocks, f"ms_n{n}": t.median_ms, f"tflops_n{n}": rate})
        line = f"{n:4d} {blocks:7d} {100 * blocks / held:8.0f}% {t.median_ms:9.4f} {rate:8.2f}"
        if torch is not None:
            base = min(conv2d.cudnn_times(torch, layer, budget_ms, ws).values())
            facts[f"cudnn_tflops_n{n}"] = layer.flops / (base * 1e-3) / 1e12
            facts[f"of_cudnn_n{n}"] = base / t.median_ms
            line += f" {facts[f'cudnn_tflops_n{n}']:8.2f} {100 * base / t.median_ms:10.1f}%"
        print(line)
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    kernels = conv2d.load_kernels()
    rng = np.random.default_rng(args.seed)
    layers = [SANITIZER_LAYER] if os.environ.get("CUDABOOK_SANITIZER") else \
        [(n, *DEEP) for n in CHECK_BATCHES]
    for layer in layers:
        conv2d.Layer.random(layer, rng).check(kernels, rungs=("implicit",))
    if args.bench:
        cb.report_facts(baseline=conv2d.BASELINE, **sweep(kernels, gpu, args.seed, args.budget_ms))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
