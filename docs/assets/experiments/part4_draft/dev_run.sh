#!/usr/bin/env bash
# Development run on any GPU (not a record): chapter 20's drafts, then Part VI's
# torch-op checks. Needs part4_chapters.patch applied; carry .gpu and .whl
# (as run_all.sh). About 8 minutes; logs in $OUT.
set -u
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=code:/tmp/site
D=docs/assets/experiments/part4_draft; S=docs/assets/experiments/part6_draft
run() { n=$1; t=$2; shift 2; s=$(date +%s)
  timeout "$t" bash .gpu/gpu-env.sh python3 "$@" > "$OUT/$n.txt" 2>&1
  echo "== $n rc=$? $(( $(date +%s) - s ))s"; grep -vE "^ok |Warn" "$OUT/$n.txt" | tail -${TAILN:-25} | cut -c1-300; }
run training_kernels 60 $D/training_kernels.py
run adamw 80 $D/adamw.py --bench
run training_gpu 150 $D/training_gpu.py --steps 8 --json "$OUT/ours.json"
run gpu_checks 70 $S/gpu_checks.py
run broken_streams 30 $S/broken_streams.py
run reference_train 80 $D/reference_train.py --steps 20 --json "$OUT/ref.json"
exit 0
