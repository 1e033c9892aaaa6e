"""The bridge study: TRL's own GRPOTrainer training the toy task as a tiny network, beside the toy.

    python scripts/bridge_study.py [--seeds 3] [--steps 150] [--n-jobs 2] [--out-dir results]
                                   [--figures figures]
    python scripts/bridge_study.py --plot-only      # the figure and summary again, from the CSV

Needs the bridge extra (TRL 1.16.0; e.g. TRL's conformance environment, .trainers/trl/bin/python).
Three of TRL 1.16.0's settings (`LABELS`), each trained by `toyrl.bridge.run_bridge` at
`toyrl.bridge.BRIDGE_CONFIG` (cap 64, min_length 4, stop probabilities 5/64 and 2.14/64, 16
prompts x 8 completions, one optimiser step per batch, network lr 3e-5 constant, toy lr 0.02):
`grpo` (loss_type=grpo, scale_rewards=group), `dr_grpo` (loss_type=dr_grpo, scale_rewards=none) and
`dapo`, TRL's defaults (loss_type=dapo, scale_rewards=group). A seed's three networks start from
the same network, fitted to the toy's starting policy of that seed, and TRL seeds their prompts
and sampling alike (the first batch is the same; after it, their batches differ); the toy's three
runs of a seed share its noise streams. About 10 CPU-minutes (5 minutes on 2 cores). Writes:

- `results/bridge_study.csv`: `toyrl.bridge.Bridge.frame`, one row per label, source (network or
  toy), seed and step 0..steps; beside it `results/bridge_study.json` (`Bridge.meta`: settings, the
  GRPOConfig in effect, the fits, CPU seconds, versions, kernels, and `derived`, the numbers below);
- `results/bridge_study.md`: for grpo and dapo against dr_grpo, the gap in E[L | incorrect] per seed
  at steps 25, 50, 100 and the last, network and toy (means of the WINDOW steps up to each), the
  step from which each seed's network gap (the same moving mean) stays above 0, and accuracy,
  correct length, truncation, tokens off the ramble and clipped steps, network beside toy;
- `figures/bridge_study.png|svg` (`toyrl.plots.plot_bridge`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
from joblib import Parallel, delayed

from toyrl.bridge import BRIDGE_CONFIG, WINDOW, Bridge, contrast, level, run_bridge, settings_text
from toyrl.files import write_together
from toyrl.plots import plot_bridge, save_figure
from toyrl.variants import display_name

LABELS: dict[str, dict[str, Any]] = {
    "grpo": {"loss_type": "grpo", "scale_rewards": "group"},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    "dapo": {},  # TRL 1.16.0's defaults: loss_type=dapo, scale_rewards=group
}
REFERENCE = "dr_grpo"
CHECKPOINTS = (25, 50, 100)  # and the last step
NAME = "bridge_study"


def figure_names(settings: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each label's legend entry: its display name (`toyrl.variants.display_name`: "Dr. GRPO" for
    dr_grpo) and its TRL settings."""
    return {label: f"{display_name(label)} ({settings_text(given)})" for label, given in settings.items()}


def one_seed(seed: int, steps: int) -> Bridge:
    return run_bridge(LABELS, BRIDGE_CONFIG.replace(steps=steps), [seed], REFERENCE)


def stays_above(frame: pd.DataFrame, label: str, seed: int) -> int | None:
    """The first step from which the network's gap in E[L | incorrect] (the moving mean of WINDOW
    steps, as drawn) is above 0 at every later step; None if it ends at or below 0."""

    def moving(name: str) -> pd.Series:
        rows = frame[(frame["label"] == name) & (frame["source"] == "network") & (frame["seed"] == seed)]
        return rows.set_index("step")["length_incorrect"].rolling(WINDOW, min_periods=1).mean()

    above = (moving(label) - moving(REFERENCE)) > 0
    if not above.iloc[-1]:
        return None
    below = above.index[~above.to_numpy()]
    return int(below.max()) + 1 if len(below) else 0


def derived(frame: pd.DataFrame) -> dict[str, Any]:
    """The study's numbers, from its table."""
    last = int(frame["step"].max())
    seeds = sorted(int(seed) for seed in set(frame["seed"]))
    out: dict[str, Any] = {
        "window": WINDOW,
        "last_step": last,
        "seeds": seeds,
        "gaps": {},
        "levels": {},
        "seeds_network": {},
    }
    for label in LABELS:
        if label != REFERENCE:
            out["gaps"][label] = {
                str(step): {
                    source: {
                        "per_seed": [round(float(x), 3) for x in part.per_seed],
                        "mean": round(part.mean, 3),
                        "se": round(part.se, 3),
                    }
                    for source in ("network", "toy")
                    for part in [
                        contrast(frame, "length_incorrect", step, (label, source), (REFERENCE, source))
                    ]
                }
                for step in (*CHECKPOINTS, last)
            }
            out["gaps"][label]["stays_above_from"] = [stays_above(frame, label, seed) for seed in seeds]
        out["levels"][label] = {
            source: {
                metric: {
                    str(step): round(level(frame, label, source, metric, step), 4)
                    for step in (WINDOW - 1, *CHECKPOINTS, last)
                }
                for metric in ("accuracy", "length_correct", "length_incorrect", "truncated", "off_ramble")
            }
            for source in ("network", "toy")
        }
        network = frame[(frame["label"] == label) & (frame["source"] == "network")]
        out["levels"][label]["network"]["clipped_share"] = round(float(network["clipped"].mean()), 4)
        out["seeds_network"][label] = {
            str(seed): one_network(network[network["seed"] == seed]) for seed in seeds
        }
    return out


def one_network(rows: pd.DataFrame) -> dict[str, Any]:
    """A network's run in a few numbers: its incorrect length's peak (the moving mean of WINDOW steps)
    and where, that mean at the last step, the last step's share of ramble positions holding another
    token and its correct length, and the steps max_grad_norm clipped."""
    rows = rows.set_index("step")
    moving = rows["length_incorrect"].rolling(WINDOW, min_periods=1).mean()
    return {
        "peak_incorrect": round(float(moving.max()), 1),
        "peak_step": int(moving.idxmax()),
        "last_incorrect": round(float(moving.iloc[-1]), 1),
        "last_off_ramble": round(float(rows["off_ramble"].iloc[-1]), 3),
        "last_correct": round(float(rows["length_correct"].iloc[-1]), 1),
        "clipped_steps": int(rows["clipped"].sum()),
    }


def markdown(data: dict[str, Any]) -> str:
    d = data["derived"]
    last = d["last_step"]
    steps = [*map(str, CHECKPOINTS), str(last)]
    lines = [
        "# The bridge study: TRL 1.16.0's GRPOTrainer on a tiny network, beside the toy",
        "",
        f"Made by `python scripts/bridge_study.py` (toyrl {data['toyrl_version']}, TRL "
        f"{data['versions']['trl']}, torch {data['versions']['torch']}). "
        f"Seeds {', '.join(map(str, d['seeds']))}; "
        f"cap {data['config']['cap']}, min_length {data['config']['min_length']}, "
        f"{data['config']['batch_prompts']} prompts x {data['config']['group_size']} completions a step, "
        f"{last} steps; network lr {data['learning_rate']:g} (constant), toy lr {data['config']['lr']:g}. "
        f"Every number is a mean of the {WINDOW} steps up to the step named; gaps are a label's "
        "E[L | incorrect] less dr_grpo's, mean ± SE over seeds. A seed's networks start from the same fit "
        "and share TRL's seed; the toy's runs of a seed share their noise.",
        "",
        "## Gap in incorrect length against dr_grpo (tokens)",
        "",
        "| label | source | " + " | ".join(f"step {s}" for s in steps) + " | per seed, last step |",
        "|---|---|" + "---|" * len(steps) + "---|",
    ]
    for label, gaps in d["gaps"].items():
        for source in ("network", "toy"):
            cells = [f"{gaps[s][source]['mean']:+.1f} ± {gaps[s][source]['se']:.1f}" for s in steps]
            seeds = ", ".join(f"{x:+.1f}" for x in gaps[str(last)][source]["per_seed"])
            lines.append(f"| {label} | {source} | " + " | ".join(cells) + f" | {seeds} |")
    lines += ["", "Network gap above 0 from step (per seed, moving mean of the figure):", ""]
    for label, gaps in d["gaps"].items():
        shown = ", ".join("never" if s is None else str(s) for s in gaps["stays_above_from"])
        lines.append(f"- {label}: {shown}")
    lines += [
        "",
        "## Levels, network beside toy",
        "",
        f"| label | metric | network step {WINDOW - 1} | network step {last} | toy step {WINDOW - 1} | "
        f"toy step {last} |",
        "|---|---|---|---|---|---|",
    ]
    first = str(WINDOW - 1)
    for label, levels in d["levels"].items():
        for metric in ("accuracy", "length_correct", "length_incorrect", "truncated", "off_ramble"):
            net, toy = levels["network"][metric], levels["toy"][metric]
            lines.append(
                f"| {label} | {metric} | {net[first]:.3f} | {net[str(last)]:.3f} | {toy[first]:.3f} | "
                f"{toy[str(last)]:.3f} |"
            )
        lines.append(
            f"| {label} | steps clipped by max_grad_norm | {levels['network']['clipped_share']:.3f} | | | |"
        )
    lines += [
        "",
        "The toy's ramble has one token: no other token can appear in it.",
        "",
        "## Each network",
        "",
        f"| label | seed | peak incorrect length (moving mean) | at step | at step {last} | "
        f"other tokens at step {last} | correct length at step {last} | steps clipped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, by_seed in d["seeds_network"].items():
        for seed, one in by_seed.items():
            lines.append(
                f"| {label} | {seed} | {one['peak_incorrect']:.1f} | {one['peak_step']} | "
                f"{one['last_incorrect']:.1f} | {one['last_off_ramble']:.1%} | {one['last_correct']:.1f} | "
                f"{one['clipped_steps']} |"
            )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    parser.add_argument("--steps", type=int, default=150, help="optimiser steps (default 150)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers, a seed each (default 2)")
    parser.add_argument("--out-dir", type=Path, default=Path("results"), help="default results")
    parser.add_argument("--figures", type=Path, default=Path("figures"), help="default figures")
    parser.add_argument("--plot-only", action="store_true", help="redraw and resummarise from the CSV")
    args = parser.parse_args()
    for option, folder in (("--out-dir", args.out_dir), ("--figures", args.figures)):
        if not folder.is_dir():
            parser.error(f"{option} {folder} is not a folder")
    csv, sidecar = args.out_dir / f"{NAME}.csv", args.out_dir / f"{NAME}.json"
    started = time.perf_counter()
    if args.plot_only:
        if not (csv.is_file() and sidecar.is_file()):
            parser.error(f"{csv} or {sidecar} does not exist: run the study first")
        frame = pd.read_csv(csv)
        meta = json.loads(sidecar.read_text())
    else:
        if not 2 <= args.seeds <= 20:
            parser.error("--seeds must be in 2..20 (a standard error needs two)")
        if not 2 * WINDOW <= args.steps <= 2_000:
            parser.error(f"--steps must be in {2 * WINDOW}..2000")
        parts = Parallel(n_jobs=args.n_jobs)(
            delayed(one_seed)(seed, args.steps) for seed in range(args.seeds)
        )
        bridge = Bridge.combine(parts)
        frame, meta = bridge.frame, bridge.meta()
    meta = meta | {"command": "python scripts/bridge_study.py", "derived": derived(frame)}
    meta.pop("csv_sha256", None)
    text = frame.to_csv(index=False, lineterminator="\n", float_format="%.17g")
    meta["csv_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    write_together(
        [
            (csv, text),
            (sidecar, json.dumps(meta, indent=1, allow_nan=False) + "\n"),
            (args.out_dir / f"{NAME}.md", markdown(meta)),
        ]
    )
    for kind in ("png", "svg"):
        figure = plot_bridge(frame, REFERENCE, WINDOW, names=figure_names(LABELS))
        save_figure(figure, args.figures / f"{NAME}.{kind}")
    print(f"wrote {csv}, {sidecar.name}, {NAME}.md and figures/{NAME}.png|svg", file=sys.stderr)
    print(f"done in {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
