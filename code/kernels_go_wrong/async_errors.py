"""Where a CUDA error surfaces: at the launch, or later.

A kernel launch only queues the kernel and returns; the kernel runs later.
So an error *inside* a kernel (here a write four terabytes past its buffer)
cannot be reported by the launch call: it surfaces at the next call that
waits for the GPU, such as Context.synchronize() or a copy. It is also
sticky: the context is dead, and every later call in the process fails.
An error in the launch *configuration* (2048 threads per block) is found
before anything runs, raised by the launch call itself, and harms nothing.

This program launches only correct kernels itself. Each failing case runs
in a child process (this same file, with a hidden --case argument), whose
output it prints and checks, because a dead context cannot be revived
within a process.

Run:    python code/kernels_go_wrong/async_errors.py
Checks: a correct launch works here; bad_config: the launch raises, and a
        correct launch afterwards in the same process works; illegal_address:
        the launch returns, synchronize raises, and a later copy raises too;
        the same with CUDA_LAUNCH_BLOCKING=1: the error surfaces at the launch
        or at the first call after it. The children's exit codes and stderr
        (PyCUDA may warn about a dead context at exit) are not checked.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # find cudabook when not installed
import cudabook as cb  # noqa: E402

KERNEL_FILE = Path(__file__).with_suffix(".cu")
WILD = 1 << 40  # an index far past any buffer: 4 TB past its start


def load_kernel():
    """poke(float* p, long long i, float v): a pointer, a 64-bit int, a float."""
    return cb.compile(KERNEL_FILE).get_function("poke").prepare("Pqf")


def poke(kernel, buf, i, v, block=1):
    kernel.prepared_call((1, 1, 1), (block, 1, 1), buf.gpudata, np.int64(i), np.float32(v))


# --8<-- [start:step]
def step(label, fn):
    """Run one step of a child and print one marker line saying how it ended.
    PyCUDA checks every driver call and raises a pycuda.driver.Error subclass."""
    import pycuda.driver as cuda

    try:
        fn()
    except cuda.Error as e:
        print(f"{label}: raised {type(e).__name__}: {e}", flush=True)
        return False
    print(f"{label}: returned", flush=True)
    return True
# --8<-- [end:step]


# --8<-- [start:children]
def child_bad_config(kernel):
    """A launch that cannot start, then a correct one in the same process."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    buf = gpuarray.to_gpu(np.zeros(1, np.float32))
    step("launch with 2048 threads per block", lambda: poke(kernel, buf, 0, 1.0, block=2048))
    step("launch with 1 thread per block", lambda: poke(kernel, buf, 0, 42.0))
    step("synchronize", cuda.Context.synchronize)
    print(f"value written: {buf.get()[0]}", flush=True)


def child_illegal_address(kernel):
    """A wild write, then the calls that follow it."""
    import pycuda.driver as cuda
    from pycuda import gpuarray

    buf = gpuarray.to_gpu(np.zeros(1, np.float32))
    step("launch", lambda: poke(kernel, buf, WILD, 1.0))
    step("synchronize", cuda.Context.synchronize)
    step("allocate", lambda: cuda.mem_alloc(4))
    step("copy to host", buf.get)
# --8<-- [end:children]


def run_case(case: str) -> int:
    """The child: run one failing case, printing a marker line per step."""
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING", "0")
    print(f"case {case}, CUDA_LAUNCH_BLOCKING={blocking}", flush=True)
    cb.init()
    kernel = load_kernel()
    {"bad_config": child_bad_config, "illegal_address": child_illegal_address}[case](kernel)
    sys.stdout.flush()
    # After a sticky error the context is dead and PyCUDA's clean-up at exit
    # could only fail noisily; leave at once.
    os._exit(0)


# --8<-- [start:spawn]
def spawn(case: str, blocking: bool = False) -> dict:
    """Run this file as a child process for one case; print its output and
    return {step label: the rest of its marker line}."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("CUDA_LAUNCH_BLOCKING", None)
    if blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"  # every launch waits for its kernel
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--case", case],
                       capture_output=True, text=True, env=env, timeout=300)
    print(f"--- child process: {case}{' with CUDA_LAUNCH_BLOCKING=1' if blocking else ''}")
    for line in r.stdout.splitlines():
        print(textwrap.fill(line, 80, initial_indent="    ", subsequent_indent="      "))
    markers = {}
    for line in r.stdout.splitlines():
        label, sep, rest = line.partition(": ")
        if sep:
            markers[label] = rest
    markers["_stderr"] = r.stderr
    return markers
# --8<-- [end:spawn]


def raised(markers, label):
    return markers.get(label, "").startswith("raised ")


def returned(markers, label):
    return markers.get(label) == "returned"


def diagnose(markers, ok):
    """If a check failed, show what the child said on stderr."""
    if not ok and markers["_stderr"].strip():
        print("    child stderr (last lines):")
        for line in markers["_stderr"].strip().splitlines()[-8:]:
            print(f"    ! {line}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) == 2 and argv[0] == "--case":
        return run_case(argv[1])
    cb.parse_args(argv, __doc__)

    cb.init()
    from pycuda import gpuarray

    # --8<-- [start:correct]
    kernel = load_kernel()
    buf = gpuarray.to_gpu(np.zeros(8, np.float32))
    poke(kernel, buf, 3, 42.0)          # a correct launch: PyCUDA checks the call
    got = buf.get()                     # the copy waits for the kernel, and checks it too
    # --8<-- [end:correct]
    want = np.zeros(8, np.float32)
    want[3] = 42.0
    cb.report_check(cb.expect("a correct launch works", bool(np.array_equal(got, want)),
                              f"p[3] = {got[3]}, the other 7 elements still 0"))

    # --8<-- [start:checks]
    m = spawn("bad_config")
    ok = raised(m, "launch with 2048 threads per block")
    cb.report_check(cb.expect("bad_config: the launch call raised", ok,
                              m.get("launch with 2048 threads per block", "(no marker)")))
    ok2 = (returned(m, "launch with 1 thread per block") and returned(m, "synchronize")
           and m.get("value written") == "42.0")
    cb.report_check(cb.expect("bad_config: the context still works", ok2,
                              f"next launch {m.get('launch with 1 thread per block')}, "
                              f"value written {m.get('value written')}"))
    diagnose(m, ok and ok2)
    config_error = m.get("launch with 2048 threads per block", "")

    m = spawn("illegal_address")
    checks = [
        cb.expect("illegal_address: the launch call returned", returned(m, "launch"),
                  f"launch {m.get('launch')}"),
        cb.expect("illegal_address: the error surfaced at synchronize", raised(m, "synchronize"),
                  f"synchronize {m.get('synchronize')}"),
        cb.expect("illegal_address: a later copy fails too", raised(m, "copy to host"),
                  f"copy to host {m.get('copy to host')}"),
    ]
    for c in checks:
        cb.report_check(c)
    diagnose(m, all(c.passed for c in checks))
    sync_error = m.get("synchronize", "")
    alloc_after = "raised" if raised(m, "allocate") else m.get("allocate", "no marker")

    m = spawn("illegal_address", blocking=True)
    first = next((s for s in ("launch", "synchronize", "allocate", "copy to host") if raised(m, s)), None)
    ok = first in ("launch", "synchronize") and raised(m, "copy to host")
    cb.report_check(cb.expect("CUDA_LAUNCH_BLOCKING=1: the error surfaced at or right after the launch",
                              ok, f"first call to raise: {first}"))
    diagnose(m, ok)
    # --8<-- [end:checks]

    cb.report_facts(config_error=config_error.removeprefix("raised "),
                    sync_error=sync_error.removeprefix("raised "),
                    alloc_after_fault=alloc_after, blocking_first_error=first or "none")
    return cb.finish()


if __name__ == "__main__":
    sys.exit(cb.run(main))
