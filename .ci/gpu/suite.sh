#!/usr/bin/env bash
# There: the GPU suite (python -m cudabook verify), records and notebooks
# packed into $OUT/results.tgz even when it stops early. See README.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
source .ci/gpu/env.sh
pack() {
  # Only the records and notebooks this run wrote: unpacking them here can
  # never put back an older record than the tree has (a call that starts
  # from a tree without an earlier call's records would otherwise bring the
  # old ones back). Written since the mark, not changed since git's HEAD:
  # the machine's copy of .git may name another commit than the tree's.
  find results chapters -newer "$mark" -type f \( -name '*.json' -o -name '*.ipynb' \) -print0 |
    tar czf "$OUT/results.tgz" --null -T -
  tar tzf "$OUT/results.tgz" > "$OUT/changed.txt"
}
mark=$(mktemp)
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s)
timeout --signal=INT --kill-after=15 "${SUITE_TIMEOUT:-570}" \
  bash .gpu/gpu-env.sh env REQUIRE_GPU=1 python3 -m cudabook verify "$@" 2>&1 | tee "$OUT/suite.log"
rc=${PIPESTATUS[0]}
echo "suite: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/suite.log"
exit "$rc"
