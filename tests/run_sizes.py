"""Run one listing at several sizes in one process: the GPU suite's small sizes.

    python tests/run_sizes.py <listing.py> <out dir> <n>:<seed> [<n>:<seed> ...]

For each size this calls the listing's main(["--n", n, "--seed", seed,
"--json", <out dir>/n<n>.json]) through cb.run, as `python <listing.py> --n
<n> --seed <seed>` would, and keeps what that run printed, its exit code and
its wall time in <out dir>/n<n>.run.json. The sizes share one CUDA context.

Why: on the H200 machine, creating a CUDA context takes about 0.2 s, and the
driver creates one at a time, whatever the number of cores. Sixteen listing
processes started together took 3.5 s to get their contexts; one process
alone, 0.5 s from start to exit. At the warp-edge sizes a listing's own work
is a few milliseconds, so five processes cost five contexts for nothing. The
large size still runs in a process of its own (tests/test_gpu.py), beside
the others.

A size that fails does not stop the next one. A crash of the whole process
(a segfault) leaves the sizes it did not reach without a .run.json, and the
test reports them as not run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    listing, out, *pairs = argv
    path = Path(listing).resolve()
    spec = importlib.util.spec_from_file_location(f"listing_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)          # its imports, and cudabook's path
    import cudabook as cb

    for pair in pairs:
        n, seed = pair.split(":")
        args = ["--n", n, "--seed", seed, "--json", str(Path(out) / f"n{n}.json")]
        stdout, stderr = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = cb.run(lambda: module.main(args))
            except SystemExit as e:          # argparse's errors, or a listing's own exit
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:            # what would have ended the process: report it, go on
                traceback.print_exc()
                code = 1
        run = {"returncode": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
               "wall_s": time.perf_counter() - t0}
        (Path(out) / f"n{n}.run.json").write_text(json.dumps(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
