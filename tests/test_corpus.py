"""The trainers' own example scripts and configurations, taken as they are from their repositories:
each is read as its trainer, or refused in one line that names a mode toyrl does not model (PPO with
a value model, ReMax's greedy baseline, an estimator it has no stage for), never for its format.

The files are not part of toyrl's repository (they are the trainers'); the test reads them from
the folder TOYRL_TRAINER_CORPUS names, one subfolder a trainer by its registry name (`verl/`,
`nemo-rl/`, ...), and skips without it. A subfolder with a MANIFEST holds a repository's files at
their own paths (the configurations its launch lines name, the files they inherit): its first line
`# OWNER/REPO COMMIT`, then the paths of the examples to check, each checked from the subfolder as
the current folder, as the repository's examples run from its root. Without a MANIFEST, every
file directly in the subfolder is checked. docs/trainers.md says how to gather them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toyrl.config import Config, InvalidInput
from toyrl.trainers import registry
from toyrl.trainers.check import resolve_input, toy_variant

pytest.importorskip("tree_sitter_bash")
pytest.importorskip("hydra")

CORPUS = Path(os.environ.get("TOYRL_TRAINER_CORPUS", "")) if os.environ.get("TOYRL_TRAINER_CORPUS") else None
# what a refusal of a mode says (trainers/__init__.py not_modelled); a refusal of the input's form
# says none of these
MODE = "is not modelled by toyrl"


def _files() -> list[tuple[str, Path]]:
    """(trainer, path from its subfolder) of every example to check."""
    if CORPUS is None or not CORPUS.is_dir():
        return []
    found = []
    for folder in sorted(CORPUS.iterdir()):
        if folder.name not in registry():
            continue
        manifest = folder / "MANIFEST"
        if manifest.is_file():
            lines = [line.strip() for line in manifest.read_text().splitlines()]
            found += [(folder.name, Path(line)) for line in lines if line and not line.startswith("#")]
        else:
            found += [(folder.name, Path(path.name)) for path in sorted(folder.iterdir()) if path.is_file()]
    return found


@pytest.mark.skipif(CORPUS is None, reason="TOYRL_TRAINER_CORPUS names no folder of the trainers' own files")
def test_the_corpus_is_not_empty() -> None:
    assert _files(), f"{CORPUS}: no file under a trainer's folder ({', '.join(registry())})"


@pytest.mark.parametrize("trainer,path", _files(), ids=lambda item: str(item))
def test_each_file_is_read_as_its_trainer_or_refused_for_its_mode(
    trainer: str, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CORPUS is not None
    monkeypatch.chdir(CORPUS / trainer)
    assert path.is_file(), f"{trainer}/MANIFEST names {path}, which is not in the corpus"
    try:
        resolved = resolve_input([str(path)], None, {}, None)
        toy_variant(resolved, Config())
    except InvalidInput as error:
        assert "\n" not in str(error) and MODE in str(error), str(error)
        return
    assert resolved.trainer is registry()[trainer]
