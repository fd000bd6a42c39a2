"""Solution to exercise 2: one sequence instead of eight.

The same GPT-2 small block at B = 1, T = 1024: 1,024 rows instead of
8,192. Every product still cuts C into tiles of a fixed size, one block
each, so the grids shrink eightfold. With wgmma_gemm's 128 x 256 tiles
(one block an SM), c_proj and c_proj2 (N = 768) get 8 x 3 = 24 blocks on
132 SMs; with rung 4's 128 x 128 (two an SM), 48. PyTorch's cuBLAS picks
its tiles for each shape. This exercise measures what that does to the
block, step by step, against B = 8 in the same run.

Run:    python code/transformer/ex2_batch_one.py [--seed S] [--bench]
Checks: the chapter's checks (each launch, and the block end to end) at
        (B, T, C, H) = (1, 1, 64, 1) and (1, 70, 128, 2) (the same under
        compute-sanitizer), and under --bench at both benchmark shapes.
Bench:  the block at B = 8 and at B = 1 (T = 1024, C = 768, H = 12)
        against the same nn.Module in bf16, as gpt2_block.time_block times
        it: ours in alternation with its eager forward captured once as one
        CUDA graph and replayed (which the host cannot pace), then with its
        eager forward as Python issues it (the host-bound figure), each
        ratio the median of its rounds' ratios (no torch.compile here); at
        B = 1 also each launch against PyTorch's ops for the step. Printed
        beside it: the blocks each product launches and how many of the
        GPU's slots (blocks an SM holds, times the SMs) they fill.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from transformer import gpt2_block as gb  # noqa: E402

SHAPES = [(1, 1, 64, 1), (1, 70, 128, 2)]
BENCH_SHAPES = {"b8": (8, 1024, 768, 12), "b1": (1, 1024, 768, 12)}


def product_grids(b, t, c, kind: str) -> dict:
    """Blocks each product launches: one per tile of its output, of the
    size the kind of product uses (gpt2_block.PRODUCTS)."""
    m, (bm, bn) = b * t, gb.PRODUCTS[kind].tile
    return {name: cb.ceil_div(n, bn) * cb.ceil_div(m, bm)
            for name, n in (("c_attn", 3 * c), ("c_proj", c), ("c_fc", 4 * c), ("c_proj2", c))}


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    gpu = cb.init()
    k = gb.load_kernels()
    rng = np.random.default_rng(args.seed)
    torch = cb.torch_cuda() if args.bench else None
    for b, t, c, h in SHAPES:
        gb.run_shape(k, b, t, c, h, rng, torch)
    if args.bench:
        facts = {}
        for tag, shape in BENCH_SHAPES.items():
            facts.update(gb.time_block(k, shape, args.seed, args.budget_ms, compile=False,
                                       steps=tag == "b1", tag=f"{tag}_"))
            slots = gb.PRODUCTS[k["products"]].blocks_per_sm * gpu.sm_count
            for name, blocks in product_grids(*shape[:3], k["products"]).items():
                print(f"  {name:8s} {blocks:5,} blocks = {blocks / slots:5.2f} of the {slots} slots "
                      f"({k['products']} products)")
                facts[f"{tag}_{name}_blocks"] = blocks
        facts["slots"] = gb.PRODUCTS[k["products"]].blocks_per_sm * gpu.sm_count
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
