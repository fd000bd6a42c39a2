"""The training text of Part IV: the book's own chapters, as bytes.

Draft. The model of Part IV learns to continue the book's prose, one byte
at a time: a vocabulary of 256 tokens, no tokenizer to download, and a
text that ships with the repository. build() concatenates the chapters'
Markdown in the order of the site's navigation; freeze() writes it to one
file, so later edits to the prose do not change the data a record was
trained on; batches() draws the same (input, target) batches for the
book's kernels and for PyTorch, from a seed and a step number alone.

Run:    python3 docs/assets/experiments/part4_draft/corpus.py [OUT]
        (prints the corpus's size and a sample, and writes it to OUT if
        given)
"""

import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
VOCAB = 256
VALIDATION = 0.1                                # the last tenth of the bytes


def chapter_pages(root: Path = ROOT) -> list[Path]:
    """The chapters' pages in the order mkdocs.yml's nav lists them."""
    nav = (root / "mkdocs.yml").read_text()
    pages = list(dict.fromkeys(re.findall(r"(chapters/\w+/index\.md)\s*$", nav, re.M)))
    if not pages:
        raise ValueError("mkdocs.yml: no chapter pages in its nav")
    return [root / p for p in pages]


def build(root: Path = ROOT) -> bytes:
    """Every chapter's Markdown, UTF-8, one after another, a blank line
    between them."""
    return b"\n\n".join(p.read_bytes().strip() for p in chapter_pages(root)) + b"\n"


#: The frozen text, once the chapter lands: code/training/_book.txt, named
#: whole here so the book's tooling hashes it with the listings that read it
#: (CONTRIBUTING: data files).
FROZEN = Path(__file__).with_name("_book.txt")


def freeze(text: bytes, out: Path) -> None:
    out.write_bytes(text)


def text() -> bytes:
    """The training text: the frozen file when there is one, else the
    chapters as they are now (a draft's run)."""
    return FROZEN.read_bytes() if FROZEN.is_file() else build()


def split(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation tokens: the first nine tenths, the last."""
    cut = int(len(tokens) * (1 - VALIDATION))
    return tokens[:cut], tokens[cut:]


def tokens_of(text: bytes) -> np.ndarray:
    """Byte-level tokens: each byte its own token, 0 to 255."""
    return np.frombuffer(text, dtype=np.uint8).astype(np.int32)


def batches(tokens: np.ndarray, step: int, b: int, t: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The batch of step `step`: b windows of t + 1 tokens at offsets drawn
    from (seed, step) alone, as inputs (b, t) and next-token targets (b, t).
    Any program that asks for the same step gets the same batch."""
    if len(tokens) < t + 1:
        raise ValueError(f"tokens: need at least t + 1 = {t + 1} tokens, got {len(tokens)}")
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - t, size=b)
    windows = np.stack([tokens[s:s + t + 1] for s in starts])
    return windows[:, :-1].copy(), windows[:, 1:].copy()


def decode(toks) -> str:
    return bytes(int(v) for v in toks).decode("utf-8", errors="replace")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = build()                              # freezing takes the chapters as they are now
    tokens = tokens_of(text)
    train, val = split(tokens)
    print(f"{len(chapter_pages())} chapters, {len(text):,} bytes: {len(train):,} to train on, "
          f"{len(val):,} to validate; {len(np.unique(tokens))} distinct bytes of {VOCAB}")
    x, y = batches(train, step=0, b=2, t=64)
    print(repr(decode(x[0])))
    if argv:
        freeze(text, Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
