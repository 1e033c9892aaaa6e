"""Gather the trainers' own example files that tests/test_corpus.py checks, from their repositories.

    python scripts/trainer_corpus.py DIR [--trainer NAME ...] [--url URL_TEMPLATE]

For each manifest tests/corpus/TRAINER.txt (first line `# OWNER/REPO COMMIT`, then the paths of the
trainer's GRPO examples in that repository), checks the repository out at that commit into
DIR/TRAINER (a partial clone: its files at their own paths, so the configuration files a launch
line names are where it names them) and writes the manifest there as DIR/TRAINER/MANIFEST. Then

    TOYRL_TRAINER_CORPUS=DIR python -m pytest tests/test_corpus.py

checks every example. The files are the trainers' (their licences, their repositories): toyrl's
repository holds only the manifests. `--url` gives the clone's address, `{repo}` standing for
OWNER/REPO (default https://github.com/{repo}; a local mirror works too). A folder already holding
the commit is kept. Needs git and network access to the repositories.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parent.parent / "tests" / "corpus"


def read_manifest(path: Path) -> tuple[str, str, list[str]]:
    """(OWNER/REPO, commit, example paths) of a manifest; ValueError naming what is wrong."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    head = lines[0].lstrip("#").split() if lines and lines[0].startswith("#") else []
    if len(head) != 2 or "/" not in head[0] or len(head[1]) != 40:
        raise ValueError(f"{path}: its first line must be '# OWNER/REPO COMMIT' (a 40-digit commit)")
    paths = [line for line in lines[1:] if not line.startswith("#")]
    if not paths:
        raise ValueError(f"{path}: names no example")
    return head[0], head[1], paths


def _git(*arguments: str) -> str:
    return subprocess.run(["git", *arguments], check=True, capture_output=True, text=True).stdout.strip()


def gather(trainer: str, into: Path, url: str) -> int:
    """Check out `trainer`'s manifest's commit into `into`/trainer; the number of examples."""
    repo, commit, paths = read_manifest(MANIFESTS / f"{trainer}.txt")
    folder = into / trainer
    if (folder / ".git").is_dir() and _git("-C", str(folder), "rev-parse", "HEAD") == commit:
        print(f"{trainer}: {repo} {commit[:12]} already in {folder}", file=sys.stderr)
    else:
        if folder.exists():
            shutil.rmtree(folder)
        print(f"{trainer}: cloning {repo} at {commit[:12]} into {folder}", file=sys.stderr)
        _git("clone", "--quiet", "--filter=blob:none", "--no-checkout", url.format(repo=repo), str(folder))
        _git("-C", str(folder), "checkout", "--quiet", commit)
    missing = [path for path in paths if not (folder / path).is_file()]
    if missing:
        raise ValueError(f"{trainer}: {repo} at {commit[:12]} has no {', '.join(missing)}")
    shutil.copyfile(MANIFESTS / f"{trainer}.txt", folder / "MANIFEST")
    return len(paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("into", type=Path, help="the corpus folder (TOYRL_TRAINER_CORPUS)")
    known = sorted(path.stem for path in MANIFESTS.glob("*.txt"))
    parser.add_argument("--trainer", action="append", choices=known, help="only these (default: all)")
    parser.add_argument(
        "--url", default="https://github.com/{repo}", help="clone address, {repo} = OWNER/REPO"
    )
    args = parser.parse_args(argv)
    args.into.mkdir(parents=True, exist_ok=True)
    try:
        for trainer in args.trainer or known:
            count = gather(trainer, args.into, args.url)
            print(f"{trainer}: {count} examples", file=sys.stderr)
    except (ValueError, subprocess.CalledProcessError) as error:
        detail = (
            error.stderr.strip().splitlines()[-1] if isinstance(error, subprocess.CalledProcessError) else ""
        )
        print(f"trainer_corpus: {error}{': ' + detail if detail else ''}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
