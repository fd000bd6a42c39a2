"""GPU records: which listings exist, what they hash to, and what the GPU said.

A listing is `code/<chapter>/<name>.py`, with its kernel in `<name>.cu` when it
has one. Its GPU record is `results/<chapter>/<name>.json`, written by the GPU
test suite (`pytest -m gpu`). A record is *current* when its content hash
equals the hash of the listing's files plus the helper modules that run on
the GPU (RUNTIME_MODULES). Editing the site, the docs or the tests does not
touch the hash; editing a kernel, its host program or the runtime helpers does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Helper modules whose code runs when a listing runs: part of every hash.
RUNTIME_MODULES = ("__init__.py", "gpu.py", "compile.py", "check.py", "bench.py",
                   "roofline.py", "cli.py")
#: Helper modules that only build the book or run the tests: not hashed.
TOOLING_MODULES = ("records.py", "mkdocs_hooks.py", "notebooks.py", "plots.py", "__main__.py")

HELPER_PACKAGE = "cudabook"
ALONE = re.compile(r"^Needs:\s+the GPU to itself\b", re.M)
EXPECT = re.compile(r"^Expect:\s+compute-sanitizer --tool (memcheck|racecheck|initcheck|synccheck)\b", re.M)


@dataclass(frozen=True)
class Listing:
    chapter: str
    name: str
    root: Path = ROOT

    @property
    def id(self) -> str:
        return f"{self.chapter}/{self.name}"

    @property
    def py(self) -> Path:
        return self.root / "code" / self.chapter / f"{self.name}.py"

    @property
    def cu(self) -> Path | None:
        p = self.py.with_suffix(".cu")
        return p if p.exists() else None

    @property
    def files(self) -> list[Path]:
        return [p for p in (self.py, self.cu) if p is not None]

    @property
    def broken_tool(self) -> str | None:
        """For a deliberately broken listing (chapter "When kernels go wrong"):
        the compute-sanitizer tool that must report it, from a docstring line
        `Expect: compute-sanitizer --tool memcheck reports ...`. Its GPU test
        passes only when that tool finds the bug; it is run at no other size."""
        m = EXPECT.search(self.py.read_text())
        return m.group(1) if m else None

    @property
    def needs_gpu_alone(self) -> bool:
        """A listing whose plain run measures the hardware (bandwidth, block
        scheduling) says so with a docstring line `Needs:  the GPU to itself`;
        the GPU suite then runs it with no other test on the GPU."""
        return bool(ALONE.search(self.py.read_text()))

    @property
    def record_path(self) -> Path:
        return self.root / "results" / self.chapter / f"{self.name}.json"

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()


def chapters(root: Path = ROOT) -> list[str]:
    """Code folders that hold listings (every folder of code/ but the helper package)."""
    code = root / "code"
    return sorted(p.name for p in code.iterdir()
                  if p.is_dir() and p.name != HELPER_PACKAGE and p.name.isidentifier()
                  and not p.name.startswith("_"))


def discover(root: Path = ROOT) -> list[Listing]:
    """Every listing in the book, in a stable order."""
    out = []
    for ch in chapters(root):
        for py in sorted((root / "code" / ch).glob("*.py")):
            if not py.name.startswith("_"):
                out.append(Listing(ch, py.stem, root))
    return out


IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w, ]+)|import\s+([\w.]+))", re.M)


def uses(listing: Listing) -> list[Listing]:
    """Other listings whose code this one imports (`from <chapter>.<name> import
    ...`, `from <chapter> import <name>`, or `import <name>` of a listing in
    the same folder), directly or through them. An
    exercise's solution that reuses a chapter listing's kernel must go stale
    when that kernel changes, so their files are part of its hash."""
    known = {lst.id: lst for lst in discover(listing.root)}
    found: dict[str, Listing] = {}
    todo = [listing]
    while todo:
        cur = todo.pop()
        for frm, names, imp in IMPORT.findall(cur.py.read_text()):
            ids = []
            if frm and "." in frm:
                ids.append(frm.replace(".", "/", 1))
            elif frm:                       # from <chapter> import <name>, or from <sibling> import ...
                ids += [f"{frm}/{n.strip()}" for n in names.split(",")] + [f"{cur.chapter}/{frm}"]
            elif imp and "." in imp:
                ids.append(imp.replace(".", "/", 1))
            elif imp:                       # import <sibling>, with the listing's folder on sys.path
                ids.append(f"{cur.chapter}/{imp}")
            for lid in ids:
                if lid in known and lid != listing.id and lid not in found:
                    found[lid] = known[lid]
                    todo.append(known[lid])
    return sorted(found.values(), key=lambda lst: lst.id)


def hashed_files(listing: Listing) -> list[Path]:
    """The listing's files, those of the listings it imports, and the runtime helpers."""
    pkg = listing.root / "code" / HELPER_PACKAGE
    own = listing.files + [f for dep in uses(listing) for f in dep.files]
    return own + [pkg / m for m in RUNTIME_MODULES]


def content_hash(listing: Listing) -> str:
    """sha256 over the listing's files and the runtime helper modules,
    each entered as its path and its bytes."""
    h = hashlib.sha256()
    for p in hashed_files(listing):
        h.update(listing.rel(p).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def load_record(listing: Listing) -> dict | None:
    p = listing.record_path
    if not p.exists():
        return None
    return json.loads(p.read_text())


def status(listing: Listing) -> tuple[str, dict | None]:
    """('current' | 'stale' | 'failed' | 'missing', record)."""
    rec = load_record(listing)
    if rec is None:
        return "missing", None
    if rec.get("hash") != content_hash(listing):
        return "stale", rec
    if not rec.get("passed"):
        return "failed", rec
    return "current", rec


def reverify_command(listing: Listing) -> str:
    return (f"on a GPU machine: REQUIRE_GPU=1 python -m pytest -m gpu -k '{listing.name}' "
            f"then commit {listing.rel(listing.record_path)}")


def rate_text(bps: float) -> str:
    """A rate in bytes/s for prose and badges: '4.38 TB/s' or '55 GB/s'."""
    return f"{bps / 1e12:.2f} TB/s" if bps >= 1e12 else f"{bps / 1e9:.0f} GB/s"


def utc_now() -> str:
    """The timestamp written into records and notebooks."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(listing: Listing) -> dict:
    """What a listing's command line accepts ({"sized": ..., "bench": ...}),
    asked of the listing itself (`--describe` needs no GPU)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(listing.py), "--describe"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"{listing.id} --describe failed:\n{r.stderr}")
    return json.loads(r.stdout)


def facts(record: dict) -> dict:
    """A record's named findings: the first run's facts, overlaid by those
    of the benchmark run. What [[rec:...:facts.<key>]] in prose and the
    charts read."""
    out = dict(next((r.get("facts") for r in record.get("runs", []) if r.get("facts")), {}) or {})
    out.update((record.get("benchmark") or {}).get("facts") or {})
    return out


def headline(record: dict) -> str | None:
    """The one number a badge shows: the best benchmark's rate and its share
    of the ceiling, e.g. '4.12 TB/s (95% of copy)'."""
    benches = (record.get("benchmark") or {}).get("benchmarks") or []
    if not benches:
        return None
    b = max(benches, key=lambda b: b["bytes_per_s"])
    s = f"{rate_text(b['bytes_per_s'])} ({100 * b['fraction_of_ceiling']:.0f}% of copy"
    if "baseline" in b:
        s += f", {b['baseline']['ratio']:.2f}x {b['baseline']['name']}"
    return s + ")"


def badge_text(record: dict) -> str:
    env = record.get("environment", {})
    if record.get("broken"):
        return (f"broken on purpose: compute-sanitizer --tool {record['broken']} catches it · "
                f"{env.get('gpu', 'unknown GPU')} · {record.get('date', '?')[:10]}")
    cc = env.get("compute_capability", "?").replace(".", "")
    parts = [env.get("gpu", "unknown GPU"), f"sm_{cc}", f"CUDA {env.get('cuda', '?')}",
             record.get("date", "?")[:10]]
    h = headline(record)
    if h:
        parts.append(h)
    return " · ".join(parts)
