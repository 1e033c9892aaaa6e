"""Results on disk: a tidy CSV with a JSON sidecar that says how it was made, and the summary table.

Both files are written atomically (a temporary file in the same folder, then a rename), sidecar
first, so a reader never sees a half-written file.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toyrl import __version__
from toyrl.config import Config, InvalidInput
from toyrl.objective import VARIANTS

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
    "grad_norm": "L2 norm of the loss gradient that batch gives (all P + 2 parameters)",
}

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
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"{option}: folder '{folder}' is not writable")
    if path.is_dir():
        raise InvalidInput(f"{option}: '{path}' is a folder, not a file")


def metadata(config: Config, variants: Sequence[str], seeds: Sequence[int], command: str) -> dict[str, Any]:
    """Everything needed to remake a results file: version, configuration, variants, seeds."""
    return {
        "toyrl_version": __version__,
        "command": command,
        "config": config.to_dict(),
        "length_norm_used": config.length_norm_value,
        "variants": {
            name: {
                "std_scaled": VARIANTS[name].std_scaled,
                "length_mean": VARIANTS[name].length_mean,
                "summary": VARIANTS[name].summary,
            }
            for name in variants
        },
        "seeds": [int(seed) for seed in seeds],
        "python": platform.python_version(),
        "numpy": np.__version__,
        "columns": COLUMN_DOCS,
    }


def _write_atomic(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide results from other users
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_results(frame: pd.DataFrame, path: Path, meta: dict[str, Any]) -> None:
    """Write `frame` to `path` (CSV, floats written to round-trip exactly) and `meta` beside it."""
    _write_atomic(sidecar_path(path), json.dumps(meta, indent=2) + "\n")
    _write_atomic(path, frame.to_csv(index=False, lineterminator="\n"))


def final_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant, mean and sd (over seeds, ddof 1) of the last step's exact metrics.

    Columns are a (metric, statistic) MultiIndex; rows keep the frame's variant order.
    """
    last = frame[frame["step"] == frame["step"].max()]
    order = list(dict.fromkeys(last["variant"]))
    summary = last.groupby("variant", sort=False)[SUMMARY_COLUMNS].agg(["mean", "std"])
    summary.insert(0, ("seeds", "n"), last.groupby("variant", sort=False).size())
    return summary.loc[order]


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as an aligned text table: accuracy in percent, lengths in tokens, mean ± sd."""

    def cell(mean: float, sd: float, scale: float, digits: int) -> str:
        spread = "" if np.isnan(sd) else f" ± {sd * scale:.{digits}f}"
        return f"{mean * scale:.{digits}f}{spread}"

    header = [
        "variant",
        "seeds",
        "accuracy %",
        "E[L]",
        "E[L|correct]",
        "E[L|incorrect]",
        "E[L|wrong approach]",
    ]
    rows = [header]
    for variant, row in summary.iterrows():
        rows.append(
            [str(variant), str(int(row[("seeds", "n")]))]
            + [cell(row[("accuracy", "mean")], row[("accuracy", "std")], 100, 1)]
            + [cell(row[(c, "mean")], row[(c, "std")], 1, 0) for c in SUMMARY_COLUMNS[1:]]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join([row[0].ljust(widths[0])] + [t.rjust(w) for t, w in zip(row[1:], widths[1:], strict=True)])
        for row in rows
    ]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])
