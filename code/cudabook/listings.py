"""The book's listings: which exist, which files belong to each, what each
imports, and what each says about itself.

A listing is `code/<chapter>/<name>.py`, with its kernel in `<name>.cu` when
it has one. A file under `code/<chapter>/` whose name starts with `_` is a
helper: a Python module (`_common.py`) or a kernel header (`_tiles.cuh`)
that listings import or `#include`; it belongs to every listing that uses
it. Every other file there is an orphan, and the tests fail on it.

What a listing imports is read from its syntax tree (`import x`,
`from a.b import c`, `importlib.import_module("x")`), never run.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .suite import module_constant

ROOT = Path(__file__).resolve().parents[2]
HELPER_PACKAGE = "cudabook"
EXPECT = re.compile(r'^Expect:\s+compute-sanitizer --tool (memcheck|racecheck|initcheck|synccheck)\s+'
                    r'reports\s+"([^"]+)"', re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def exercise_number(name: str) -> int | None:
    """N for a listing named ex<N>_<what>, the solution to exercise N of its
    chapter (CONTRIBUTING.md, 'Exercise solutions'); None for any other."""
    m = re.match(r"ex(\d+)_", name)
    return int(m.group(1)) if m else None


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
    def expectation(self) -> tuple[str, str] | None:
        """For a listing broken on purpose: (tool, error class) from its
        docstring line `Expect: compute-sanitizer --tool T reports "E" ...`.
        Its GPU test passes only when tool T reports an error whose text
        contains E; it runs at no other size."""
        m = EXPECT.search(self.py.read_text())
        return (m.group(1), m.group(2)) if m else None

    @property
    def broken_tool(self) -> str | None:
        e = self.expectation
        return e[0] if e else None

    @property
    def exercise(self) -> int | None:
        return exercise_number(self.name)

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


def find(listing_id: str, root: Path = ROOT) -> Listing:
    chapter, name = listing_id.split("/")
    return Listing(chapter, name, root)


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def imported_modules(py: Path) -> set[str]:
    """Every module name a Python file imports, read from its syntax tree:
    `import a.b`, `from a import b` (as `a` and `a.b`), and
    `importlib.import_module("a.b")` with a literal name. Relative imports
    are returned with their leading dots."""
    return set(_imported_modules(str(py), py.read_text()))


@functools.lru_cache(maxsize=4096)
def _imported_modules(filename: str, text: str) -> frozenset[str]:
    """imported_modules of a file's text, parsed once per text: hashing all
    94 listings reads the helper package's modules 94 times over."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text, filename=filename)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(base)
            sep = "" if base.endswith(".") else "."
            names |= {f"{base}{sep}{a.name}" for a in node.names if a.name != "*"}
        elif (isinstance(node, ast.Call) and _dotted(node.func) in
              ("importlib.import_module", "import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return frozenset(names)


def _code_file(root: Path, chapter: str, module: str) -> Path | None:
    """The file under code/ that a module name means, seen from a file in
    code/<chapter>/ (whose folder is on sys.path when it runs as a script)."""
    parts = module.split(".")
    candidates = []
    if len(parts) == 2:
        candidates.append(root / "code" / parts[0] / f"{parts[1]}.py")
    if len(parts) == 1:
        candidates.append(root / "code" / chapter / f"{parts[0]}.py")
    for c in candidates:
        if c.is_file() and c.parent.name != HELPER_PACKAGE:
            return c
    return None


CODE_SUFFIXES = (".py", ".cu", ".cuh")


def data_files(py: Path) -> list[Path]:
    """The data files a module of code/<chapter>/ reads from its own folder:
    files whose name starts with `_` and is not code (`_book.txt`), named
    whole in one of the module's string literals. They belong to the
    listings that run the module, and are hashed with their code: the
    same code on other data is another experiment."""
    try:
        tree = ast.parse(py.read_text(), filename=str(py))
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_") \
                and "/" not in node.value and not node.value.endswith(CODE_SUFFIXES):
            p = py.parent / node.value
            if p.is_file() and p not in out:
                out.append(p)
    return sorted(out)


def _included(cu: Path) -> list[Path]:
    """Files a .cu file #includes with quotes, from its own folder."""
    out = []
    for name in INCLUDE.findall(cu.read_text()):
        p = cu.parent / name
        if p.is_file():
            out.append(p)
    return out


def code_closure(listing: Listing) -> list[Path]:
    """The chapter files whose code runs when the listing runs: its own, those
    of the listings and helpers it imports (directly or through them), the
    files their kernels #include, and the data files they read (data_files).
    In a stable order, own files first."""
    root = listing.root
    seen: dict[Path, None] = {}
    todo = list(listing.files)
    while todo:
        f = todo.pop(0)
        if f in seen:
            continue
        seen[f] = None
        if f.suffix == ".py":
            for m in sorted(imported_modules(f)):
                dep = _code_file(root, f.parent.name, m)
                if dep is not None:
                    todo.append(dep)
                    cu = dep.with_suffix(".cu")
                    if cu.is_file():
                        todo.append(cu)
            todo += data_files(f)
        elif f.suffix in (".cu", ".cuh"):
            todo += _included(f)
    own = listing.files
    return own + sorted((p for p in seen if p not in own), key=lambda p: p.as_posix())


def uses(listing: Listing) -> list[Listing]:
    """Other listings whose code this one runs (an exercise's solution that
    reuses a chapter listing's kernel)."""
    known = {lst.py: lst for lst in discover(listing.root)}
    return sorted({known[p] for p in code_closure(listing) if p in known and p != listing.py},
                  key=lambda lst: lst.id)


def launches_kernels(listing: Listing) -> bool:
    """Does running the listing launch a kernel of the book's own (its .cu, or
    one of a listing or helper it uses)? Such a listing runs under every
    compute-sanitizer tool."""
    return any(p.suffix in (".cu", ".cuh") for p in code_closure(listing))


def _cpu_timers(py: Path, root: Path, stack: tuple = ()) -> tuple[set[str], bool]:
    """(the names of a module under code/ that time CPU code, does the
    module's own code time CPU code). A name times CPU code if it is a
    function that uses time_cpu, or a timing function of another module of
    the book's code (imported by name, or reached through its module), or
    another such function of this module; or if it is such a function
    imported from elsewhere. Read from the syntax trees, so a name that
    happens to match counts too: it errs towards "times"."""
    if py in stack:
        return set(), False
    try:
        tree = ast.parse(py.read_text(), filename=str(py))
    except SyntaxError:
        return set(), False
    chapter, inner = py.parent.name, stack + (py,)
    imported: set[str] = set()                      # timing names that came in by import
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            dep = _code_file(root, chapter, node.module)
            if dep is not None:                     # from ch.module import f
                got = _cpu_timers(dep, root, inner)[0]
                imported |= {a.asname or a.name for a in node.names if a.name in got}
            for a in node.names:                    # from ch import module; module.f(...)
                sub = _code_file(root, chapter, f"{node.module}.{a.name}")
                if sub is not None:
                    imported |= _cpu_timers(sub, root, inner)[0]
        elif isinstance(node, ast.Import):          # import ch.module [as m]; m.f(...)
            for a in node.names:
                dep = _code_file(root, chapter, a.name)
                if dep is not None:
                    imported |= _cpu_timers(dep, root, inner)[0]

    def names(node) -> set[str]:
        return {n.attr if isinstance(n, ast.Attribute) else n.id
                for n in ast.walk(node) if isinstance(n, (ast.Attribute, ast.Name))}

    funcs = {n.name: names(n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    known = imported | {"time_cpu"}
    own: set[str] = set()
    while True:
        more = {f for f, used in funcs.items() if used & (known | own)} - own
        if not more:
            break
        own |= more
    top = any(names(n) & (known | own) for n in tree.body
              if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Import, ast.ImportFrom)))
    return own | imported, bool(own) or top


def times_cpu(listing: Listing) -> bool:
    """Does running the listing time CPU code: does its code use time_cpu,
    or a function of another listing or helper that does? All the cores
    take part in such a timing, so the suite runs it when nothing else is
    running at all (book_cli.verify)."""
    return _cpu_timers(listing.py, listing.root)[1]


HOST_BOUND = "HOST_BOUND_TIMINGS"


def _host_bound_declaration(py: Path) -> bool | None:
    """What the module sets HOST_BOUND_TIMINGS to at its top level (plain
    or annotated), or None where it does not say True or False."""
    try:
        said = module_constant(py.read_text(), HOST_BOUND)
    except (SyntaxError, ValueError):
        return None
    return said if isinstance(said, bool) else None


def times_host(listing: Listing) -> bool:
    """Does the listing time GPU work whose speed is the host's? PyTorch's
    eager modules issue each operation from Python, and on short work the
    GPU then waits on the CPU: such a time moves with whatever else runs on
    the CPU. A listing says so with HOST_BOUND_TIMINGS = True at its top
    level; one that imports such a listing inherits it, unless it says
    HOST_BOUND_TIMINGS = False itself. The suite runs these timings alone,
    as it does CPU timings (book_cli.verify)."""
    own = {f for f in listing.files if f.suffix == ".py"}
    for f in own:
        said = _host_bound_declaration(f)
        if said is not None:
            return said
    return any(_host_bound_declaration(f) for f in code_closure(listing) if f.suffix == ".py" and f not in own)


def helper_modules(listing: Listing) -> list[Path]:
    """The modules of the helper package that run when the listing runs: the
    package's __init__ and everything it imports, and any module the
    listing's code imports by name (cudabook.x), followed through their
    relative imports."""
    pkg = listing.root / "code" / HELPER_PACKAGE
    wanted = {pkg / "__init__.py"}
    for f in code_closure(listing):
        if f.suffix == ".py":
            wanted |= {pkg / f"{m.split('.')[1]}.py" for m in imported_modules(f)
                       if m.startswith(HELPER_PACKAGE + ".") and (pkg / f"{m.split('.')[1]}.py").is_file()}
    seen: set[Path] = set()
    todo = sorted(wanted)
    while todo:
        f = todo.pop()
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        for m in imported_modules(f):
            if m.startswith(".") and not m.startswith(".."):
                name = m.lstrip(".").split(".")[0]
                if name:
                    todo.append(pkg / f"{name}.py")
    return sorted(seen, key=lambda p: p.name)


def orphans(root: Path = ROOT) -> list[Path]:
    """Files under code/<chapter>/ that belong to no listing: neither a
    listing's .py or .cu, nor a helper (`_*`) that some listing uses."""
    used: set[Path] = set()
    for lst in discover(root):
        used |= set(code_closure(lst))
    out = []
    for ch in chapters(root):
        for p in sorted((root / "code" / ch).iterdir()):
            if p.name == "__pycache__" or p in used:
                continue
            out.append(p)
    return out


def describe(listing: Listing, env: dict | None = None) -> dict:
    """What a listing's command line accepts ({"sized": ..., "bench": ...}),
    asked of the listing itself (`--describe` needs no GPU)."""
    r = subprocess.run([sys.executable, str(listing.py), "--describe"], capture_output=True,
                       text=True, timeout=60, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{listing.id} --describe failed:\n{r.stderr}")
    return json.loads(r.stdout)


def describe_all(found: list[Listing], env: dict | None = None) -> dict[str, dict | str]:
    """describe() for many listings at once, one process per listing, as
    many at a time as there are cores. A listing that cannot describe
    itself maps to the error's text instead."""
    from concurrent.futures import ThreadPoolExecutor

    def one(lst: Listing) -> dict | str:
        try:
            return describe(lst, env)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            return str(e)

    with ThreadPoolExecutor(max_workers=max(2, len(os.sched_getaffinity(0)))) as pool:
        got = dict(zip((lst.id for lst in found), pool.map(one, found)))
    for lst in found:                      # a failure under load is asked again, alone
        if isinstance(got[lst.id], str):
            got[lst.id] = one(lst)
    return got
