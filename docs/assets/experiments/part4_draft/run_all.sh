#!/usr/bin/env bash
# One device call for every draft of this folder and the threads-order
# experiment: each draft's checks and --bench, then each under memcheck at
# its small sizes; logs under $OUT. From the repository root, on the GPU
# machine, with the PyCUDA wheels (.gpu/gpu-env.sh) and the notebooks'
# wheels (.whl/, for liger-kernel) carried:
#   bash docs/assets/experiments/part4_draft/run_all.sh
set -u
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=code:/tmp/site
timeout 100 bash .gpu/gpu-env.sh python3 docs/assets/experiments/torch_threads_order.py > "$OUT/threads_order.txt" 2>&1
echo "== threads order rc=$?"; grep -v Warn "$OUT/threads_order.txt" | tail -8
for d in cross_entropy adamw embedding_backward bias_grad attention_backward linear_backward; do
  timeout "${EACH:-120}" bash .gpu/gpu-env.sh python3 "docs/assets/experiments/part4_draft/$d.py" --bench > "$OUT/$d.txt" 2>&1
  echo "== $d rc=$?"; grep -E "^(FAIL|ok )|ours|ratio|GB/s|Error|error" "$OUT/$d.txt" | grep -v "^ok " | tail -14
  grep -c "^ok " "$OUT/$d.txt"
done
for d in cross_entropy adamw embedding_backward bias_grad attention_backward linear_backward; do
  timeout 120 bash .gpu/gpu-env.sh compute-sanitizer --tool memcheck --error-exitcode 9 python3 \
    "docs/assets/experiments/part4_draft/$d.py" $([ "$d" = adamw ] && echo --n 1027) > "$OUT/san_$d.txt" 2>&1
  echo "== memcheck $d rc=$?"; tail -2 "$OUT/san_$d.txt"
done
# issue #38's histogram draft (Part II)
timeout 120 bash .gpu/gpu-env.sh python3 docs/assets/experiments/part2_draft/histogram.py --bench > "$OUT/histogram.txt" 2>&1
echo "== histogram rc=$?"; grep -E "^FAIL|ratio|GB/s" "$OUT/histogram.txt" | tail -12
timeout 120 bash .gpu/gpu-env.sh compute-sanitizer --tool memcheck --error-exitcode 9 python3 \
  docs/assets/experiments/part2_draft/histogram.py --n 1027 > "$OUT/san_histogram.txt" 2>&1
echo "== memcheck histogram rc=$?"; tail -2 "$OUT/san_histogram.txt"
