"""Results on disk: a tidy CSV with a JSON sidecar that says how it was made, and the summary table.

Both files are written atomically (a temporary file in the same folder, then a rename), sidecar
first, so a reader never sees a half-written file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toyrl import __version__
from toyrl.config import Config, InvalidInput
from toyrl.objective import Variant
from toyrl.presets import stands_for

COLUMN_DOCS = {
    "variant": "loss variant (toyrl.objective.VARIANTS)",
    "seed": "the run's seed; variants with the same seed share initial logits and noise",
    "step": "optimiser steps taken; 0 is the initial policy",
    "accuracy": "exact P(correct) under the policy, prompts weighted uniformly",
    "length_mean": "exact E[L], ramble tokens after truncation",
    "length_correct": "exact E[L | correct]",
    "length_incorrect": "exact E[L | incorrect]",
    "length_right_approach": "exact E[L | right approach]",
    "length_wrong_approach": "exact E[L | wrong approach]",
    "p_right_approach": "exact P(right approach), mean of sigma(psi_j)",
    "stop_prob_right": "sigma(phi_right), per-token stop probability on the right approach",
    "stop_prob_wrong": "sigma(phi_wrong), per-token stop probability on a wrong approach",
    "batch_accuracy": "fraction of correct responses in the batch sampled at this step",
    "batch_length_mean": "mean L of that batch",
    "batch_length_correct": "mean L of its correct responses (NaN if none)",
    "batch_length_incorrect": "mean L of its incorrect responses (NaN if none)",
    "zero_variance_fraction": "fraction of its groups whose rewards are all equal",
    "grad_norm": "L2 norm of the loss gradient that batch gives (all P + 2 parameters), first update",
    "clip_fraction": "share of tokens whose PPO clip was active, mean over the step's updates (0 on-policy)",
}

# Article, "Toy run": final accuracy and tokens of GRPO and length-only (6 seeds). The token figure
# is E[L | wrong approach] (README, "Which length is the article's 1,410 tokens?").
ARTICLE_FINAL = {"grpo": (27.4, 1410), "length_only": (27.3, 1405)}

SUMMARY_COLUMNS = [
    "accuracy",
    "length_mean",
    "length_correct",
    "length_incorrect",
    "length_wrong_approach",
]


def sidecar_path(csv_path: Path) -> Path:
    """The JSON file that describes a results CSV: same name, `.json`."""
    return csv_path.with_suffix(".json")


def check_output_path(path: Path, option: str = "--out") -> None:
    """Fail before any work if the results cannot be written to `path` (a `.csv` in a writable folder)."""
    if path.suffix != ".csv":
        raise InvalidInput(f"{option} must be a path ending in .csv (got '{path}')")
    folder = path.parent
    if not folder.is_dir():
        raise InvalidInput(f"{option}: folder '{folder}' does not exist")
    check_writable(folder, option)
    if path.is_dir():
        raise InvalidInput(f"{option}: '{path}' is a folder, not a file")


def check_writable(folder: Path, option: str) -> None:
    """InvalidInput unless a file can be created in `folder` (probed: permission bits do not bind root)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"{option}: folder '{folder}' is not writable")
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".toyrl-probe-")
    except OSError as error:
        raise InvalidInput(f"{option}: folder '{folder}' is not writable ({error.strerror})") from None
    os.close(handle)
    os.unlink(probe)


def metadata(
    config: Config, variants: Sequence[Variant], seeds: Sequence[int], command: str, exact: bool = False
) -> dict[str, Any]:
    """Everything needed to remake a results file: version, configuration, variants, seeds, and
    whether the runs are mean-field (`exact`) ones."""
    return {
        "toyrl_version": __version__,
        "command": command,
        "exact": exact,
        "config": config.to_dict(),
        "length_norm_used": config.length_norm_value,
        "variants": {
            variant.name: {**dataclasses.asdict(variant), "stands_for": stands_for(variant.name)}
            for variant in variants
        },
        "seeds": [int(seed) for seed in seeds],
        "python": platform.python_version(),
        "numpy": np.__version__,
        "columns": COLUMN_DOCS,
    }


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename.

    A failure to write (permissions, a read-only or full file system) is InvalidInput naming the
    path; the temporary file is removed, and `path` keeps its old content.
    """
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise InvalidInput(f"cannot write {path}: {error.strerror or error}") from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide results from other users
        with os.fdopen(handle, "wb") as stream:
            stream.write(data.encode("utf-8") if isinstance(data, str) else data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise InvalidInput(f"cannot write {path}: {error.strerror or error}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_results(frame: pd.DataFrame, path: Path, meta: dict[str, Any]) -> None:
    """Write `frame` to `path` (CSV, floats written to round-trip exactly) and `meta` beside it.

    Each file is replaced atomically, and the sidecar records the CSV's SHA-256: a pair left
    mismatched by a kill between the two renames is detected on loading, never used silently.
    """
    text = frame.to_csv(index=False, lineterminator="\n")
    meta = meta | {"csv_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    write_atomic(sidecar_path(path), json.dumps(meta, indent=2) + "\n")
    write_atomic(path, text)


def check_overwrite(path: Path, meta: dict[str, Any], force: bool, option: str = "--out") -> None:
    """Refuse to replace results made with another configuration, variants or seeds, unless `force`.

    Results of the same settings are simply replaced (the run is deterministic, so they are the same
    numbers, or the remedy for an interrupted write).
    """
    sidecar = sidecar_path(path)
    if force or not (path.exists() or sidecar.exists()):
        return
    try:
        existing = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        existing = {}
    keys = ("config", "variants", "seeds", "exact")
    if any(existing.get(key) != json.loads(json.dumps(meta.get(key))) for key in keys):
        raise InvalidInput(
            f"{option}: {path} holds results made with other settings; choose another path, or add --force"
        )


def load_results(path: Path) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """A results CSV of `toyrl run` and its sidecar (None if absent), or InvalidInput naming the file."""
    if not path.is_file():
        raise InvalidInput(f"{path}: no such results file")
    try:
        frame = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise InvalidInput(f"{path}: not a readable CSV ({reason})") from None
    missing = [column for column in COLUMN_DOCS if column not in frame.columns]
    if missing:
        raise InvalidInput(f"{path}: missing columns {', '.join(missing)}; is it a toyrl results CSV?")
    if frame.empty:
        raise InvalidInput(f"{path}: has no rows")
    numeric = [c for c in COLUMN_DOCS if c != "variant" and not pd.api.types.is_numeric_dtype(frame[c])]
    if numeric:
        raise InvalidInput(f"{path}: columns {', '.join(numeric)} must hold numbers")
    frame["variant"] = frame["variant"].astype(str)
    meta = None
    sidecar = sidecar_path(path)
    if sidecar.is_file():
        try:
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InvalidInput(f"{sidecar}: not readable JSON ({error})") from None
        recorded = meta.get("csv_sha256") if isinstance(meta, dict) else None
        if recorded and recorded != hashlib.sha256(path.read_bytes()).hexdigest():
            raise InvalidInput(
                f"{path}: does not match {sidecar.name} (a write was interrupted?); "
                "run the command that made it again"
            )
        version = meta.get("toyrl_version") if isinstance(meta, dict) else None
        if version and version != __version__:
            warnings.warn(f"{path} was made by toyrl {version}; this is toyrl {__version__}", stacklevel=2)
    return frame, meta


def final_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant, mean and sd (over seeds, ddof 1) of the last step's exact metrics.

    Columns are a (metric, statistic) MultiIndex; rows keep the frame's variant order.
    """
    last = frame[frame["step"] == frame["step"].max()]
    order = list(dict.fromkeys(last["variant"]))
    summary = last.groupby("variant", sort=False)[SUMMARY_COLUMNS].agg(["mean", "std"])
    summary.insert(0, ("seeds", "n"), last.groupby("variant", sort=False).size())
    return summary.loc[order]


SUMMARY_HEADER = [
    "variant",
    "seeds",
    "accuracy %",
    "E[L]",
    "E[L | correct]",
    "E[L | incorrect]",
    "E[L | wrong approach]",
]


def _summary_rows(summary: pd.DataFrame) -> list[list[str]]:
    """Cells of the summary: accuracy in percent (1 decimal), lengths in tokens, "mean ± sd"."""
    rows = []
    for variant, row in summary.iterrows():
        cells = [str(variant), str(int(row[("seeds", "n")]))]
        for column, scale, digits in [("accuracy", 100, 1)] + [(c, 1, 0) for c in SUMMARY_COLUMNS[1:]]:
            mean, sd = row[(column, "mean")] * scale, row[(column, "std")] * scale
            cells.append(f"{mean:.{digits}f}" + ("" if np.isnan(sd) else f" ± {sd:.{digits}f}"))
        rows.append(cells)
    return rows


def format_table(rows: Sequence[Sequence[str]], indent: str = "", left_first: bool = True) -> str:
    """Rows of cells (the first the header) as an aligned text table with a rule under the header:
    numbers right-aligned, the first column left-aligned when `left_first`."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(cells: Sequence[str]) -> str:
        return indent + "  ".join(
            text.ljust(width) if i == 0 and left_first else text.rjust(width)
            for i, (text, width) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(rows[0]), indent + "  ".join("-" * w for w in widths), *map(line, rows[1:])])


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as an aligned text table for the terminal."""
    return format_table([SUMMARY_HEADER, *_summary_rows(summary)])


def final_table_markdown(frame: pd.DataFrame, article: bool) -> str:
    """The last step's exact numbers per variant as a markdown table, mean ± sd over seeds.

    With `article`, a last column gives the article's figures for the variants it reports.
    """
    header = [cell.replace("|", "\\|") for cell in SUMMARY_HEADER]
    rows = _summary_rows(final_summary(frame))
    if article:
        header.append("article: accuracy %, tokens")
        for row in rows:
            figures = ARTICLE_FINAL.get(row[0])
            row.append(f"{figures[0]}, {figures[1]:,}" if figures else "–")
    for row in rows:
        row[0] = f"`{row[0]}`"
    rule = ["---"] + ["---:"] * (len(SUMMARY_HEADER) - 1) + (["---"] if article else [])
    return "".join("| " + " | ".join(cells) + " |\n" for cells in [header, rule, *rows])
