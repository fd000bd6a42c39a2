#!/usr/bin/env bash
# On the GPU machine: Part I's whole suite once (a freshly started machine's
# time), then its timed pass alone four times on the same machine, in turn
# with xdist's order and with tests/scheduling.py's (commit ffed499, plus the
# CUDABOOK_XDIST_ORDER=1 line of ABOUT.txt), to compare the two.
set -uo pipefail
K="why_gpus or first_kernel or threads_warps or kernels_go_wrong or ram_vram"
SUITE_TIMEOUT=280 bash .ci/gpu/suite.sh -v --durations=0 -k "$K" > "$OUT/full.out" 2>&1
echo "full suite: $(tail -1 "$OUT/suite.log")" | tee "$OUT/ab.txt"
source .ci/gpu/env.sh
alone=(--deselect "tests/test_gpu.py::test_benchmark[why_gpus/gelu_cpu_vs_gpu]"
       --deselect "tests/test_gpu.py::test_benchmark[why_gpus/ex1_add_one_crossover]")
i=0
for order in xdist ours xdist ours; do
  i=$((i + 1))
  flag=0; [ "$order" = xdist ] && flag=1
  t0=$(date +%s.%N)
  CUDABOOK_XDIST_ORDER=$flag CUDABOOK_STAGING=$(mktemp -d) CUDABOOK_RUN=ab$i REQUIRE_GPU=1 \
    timeout 150 bash .gpu/gpu-env.sh python3 -m pytest -p no:cacheprovider --maxschedchunk=1 \
    -m "gpu and timed" -n 16 tests/test_gpu.py tests/test_gpu_first_kernel.py "${alone[@]}" \
    -k "$K" -v --durations=0 2>&1 | python3 -u -c 'import sys, time
t0 = time.monotonic()
for line in sys.stdin:
    sys.stdout.write(f"{time.monotonic() - t0:6.1f} {line}")' > "$OUT/pass2-$i-$order.log"
  t1=$(date +%s.%N)
  echo "timed pass $i ($order): $(python3 -c "print(round($t1 - $t0, 1))") s; $(grep -E 'passed|failed' "$OUT/pass2-$i-$order.log" | tail -1)" | tee -a "$OUT/ab.txt"
done
