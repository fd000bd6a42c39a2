#!/usr/bin/env bash
# one-off profiling of process start-up on the GPU machine
cd "$(dirname "$0")/../.."
source .ci/gpu/env.sh
env | grep -i "^PYTHON" ; nproc; python3 -c "import numpy,sys;print(numpy.__file__, sys.version)"; python3 -c "import torch;print(torch.__file__)"
touch "$(python3 -c 'import numpy,os;print(os.path.dirname(numpy.__file__))')/.w" 2>&1 && echo site-packages writable
G="bash .gpu/gpu-env.sh"
TIMEFORMAT=%R
t() { echo -n "$* : "; { time "$@" >/dev/null 2>&1; } 2>&1; }
export PYTHONPYCACHEPREFIX=/tmp/pyc
t $G python3 -c "import numpy"
t $G python3 -c "import numpy"
t $G python3 -c "import pycuda.driver"
t $G python3 -c "import torch"
t $G python3 -c "import torch"
t $G python3 code/first_kernel/add_vectorized.py --describe
t $G python3 code/first_kernel/add_vectorized.py --describe
t $G python3 code/first_kernel/add_vectorized.py --n 1
t $G python3 code/first_kernel/add_vectorized.py --n 1
t $G python3 code/first_kernel/add_vectorized.py --n 134217735
t $G python3 -c "import sys;sys.path.insert(0,'code');import cudabook as cb;cb.init()"
unset PYTHONDONTWRITEBYTECODE
echo "--- without PYTHONDONTWRITEBYTECODE"
t $G python3 -c "import numpy"
t $G python3 -c "import numpy"
t $G python3 -c "import torch"
t $G python3 -c "import torch"
t $G python3 code/first_kernel/add_vectorized.py --n 1
t $G python3 code/first_kernel/add_vectorized.py --n 1
$G python3 -X importtime code/first_kernel/add_vectorized.py --n 1 2>&1 | sort -t'|' -k2 -n | tail -6
t $G compute-sanitizer --tool memcheck python3 code/first_kernel/add_vectorized.py --n 1027
t $G compute-sanitizer --tool racecheck python3 code/first_kernel/add_vectorized.py --n 1027
t $G python3 code/first_kernel/add_vectorized.py --bench
echo "--- 16 at once, n=1"
par() { for i in $(seq 16); do $G python3 code/first_kernel/add_vectorized.py --n 1 >/dev/null 2>&1 & done; wait; }
t par
echo "--- collection, -n 16"
time ($G python3 -m pytest -p no:cacheprovider -m "gpu and not timed" -n 16 --collect-only -q tests/test_gpu.py 2>&1 | tail -2)
