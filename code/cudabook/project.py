"""Where the book lives: its repository and its hosted site.

Both addresses are written once, in pyproject.toml's [project.urls]
(Repository, Documentation). The site's config (site_url, repo_url, the
edit and view-source buttons), the notebooks' Colab links and first cell,
and the tests that keep README.md and docs/running.md in step all read
them from here, so a fork changes two lines and nothing else.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from .listings import ROOT

#: The branch the book is published from.
BRANCH = "main"


def _urls(root: Path) -> dict:
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["urls"]


def repository(root: Path = ROOT) -> str:
    """The book's public repository, e.g. https://github.com/cudabook/cudabook."""
    return _urls(root)["Repository"]


def site(root: Path = ROOT) -> str:
    """The hosted book's address, ending in '/'."""
    url = _urls(root)["Documentation"]
    return url if url.endswith("/") else url + "/"


def slug(root: Path = ROOT) -> str:
    """owner/name of the repository."""
    return repository(root).removeprefix("https://github.com/").strip("/")


def edit_url(repo_path: str, root: Path = ROOT) -> str:
    """The repository's page that edits one file (GitHub opens a fork and a
    pull request for a reader who cannot push)."""
    return f"{repository(root)}/edit/{BRANCH}/{repo_path}"
