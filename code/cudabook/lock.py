"""Sharing one GPU between many checks, and giving it to one timing alone.

When the test suite runs listings side by side (`pytest -n 16`), it names a
lock file in CUDABOOK_GPU_LOCK. A listing then holds the lock *shared* from
`parse_args()` to `finish()`, and *alone* from the moment it times something
(`bench`, `time_cpu`) or says it measures the hardware (`gpu_alone`) until
`finish()`. An exclusive holder has its GPU to itself: no other listing
process that uses that GPU is running. On a machine with one GPU that is
every listing process, so neither the GPU nor the CPU cores are busy with
another listing's work while it measures (work the lock cannot see still
runs: a process starting up before it asks for the lock).

On a machine with several GPUs the suite gives each GPU its own lock
(CUDABOOK_GPU_LOCK names the listing's), so timings on different GPUs run
side by side. What the GPUs share is taken whole: a CPU timing
(`time_cpu`) and a listing that measures the hardware (`gpu_alone`: host
copies cross the same memory and PCIe root) hold every GPU's lock
(CUDABOOK_MACHINE_LOCKS, `exclusive(machine=True)`). On one GPU the two
are the same lock.

A waiting timer goes first: new processes queue behind it (a turnstile), so
timing cannot starve while checks keep arriving. A process started by a
holder (a listing that runs a failing case in a child process) is covered by
its parent's hold and takes none itself: waiting for the lock while its
parent waits for it would deadlock. (While a parent moves from its GPU's
lock to every GPU's it holds nothing, so its children are not covered
then; no listing of the book times while a child runs.) Without CUDABOOK_GPU_LOCK
(a reader running a listing) all of this does nothing. Under
compute-sanitizer (CUDABOOK_SANITIZER) nothing is measured, so the lock
stays shared.

The locks are POSIX file locks (fcntl). Native Windows has none; there the
package still imports, so that a listing can say what is missing (gpu.py),
and asking for a lock is an error that says why.
"""

from __future__ import annotations

import os

try:
    import fcntl
except ImportError:                  # native Windows
    fcntl = None

_state = {"fds": {}, "held": [], "mode": None}
OWNER = "CUDABOOK_GPU_LOCK_OWNER"   # the pid of the process holding the lock, for its children
MACHINE = "CUDABOOK_MACHINE_LOCKS"  # every GPU's lock, for what the GPUs share


def _split(value: str | None) -> list[str]:
    return [p for p in (value or "").split(os.pathsep) if p]


def _paths(machine: bool = False) -> list[str]:
    """The lock files to hold: one a GPU the listing uses (CUDABOOK_GPU_LOCK,
    several joined by os.pathsep for a listing that uses several GPUs), or,
    with machine=True, every GPU's (CUDABOOK_MACHINE_LOCKS, which includes
    the listing's own). Always taken in sorted order, so two listings
    cannot deadlock."""
    if os.environ.get(OWNER) not in (None, str(os.getpid())):
        return []                    # a parent holds it for us
    mine = _split(os.environ.get("CUDABOOK_GPU_LOCK"))
    if mine and fcntl is None:
        raise RuntimeError("CUDABOOK_GPU_LOCK is set, but this system has no POSIX file locks "
                           "(fcntl): the GPU suite runs on Linux")
    if machine and mine:
        mine = sorted(set(mine) | set(_split(os.environ.get(MACHINE))))
    return sorted(set(mine))


def _turnstile(path: str) -> None:
    """Wait until no exclusive request is queued ahead of us."""
    with open(path + ".turnstile", "a") as t:
        fcntl.flock(t, fcntl.LOCK_EX)
        fcntl.flock(t, fcntl.LOCK_UN)


def _fd(path: str):
    if path not in _state["fds"]:
        _state["fds"][path] = open(path, "a")
    return _state["fds"][path]


def _let_go() -> None:
    for path in _state["held"]:
        fcntl.flock(_fd(path), fcntl.LOCK_UN)
    _state["held"] = []


def shared() -> None:
    """Hold the GPU(s) shared (from a listing's start, and by init())."""
    paths = _paths()
    if not paths or _state["mode"] is not None:
        return
    for path in paths:
        _turnstile(path)
        fcntl.flock(_fd(path), fcntl.LOCK_SH)
    _state["held"] = paths
    _state["mode"] = "shared"
    os.environ[OWNER] = str(os.getpid())


def exclusive(machine: bool = False) -> None:
    """Hold the GPU(s) (and the machine's share that goes with them) alone
    until release(); with machine=True, every GPU of the machine."""
    paths = _paths(machine)
    if not paths or os.environ.get("CUDABOOK_SANITIZER"):
        return
    if _state["mode"] == "exclusive" and set(paths) <= set(_state["held"]):
        return
    _let_go()                                  # never wait while holding any of them
    for path in paths:
        with open(path + ".turnstile", "a") as t:
            fcntl.flock(t, fcntl.LOCK_EX)      # queue ahead of later arrivals
            fcntl.flock(_fd(path), fcntl.LOCK_EX)  # wait for the running ones to finish
            fcntl.flock(t, fcntl.LOCK_UN)
    _state["held"] = paths
    _state["mode"] = "exclusive"
    os.environ[OWNER] = str(os.getpid())


def alone() -> bool:
    """Does this process hold the GPU(s) alone now?"""
    return _state["mode"] == "exclusive"


def release() -> None:
    """Let go of the GPU(s), shared or alone (a listing's finish()): a notebook
    that runs one listing after another holds nothing in between."""
    if _state["mode"] is None:
        return
    _let_go()
    _state["mode"] = None
    os.environ.pop(OWNER, None)
