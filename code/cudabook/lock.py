"""Sharing one GPU between many checks, and giving it to one timing alone.

When the test suite runs listings side by side (`pytest -n 16`), it names a
lock file in CUDABOOK_GPU_LOCK. A listing then holds the lock *shared* from
`parse_args()` to `finish()`, and *alone* from the moment it times something
(`bench`, `time_cpu`) or says it measures the hardware (`gpu_alone`) until
`finish()`. An exclusive holder has the machine to itself: no
other listing process is running, so neither the GPU nor the CPU cores are
busy with anything else while it measures.

A waiting timer goes first: new processes queue behind it (a turnstile), so
timing cannot starve while checks keep arriving. A process started by a
holder (a listing that runs a failing case in a child process) is covered by
its parent's hold and takes none itself: waiting for the lock while its
parent waits for it would deadlock. Without CUDABOOK_GPU_LOCK
(a reader running a listing) all of this does nothing. Under
compute-sanitizer (CUDABOOK_SANITIZER) nothing is measured, so the lock
stays shared.
"""

from __future__ import annotations

import fcntl
import os

_state = {"fds": [], "mode": None}
OWNER = "CUDABOOK_GPU_LOCK_OWNER"   # the pid of the process holding the lock, for its children


def _paths() -> list[str]:
    """The lock files to hold: one a GPU the listing uses (CUDABOOK_GPU_LOCK,
    several joined by os.pathsep for a listing that uses several GPUs),
    always taken in the same order, so two such listings cannot deadlock."""
    if os.environ.get(OWNER) not in (None, str(os.getpid())):
        return []                    # a parent holds it for us
    value = os.environ.get("CUDABOOK_GPU_LOCK") or ""
    return [p for p in value.split(os.pathsep) if p]


def _turnstile(path: str) -> None:
    """Wait until no exclusive request is queued ahead of us."""
    with open(path + ".turnstile", "a") as t:
        fcntl.flock(t, fcntl.LOCK_EX)
        fcntl.flock(t, fcntl.LOCK_UN)


def _fds(paths: list[str]) -> list:
    if not _state["fds"]:
        _state["fds"] = [open(p, "a") for p in paths]
    return _state["fds"]


def shared() -> None:
    """Hold the GPU(s) shared (from a listing's start, and by init())."""
    paths = _paths()
    if not paths or _state["mode"] is not None:
        return
    for path, fd in zip(paths, _fds(paths)):
        _turnstile(path)
        fcntl.flock(fd, fcntl.LOCK_SH)
    _state["mode"] = "shared"
    os.environ[OWNER] = str(os.getpid())


def exclusive() -> None:
    """Hold the GPU(s) (and the machine's share that goes with them) alone
    until release()."""
    paths = _paths()
    if not paths or _state["mode"] == "exclusive" or os.environ.get("CUDABOOK_SANITIZER"):
        return
    fds = _fds(paths)
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_UN)        # never wait while holding any of them shared
    for path, fd in zip(paths, fds):
        with open(path + ".turnstile", "a") as t:
            fcntl.flock(t, fcntl.LOCK_EX)     # queue ahead of later arrivals
            fcntl.flock(fd, fcntl.LOCK_EX)    # wait for the running ones to finish
            fcntl.flock(t, fcntl.LOCK_UN)
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
    for fd in _state["fds"]:
        fcntl.flock(fd, fcntl.LOCK_UN)
    _state["mode"] = None
    os.environ.pop(OWNER, None)
