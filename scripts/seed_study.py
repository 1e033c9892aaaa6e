"""How much of the article's toy study is seed noise; what pairing, conventions and the mean field change.

    python scripts/seed_study.py [--out-dir results] [--seeds 100] [--n-jobs 2]

At the article's settings (`Config()`), the four variants of `toyrl.variants.ARTICLE`, final step
400, over the article's 6 seeds (0-5, set `six`) and over seeds 0..N-1 (set `all`, N = --seeds,
default 100). The variants of one seed share initial logits and noise (common random numbers), so
differences between variants are paired per seed. A few tens of seconds on 2 cores; progress on
stderr. Writes, under --out-dir:

- `seed_study.json`: `meta` (toyrl version, command, the configuration, the other convention's
  change, seeds of each set, variants, final step, the article's figures), then sections, each a
  flat dict of dotted keys -> plain numbers (accuracy in percent, lengths in ramble tokens,
  mean/sd/se over seeds with sd ddof 1 and se = sd / sqrt(n)):
  - `headline`: `{set}.{variant}.final.{metric}.{mean|sd|se|n}` for metric in accuracy_pct,
    length_mean, length_correct, length_incorrect, length_wrong_approach; `{set}.initial.{metric}.{stat}`
    for step 0 (shared by all variants) for accuracy_pct, length_correct, length_incorrect.
  - `pairing`: `{set}.corr.grpo_length_only.accuracy_pct` (Pearson correlation across seeds of the two
    final accuracies); `{set}.{a}_minus_{b}.{metric}.{paired_mean|paired_sd|paired_se|unpaired_se}`
    for (a, b) in (grpo, length_only), (std_only, dr_grpo), (grpo, dr_grpo) and metric in accuracy_pct,
    length_incorrect, length_wrong_approach; unpaired_se = sqrt(se_a^2 + se_b^2).
  - `article`: the article's "27.4% vs 27.3%, 1,410 vs 1,405 tokens" (GRPO vs length-only) under
    `{convention}.{runs}.{variant}.{metric}.{mean|sd|se|article|diff|z}`: convention `l_plus_1`
    (|o_i| = L + 1, the default) or `l` (count_approach_token=False); runs `sampled_six`,
    `sampled_all` or `meanfield_six` (mean_field=True, one trajectory per seed); metric accuracy_pct,
    length_incorrect, length_wrong_approach (the two readings of the token figure); diff = mean -
    article, z = diff / se. Orderings: `{convention}.{runs}.{variant}.wrong_minus_incorrect` and
    `{convention}.{runs}.grpo_minus_length_only.{metric}` (differences of the means).
  - `convention`: `{set}.{variant}.{metric}.{paired_mean|paired_sd|paired_se}` of the per-seed
    difference (|o_i| = L) - (|o_i| = L + 1) of the final metric (sampled runs).
  - `dr_grpo_curves`: Dr. GRPO's E[L | incorrect] against E[L | correct], mean over the seeds of a
    set: `{set}.initial_incorrect`, `{set}.initial_correct`; `{set}.max_incorrect_0_50` and
    `{set}.max_incorrect_step` (maximum of the mean incorrect curve in steps 0-50 and its step);
    `{set}.max_incorrect_overall` and `{set}.max_incorrect_overall_step` (the same over every
    step); `{set}.stays_below_from_step` (the first step from which the mean incorrect curve stays
    below the mean correct one up to the final step; null if it is not below at the final step);
    `{set}.final_incorrect`, `{set}.final_correct`; `{set}.final_fraction_incorrect_below` (share
    of seeds with E[L | incorrect] < E[L | correct] at the final step).
  - `stops`: the final stop probabilities, `{set}.{variant}.{stop_prob_right|stop_prob_wrong}.mean`
    over seeds and `.inverse_of_mean` (1 / mean, "one token in N").
  - `meanfield`: the mean-field runs (|o_i| = L + 1, seeds 0-5): `{variant}.final.{metric}.{stat}`
    as in `headline`, and `{variant}.wrong_approach_max_change`, the largest distance in tokens of
    E[L | wrong approach] from its initial value over every step and seed.
  - `bias`: the exact expected update E[g] against grad J (`toyrl.bias.bias_report`) at a state
    `init` (theta_0 of each seed), `step100` or `step400` (of the sampled runs, seeds 0-5, replayed):
    `{state}.{variant}.{metric}.{stat}` for metric in cosine, norm_ratio, phi_wrong_cosine (u_w/|u|),
    phi_wrong_share (u_w^2/|u|^2); stat `six.seed{k}`, `six.min`, `six.max`, `six.mean`, and for
    `init` also `all.mean`, `all.sd`, `all.se`, `all.min`, `all.max`. Dr. GRPO's check over every state
    evaluated: `dr_grpo.expected_norm_ratio` ((G - 1)/(G L_norm)), `dr_grpo.max_cosine_deviation`
    (max |cosine - 1|), `dr_grpo.max_norm_ratio_relative_deviation`, `dr_grpo.states`.
- `seed_study_curves.csv`: Dr. GRPO's mean-over-seeds curves, one row per step: `six_correct`,
  `six_incorrect`, `all_correct`, `all_incorrect`, `all_fraction_incorrect_below`.
- `seed_study.md`: markdown tables made from the same numbers (a bias metric within rounding of the
  exact 0 or 1 it has in exact arithmetic is shown as that value, without an SE: `bias_cell`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toyrl import __version__
from toyrl.bias import bias_report, replay_states
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.files import write_together
from toyrl.results import ARTICLE_FINAL
from toyrl.train import initial_theta, run_streams
from toyrl.variants import ARTICLE as ARTICLE_NAMES
from toyrl.variants import VARIANTS

NAMES = list(ARTICLE_NAMES)
FINAL_METRICS = ["accuracy_pct", "length_mean", "length_correct", "length_incorrect", "length_wrong_approach"]
INITIAL_METRICS = ["accuracy_pct", "length_correct", "length_incorrect"]
PAIRS = [("grpo", "length_only"), ("std_only", "dr_grpo"), ("grpo", "dr_grpo")]
PAIR_METRICS = ["accuracy_pct", "length_incorrect", "length_wrong_approach"]
READINGS = ["accuracy_pct", "length_incorrect", "length_wrong_approach"]
CONVENTION_METRICS = ["accuracy_pct", "length_mean", "length_incorrect", "length_wrong_approach"]
BIAS_METRICS = ["cosine", "norm_ratio", "phi_wrong_cosine", "phi_wrong_share"]
CONVENTIONS = {"l_plus_1": True, "l": False}
CONVENTION_LABEL = {"l_plus_1": "\\|o_i\\| = L + 1", "l": "\\|o_i\\| = L"}
LABEL = {
    "accuracy_pct": "accuracy %",
    "length_mean": "E[L]",
    "length_correct": "E[L \\| correct]",
    "length_incorrect": "E[L \\| incorrect]",
    "length_wrong_approach": "E[L \\| wrong approach]",
}
ARTICLE = {
    name: {"accuracy_pct": acc, "tokens": float(tokens)} for name, (acc, tokens) in ARTICLE_FINAL.items()
}
CURVE_STEPS = [0, 5, 10, 15, 20, 25, 30, 40, 50, 75, 100, 125, 150, 200, 250, 300, 350, 400]


def log(message: str, start: float) -> None:
    print(f"[{time.perf_counter() - start:6.1f} s] {message}", file=sys.stderr, flush=True)


def stats(values: np.ndarray) -> dict[str, float]:
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    sd = float(values.std(ddof=1)) if n > 1 else 0.0
    return {"mean": float(values.mean()), "sd": sd, "se": sd / math.sqrt(n), "n": float(n)}


def per_seed(frame: pd.DataFrame, step: int, metric: str, variant: str, seeds: Sequence[int]) -> np.ndarray:
    """The metric at `step` of `variant`'s runs, in the order of `seeds` (accuracy in percent)."""
    rows = frame[(frame["step"] == step) & (frame["variant"] == variant)].set_index("seed")
    column = "accuracy" if metric == "accuracy_pct" else metric
    values = rows.loc[list(seeds), column].to_numpy(dtype=np.float64)
    return values * 100 if metric == "accuracy_pct" else values


def headline(frame: pd.DataFrame, sets: dict[str, list[int]], final: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for set_name, seeds in sets.items():
        for variant in NAMES:
            for metric in FINAL_METRICS:
                for stat, value in stats(per_seed(frame, final, metric, variant, seeds)).items():
                    out[f"{set_name}.{variant}.final.{metric}.{stat}"] = value
        for metric in INITIAL_METRICS:
            first = per_seed(frame, 0, metric, NAMES[0], seeds)
            for variant in NAMES[1:]:  # step 0 is the same policy for every variant of a seed
                assert np.array_equal(first, per_seed(frame, 0, metric, variant, seeds)), metric
            for stat, value in stats(first).items():
                out[f"{set_name}.initial.{metric}.{stat}"] = value
    return out


def pairing(frame: pd.DataFrame, sets: dict[str, list[int]], final: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for set_name, seeds in sets.items():
        grpo = per_seed(frame, final, "accuracy_pct", "grpo", seeds)
        length_only = per_seed(frame, final, "accuracy_pct", "length_only", seeds)
        out[f"{set_name}.corr.grpo_length_only.accuracy_pct"] = float(np.corrcoef(grpo, length_only)[0, 1])
        for a, b in PAIRS:
            for metric in PAIR_METRICS:
                x, y = per_seed(frame, final, metric, a, seeds), per_seed(frame, final, metric, b, seeds)
                difference = stats(x - y)
                key = f"{set_name}.{a}_minus_{b}.{metric}"
                out[f"{key}.paired_mean"] = difference["mean"]
                out[f"{key}.paired_sd"] = difference["sd"]
                out[f"{key}.paired_se"] = difference["se"]
                out[f"{key}.unpaired_se"] = math.hypot(stats(x)["se"], stats(y)["se"])
    return out


def article_section(
    frames: dict[tuple[str, str], pd.DataFrame], sets: dict[str, list[int]], final: int
) -> dict[str, float]:
    """frames[(convention, kind)] with kind 'sampled' (all seeds) or 'meanfield' (seeds 0-5)."""
    out: dict[str, float] = {}
    for convention in CONVENTIONS:
        runs = {
            "sampled_six": (frames[(convention, "sampled")], sets["six"]),
            "sampled_all": (frames[(convention, "sampled")], sets["all"]),
            "meanfield_six": (frames[(convention, "meanfield")], sets["six"]),
        }
        for run_name, (frame, seeds) in runs.items():
            means: dict[tuple[str, str], float] = {}
            for variant in ARTICLE:
                for metric in READINGS:
                    s = stats(per_seed(frame, final, metric, variant, seeds))
                    figure = ARTICLE[variant]["accuracy_pct" if metric == "accuracy_pct" else "tokens"]
                    key = f"{convention}.{run_name}.{variant}.{metric}"
                    out[f"{key}.mean"], out[f"{key}.sd"], out[f"{key}.se"] = s["mean"], s["sd"], s["se"]
                    out[f"{key}.article"] = figure
                    out[f"{key}.diff"] = s["mean"] - figure
                    out[f"{key}.z"] = (s["mean"] - figure) / s["se"] if s["se"] > 0 else math.nan
                    means[(variant, metric)] = s["mean"]
                key = f"{convention}.{run_name}.{variant}.wrong_minus_incorrect"
                out[key] = means[(variant, "length_wrong_approach")] - means[(variant, "length_incorrect")]
            for metric in READINGS:
                out[f"{convention}.{run_name}.grpo_minus_length_only.{metric}"] = (
                    means[("grpo", metric)] - means[("length_only", metric)]
                )
    return out


def convention_section(
    counted: pd.DataFrame, ramble: pd.DataFrame, sets: dict[str, list[int]], final: int
) -> dict[str, float]:
    out: dict[str, float] = {}
    for set_name, seeds in sets.items():
        for variant in NAMES:
            for metric in CONVENTION_METRICS:
                difference = per_seed(ramble, final, metric, variant, seeds) - per_seed(
                    counted, final, metric, variant, seeds
                )
                s = stats(difference)
                key = f"{set_name}.{variant}.{metric}"
                out[f"{key}.paired_mean"], out[f"{key}.paired_sd"] = s["mean"], s["sd"]
                out[f"{key}.paired_se"] = s["se"]
    return out


def stops_section(frame: pd.DataFrame, sets: dict[str, list[int]], final: int) -> dict[str, float]:
    """The final per-token stop probabilities: `{set}.{variant}.{stop_prob_right|stop_prob_wrong}`
    with `.mean` over seeds and `.inverse_of_mean` (1/mean: "1 in N tokens")."""
    out: dict[str, float] = {}
    for set_name, seeds in sets.items():
        for variant in NAMES:
            for column in ("stop_prob_right", "stop_prob_wrong"):
                mean = float(per_seed(frame, final, column, variant, seeds).mean())
                out[f"{set_name}.{variant}.{column}.mean"] = mean
                out[f"{set_name}.{variant}.{column}.inverse_of_mean"] = 1 / mean
    return out


def meanfield_section(frame: pd.DataFrame, seeds: Sequence[int], final: int) -> dict[str, float]:
    """Mean-field runs (|o_i| = L + 1): per variant, the final metrics over `seeds`, and how far the
    wrong approach's expected length ever moves from its start (max over steps and seeds, tokens)."""
    out: dict[str, float] = {}
    for variant in NAMES:
        for metric in FINAL_METRICS:
            for stat, value in stats(per_seed(frame, final, metric, variant, seeds)).items():
                out[f"{variant}.final.{metric}.{stat}"] = value
        runs = frame[frame["variant"] == variant]
        start = runs.groupby("seed")["length_wrong_approach"].transform("first")
        out[f"{variant}.wrong_approach_max_change"] = float(
            (runs["length_wrong_approach"] - start).abs().max()
        )
    return out


def curves(
    frame: pd.DataFrame, sets: dict[str, list[int]], final: int
) -> tuple[dict[str, float | None], pd.DataFrame]:
    out: dict[str, float | None] = {}
    dr = frame[frame["variant"] == "dr_grpo"]
    table = pd.DataFrame({"step": np.arange(final + 1)})
    for set_name, seeds in sets.items():
        rows = dr[dr["seed"].isin(seeds)]
        correct = rows.pivot(index="step", columns="seed", values="length_correct")[seeds]
        incorrect = rows.pivot(index="step", columns="seed", values="length_incorrect")[seeds]
        mean_correct = correct.mean(axis=1).to_numpy()
        mean_incorrect = incorrect.mean(axis=1).to_numpy()
        table[f"{set_name}_correct"] = mean_correct
        table[f"{set_name}_incorrect"] = mean_incorrect
        early = mean_incorrect[: min(50, final) + 1]
        above = np.flatnonzero(mean_incorrect >= mean_correct)
        # The first step of the final run of steps with incorrect < correct (the final step included).
        below_from = float(above[-1] + 1) if len(above) else 0.0
        fraction = (incorrect.to_numpy() < correct.to_numpy()).mean(axis=1)
        if set_name == "all":
            table["all_fraction_incorrect_below"] = fraction
        out[f"{set_name}.initial_incorrect"] = float(mean_incorrect[0])
        out[f"{set_name}.initial_correct"] = float(mean_correct[0])
        out[f"{set_name}.max_incorrect_0_50"] = float(early.max())
        out[f"{set_name}.max_incorrect_step"] = float(early.argmax())
        out[f"{set_name}.max_incorrect_overall"] = float(mean_incorrect.max())
        out[f"{set_name}.max_incorrect_overall_step"] = float(mean_incorrect.argmax())
        out[f"{set_name}.stays_below_from_step"] = below_from if below_from <= final else None
        out[f"{set_name}.final_incorrect"] = float(mean_incorrect[-1])
        out[f"{set_name}.final_correct"] = float(mean_correct[-1])
        out[f"{set_name}.final_fraction_incorrect_below"] = float(fraction[-1])
    return out, table


def bias_rows(states: np.ndarray, config: Config) -> dict[str, np.ndarray]:
    """bias_report of each variant at each state: {f'{variant}.{metric}': values [states]}."""
    variants = [VARIANTS[name] for name in NAMES for _ in range(len(states))]
    report = bias_report(np.concatenate([states] * len(NAMES)), config, variants)
    out = {}
    for i, name in enumerate(NAMES):
        chunk = report[i * len(states) : (i + 1) * len(states)]
        for metric in BIAS_METRICS:
            out[f"{name}.{metric}"] = np.array([float(row[metric]) for row in chunk])
    return out


def bias_section(
    config: Config, frame: pd.DataFrame, sets: dict[str, list[int]], final: int
) -> dict[str, float]:
    out: dict[str, float] = {}
    six, every = sets["six"], sets["all"]
    init_states = np.stack([initial_theta(config, run_streams(seed)[0]) for seed in every])
    evaluated: dict[str, dict[str, np.ndarray]] = {"init": bias_rows(init_states, config)}
    steps = [100, final] if final != 100 else [100]
    runs = [(VARIANTS[name], seed) for name in NAMES for seed in six]
    check = frame[frame["seed"].isin(six)]
    replayed = replay_states(config, runs, steps, check=check)  # [runs, steps, P + 2]
    for k, step in enumerate(steps):
        report = {}
        # Each variant's state is evaluated with its own variant only.
        for i, name in enumerate(NAMES):
            states = replayed[i * len(six) : (i + 1) * len(six), k]
            rows = bias_report(states, config, [VARIANTS[name]] * len(six))
            for metric in BIAS_METRICS:
                report[f"{name}.{metric}"] = np.array([float(row[metric]) for row in rows])
        evaluated[f"step{step}"] = report
    position = {seed: i for i, seed in enumerate(every)}
    for state, report in evaluated.items():
        for key, values in report.items():
            few = values[[position[seed] for seed in six]] if state == "init" else values
            for seed, value in zip(six, few, strict=True):
                out[f"{state}.{key}.six.seed{seed}"] = float(value)
            out[f"{state}.{key}.six.min"] = float(few.min())
            out[f"{state}.{key}.six.max"] = float(few.max())
            out[f"{state}.{key}.six.mean"] = float(few.mean())
            if state == "init":
                s = stats(values)
                out[f"{state}.{key}.all.mean"], out[f"{state}.{key}.all.sd"] = s["mean"], s["sd"]
                out[f"{state}.{key}.all.se"] = s["se"]
                out[f"{state}.{key}.all.min"] = float(values.min())
                out[f"{state}.{key}.all.max"] = float(values.max())
    expected_ratio = (config.group_size - 1) / (config.group_size * config.length_norm_value)
    cosines = np.concatenate([report["dr_grpo.cosine"] for report in evaluated.values()])
    ratios = np.concatenate([report["dr_grpo.norm_ratio"] for report in evaluated.values()])
    out["dr_grpo.expected_norm_ratio"] = expected_ratio
    out["dr_grpo.max_cosine_deviation"] = float(np.abs(cosines - 1).max())
    out["dr_grpo.max_norm_ratio_relative_deviation"] = float(np.abs(ratios / expected_ratio - 1).max())
    out["dr_grpo.states"] = float(len(cosines))
    return out


# --- markdown ---------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def digits(metric: str) -> int:
    return 2 if metric == "accuracy_pct" else 1


def pm(mean: float, spread: float, metric: str) -> str:
    d = digits(metric)
    return f"{mean:.{d}f} ± {spread:.{d}f}"


# A bias metric this close to the exact value it has in exact arithmetic (Dr. GRPO's and std_only's
# zero along phi_wrong, Dr. GRPO's cosine 1) is rounding residue: 16 ulp of 1 for a cosine, its square
# for a share (a cosine squared).
ROUNDING = 2.0**-48
EXACT_WITHIN = {
    "cosine": (1.0, ROUNDING),
    "phi_wrong_cosine": (0.0, ROUNDING),
    "phi_wrong_share": (0.0, ROUNDING * ROUNDING),
}


def bias_cell(metric: str, *values: float) -> str | None:
    """The exact value `values` all round to, as the table shows it ("0", "1"), or None if one of them
    is farther from it than rounding residue (or the metric has no exact value)."""
    if metric not in EXACT_WITHIN:
        return None
    exact, within = EXACT_WITHIN[metric]
    return f"{exact:g}" if all(abs(value - exact) <= within for value in values) else None


def markdown(result: dict[str, Any]) -> str:
    meta, h, p, a, c, dr, b = (
        result[k] for k in ("meta", "headline", "pairing", "article", "convention", "dr_grpo_curves", "bias")
    )
    n_all = len(meta["seeds"]["all"])
    final = meta["final_step"]
    sets = {"six": "0–5", "all": f"0–{n_all - 1}"}
    parts = [
        "# Seed study",
        "",
        f"Generated by `python scripts/seed_study.py` (toyrl {meta['toyrl_version']}) at the article's "
        f"settings, final step {final}; numbers from `seed_study.json`. Cells are mean ± SE over seeds "
        "(SE = sd/√n, sd in brackets where shown); accuracy in percent, lengths in ramble tokens.",
        "",
        "## Headline figures",
        "",
    ]
    header = ["variant", "seeds", *(LABEL[m] for m in FINAL_METRICS)]
    rows = []
    for variant in NAMES:
        for set_name, label in sets.items():
            cells = [f"`{variant}`", label]
            for metric in FINAL_METRICS:
                key = f"{set_name}.{variant}.final.{metric}"
                d = digits(metric)
                cells.append(f"{pm(h[key + '.mean'], h[key + '.se'], metric)} ({h[key + '.sd']:.{d}f})")
            rows.append(cells)
    for set_name, label in sets.items():
        cells = ["step 0 (all)", label]
        for metric in FINAL_METRICS:
            key = f"{set_name}.initial.{metric}"
            if metric in INITIAL_METRICS:
                d = digits(metric)
                cells.append(f"{pm(h[key + '.mean'], h[key + '.se'], metric)} ({h[key + '.sd']:.{d}f})")
            else:
                cells.append("–")
        rows.append(cells)
    parts += [table(header, rows, "llrrrrr"), ""]

    parts += ["## Pairing (common random numbers)", ""]
    for set_name, label in sets.items():
        corr = p[f"{set_name}.corr.grpo_length_only.accuracy_pct"]
        parts.append(
            f"Seeds {label}: correlation across seeds of GRPO's and length-only's final accuracy {corr:.4f}."
        )
    parts.append("")
    header = ["difference", "seeds", "metric", "paired mean", "paired SE", "unpaired SE", "unpaired / paired"]
    rows = []
    for a_name, b_name in PAIRS:
        for set_name, label in sets.items():
            for metric in PAIR_METRICS:
                key = f"{set_name}.{a_name}_minus_{b_name}.{metric}"
                d = digits(metric) + 1
                ratio = p[key + ".unpaired_se"] / p[key + ".paired_se"]
                rows.append(
                    [
                        f"`{a_name}` − `{b_name}`",
                        label,
                        LABEL[metric],
                        f"{p[key + '.paired_mean']:.{d}f}",
                        f"{p[key + '.paired_se']:.{d}f}",
                        f"{p[key + '.unpaired_se']:.{d}f}",
                        f"{ratio:.1f}×",
                    ]
                )
    parts += [table(header, rows, "lllrrrr"), ""]

    parts += [
        "## The article's 27.4% vs 27.3%, 1,410 vs 1,405 tokens (GRPO vs length-only)",
        "",
        "z = (mean − article) / SE of the mean over seeds. Mean-field runs: one noise-free trajectory per "
        "seed (the seed sets the initial logits only), seeds 0–5; their SE measures only the spread of the "
        "initial logits, not sampling noise, so their z is not a test.",
        "",
    ]
    header = ["\\|o_i\\|", "runs", "variant", "reading", "mean ± SE", "article", "mean − article", "z"]
    run_label = {
        "sampled_six": "sampled, seeds 0–5",
        "sampled_all": f"sampled, seeds 0–{n_all - 1}",
        "meanfield_six": "mean-field, seeds 0–5",
    }
    rows = []
    for convention in CONVENTIONS:
        for run_name, run_text in run_label.items():
            for variant in ARTICLE:
                for metric in READINGS:
                    key = f"{convention}.{run_name}.{variant}.{metric}"
                    d = digits(metric)
                    figure = a[key + ".article"]
                    rows.append(
                        [
                            CONVENTION_LABEL[convention].replace("\\|o_i\\| = ", ""),
                            run_text,
                            f"`{variant}`",
                            LABEL[metric],
                            pm(a[key + ".mean"], a[key + ".se"], metric),
                            f"{figure:.1f}" if metric == "accuracy_pct" else f"{figure:,.0f}",
                            f"{a[key + '.diff']:+.{d}f}",
                            f"{a[key + '.z']:+.1f}",
                        ]
                    )
    parts += [table(header, rows, "lllrrrrr"), ""]
    header = [
        "\\|o_i\\|",
        "runs",
        "GRPO: wrong − incorrect",
        "length-only: wrong − incorrect",
        "GRPO − length-only: E[L \\| incorrect]",
        "GRPO − length-only: E[L \\| wrong approach]",
    ]
    rows = []
    for convention in CONVENTIONS:
        for run_name, run_text in run_label.items():
            key = f"{convention}.{run_name}"
            rows.append(
                [
                    CONVENTION_LABEL[convention].replace("\\|o_i\\| = ", ""),
                    run_text,
                    f"{a[key + '.grpo.wrong_minus_incorrect']:+.1f}",
                    f"{a[key + '.length_only.wrong_minus_incorrect']:+.1f}",
                    f"{a[key + '.grpo_minus_length_only.length_incorrect']:+.1f}",
                    f"{a[key + '.grpo_minus_length_only.length_wrong_approach']:+.1f}",
                ]
            )
    article_gap = ARTICLE["grpo"]["tokens"] - ARTICLE["length_only"]["tokens"]
    parts += [
        "Orderings (differences of the means; the article: "
        f"{article_gap:+.0f} tokens for GRPO − length-only):",
        "",
    ]
    parts += [table(header, rows, "llrrrr"), ""]

    parts += [
        "## The \\|o_i\\| convention: (\\|o_i\\| = L) − (\\|o_i\\| = L + 1), "
        f"paired over seeds 0–{n_all - 1}",
        "",
    ]
    header = ["variant", *(LABEL[m] for m in CONVENTION_METRICS)]
    rows = []
    for variant in NAMES:
        cells = [f"`{variant}`"]
        for metric in CONVENTION_METRICS:
            key = f"all.{variant}.{metric}"
            d = digits(metric)
            cells.append(f"{c[key + '.paired_mean']:+.{d}f} ± {c[key + '.paired_se']:.{d}f}")
        rows.append(cells)
    parts += [table(header, rows, "lrrrr"), ""]

    parts += ["## Dr. GRPO: incorrect against correct length over training", ""]
    header = [
        "seeds",
        "E[L \\| incorrect] at step 0",
        "max in steps 0–50 (step)",
        "max overall (step)",
        "mean incorrect < mean correct from step",
        f"at step {final}: incorrect, correct",
        "seeds with incorrect < correct",
    ]
    rows = []
    for set_name, label in sets.items():
        below = dr[f"{set_name}.stays_below_from_step"]
        rows.append(
            [
                label,
                f"{dr[set_name + '.initial_incorrect']:.1f}",
                f"{dr[set_name + '.max_incorrect_0_50']:.1f} ({dr[set_name + '.max_incorrect_step']:.0f})",
                f"{dr[set_name + '.max_incorrect_overall']:.1f} "
                f"({dr[set_name + '.max_incorrect_overall_step']:.0f})",
                "never" if below is None else f"{below:.0f}",
                f"{dr[set_name + '.final_incorrect']:.1f}, {dr[set_name + '.final_correct']:.1f}",
                f"{100 * dr[set_name + '.final_fraction_incorrect_below']:.0f}%",
            ]
        )
    parts += [table(header, rows, "lrrrrrr"), ""]
    curve = result["curve_table"]
    header = [
        "step",
        *(f"seeds {label}: {kind}" for label in sets.values() for kind in ("correct", "incorrect")),
    ]
    rows = []
    for step in [s for s in CURVE_STEPS if s <= final]:
        row = curve[curve["step"] == step].iloc[0]
        cells = [str(step)]
        for set_name in sets:
            cells += [f"{row[set_name + '_correct']:.1f}", f"{row[set_name + '_incorrect']:.1f}"]
        rows.append(cells)
    parts += ["Mean-over-seeds curves at selected steps (every step: `seed_study_curves.csv`):", ""]
    parts += [table(header, rows, "rrrrr"), ""]

    parts += [
        "## The exact expected update against ∇J",
        "",
        "`toyrl.bias.bias_report` of each variant's exact expected update E[g]: cosine to ∇J, norm ratio "
        "|E[g]|/|∇J|, φ_wrong cosine u_w/|u| and φ_wrong share u_w²/|u|². At the initial policy θ0 of each "
        "seed, and at steps 100 and 400 of the sampled runs (seeds 0–5, replayed).",
        "",
    ]
    header = [
        "state",
        "variant",
        "metric",
        "seeds 0–5: min",
        "max",
        "mean",
        f"seeds 0–{n_all - 1}: mean ± SE",
    ]
    rows = []
    states = [s for s in ("init", "step100", f"step{final}") if any(k.startswith(s + ".") for k in b)]
    states = list(dict.fromkeys(states))
    for state in states:
        for variant in NAMES:
            for metric in BIAS_METRICS:
                key = f"{state}.{variant}.{metric}"
                wide = "–"
                if state == "init":
                    spread = (b[key + ".all.min"], b[key + ".all.max"])
                    wide = (
                        bias_cell(metric, *spread) or f"{b[key + '.all.mean']:.4g} ± {b[key + '.all.se']:.2g}"
                    )
                rows.append(
                    [
                        "θ0" if state == "init" else f"step {state[4:]}",
                        f"`{variant}`",
                        metric,
                        *(
                            bias_cell(metric, b[f"{key}.six.{stat}"]) or f"{b[f'{key}.six.{stat}']:.4g}"
                            for stat in ("min", "max", "mean")
                        ),
                        wide,
                    ]
                )
    parts += [
        table(header, rows, "lllrrrr"),
        "",
        "A value within 2^-48 (16 ulp of 1) of the exact 0 or 1 it has in exact arithmetic (Dr. GRPO's and "
        "`std_only`'s zero along φ_wrong, Dr. GRPO's cosine 1; for the φ_wrong share, within 2^-96) is "
        "rounding residue and is shown as that value, without an SE: the spread of rounding errors over "
        "seeds measures nothing.",
        "",
    ]
    header = ["state", "variant", "metric", *(f"seed {s}" for s in meta["seeds"]["six"])]
    rows = []
    for state in states:
        for variant in NAMES:
            for metric in BIAS_METRICS:
                key = f"{state}.{variant}.{metric}"
                rows.append(
                    [
                        "θ0" if state == "init" else f"step {state[4:]}",
                        f"`{variant}`",
                        metric,
                        *(
                            bias_cell(metric, b[f"{key}.six.seed{s}"]) or f"{b[f'{key}.six.seed{s}']:.4g}"
                            for s in meta["seeds"]["six"]
                        ),
                    ]
                )
    parts += ["Each seed's value:", "", table(header, rows, "lll" + "r" * len(meta["seeds"]["six"])), ""]
    parts += [
        f"Dr. GRPO over all {b['dr_grpo.states']:.0f} states evaluated: max |cosine − 1| = "
        f"{b['dr_grpo.max_cosine_deviation']:.2g}, max relative deviation of the norm ratio from "
        f"(G−1)/(G·L_norm) = {b['dr_grpo.expected_norm_ratio']:.6g}: "
        f"{b['dr_grpo.max_norm_ratio_relative_deviation']:.2g}.",
        "",
    ]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=Path("results"), help="output folder (default results)"
    )
    parser.add_argument("--seeds", type=int, default=100, help="seeds of the wide set, 0..N-1 (default 100)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    args = parser.parse_args()
    if args.seeds < 6:
        parser.error("--seeds must be at least 6 (the article's seeds 0-5 are a subset)")
    if not args.out_dir.is_dir():
        parser.error(f"--out-dir {args.out_dir} is not a folder")
    start = time.perf_counter()
    config = Config()
    final = config.steps
    sets = {"six": list(range(6)), "all": list(range(args.seeds))}
    frames: dict[tuple[str, str], pd.DataFrame] = {}
    for convention, counted in CONVENTIONS.items():
        run_config = config.replace(count_approach_token=counted)
        log(f"sampled runs, {convention}: {len(NAMES)} variants x {args.seeds} seeds", start)
        frames[(convention, "sampled")] = run_experiment(run_config, NAMES, sets["all"], n_jobs=args.n_jobs)
        log(f"mean-field runs, {convention}: {len(NAMES)} variants x 6 seeds", start)
        frames[(convention, "meanfield")] = run_experiment(
            run_config, NAMES, sets["six"], n_jobs=args.n_jobs, mean_field=True
        )
    main_frame = frames[("l_plus_1", "sampled")]
    log("statistics", start)
    curve_numbers, curve_table = curves(main_frame, sets, final)
    result: dict[str, Any] = {
        "meta": {
            "toyrl_version": __version__,
            "command": "python scripts/seed_study.py"
            + (f" --seeds {args.seeds}" if args.seeds != 100 else ""),
            "config": config.to_dict(),
            "other_convention": {"count_approach_token": False},
            "seeds": sets,
            "variants": NAMES,
            "final_step": final,
            "article": ARTICLE,
        },
        "headline": headline(main_frame, sets, final),
        "pairing": pairing(main_frame, sets, final),
        "article": article_section(frames, sets, final),
        "convention": convention_section(main_frame, frames[("l", "sampled")], sets, final),
        "dr_grpo_curves": curve_numbers,
        "stops": stops_section(main_frame, sets, final),
        "meanfield": meanfield_section(frames[("l_plus_1", "meanfield")], sets["six"], final),
    }
    log("exact expected updates (initial policies, replayed steps)", start)
    result["bias"] = bias_section(config, main_frame, sets, final)
    text = json.dumps(result, indent=1, allow_nan=False) + "\n"
    md = markdown({**result, "curve_table": curve_table})
    out = args.out_dir
    write_together(
        [
            (out / "seed_study.json", text),
            (out / "seed_study_curves.csv", curve_table.to_csv(index=False, float_format="%.17g")),
            (out / "seed_study.md", md),
        ]
    )
    log(f"wrote {out / 'seed_study.json'}, {out / 'seed_study_curves.csv'}, {out / 'seed_study.md'}", start)


if __name__ == "__main__":
    main()
