#!/usr/bin/env bash
# There: run listings once and with --bench, writing no record; with --san,
# each run is under compute-sanitizer memcheck. Usage: try.sh [--san] chapter/listing ...
set -uo pipefail
cd "$(dirname "$0")/../.."
source .ci/gpu/env.sh
san=()
if [ "${1:-}" = --san ]; then
  san=(compute-sanitizer --tool memcheck --error-exitcode 9); shift
  export CUDABOOK_SANITIZER=memcheck     # listings then run their small sanitizer shapes
fi
fail=0
for l in "$@"; do
  for args in "" "--bench"; do
    echo "=== $l $args"
    bash .gpu/gpu-env.sh "${san[@]}" python3 "code/$l.py" $args 2>&1 | tee -a "$OUT/try.log"
    rc=${PIPESTATUS[0]}; echo "=== $l $args: exit $rc" | tee -a "$OUT/try.log"
    [ "$rc" = 0 ] || fail=1
    [ ${#san[@]} -gt 0 ] && break   # bench under the sanitizer times nothing useful
  done
done
exit "$fail"
