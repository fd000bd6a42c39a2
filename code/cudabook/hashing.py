"""What a GPU record is a record *of*: the content hash of a listing's code,
and of the suite that ran it.

A record is current when its `hash` equals the hash of the code that runs
when the listing runs (its own files, the listings and helpers it imports,
the helper-package modules it loads: see listings.py), and its `suite_hash`
equals the hash of the test suite that writes records. Only what affects
behaviour is hashed: Python with its comments and docstrings removed, CUDA
with its comments removed, and neither with blank lines or trailing spaces.
Editing prose, a comment, a docstring, the site or the CPU tests leaves
every record current. Two things are hashed whole, because they show up in
the book: a broken listing's files (its sanitizer report cites line
numbers), and a broken listing's `Expect:` line (the suite checks it).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import tokenize
from pathlib import Path

from . import listings, suite
from .listings import Listing


def _strip_lines(text: str) -> str:
    return "\n".join(ln.rstrip() for ln in text.splitlines() if ln.strip()) + "\n"


def normalized_python(text: str) -> str:
    """Python source without comments, docstrings, blank lines and trailing
    spaces. Positions come from tokenize and ast, so the result is the same
    under every Python version that parses the file."""
    lines = text.splitlines(keepends=True)
    cut: list[tuple[int, int, int, int]] = []       # (start row, col, end row, col), 1-based rows
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            cut.append((*tok.start, *tok.end))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                d = body[0]
                cut.append((d.lineno, d.col_offset, d.end_lineno, d.end_col_offset))
    chars = [list(ln) for ln in lines]
    for r0, c0, r1, c1 in cut:
        for r in range(r0, r1 + 1):
            row = chars[r - 1]
            a = c0 if r == r0 else 0
            b = c1 if r == r1 else len(row)
            for c in range(a, min(b, len(row))):
                if row[c] not in "\r\n":
                    row[c] = " "
    return _strip_lines("".join("".join(r) for r in chars))


_CUDA_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)


def normalized_cuda(text: str) -> str:
    """CUDA C++ without comments (string and character literals kept),
    blank lines and trailing spaces."""
    def keep(m):
        s = m.group(0)
        if s.startswith("//"):
            return ""
        if s.startswith("/*"):
            return "\n" * s.count("\n")
        return s
    return _strip_lines(_CUDA_TOKEN.sub(keep, text))


def normalized(path: Path) -> str:
    return _normalized(path.suffix, path.read_text())


@functools.lru_cache(maxsize=4096)
def _normalized(suffix: str, text: str) -> str:
    """normalized() of a file's text, worked out once per text (every
    listing's hash reads the same helper modules)."""
    if suffix == ".py":
        return normalized_python(text)
    if suffix in (".cu", ".cuh"):
        return normalized_cuda(text)
    return text


def hashed_files(listing: Listing) -> list[Path]:
    """The chapter files that run when the listing runs, then the helper
    modules they load."""
    return listings.code_closure(listing) + listings.helper_modules(listing)


def content_hash(listing: Listing) -> str:
    """sha256 over each hashed file's path and normalised text (a broken
    listing's files whole), and a broken listing's expectation."""
    h = hashlib.sha256()
    whole = set(listing.files) if listing.expectation else set()
    for p in hashed_files(listing):
        text = p.read_text() if p in whole else normalized(p)
        h.update(listing.rel(p).encode() + b"\0" + text.encode() + b"\0")
    if listing.expectation:
        h.update(repr(listing.expectation).encode())
    return h.hexdigest()


def suite_hash(root: Path = listings.ROOT) -> str:
    """sha256 over the normalised files of the GPU suite (what runs each
    listing, at which sizes and tolerances, and writes its record)."""
    h = hashlib.sha256()
    for rel in suite.SUITE_FILES:
        h.update(rel.encode() + b"\0" + normalized(root / rel).encode() + b"\0")
    return h.hexdigest()
