"""Solution to exercise 2: give the stem a fourth channel.

An RGB image has C = 3, so conv_implicit takes its scalar path on the
network's first layer: four loads a thread where a float4 would do, and two
divisions and two remainders for each. Padding the image to C = 4 with a
channel of zeros (and the filters with a row of zeros) puts every column
group of 4 back inside one pixel, and the kernel takes its float4 path.
The zeros change nothing: fma(0, w, acc) is acc, so the padded
convolution gives the same bits as the unpadded one.

Run:    python code/conv/ex2_pad_channels.py [--seed S] [--bench]
Checks: the C = 3 convolution against float64 (conv2d.py's bound), and
        the padded C = 4 one against it bit for bit (k = 0), at
        N=2, 23 x 23, K=64, 7 x 7 filter, stride 2, pad 3 (under
        compute-sanitizer N=1, 9 x 9, K=8), and under --bench on
        conv2d.py's stem layer (N=32, 224 x 224, K=64).
Bench:  the stem at C = 3 and at C = 4: ms and TFLOP/s counted on the
        C = 3 work for both, and cuDNN (conv2d.py's baseline, the faster of
        its two layouts) on each, in the same run; and the padded kernel
        against cuDNN's faster time of the two. The padding itself is
        not timed: a data loader can write the fourth channel as it
        decodes the images.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from conv import conv2d  # noqa: E402

CHECK_LAYER = (2, 23, 23, 3, 64, 7, 7, 2, 3)
SANITIZER_LAYER = (1, 9, 9, 3, 8, 7, 7, 2, 3)


# --8<-- [start:solution]
def padded(layer: conv2d.Layer) -> conv2d.Layer:
    """The same layer with a fourth channel of zeros, in X and in W."""
    x4 = np.concatenate([layer.x, np.zeros(layer.x.shape[:3] + (1,), np.float32)], axis=3)
    w4 = np.concatenate([layer.w, np.zeros(layer.w.shape[:2] + (1, layer.k), np.float32)], axis=2)
    return conv2d.Layer(x4, w4, layer.stride, layer.pad)


def same_bits(kernels, layer: conv2d.Layer) -> conv2d.Layer:
    layer.check(kernels, rungs=("implicit",))
    three = layer.y_gpu.get()
    four = padded(layer)
    cb.poison(four.y_gpu)
    four.run(kernels, "implicit")
    cb.report_check(cb.compare("C = 4 (a channel of zeros) == C = 3", four.y_gpu.get(), three, k=0))
    return four


def time_both(kernels, seed: int, budget_ms: float) -> dict:
    layer = conv2d.Layer.random(conv2d.BENCH_LAYERS["stem"], np.random.default_rng(seed))
    four = same_bits(kernels, layer)
    torch = cb.torch_cuda()
    facts = {}
    for c, lay in ((3, layer), (4, four)):
        ws = 4 * (lay.x.size + lay.w.size + lay.m * lay.k)
        t = cb.bench(lambda lay=lay: lay.run(kernels, "implicit"), working_set_bytes=ws,
                     budget_ms=budget_ms)
        facts[f"c{c}_ms"] = t.median_ms
        facts[f"c{c}_tflops"] = layer.flops / (t.median_ms * 1e-3) / 1e12
        line = f"C = {c}: conv_implicit {t.median_ms:.3f} ms, {facts[f'c{c}_tflops']:.2f} TFLOP/s"
        if torch is not None:
            base = min(conv2d.cudnn_times(torch, lay, budget_ms, ws).values())
            facts[f"cudnn_c{c}_ms"] = base
            facts[f"c{c}_of_cudnn"] = base / t.median_ms
            line += f"; cuDNN {base:.3f} ms, ours {100 * base / t.median_ms:.1f}% of it"
        print(line)
    facts["speedup"] = facts["c3_ms"] / facts["c4_ms"]
    if torch is not None:                  # against cuDNN on whichever input it ran faster
        best = min(facts["cudnn_c3_ms"], facts["cudnn_c4_ms"])
        facts["c4_of_cudnn_best"] = best / facts["c4_ms"]
        print(f"padded, ours is {100 * facts['c4_of_cudnn_best']:.1f}% of cuDNN's faster "
              f"time ({best:.3f} ms, at C = {3 if best == facts['cudnn_c3_ms'] else 4})")
    print(f"the fourth channel makes conv_implicit {facts['speedup']:.2f}x as fast "
          f"(TFLOP/s counted on the 3-channel work: the zeros are not work)")
    return facts
# --8<-- [end:solution]


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    kernels = conv2d.load_kernels()
    rng = np.random.default_rng(args.seed)
    layer = SANITIZER_LAYER if os.environ.get("CUDABOOK_SANITIZER") else CHECK_LAYER
    same_bits(kernels, conv2d.Layer.random(layer, rng))
    if args.bench:
        cb.report_facts(baseline=conv2d.BASELINE, **time_both(kernels, args.seed, args.budget_ms))
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
