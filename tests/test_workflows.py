"""The GitHub Actions workflow: valid against the published schema (checked
offline by check-jsonschema), and shaped as the book needs: CPU checks on
every pull request, the GPU suite only on the self-hosted GPU runner and
never for forks, and a deploy from main only after both passed."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("wf", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_is_valid(wf):
    exe = shutil.which("check-jsonschema")
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
    assert any("upload-artifact" in str(s.get("uses")) for s in gpu["steps"])
    deploy = jobs["deploy"]
    assert set(deploy["needs"]) == {"cpu", "gpu"}
    assert "refs/heads/main" in deploy["if"] and "push" in deploy["if"]
    assert any("deploy-pages" in str(s.get("uses")) for s in deploy["steps"])
