"""Solution to exercise 3: where the time goes as the sequence grows.

The GPT-2 small block with the number of tokens held at 8,192 (B T), and
T = 256, 1024 and 4096 (B = 32, 8 and 2). The products and the
LayerNorms do the same work at every T; attention's grows with T (each
token attends to up to T earlier ones). This exercise measures each
launch's share of the block at each T, ours and PyTorch's, in one run.

Run:    python code/transformer/ex3_long_sequences.py [--seed S] [--bench]
Checks: the chapter's checks (each launch, and the block end to end) at
        (B, T, C, H) = (1, 1, 64, 1) and (2, 77, 128, 2) (the same under
        compute-sanitizer), and under --bench at each benchmark shape.
Bench:  the block, against PyTorch's as gpt2_block.time_block times it
        (its eager forward replayed as one CUDA graph, and as Python issues
        it, each in alternation with ours; no torch.compile here), and each
        launch beside PyTorch's ops for the step, at each T; the attention
        step's share of the steps' sum, ours and PyTorch's.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402
from transformer import gpt2_block as gb  # noqa: E402

SHAPES = [(1, 1, 64, 1), (2, 77, 128, 2)]
TOKENS = 8 * 1024
LENGTHS = (256, 1024, 4096)


def main(argv=None) -> int:
    args = cb.parse_args(argv, __doc__, bench_n=0)
    cb.init()
    k = gb.load_kernels()
    rng = np.random.default_rng(args.seed)
    torch = cb.torch_cuda() if args.bench else None
    for b, t, c, h in SHAPES:
        gb.run_shape(k, b, t, c, h, rng, torch)
    if args.bench:
        facts = {}
        for t in LENGTHS:
            tag = f"t{t}_"
            f = gb.time_block(k, (TOKENS // t, t, 768, 12), args.seed, args.budget_ms, compile=False,
                              tag=tag)
            facts.update(f)
            share = f[f"{tag}step_attention_ms"] / f[f"{tag}steps_sum_ms"]
            facts[f"{tag}attention_share"] = share
            line = f"  T={t}: attention is {100 * share:.0f}% of our steps"
            theirs = [v for name, v in f.items() if name.startswith(f"{tag}torch_step_")]
            if theirs:
                tshare = f[f"{tag}torch_step_attention_ms"] / sum(theirs)
                facts[f"{tag}torch_attention_share"] = tshare
                line += f", {100 * tshare:.0f}% of PyTorch's"
            print(line)
        cb.report_facts(**facts)
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
