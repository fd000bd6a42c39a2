"""Diagnostic only (untracked, prof/): log cudabook.lock's calls with wall
times, one JSON line each, to /tmp/locklog/<pid>.jsonl. Loaded through
PYTHONPATH=prof; wraps cudabook.lock when something imports it."""
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

_T0 = time.time()
_DIR = "/tmp/locklog"
_f = None


def _log(ev, **kw):
    global _f
    if _f is None:
        os.makedirs(_DIR, exist_ok=True)
        _f = open(f"{_DIR}/{os.getpid()}.jsonl", "a", buffering=1)
        _f.write(json.dumps({"ev": "start", "t": _T0, "pid": os.getpid(), "ppid": os.getppid(),
                             "argv": sys.argv, "san": os.environ.get("CUDABOOK_SANITIZER"),
                             "owner": os.environ.get("CUDABOOK_GPU_LOCK_OWNER")}) + "\n")
        import atexit
        atexit.register(lambda: _f.write(json.dumps({"ev": "exit", "t": time.time()}) + "\n"))
    _f.write(json.dumps({"ev": ev, "t": time.time(), **kw}) + "\n")


def _wrap(mod):
    for name in ("shared", "exclusive", "release"):
        orig = getattr(mod, name)

        def w(*a, _orig=orig, _name=name, **k):
            before = mod._state["mode"]
            t = time.time()
            r = _orig(*a, **k)
            _log(_name, t_call=t, before=before, after=mod._state["mode"], held=len(mod._state["held"]))
            return r
        setattr(mod, name, w)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "cudabook.lock":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        orig_exec = spec.loader.exec_module

        def exec_module(module):
            orig_exec(module)
            _wrap(module)
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
