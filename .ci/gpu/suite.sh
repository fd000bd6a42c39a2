#!/usr/bin/env bash
# There: the GPU suite (python -m cudabook verify), records and notebooks
# packed into $OUT/results.tgz even when it stops early. See README.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
source .ci/gpu/env.sh
records() {
  find results chapters -type f \( -name '*.json' -o -name '*.ipynb' \) -print0 |
    xargs -0 -r sha256sum | LC_ALL=C sort
}
pack() {
  # Only the records and notebooks this run wrote or changed: unpacking them
  # here can never put back an older record than the tree has (a call that
  # starts from a tree without an earlier call's records would otherwise
  # bring the old ones back). Found by their content before and after the
  # run, not by git (the machine's copy of .git may name another commit)
  # nor by file times (a copied tree's times need not be this machine's).
  records | LC_ALL=C comm -13 "$before" - | cut -c67- | tr '\n' '\0' |
    tar czf "$OUT/results.tgz" --null -T -
  tar tzf "$OUT/results.tgz" > "$OUT/changed.txt"
  rm -f "$before"
}
before=$(mktemp)
records > "$before"
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s)
timeout --signal=INT --kill-after=15 "${SUITE_TIMEOUT:-570}" \
  bash .gpu/gpu-env.sh env REQUIRE_GPU=1 python3 -m cudabook verify "$@" 2>&1 |
  python3 -u -c 'import sys, time
t0 = time.monotonic()
for line in sys.stdin:   # each line with the seconds since the suite started: a timeline
    sys.stdout.write(f"{time.monotonic() - t0:6.1f} {line}")' | tee "$OUT/suite.log"
rc=${PIPESTATUS[0]}
echo "suite: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/suite.log"
exit "$rc"
