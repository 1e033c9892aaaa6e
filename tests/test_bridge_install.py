"""The bridge extra's install command, as the README and docs/bridge.md give it, resolves no CUDA
package: pip's own resolver, asked in a fresh virtual environment (--dry-run, nothing installed),
from the package index this machine is configured with. Slow (a resolve over the index) and
needs the index."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMAND = 'pip install torch==2.13.0 ".[bridge]"'
CUDA = ("nvidia", "cuda", "triton", "cudnn", "cublas", "nccl")


@pytest.mark.slow
def test_the_documented_bridge_install_resolves_no_cuda_package(tmp_path: Path) -> None:
    for page in (ROOT / "README.md", ROOT / "docs" / "bridge.md"):
        assert COMMAND in page.read_text(encoding="utf-8"), page
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    report = tmp_path / "report.json"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            "torch==2.13.0",
            f"{ROOT}[bridge]",
        ],
        check=True,
        cwd=tmp_path,
        capture_output=True,
        timeout=600,
    )
    resolved = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert not [name for name in resolved if any(part in name for part in CUDA)], sorted(resolved)
    assert resolved["torch"].startswith("2.13.0")
    assert (resolved["trl"], resolved["transformers"]) == ("1.16.0", "5.24.0")
