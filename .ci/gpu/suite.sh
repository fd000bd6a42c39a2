#!/usr/bin/env bash
# There: the GPU suite (python -m cudabook verify), records and notebooks
# packed into $OUT/results.tgz even when it stops early. See README.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
source .ci/gpu/env.sh
pack() {
  # Only the records and notebooks this run changed or added: unpacking
  # them here can never put back an older record than the tree has (a
  # call that starts from a tree without an earlier call's records would
  # otherwise bring the old ones back).
  if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z -m -o --exclude-standard -- results 'chapters/*/*.ipynb' |
      tar czf "$OUT/results.tgz" --null --ignore-failed-read -T -
  else
    tar czf "$OUT/results.tgz" results chapters/*/*.ipynb
  fi
  git status --short results chapters > "$OUT/changed.txt" 2>/dev/null || true
}
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s)
timeout --signal=INT --kill-after=15 "${SUITE_TIMEOUT:-570}" \
  bash .gpu/gpu-env.sh env REQUIRE_GPU=1 python3 -m cudabook verify "$@" 2>&1 | tee "$OUT/suite.log"
rc=${PIPESTATUS[0]}
echo "suite: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/suite.log"
exit "$rc"
