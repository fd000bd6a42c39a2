#!/usr/bin/env bash
# Records chapters 18 and 19 (Part IV) on the book's GPU, once
# part4_chapters.patch is applied, in two device calls (each fits the
# 10-minute limit; together about 12 minutes on an H100, measured):
#
#   git apply docs/assets/experiments/part4_draft/part4_chapters.patch
#   run (carry .gpu and .whl):  PART=attention bash docs/assets/experiments/part4_draft/run_all.sh
#   run (carry .gpu and .whl):  PART=backprop  bash docs/assets/experiments/part4_draft/run_all.sh
#
# Each stops at once on any GPU but an H200 (the book's records are all
# from one kind of GPU). It runs the GPU suite on what is stale in that
# chapter (listings, memcheck, the notebook) and returns the new records
# and notebooks in $OUT/records.tgz: untar them at the repository root,
# check `python -m cudabook list`, build with --strict, commit.
# PART=experiments runs the two experiments still waiting (threads order,
# issue #38's histogram) on any GPU.
set -u
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu" | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=code:/tmp/site
if [ "${PART:-}" = experiments ]; then
  timeout 100 bash .gpu/gpu-env.sh python3 docs/assets/experiments/torch_threads_order.py > "$OUT/threads_order.txt" 2>&1
  echo "== threads order rc=$?"; grep -v Warn "$OUT/threads_order.txt" | tail -8
  timeout 200 bash .gpu/gpu-env.sh python3 docs/assets/experiments/part2_draft/histogram.py --bench > "$OUT/histogram.txt" 2>&1
  echo "== histogram rc=$?"; grep -vE "^ok |Warn" "$OUT/histogram.txt" | tail -40
  exit 0
fi
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing recorded"; exit 3 ;; esac
case "${PART:-}" in attention) k=attention_backward ;; backprop) k=backprop ;; *) echo "PART=attention|backprop|experiments"; exit 2 ;; esac
touch /tmp/marker; sleep 1
REQUIRE_GPU=1 timeout "${LIMIT:-560}" bash .gpu/gpu-env.sh python3 -m cudabook verify --stale -q -k "$k" > "$OUT/verify.log" 2>&1
echo "verify rc=$?"
find results chapters -newer /tmp/marker -type f \( -name '*.json' -o -name '*.ipynb' \) -print0 | tar --null -czf "$OUT/records.tgz" -T -
tar -tzf "$OUT/records.tgz"
tail -30 "$OUT/verify.log"
