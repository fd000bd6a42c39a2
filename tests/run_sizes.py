"""Run one listing at several sizes in one process: the GPU suite's small sizes.

    python tests/run_sizes.py <listing.py> <out dir> <n>:<seed> [<n>:<seed> ...]

For each size this calls the listing's main(["--n", n, "--seed", seed,
"--json", <out dir>/n<n>.json]) through cb.run, as `python <listing.py> --n
<n> --seed <seed>` would, and keeps in <out dir>:

- n<n>.started before the size starts, so that a crash names its size;
- n<n>.stdout and n<n>.stderr: everything written to the process's standard
  output and error while it ran (file descriptors 1 and 2, so a child
  process's output and C-level output are kept too);
- n<n>.run.json when it is done: its exit code and wall time.

The sizes share one CUDA context. Why: on the H200 machine, creating a CUDA
context takes about 0.2 s, and contexts do not start in parallel, whatever
the number of cores. Sixteen listing processes started together took 3.5 s
to get their contexts; one process alone, 0.5 s from start to exit. At the
warp-edge sizes a listing's own work is a few milliseconds, so five
processes cost five contexts for nothing. The large size still runs in a
process of its own (tests/test_gpu.py), beside the others.

What a size leaves behind does not reach the next: the GPU's work is
waited for at the end of each size (an error it raises is that size's),
and the GPU lock and the listing's report are let go of even when the size
raises. A size that fails does not stop the next one. A crash of the whole
process leaves the size it was running with n<n>.started and its output
but no n<n>.run.json (faulthandler writes the Python stack to its
n<n>.stderr), and the sizes after it with nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path


@contextlib.contextmanager
def _output_to(stdout: Path, stderr: Path):
    """Send file descriptors 1 and 2 (and so sys.stdout, sys.stderr, child
    processes and C code) to these two files until the block ends."""
    libc = ctypes.CDLL(None)

    def flush():
        sys.stdout.flush()
        sys.stderr.flush()
        libc.fflush(None)                    # C stdio's buffers (printf from a kernel)

    flush()
    saved = os.dup(1), os.dup(2)
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            yield
        finally:
            flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _exit_code(e: SystemExit) -> int:
    """The exit status sys.exit(e.code) would give the process."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)           # sys.exit("message") prints it and exits 1
    return 1


def _after_size() -> None:
    """Wait for the GPU's work of the size just run, so that an error it
    raises is charged to that size."""
    from cudabook import gpu

    if gpu._GPU is not None:
        import pycuda.driver as cuda

        cuda.Context.synchronize()


def main(argv: list[str]) -> int:
    listing, out, *pairs = argv
    out = Path(out)
    path = Path(listing).resolve()
    # As `python <listing.py>` would: its folder first on the path, and the
    # module findable by its name (dataclasses and pickling look it up).
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"listing_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)          # its imports, and cudabook's path
    import cudabook as cb
    from cudabook import listing_cli, lock

    faulthandler.enable()                    # writes to descriptor 2: the running size's stderr
    for pair in pairs:
        n, seed = pair.split(":")
        args = ["--n", n, "--seed", seed, "--json", str(out / f"n{n}.json")]
        (out / f"n{n}.started").touch()
        t0 = time.perf_counter()
        with _output_to(out / f"n{n}.stdout", out / f"n{n}.stderr"):
            code, interrupted = 1, False
            try:
                code = cb.run(lambda: module.main(args))
                code = 0 if code is None else code
            except SystemExit as e:          # argparse's errors, or a listing's own exit
                code = _exit_code(e)
            except KeyboardInterrupt:
                interrupted = True
                raise
            except BaseException:            # what would have ended the process: report it, go on
                traceback.print_exc()
                code = 1
            finally:
                if not interrupted:
                    try:                     # the size's kernels, however it ended, are its own
                        _after_size()
                    except BaseException:
                        traceback.print_exc()
                        code = code or 1
                lock.release()               # finish() does, unless the size raised first
                listing_cli._report.clear()
        run = {"returncode": code, "wall_s": time.perf_counter() - t0}
        (out / f"n{n}.run.json").write_text(json.dumps(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
