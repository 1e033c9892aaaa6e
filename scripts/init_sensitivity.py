"""How the final numbers depend on the one open choice, psi_j ~ N(mean, std), under both |o_i| conventions.

The article does not say how the 64 prompt logits start. This study shows which of its figures that
choice moves (final accuracy) and which it hardly touches (the lengths), under both conventions for
|o_i|, the token count of GRPO's per-response mean: L + 1 (the approach token counted, the default)
and L (`count_approach_token=False`); and it rechecks the calibration of the default N(-1, 1) on
GRPO's final accuracy of 27.4%.

    python scripts/init_sensitivity.py [--out-dir results] [--seeds 100] [--n-jobs 2]

About a minute on 2 cores; progress on stderr. Seeds 0..N-1 (default 100); a seed draws the same
standard normals for every (mean, std), so the settings are paired as well as the variants.
Writes, under --out-dir:

- `init_sensitivity.csv`: one row per (study, convention, psi mean, psi std, variant), final step
  400. `study` is `grid` (GRPO, length-only and Dr. GRPO at psi mean in {-1.5, -1, -0.5, 0} with
  std 1, and std in {0.5, 1.5} with mean -1) or `calibration` (GRPO only, std 1, mean from -1.5 to
  0 in steps of 0.1: with |o_i| = L the article's figure is reached only above -0.5);
  `count_approach_token` true for |o_i| = L + 1; `seeds` the number of seeds;
  `initial_accuracy_pct_{mean,se}` at step 0; `{metric}_{mean,sd,se}` over seeds for accuracy_pct
  (percent), length_incorrect and length_wrong_approach (ramble tokens); sd ddof 1, se = sd/sqrt(n).
- `init_sensitivity.json`: toyrl version, command, base configuration, seeds, the grid, and the
  calibration: per convention the scanned mean closest to the article's 27.4% (`closest_mean`,
  `closest_accuracy_pct`, `closest_se`) and the mean at which the scan crosses 27.4% by linear
  interpolation (`crossing_mean`).
- `init_sensitivity.md`: the grid and calibration tables and the calibration summary, made from the
  same numbers (docs/initialisation.md includes them verbatim).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toyrl import __version__
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.files import write_together
from toyrl.results import ARTICLE_FINAL

GRID = [(-1.5, 1.0), (-1.0, 0.5), (-1.0, 1.0), (-1.0, 1.5), (-0.5, 1.0), (0.0, 1.0)]
GRID_VARIANTS = ["grpo", "length_only", "dr_grpo"]
CALIBRATION_MEANS = [round(-1.5 + 0.1 * i, 1) for i in range(16)]  # -1.5 to 0 in steps of 0.1
CALIBRATION_STD = 1.0
CONVENTIONS = {"L + 1": True, "L": False}
METRICS = ["accuracy_pct", "length_incorrect", "length_wrong_approach"]
ARTICLE_ACCURACY = ARTICLE_FINAL["grpo"][0]  # 27.4 (percent)
SIX = list(range(6))  # the article's seeds


def log(message: str, start: float) -> None:
    print(f"[{time.perf_counter() - start:6.1f} s] {message}", file=sys.stderr, flush=True)


def summarise(frame: pd.DataFrame, final: int) -> dict[str, dict[str, float]]:
    """Per variant: the initial accuracy and the final metrics' mean, sd and se over all seeds, and
    the final metrics' mean and se over the article's seeds 0-5 (columns prefixed `six_`)."""
    out = {}
    initial = frame[frame["step"] == 0]
    last = frame[frame["step"] == final]
    for variant, rows in last.groupby("variant", sort=False):
        start = initial[initial["variant"] == variant]["accuracy"].to_numpy() * 100
        n = len(rows)
        row = {
            "seeds": float(n),
            "initial_accuracy_pct_mean": float(start.mean()),
            "initial_accuracy_pct_se": float(start.std(ddof=1) / math.sqrt(n)),
        }
        for prefix, chosen in (("", rows), ("six_", rows[rows["seed"].isin(SIX)])):
            for metric in METRICS:
                column = "accuracy" if metric == "accuracy_pct" else metric
                values = chosen[column].to_numpy(dtype=np.float64) * (100 if metric == "accuracy_pct" else 1)
                sd = float(values.std(ddof=1))
                row[f"{prefix}{metric}_mean"] = float(values.mean())
                if not prefix:
                    row[f"{metric}_sd"] = sd
                row[f"{prefix}{metric}_se"] = sd / math.sqrt(len(values))
        out[str(variant)] = row
    return out


def calibration_summary(table: pd.DataFrame) -> dict[str, dict[str, float | None]]:
    """Per convention and seed set (`L + 1`, `L + 1, seeds 0-5`, ...): the scanned mean closest to the
    article's accuracy, and where the scan crosses it by linear interpolation (None: it does not)."""
    out: dict[str, dict[str, float | None]] = {}
    scan = table[table["study"] == "calibration"]
    for label, counted in CONVENTIONS.items():
        for suffix, prefix in (("", ""), (", seeds 0-5", "six_")):
            rows = scan[scan["count_approach_token"] == counted].sort_values("psi_mean")
            means = rows["psi_mean"].to_numpy()
            accuracy = rows[f"{prefix}accuracy_pct_mean"].to_numpy()
            best = int(np.abs(accuracy - ARTICLE_ACCURACY).argmin())
            crossing = None
            above = accuracy - ARTICLE_ACCURACY
            for i in range(len(means) - 1):
                if above[i] <= 0 < above[i + 1] or above[i] >= 0 > above[i + 1]:
                    t = above[i] / (above[i] - above[i + 1])
                    crossing = float(means[i] + t * (means[i + 1] - means[i]))
                    break
            out[label + suffix] = {
                "closest_mean": float(means[best]),
                "closest_accuracy_pct": float(accuracy[best]),
                "closest_se": float(rows[f"{prefix}accuracy_pct_se"].to_numpy()[best]),
                "crossing_mean": crossing,
            }
    return out


def cell(row: pd.Series, metric: str) -> str:
    digits = 2 if metric == "accuracy_pct" else 1
    return f"{row[metric + '_mean']:.{digits}f} ± {row[metric + '_se']:.{digits}f}"


def markdown(table: pd.DataFrame, calibration: dict[str, dict[str, float | None]], seeds: int) -> str:
    label = {
        "accuracy_pct": "final acc %",
        "length_incorrect": "E[L \\| incorrect]",
        "length_wrong_approach": "E[L \\| wrong approach]",
    }
    header = ["ψ mean", "ψ std", "initial acc %", "variant"]
    header += [f"{label[m]}, \\|o_i\\| = {c}" for m in METRICS for c in CONVENTIONS]
    lines = [
        f"Final step 400, mean ± SE over seeds 0–{seeds - 1} (accuracy in percent, lengths in ramble "
        "tokens); made by `python scripts/init_sensitivity.py`.",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---:", "---:", "---:", "---"] + ["---:"] * (len(header) - 4)) + " |",
    ]
    grid = table[table["study"] == "grid"]
    for mean, std in GRID:
        for variant in GRID_VARIANTS:
            rows = grid[(grid["psi_mean"] == mean) & (grid["psi_std"] == std) & (grid["variant"] == variant)]
            by_convention = {
                c: rows[rows["count_approach_token"] == v].iloc[0] for c, v in CONVENTIONS.items()
            }
            first = by_convention["L + 1"]
            cells = [f"{mean:g}", f"{std:g}", f"{first['initial_accuracy_pct_mean']:.1f}", f"`{variant}`"]
            cells += [cell(by_convention[c], m) for m in METRICS for c in CONVENTIONS]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Calibration: GRPO's final accuracy (%), ψ std {CALIBRATION_STD:g}, mean ± SE over seeds "
        f"0–{seeds - 1} and over the article's seeds 0–5; the article's figure is {ARTICLE_ACCURACY:.1f}%, "
        "the closest value of each column in bold.",
        "",
        "| ψ mean | "
        + " | ".join(f"\\|o_i\\| = {c}, seeds {s}" for c in CONVENTIONS for s in (f"0–{seeds - 1}", "0–5"))
        + " |",
        "| ---: | " + " | ".join("---:" for _ in range(2 * len(CONVENTIONS))) + " |",
    ]
    scan = table[table["study"] == "calibration"]
    for mean in CALIBRATION_MEANS:
        cells = [f"{mean:g}"]
        for c, counted in CONVENTIONS.items():
            row = scan[(scan["psi_mean"] == mean) & (scan["count_approach_token"] == counted)].iloc[0]
            for suffix, prefix in (("", ""), (", seeds 0-5", "six_")):
                text = f"{row[prefix + 'accuracy_pct_mean']:.2f} ± {row[prefix + 'accuracy_pct_se']:.2f}"
                cells.append(f"**{text}**" if calibration[c + suffix]["closest_mean"] == mean else text)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for key, summary in calibration.items():
        crossing = summary["crossing_mean"]
        where = "outside the scan" if crossing is None else f"at ψ mean ≈ {crossing:.2f}"
        convention, _, subset = key.partition(", ")
        subset = subset.replace("-", "–") if subset else f"seeds 0–{seeds - 1}"
        lines.append(
            f"- \\|o_i\\| = {convention}, {subset}: closest ψ mean {summary['closest_mean']:g} "
            f"({summary['closest_accuracy_pct']:.2f} ± {summary['closest_se']:.2f}%); "
            f"linear interpolation crosses {ARTICLE_ACCURACY:.1f}% {where}."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=Path("results"), help="output folder (default results)"
    )
    parser.add_argument("--seeds", type=int, default=100, help="seeds per setting, 0..N-1 (default 100)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2")
    if not args.out_dir.is_dir():
        parser.error(f"--out-dir {args.out_dir} is not a folder")
    start = time.perf_counter()
    base = Config()
    seeds = list(range(args.seeds))
    # (mean, std) -> the variants to run; the calibration reuses the grid's GRPO runs where they meet.
    settings: dict[tuple[float, float], list[str]] = {setting: list(GRID_VARIANTS) for setting in GRID}
    for mean in CALIBRATION_MEANS:
        settings.setdefault((mean, CALIBRATION_STD), ["grpo"])
    rows: list[dict[str, Any]] = []
    done = 0
    for label, counted in CONVENTIONS.items():
        for (mean, std), variants in settings.items():
            config = base.replace(prompt_logit_mean=mean, prompt_logit_std=std, count_approach_token=counted)
            frame = run_experiment(config, variants, seeds, n_jobs=args.n_jobs)
            summary = summarise(frame, config.steps)
            done += 1
            log(f"|o_i| = {label}, psi ~ N({mean:g}, {std:g}): {done} of {2 * len(settings)}", start)
            common = {"count_approach_token": counted, "convention": label, "psi_mean": mean, "psi_std": std}
            if (mean, std) in GRID:
                for variant in variants:
                    rows.append({"study": "grid", **common, "variant": variant, **summary[variant]})
            if std == CALIBRATION_STD and mean in CALIBRATION_MEANS:
                rows.append({"study": "calibration", **common, "variant": "grpo", **summary["grpo"]})
    table = pd.DataFrame(rows)
    order = {"grid": 0, "calibration": 1, **{name: i for i, name in enumerate(GRID_VARIANTS)}}
    table = table.sort_values(
        ["study", "count_approach_token", "psi_mean", "psi_std", "variant"],
        key=lambda column: column.map(order) if column.name in ("study", "variant") else column,
        ascending=[True, False, True, True, True],
        kind="stable",
    ).reset_index(drop=True)
    table["seeds"] = table["seeds"].astype(int)
    calibration = calibration_summary(table)
    meta = {
        "toyrl_version": __version__,
        "command": "python scripts/init_sensitivity.py"
        + (f" --seeds {args.seeds}" if args.seeds != 100 else ""),
        "config": base.to_dict(),
        "seeds": seeds,
        "grid": [list(setting) for setting in GRID],
        "grid_variants": GRID_VARIANTS,
        "calibration_means": CALIBRATION_MEANS,
        "calibration_std": CALIBRATION_STD,
        "article_accuracy_pct": ARTICLE_ACCURACY,
        "calibration": calibration,
    }
    out = args.out_dir
    write_together(
        [
            (out / "init_sensitivity.csv", table.to_csv(index=False, float_format="%.17g")),
            (out / "init_sensitivity.json", json.dumps(meta, indent=1, allow_nan=False) + "\n"),
            (out / "init_sensitivity.md", markdown(table, calibration, args.seeds)),
        ]
    )
    log("wrote " + ", ".join(str(out / f"init_sensitivity.{ext}") for ext in ("csv", "json", "md")), start)


if __name__ == "__main__":
    main()
