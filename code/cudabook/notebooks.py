"""Companion notebooks, generated from a chapter's listings.

The listings stay the single source: `build(chapter)` makes the notebook's
cells from them (each listing's docstring, its kernel source, and a cell that
runs it with its checks), in the order the chapter uses them, and the tests
fail if the stored notebook's cells differ from a fresh build. `execute`
runs it in a Jupyter kernel on a GPU machine and stores the outputs, so the
site can show a real run to readers with no GPU. The first cell makes it
work on Colab.

    python -m cudabook.notebooks build first_kernel      # cells only
    python -m cudabook.notebooks execute first_kernel    # on a GPU: cells + outputs

Notebooks are written to chapters/<chapter>/<chapter>.ipynb.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from . import hashing, listings, project, record, suite
from .listings import ROOT, Listing

SETUP = '''\
# Make the book's code importable. On Google Colab, first fetch the book and
# install PyCUDA (Colab's GPU runtimes have the CUDA toolkit PyCUDA needs).
# Safe to run again, and after a restart of the runtime.
import importlib.util, os, subprocess, sys
from pathlib import Path
if "google.colab" in sys.modules:
    book = Path("/content/cudabook")
    if not (book / "code" / "cudabook").is_dir():
        subprocess.run(["git", "clone", "--depth", "1", "{repo}", str(book)], check=True)
    if importlib.util.find_spec("pycuda") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pycuda"], check=True)
    os.chdir(book)
for up in [Path.cwd(), *Path.cwd().parents]:
    if (up / "code" / "cudabook").is_dir():
        sys.path.insert(0, str(up / "code"))
        break
else:
    raise RuntimeError("run this notebook from inside the cudabook repository")'''


def colab_url(chapter: str, root: Path = ROOT) -> str:
    return (f"https://colab.research.google.com/github/{project.slug(root)}/blob/{project.BRANCH}/"
            f"chapters/{chapter}/{chapter}.ipynb")


def chapter_listings(chapter: str, root: Path = ROOT) -> list[Listing]:
    """The chapter's listings in the order the chapter first includes them."""
    found = [lst for lst in listings.discover(root) if lst.chapter == chapter]
    page = root / "chapters" / chapter / "index.md"
    text = page.read_text() if page.exists() else ""

    def first_use(lst):
        spots = [text.find(f"code/{chapter}/{lst.name}.{ext}") for ext in ("py", "cu")]
        spots = [p for p in spots if p >= 0]
        return min(spots) if spots else len(text)

    return sorted(found, key=first_use)


def _doc_cell(lst: Listing) -> dict:
    """The listing's docstring: prose as Markdown, the Run/Checks part verbatim."""
    doc = lst.py.read_text().split('"""')[1].strip()
    prose, sep, rest = doc.partition("\nRun:")
    text = f"## `{lst.name}`\n\n{prose.strip()}\n"
    if sep:
        text += f"\n```text\nRun:{rest.rstrip()}\n```\n"
    return _md(text)


ANNOTATION = re.compile(r"\s*// \(\d+\)!\s*$")


def _kernel_source(lst: Listing) -> str:
    """The .cu file without its snippet section markers and without the
    site's code-annotation markers (`// (1)!`), which mean nothing here."""
    lines = lst.cu.read_text().rstrip().splitlines()
    return "\n".join(ANNOTATION.sub("", ln) for ln in lines if "--8<--" not in ln)


def path(chapter: str, root: Path = ROOT) -> Path:
    return root / "chapters" / chapter / f"{chapter}.ipynb"


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": text}


def chapter_title(chapter: str, root: Path = ROOT) -> str:
    """The chapter page's first heading, e.g. "Threads, warps and SMs"."""
    page = root / "chapters" / chapter / "index.md"
    for line in (page.read_text().splitlines() if page.exists() else []):
        if line.startswith("# "):
            return line[2:].split(":")[0].strip()
    return chapter.replace("_", " ").capitalize()


def _sanitizer_cell(lst: Listing, sized: bool) -> str:
    """A deliberately broken listing is shown being caught: run it under the
    compute-sanitizer tool its docstring names, which must report an error."""
    args = f', "--n", "{suite.SANITIZER_N}"' if sized else ""
    return (
        "# Broken on purpose: run it under compute-sanitizer, which must catch the bug.\n"
        "import shutil, subprocess\n"
        'sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"\n'
        f'r = subprocess.run([sanitizer, "--tool", "{lst.broken_tool}", "--error-exitcode", "99",\n'
        f'                    "--print-limit", "3", sys.executable, "{lst.rel(lst.py)}"{args}],\n'
        "                   capture_output=True, text=True, cwd=up)\n"
        'print("\\n".join(ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("=========")))\n'
        'assert r.returncode == 99, f"compute-sanitizer did not report the bug (exit {r.returncode})"'
    )


def _timing_note(lst: Listing) -> dict:
    """Said after the cell of a listing that has a benchmark. The notebook
    runs each listing's checks, not its benchmark: the GPU suite times every
    benchmark once for the record, which the chapter shows, and timing it
    again here only made the suite slower."""
    return _md(f"To time it as well, run `{lst.name}.main([\"--bench\"])`. The chapter shows "
               "the timing recorded on the book's GPU.")


def build(chapter: str, root: Path = ROOT, describe=listings.describe) -> dict:
    """The notebook for a chapter, without outputs. `describe` says what a
    listing's command line accepts (the test suite passes the answers it
    already has)."""
    found = chapter_listings(chapter, root)
    title = chapter_title(chapter, root)
    cells = [
        _md(f"# {title}: companion notebook\n\n"
            f"[Open in Colab]({colab_url(chapter, root)}) (choose a GPU runtime)\n\n"
            f"Generated from the chapter's listings in `code/{chapter}/`. Each listing runs "
            "its checks here; the outputs below come from a run on the GPU named in the last "
            "cell. The timings are in the chapter, from the book's GPU records."),
        _code(SETUP.replace("{repo}", project.repository(root))),
    ]
    for lst in found:
        cells.append(_doc_cell(lst))
        if lst.cu is not None:
            cells.append(_md(f"The kernel, `{lst.rel(lst.cu)}`:\n\n```cuda\n{_kernel_source(lst)}\n```"))
        if lst.broken_tool:
            cells.append(_code(_sanitizer_cell(lst, describe(lst)["sized"])))
            continue
        cells.append(_code(f"from {chapter} import {lst.name}\n"
                           f"assert {lst.name}.main([]) == 0"))
        if describe(lst)["bench"]:
            cells.append(_timing_note(lst))
    cells.append(_code("import cudabook\ncudabook.gpu.environment()"))
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i:02d}"
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "accelerator": "GPU",
            "cudabook": {"chapter": chapter,
                         "listings": {lst.id: hashing.content_hash(lst) for lst in found}},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def out_of_date(chapter: str, root: Path = ROOT, describe=listings.describe) -> str | None:
    """Why the stored notebook is not the executed form of a fresh build
    (missing, other cells, other code, never executed), or None."""
    stored_path = path(chapter, root)
    if not stored_path.exists():
        return f"no notebook for {chapter}"
    fresh = build(chapter, root, describe)

    def src(nb):
        return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    try:                                   # e.g. a merge conflict left in the file
        stored = json.loads(stored_path.read_text())
        same_cells = src(stored) == src(fresh)
        ran = stored["metadata"]["cudabook"]["listings"]
        executed = stored["metadata"]["cudabook"].get("executed")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{stored_path.name} cannot be read as a notebook ({type(e).__name__}: {e})"
    if not same_cells:
        return f"{stored_path.name} is out of date with its listings"
    if ran != fresh["metadata"]["cudabook"]["listings"]:
        return f"{stored_path.name} ran other code than its listings hold now"
    if not executed:
        return f"{stored_path.name} was never executed"
    return None


def execute(nb: dict, cwd: Path, timeout: int = 600) -> dict:
    """Run the notebook in a real Jupyter kernel (nbclient + ipykernel), cell
    by cell, keeping the outputs. An error in any cell raises: a notebook
    with an error is never stored.

    In the GPU suite, starting Jupyter and the kernel (seconds of CPU work)
    waits, as a listing does, until no timing is running, and holds the GPU
    shared until the kernel is ready (cudabook/lock.py); the kernel's cells
    then run listings that take locks of their own."""
    import os
    import tempfile

    from . import lock

    lock.shared()
    os.environ.pop(lock.OWNER, None)     # the kernel is not covered by this hold: its listings lock
    try:
        try:
            import nbformat
            from jupyter_client.manager import KernelManager
            from nbclient import NotebookClient
        except ImportError:
            raise SystemExit("executing notebooks needs nbclient and ipykernel: "
                             "pip install nbclient ipykernel") from None
        node = nbformat.from_dict(nb)
        with tempfile.TemporaryDirectory(prefix="cudabook-kernel-") as sockets:
            # The kernel and this process talk over Unix sockets in a folder of
            # their own, not over TCP ports: Jupyter picks a free port before the
            # kernel binds it, so two notebooks started at once can pick the same
            # one (the GPU suite saw "ZMQError: Address already in use").
            km = (KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "kernel"))
                  if os.name == "posix" else KernelManager(kernel_name="python3"))
            NotebookClient(node, km=km, timeout=timeout, kernel_name="python3", allow_errors=False,
                           resources={"metadata": {"path": str(cwd)}},
                           on_notebook_start=lambda **_: lock.release()).execute()
    finally:
        lock.release()
    out = json.loads(nbformat.writes(node))
    out["metadata"]["cudabook"]["executed"] = record.utc_now()
    return out


def write(nb: dict, dest: Path) -> None:
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["build", "execute"])
    p.add_argument("chapter")
    args = p.parse_args(argv)
    nb = build(args.chapter)
    dest = path(args.chapter)
    if args.action == "execute":
        nb = execute(nb, dest.parent)
    write(nb, dest)
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
