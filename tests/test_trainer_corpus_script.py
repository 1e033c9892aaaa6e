"""scripts/trainer_corpus.py gathers the trainers' examples at a manifest's commit, from a clone's
address (here a local repository standing for the trainer's), and refuses a manifest that names a
file the commit lacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import trainer_corpus  # noqa: E402


def _repository(path: Path) -> str:
    """A repository with an example at one commit and another file added after: the commit."""

    def git(*arguments: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(path), *arguments], check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    (path / "examples" / "configs").mkdir(parents=True)
    git("init", "--quiet")
    (path / "examples" / "configs" / "grpo.yaml").write_text("loss: {token_level_loss: true}\n")
    (path / "examples" / "run.sh").write_text("python run_grpo.py --config examples/configs/grpo.yaml\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "one")
    commit = git("rev-parse", "HEAD")
    (path / "later.txt").write_text("after the commit\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "two")
    return commit


def test_the_manifest_s_commit_is_checked_out_with_its_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = tmp_path / "owner" / "trainer"
    commit = _repository(upstream)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "sometrainer.txt").write_text(f"# owner/trainer {commit}\nexamples/run.sh\n")
    monkeypatch.setattr(trainer_corpus, "MANIFESTS", manifests)
    corpus = tmp_path / "corpus"
    assert trainer_corpus.main([str(corpus), "--url", f"file://{tmp_path}/{{repo}}"]) == 0
    folder = corpus / "sometrainer"
    assert (folder / "examples" / "configs" / "grpo.yaml").is_file()  # what the example names comes too
    assert not (folder / "later.txt").exists()  # the manifest's commit, not the newest
    assert (folder / "MANIFEST").read_text() == (manifests / "sometrainer.txt").read_text()
    # again: kept as it is
    assert trainer_corpus.main([str(corpus), "--url", f"file://{tmp_path}/{{repo}}"]) == 0


def test_a_manifest_naming_what_the_commit_lacks_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    commit = _repository(tmp_path / "owner" / "trainer")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "sometrainer.txt").write_text(f"# owner/trainer {commit}\nlater.txt\n")
    monkeypatch.setattr(trainer_corpus, "MANIFESTS", manifests)
    assert trainer_corpus.main([str(tmp_path / "corpus"), "--url", f"file://{tmp_path}/{{repo}}"]) == 2
    assert f"owner/trainer at {commit[:12]} has no later.txt" in capsys.readouterr().err


@pytest.mark.parametrize("head", ["owner/trainer abc", "# owner/trainer", "# trainer " + "a" * 40])
def test_a_manifest_without_its_repository_and_commit_is_refused(tmp_path: Path, head: str) -> None:
    path = tmp_path / "x.txt"
    path.write_text(f"{head}\nexamples/run.sh\n")
    with pytest.raises(ValueError, match="first line must be '# OWNER/REPO COMMIT'"):
        trainer_corpus.read_manifest(path)


def test_every_trainer_after_the_first_four_has_a_manifest_of_its_examples() -> None:
    """The first four's examples were gathered before manifests (docs/trainers.md); every other
    trainer modelled names its repository, commit and examples."""
    from toyrl.trainers import registry

    manifests = {path.stem: path for path in (ROOT / "tests" / "corpus").glob("*.txt")}
    assert set(registry()) - {"trl", "verl", "openrlhf", "oat"} <= set(manifests)
    for path in manifests.values():
        _, _, paths = trainer_corpus.read_manifest(path)
        assert all(not Path(p).is_absolute() and ".." not in Path(p).parts for p in paths), path
