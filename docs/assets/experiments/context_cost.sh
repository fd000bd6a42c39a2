#!/usr/bin/env bash
# Ran once (2026-12-02) from an untracked prof/ folder of the checkout, on the H200 machine.
# Is starting a CUDA context serialised between processes? Each line: the
# seconds cb.init() took in one of 16 processes started at once.
cd "$(dirname "$0")/.."
source .ci/gpu/env.sh
nvidia-smi -q | grep -i -E "persistence|compute mode|MIG Mode" -A1 | head -12
P='import sys, time; sys.path.insert(0,"code"); import cudabook as cb; t=time.perf_counter(); cb.init(); print(f"{time.perf_counter()-t:.2f}")'
el() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%7.2f", b-a}'; }
for v in "" "CUDA_DEVICE_MAX_CONNECTIONS=1" "CUDA_MODULE_LOADING=EAGER"; do
  echo "== 1 alone, then 16 at once: $v"
  env $v bash .gpu/gpu-env.sh python3 -c "$P"
  s=$EPOCHREALTIME
  for i in $(seq 16); do env $v bash .gpu/gpu-env.sh python3 -c "$P" & done | sort -n | tr '\n' ' '; wait
  echo; echo "$(el $s) s all 16"
done
echo "== cuInit and cuCtxCreate apart (ctypes), 16 at once"
C='import ctypes, time; c=ctypes.CDLL("libcuda.so.1"); t=time.perf_counter(); c.cuInit(0); t1=time.perf_counter(); d=ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d),0); x=ctypes.c_void_p(); r=c.cuCtxCreate_v2(ctypes.byref(x),0,d); t2=time.perf_counter(); c.cuCtxDestroy_v2(x); t3=time.perf_counter(); print(f"init {t1-t:.2f} ctx {t2-t1:.2f} destroy {t3-t2:.2f} rc {r}")'
python3 -c "$C"
s=$EPOCHREALTIME
for i in $(seq 16); do python3 -c "$C" & done | sort -k4 -n | tr '\n' ';'; wait
echo; echo "$(el $s) s all 16"
echo "== 16 at once, while one process holds a context open (as the suite has many)"
python3 -c 'import ctypes, time; c=ctypes.CDLL("libcuda.so.1"); c.cuInit(0); d=ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d),0); x=ctypes.c_void_p(); c.cuCtxCreate_v2(ctypes.byref(x),0,d); time.sleep(8)' &
sleep 2
s=$EPOCHREALTIME
for i in $(seq 16); do python3 -c "$C" & done | sort -k4 -n | tr '\n' ';'; wait
echo; echo "$(el $s) s all 16 (and the holder)"
