#!/usr/bin/env bash
# Next session's first device call (see NEXT.md), from the repository root:
#   run(command="bash wip/device1.sh", carry=[".gpu", ".whl"], timeout_s=600)
# Everything is logged under $OUT; nothing is written to results/.
set -uo pipefail
source .ci/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
# 1. ch16 candidates, checked then timed against SDPA (S=4096, D=64/128, non-causal)
timeout 240 bash .gpu/gpu-env.sh python3 wip/attn_bench.py --quick 2>&1 | tee "$OUT/attn_bench.log"
# 2. ch17 listings once and with --bench (torch.compile included)
timeout 200 bash .ci/gpu/try.sh transformer/gpt2_block transformer/ex1_unfused_tail
# 3. memcheck on the restructured kernel and the block at their sanitizer shapes
timeout 120 bash .ci/gpu/try.sh --san attention/flash_bf16 transformer/gpt2_block
