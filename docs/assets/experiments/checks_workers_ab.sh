#!/usr/bin/env bash
# On the GPU machine, after a whole Part I suite: its checks pass alone, with
# 24 and 16 workers in turn, in a copy of the checkout (so that nothing it
# writes reaches the suite's records).
set -uo pipefail
K="why_gpus or first_kernel or threads_warps or kernels_go_wrong or ram_vram"
rm -rf /tmp/ab && cp -r . /tmp/ab && cd /tmp/ab
source .ci/gpu/env.sh
unset CUDA_DEVICE_MAX_CONNECTIONS
plugins=$(python3 -c "import sys; sys.path.insert(0,'code'); from cudabook.book_cli import UNUSED_PLUGINS as U; print(' '.join(f'-p no:{p}' for p in U))")
i=0; mkdir -p /tmp/abl
for n in 24 16 24; do
  i=$((i + 1))
  t0=$(date +%s.%N)
  CUDABOOK_STAGING=$(mktemp -d) CUDABOOK_RUN=abn$i REQUIRE_GPU=1 \
    timeout 150 bash .gpu/gpu-env.sh python3 -m pytest -p no:cacheprovider --maxschedchunk=1 $plugins \
    -m "gpu and not timed" -n $n tests/test_gpu.py tests/test_gpu_first_kernel.py -k "$K" -q > "/tmp/abl/checks-$i-n$n.log" 2>&1
  t1=$(date +%s.%N)
  echo "checks pass $i (-n $n): $(python3 -c "print(round($t1 - $t0, 1))") s; $(tail -1 "/tmp/abl/checks-$i-n$n.log")" | tee -a "$OUT/ab_n.txt"
done
tar czf "$OUT/ab_logs.tgz" -C /tmp abl
