"""The GitHub Actions workflow: valid against the published schema (checked
offline by check-jsonschema), and shaped as the book needs: CPU checks on
every pull request; the GPU suite only on the self-hosted GPU runner and
never for forks, comparing its records with the committed ones and
attesting their provenance; and a deploy, from main only after both passed,
of the site the GPU job built from its own records."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("wf", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_is_valid(wf):
    # Beside this Python first: a virtual environment's tools are there even
    # when it was not activated (`.venv/bin/python -m pytest`).
    exe = shutil.which("check-jsonschema", path=os.pathsep.join([os.path.dirname(sys.executable),
                                                                os.environ.get("PATH", "")]))
    assert exe, "check-jsonschema not found: pip install -e \".[dev]\""
    r = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(wf)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_book_workflow_shape():
    wf = yaml.safe_load((ROOT / ".github/workflows/book.yml").read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in on and on["push"]["branches"] == ["main"]
    jobs = wf["jobs"]
    assert "bash .ci/run" in str(jobs["cpu"]["steps"])
    gpu = jobs["gpu"]
    assert set(gpu["runs-on"]) == {"self-hosted", "gpu"}
    assert "head.repo.full_name == github.repository" in gpu["if"]
    assert 'REQUIRE_GPU: "1"' in (ROOT / ".github/workflows/book.yml").read_text()
    steps = " ".join(str(s) for s in gpu["steps"])
    assert "compare-records" in steps, "the GPU job must compare its records with the committed ones"
    assert "attest-build-provenance" in steps and gpu["permissions"]["attestations"] == "write"
    assert "upload-pages-artifact" in steps and "mkdocs build --strict" in steps
    assert steps.index("compare-records") < steps.index("upload-pages-artifact")
    deploy = jobs["deploy"]
    assert set(deploy["needs"]) == {"cpu", "gpu"}
    assert "refs/heads/main" in deploy["if"] and "push" in deploy["if"]
    assert [s.get("uses", "").split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"], \
        "the deploy publishes the GPU job's build, and builds nothing from the committed records"
