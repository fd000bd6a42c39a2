#!/usr/bin/env bash
# Ran once (2026-12-02) from an untracked prof/ folder of the checkout, on the H200 machine.
# Where a Part I run's time goes, alone and 16 at once (see ABOUT).
cd "$(dirname "$0")/.."
source .ci/gpu/env.sh
G="bash .gpu/gpu-env.sh"
export CUDABOOK_STAGING=$(mktemp -d) CUDABOOK_RUN=prof
el() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%7.2f", b-a}'; }
t() { local s=$EPOCHREALTIME; "$@" > /tmp/t.out 2>&1; local rc=$?; echo "$(el $s) s rc=$rc  $*"; }
LST=code/first_kernel/add_vectorized.py
echo "== warm-up (installs, compile cache)"
t $G python3 $LST --n 1027
t $G python3 $LST --n 1027
echo "== plain runs alone"
t $G python3 -c pass
t $G python3 -c "import numpy"
t $G python3 -c "import sys; sys.path.insert(0,'code'); import cudabook"
t $G python3 -c "import sys; sys.path.insert(0,'code'); import cudabook as cb; cb.init()"
t $G python3 $LST --n 1027
t $G python3 code/kernels_go_wrong/async_errors.py
echo "== sanitizer runs alone"
for tool in memcheck racecheck initcheck synccheck; do
  S="compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 --target-processes application-only"
  t $G $S python3 -c pass
  t $G $S python3 -c "import sys; sys.path.insert(0,'code'); import cudabook as cb; cb.init()"
  t $G env CUDABOOK_SANITIZER=$tool $S python3 $LST --n 1027
done
S="compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes application-only"
t $G env CUDABOOK_SANITIZER=memcheck $S --check-device-heap no python3 $LST --n 1027
t $G env CUDABOOK_SANITIZER=memcheck $S --show-backtrace no python3 $LST --n 1027
t $G env CUDABOOK_SANITIZER=memcheck $S --target-processes application-only --check-exit-code no python3 $LST --n 1027
t $G env CUDABOOK_SANITIZER=memcheck $S python3 code/kernels_go_wrong/async_errors.py
echo "== one sanitizer run's profile (memcheck, add_vectorized)"
$G env CUDABOOK_SANITIZER=memcheck $S python3 -m cProfile -s cumtime $LST --n 1027 2>&1 | head -45
echo "== 16 at once: plain n=1027, then memcheck, then racecheck (each: wall of all)"
for mode in plain memcheck racecheck; do
  s=$EPOCHREALTIME
  for i in $(seq 16); do
    if [ $mode = plain ]; then $G python3 $LST --n 1027 >/dev/null 2>&1 &
    else $G env CUDABOOK_SANITIZER=$mode compute-sanitizer --tool $mode --error-exitcode 99 --target-processes application-only python3 $LST --n 1027 >/dev/null 2>&1 & fi
  done; wait
  echo "$(el $s) s  16 x $mode"
done
echo "== bench run alone, profiled (add_vectorized --bench)"
$G python3 -m cProfile -s cumtime $LST --bench 2>&1 | grep -v "^$" | head -50
echo "== 16 bench runs at once (add_vectorized --bench), each its wall; no lock"
s=$EPOCHREALTIME
for i in $(seq 16); do ( s1=$EPOCHREALTIME; $G python3 $LST --bench >/dev/null 2>&1; echo "  $(el $s1)" ) & done; wait
echo "$(el $s) s  all 16"
echo "== pytest start-up: collection with descriptions (fresh staging), then without"
t $G python3 -m pytest --co -q -p no:cacheprovider -m gpu tests
tail -1 /tmp/t.out
t $G python3 -m pytest --co -q -p no:cacheprovider -m gpu tests
t $G python3 -m pytest --co -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_gpu_first_kernel.py
t $G python3 -m pytest --co -q -p no:cacheprovider -p no:benchmark -p no:hypothesispytest -p no:jaxtyping -p no:cov -p no:anyio -m gpu tests/test_gpu.py tests/test_gpu_first_kernel.py
tail -3 /tmp/t.out
echo "== timed-chapter listings alone, profiled top"
for l in ram_vram/bandwidth_meter ram_vram/ex3_copy_size threads_warps/block_rate; do
  $G python3 -m cProfile -s cumtime code/$l.py 2>&1 | grep -E "^\s+[0-9]" | head -14
done
