"""The trainers' own example scripts and configurations, taken as they are from their repositories:
each is read as its trainer, or refused in one line that names a mode toyrl does not model (PPO with
a value model, ReMax's greedy baseline, an estimator it has no stage for), never for its format.

The files are not part of toyrl's repository (they are the trainers'); the test reads them from
the folder TOYRL_TRAINER_CORPUS names, one subfolder a trainer (`verl/`, `trl/`, `openrlhf/`), and
skips without it. docs/trainers.md says how to gather them.
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


def _files() -> list[Path]:
    if CORPUS is None or not CORPUS.is_dir():
        return []
    return sorted(path for path in CORPUS.rglob("*") if path.is_file() and path.parent.name in registry())


@pytest.mark.skipif(CORPUS is None, reason="TOYRL_TRAINER_CORPUS names no folder of the trainers' own files")
def test_the_corpus_is_not_empty() -> None:
    assert _files(), f"{CORPUS}: no file under a trainer's folder ({', '.join(registry())})"


@pytest.mark.parametrize("path", _files(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_each_file_is_read_as_its_trainer_or_refused_for_its_mode(path: Path) -> None:
    try:
        resolved = resolve_input([str(path)], None, {}, None)
        toy_variant(resolved, Config())
    except InvalidInput as error:
        assert "\n" not in str(error) and MODE in str(error), str(error)
        return
    assert resolved.trainer is registry()[path.parent.name]
