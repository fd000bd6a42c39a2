"""Companion notebooks, generated from a chapter's listings.

The listings stay the single source: `build(chapter)` makes the notebook's
cells from them (each listing's docstring, its kernel source, and a cell that
runs it), and the tests fail if the stored notebook's cells differ from a
fresh build. `execute` runs the code cells in one namespace on a GPU machine
and stores what they printed, so the site can show a real run with no GPU.

    python -m cudabook.notebooks build first_kernel      # cells only
    python -m cudabook.notebooks execute first_kernel    # on a GPU: cells + outputs

Notebooks are written to chapters/<chapter>/<chapter>.ipynb.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import sys
from pathlib import Path

from . import records

SETUP = '''\
# Make the book's code importable: run this notebook from the repository
# (or from chapters/<chapter>/ inside it).
import sys
from pathlib import Path
for up in [Path.cwd(), *Path.cwd().parents]:
    if (up / "code" / "cudabook").is_dir():
        sys.path.insert(0, str(up / "code"))
        break
else:
    raise RuntimeError("run this notebook from inside the cudabook repository")'''


def path(chapter: str, root: Path = records.ROOT) -> Path:
    return root / "chapters" / chapter / f"{chapter}.ipynb"


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": text}


def _run_args(listing: records.Listing) -> list[str]:
    """Benchmark the listings that have a benchmark; run the others plainly."""
    import subprocess

    r = subprocess.run([sys.executable, str(listing.py), "--describe"], capture_output=True,
                       text=True, check=True)
    return ["--bench"] if json.loads(r.stdout)["bench"] else []


def build(chapter: str, root: Path = records.ROOT) -> dict:
    """The notebook for a chapter, without outputs."""
    listings = [lst for lst in records.discover(root) if lst.chapter == chapter]
    title = chapter.replace("_", " ").capitalize()
    cells = [
        _md(f"# {title}: companion notebook\n\n"
            "Generated from the chapter's listings in `code/" + chapter + "/`; the outputs "
            "below come from a run on the GPU named in the last cell."),
        _code(SETUP),
    ]
    for lst in listings:
        doc = lst.py.read_text().split('"""')[1].strip()
        cells.append(_md(f"## `{lst.name}`\n\n{doc}"))
        if lst.cu is not None:
            cells.append(_md(f"The kernel, `{lst.rel(lst.cu)}`:\n\n```cuda\n"
                             f"{lst.cu.read_text().rstrip()}\n```"))
        args = _run_args(lst)
        cells.append(_code(f"from {chapter} import {lst.name}\n"
                           f"assert {lst.name}.main({args!r}) == 0"))
    cells.append(_code("import cudabook\ncudabook.gpu.environment()"))
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "cudabook": {"chapter": chapter,
                         "listings": {lst.id: records.content_hash(lst) for lst in listings}},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def execute(nb: dict, cwd: Path) -> dict:
    """Run the code cells in order in one namespace, keeping what each printed.
    Any exception stops the run: a notebook with an error is never stored."""
    import os

    ns: dict = {"__name__": "__main__"}
    old = Path.cwd()
    os.chdir(cwd)
    try:
        count = 0
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            count += 1
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                lines = cell["source"].rstrip().split("\n")
                body, last = "\n".join(lines[:-1]), lines[-1]
                try:
                    compile(last, "<cell>", "eval")
                    exec(compile(body, f"<cell {count}>", "exec"), ns)
                    value = eval(compile(last, f"<cell {count}>", "eval"), ns)
                except SyntaxError:
                    exec(compile(cell["source"], f"<cell {count}>", "exec"), ns)
                    value = None
            outputs = []
            for name, buf in (("stdout", out), ("stderr", err)):
                if buf.getvalue():
                    outputs.append({"output_type": "stream", "name": name, "text": buf.getvalue()})
            if value is not None:
                outputs.append({"output_type": "execute_result", "execution_count": count,
                                "metadata": {}, "data": {"text/plain": repr(value)}})
            cell["outputs"], cell["execution_count"] = outputs, count
    finally:
        os.chdir(old)
    nb["metadata"]["cudabook"]["executed"] = dt.datetime.now(dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    return nb


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
