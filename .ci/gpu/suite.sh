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
machine() {
  # What the machine waited on, so that two runs' times can be told apart:
  # the kernel's pressure stall totals (time some task waited for a CPU,
  # for memory, for the disk), page faults and reads from disk, since boot.
  echo "== $1"
  for f in /proc/pressure/cpu /proc/pressure/memory /proc/pressure/io; do
    [ -r "$f" ] && sed "s|^|$(basename "$f") |" "$f"
  done
  # the CPU's time since boot, in ticks: user nice system idle iowait irq
  # softirq steal (steal: time the virtual machine's CPUs were running another's)
  grep -E '^cpu ' /proc/stat
  grep -E '^(pgfault|pgmajfault|pgpgin|thp_fault_alloc|thp_fault_fallback) ' /proc/vmstat
  grep -E '^(MemTotal|MemFree|Cached):' /proc/meminfo
}
before=$(mktemp)
records > "$before"
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
{
  echo "uptime_s $(cut -d' ' -f1 /proc/uptime)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA node\(s\))'
  echo "transparent_hugepage $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  machine "before the suite"
} > "$OUT/machine.txt" 2>&1
start=$(date +%s)
timeout --signal=INT --kill-after=15 "${SUITE_TIMEOUT:-570}" \
  bash .gpu/gpu-env.sh env REQUIRE_GPU=1 python3 -m cudabook verify "$@" 2>&1 |
  python3 -u -c 'import sys, time
t0 = time.monotonic()
for line in sys.stdin:   # each line with the seconds since the suite started: a timeline
    sys.stdout.write(f"{time.monotonic() - t0:6.1f} {line}")' | tee "$OUT/suite.log"
rc=${PIPESTATUS[0]}
machine "after the suite" >> "$OUT/machine.txt" 2>&1
echo "suite: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/suite.log"
exit "$rc"
