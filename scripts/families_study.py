"""The length-aware families on the toy: accuracy, the drift of wrong answers, bias, and cost.

    python scripts/families_study.py [--seeds 100] [--n-jobs 2] [--out-dir results] [--figures figures]
    python scripts/families_study.py --plot-only      # the figures again, from results/families.json

Trains every variant of `FAMILIES` (the newer objectives' presets, each beside the reference that
shares its advantage, aggregation and schedule) and the power family `length_power` at alpha = 0,
0.1, ..., 1 (with Dr. GRPO's centred advantage, so alpha = 0 is length_only's loss and alpha = 1
Dr. GRPO's) at the article's settings (`Config()`), seeds 0..N-1, and writes:

- `results/families.json`: `meta` (toyrl version, command, configuration, seeds, checkpoints,
  Monte Carlo sizes), then one entry per variant: its spec, the final step's accuracy (%),
  E[L | incorrect] and E[L | correct] (exact expectations at each run's final policy), the tokens
  its sampler generated per step (the mean over the run's steps), each {mean, se} over seeds
  (and `per_seed`, every seed's value, so a test can regenerate some seeds and compare); the
  cosine of E[g] to grad J at the initial policies and, where the first update's E[g] is exact,
  at every checkpoint along training;
- `results/families.md`: the table docs/researchers.md and docs/variants.md quote;
- `figures/families.png|svg` and `figures/length_power.png|svg` (`toyrl.plots`).

E[g] is the expected *first* update of a batch (ratio 1: the objective's clip or gate does not act
on it, and for a per-response aggregation a mini-batch's expectation is the batch's). It is exact
(`toyrl.expected.expected_update`) where every stage left has an exact form; otherwise it is the
mean of `MC_DRAWS` sampled first updates at each of the first `MC_SEEDS` seeds' initial policies,
whose Monte Carlo error on the cosine is estimated from two halves of the draws and written next
to it. Every variant of a seed starts from the same policy and draws the same step noise (common
random numbers; over-draws and refills come from their own stream).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from toyrl import __version__, noise
from toyrl.config import Config
from toyrl.expected import exact_support, expected_update, true_gradient
from toyrl.files import write_together
from toyrl.objective import Variant, from_spec, parse_spec
from toyrl.plots import plot_families, plot_length_power, save_figures
from toyrl.stages import REGISTRY
from toyrl.train import Adam, Drawn, Plan, initial_theta, run_streams, simulate, train_step
from toyrl.variants import VARIANTS

# Each family beside its reference: the same advantage, aggregation and schedule, PPO's clip.
FAMILIES: list[tuple[str, str, str]] = [  # (row, variant name or spec, label)
    ("grpo", "grpo", "GRPO (the article's)"),
    ("dr_grpo", "dr_grpo", "Dr. GRPO (the article's)"),
    ("seq_mean", "verl_seq_mean_token_mean", "reference: sample std, per-response mean"),
    ("seq_mean_mb4", "verl_seq_mean_token_mean,mini_batches=4", "reference: the same, four mini-batches"),
    ("gspo", "gspo", "GSPO"),
    ("sapo", "sapo", "SAPO"),
    ("token_mean", "verl_default", "reference: sample std, token mean"),
    ("token_mean_mb4", "verl_default,mini_batches=4", "reference: the same, four mini-batches"),
    ("cispo", "cispo", "CISPO"),
    ("dapo_overlong", "dapo_overlong", "DAPO's soft overlong punishment"),
    ("dynamic_sampling", "dynamic_sampling", "DAPO's dynamic sampling"),
    ("dapo", "dapo", "DAPO (both, clip-higher)"),
    ("gfpo", "gfpo", "GFPO, shortest 8 of 16"),
    ("gfpo_token_efficiency", "gfpo_token_efficiency", "GFPO, most reward per token"),
    ("opo", "opo", "OPO"),
    ("gpg", "gpg", "GPG"),
    ("reinforce_pp", "reinforce_pp", "REINFORCE++"),
    ("reinforce_pp_baseline", "reinforce_pp_baseline", "REINFORCE++-baseline"),
    # The objectives proposed in 2025-2026 (issue 42), beside their references.
    ("skyrl_prompt_mean", "skyrl_prompt_mean", "SkyRL's prompt mean"),
    ("trl_async_grpo", "trl_async_grpo", "TRL's AsyncGRPO (population std, token mean)"),
    (
        "sum_norm",
        "advantage=group_std_sample,aggregation=seq_mean_token_sum_norm,dual_clip=3.0,std_eps=1e-06",
        "reference: sample std, constant L_norm",
    ),
    ("delta_l_norm", "delta_l_norm", "ΔL Normalization, alpha = 1"),
    ("delta_l_norm_0.75", "delta_l_norm,alpha=0.75", "ΔL Normalization, alpha = 0.75"),
    ("centred_token_mean", "advantage=none,aggregation=token_mean", "reference: centred, token mean"),
    ("max_rl", "max_rl", "MaxRL (prime-rl)"),
    ("prime_rl_length_penalty", "prime_rl_length_penalty", "prime-rl's length penalty"),
    ("gr3", "gr3", "GR3's rescaling in GRPO (reference: grpo)"),
]
ALPHAS = [round(0.1 * k, 1) for k in range(11)]
CHECKPOINT_EVERY = 50  # steps between the exact cosines along training
MC_SEEDS = 10  # initial policies at which a simulated-only variant's E[g] is estimated
MC_DRAWS = 20_000  # sampled first updates per policy
MC_CHUNK = 5_000
PER_SEED = ("accuracy", "length_incorrect", "length_correct", "tokens_sampled")  # kept per seed in the JSON


def variant_of(row: str, spec: str) -> Variant:
    """A row's variant: a named one, a named one with more settings, or a spec."""
    name, _, extra = spec.partition(",")
    if name in VARIANTS:
        spec = VARIANTS[name].spec_text() + (f",{extra}" if extra else "")
    return from_spec(row, parse_spec(spec).spec())


def power_variant(alpha: float) -> Variant:
    return from_spec(
        f"alpha_{alpha:.1f}", {"advantage": "none", "aggregation": "length_power", "alpha": alpha}
    )


def first_update(variant: Variant) -> Variant:
    """The variant's first update of a batch: ratio 1, so PPO's objective and no later updates."""
    return dataclasses.replace(
        variant, objective=REGISTRY["objective"]["ppo_clip"], schedule=REGISTRY["schedule"]["epochs"]
    )


def cosine(u: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Row-wise cosine of [R, P + 2] arrays."""
    return (u * g).sum(-1) / (np.sqrt((u * u).sum(-1)) * np.sqrt((g * g).sum(-1)))


def train(variant: Variant, seeds: list[int], config: Config) -> dict[str, np.ndarray]:
    """One chunk of runs: final metrics, tokens per step, and the exact cosines at the checkpoints."""
    checkpoints = list(range(0, config.steps + 1, CHECKPOINT_EVERY))
    states: list[np.ndarray] = []

    def keep(step: int, theta: np.ndarray) -> None:
        if step % CHECKPOINT_EVERY == 0:
            states.append(theta.copy())

    trajectory = simulate(config, [(variant, seed) for seed in seeds], on_step=keep)
    columns = trajectory.columns
    out = {name: columns[name][:, -1] for name in ("accuracy", "length_incorrect", "length_correct")} | {
        "tokens_sampled": columns["tokens_sampled"].mean(axis=1)
    }
    first = first_update(variant)
    if not exact_support(first):
        out["cosine_along"] = np.stack(
            [
                cosine(
                    expected_update(theta, config, [first] * len(seeds)),
                    true_gradient(theta, config.cap, config.min_length),
                )
                for theta in states
            ],
            axis=1,
        )  # [seeds, checkpoints]
    assert len(states) == len(checkpoints)
    return out


def sampled_mean_update(variant: Variant, seed: int, config: Config) -> tuple[float, float]:
    """(cosine of the mean of MC_DRAWS sampled first updates to grad J, its Monte Carlo error) at
    the initial policy of `seed`: the error is half the difference of the two halves' cosines."""
    theta = initial_theta(config, run_streams(seed)[0])
    rng = np.random.default_rng([seed, 2025])
    halves = []
    for _ in range(2):
        total = np.zeros(theta.shape)
        for _ in range(MC_DRAWS // 2 // MC_CHUNK):
            n = MC_CHUNK
            thetas = np.repeat(theta[None], n, axis=0)
            shape = (n, config.batch_prompts, config.group_size)
            draws = (
                noise.permutation_prefix(rng, n, config.prompts, config.batch_prompts),
                noise.uniform(rng, shape),
                noise.standard_exponential(rng, shape),
            )
            refill = [np.random.default_rng(int(s)) for s in rng.bit_generator.random_raw(n) >> np.uint64(1)]
            step = train_step(
                thetas,
                Adam(thetas, config),
                Drawn.of(thetas, draws, config),
                Plan.of([variant] * n),
                config,
                thetas.copy(),
                apply=False,
                refill=refill,
            )
            total -= step.grad.sum(axis=0)
        halves.append(total)
    grad_j = true_gradient(theta[None], config.cap, config.min_length)[0]
    whole = cosine((halves[0] + halves[1])[None], grad_j[None])[0]
    parts = [cosine(h[None], grad_j[None])[0] for h in halves]
    return float(whole), float(abs(parts[0] - parts[1]) / 2)


def summary(values: np.ndarray, scale: float = 1.0) -> dict[str, float]:
    values = np.asarray(values, dtype=float) * scale
    return {"mean": float(values.mean()), "se": float(values.std(ddof=1) / math.sqrt(len(values)))}


def study(seeds: list[int], n_jobs: int) -> dict[str, Any]:
    config = Config()
    rows = [(row, variant_of(row, spec), label) for row, spec, label in FAMILIES]
    rows += [(f"alpha_{a:.1f}", power_variant(a), f"length_power alpha = {a:.1f}") for a in ALPHAS]
    chunk = 25
    jobs = [(index, seeds[i : i + chunk]) for index in range(len(rows)) for i in range(0, len(seeds), chunk)]
    print(f"{len(rows)} variants x {len(seeds)} seeds x {config.steps} steps", file=sys.stderr)
    started = time.perf_counter()
    parts = Parallel(n_jobs=n_jobs)(delayed(train)(rows[index][1], part, config) for index, part in jobs)
    print(f"trained in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    by_row: dict[int, list[dict[str, np.ndarray]]] = {}
    for (index, _), part in zip(jobs, parts, strict=True):
        by_row.setdefault(index, []).append(part)
    simulated = [i for i, (_, v, _) in enumerate(rows) if exact_support(first_update(v))]
    mc_seeds = seeds[:MC_SEEDS]
    mc = Parallel(n_jobs=n_jobs)(
        delayed(sampled_mean_update)(rows[i][1], seed, config) for i in simulated for seed in mc_seeds
    )
    print(f"Monte Carlo first updates done at {time.perf_counter() - started:.0f} s", file=sys.stderr)
    entries: dict[str, Any] = {}
    for index, (row, variant, label) in enumerate(rows):
        joined = {k: np.concatenate([p[k] for p in by_row[index]]) for k in by_row[index][0]}
        entry: dict[str, Any] = {
            "label": label,
            "spec": variant.spec_text(),
            "accuracy_pct": summary(joined["accuracy"], 100.0),
            "length_incorrect": summary(joined["length_incorrect"]),
            "length_correct": summary(joined["length_correct"]),
            "tokens_per_step": summary(joined["tokens_sampled"]),
            "per_seed": {key: joined[key].tolist() for key in PER_SEED},
        }
        if "cosine_along" in joined:
            along = joined["cosine_along"]
            entry["exact"] = True
            entry["cosine_initial"] = summary(along[: len(mc_seeds), 0])
            entry["cosine_along"] = [summary(along[:, k]) for k in range(along.shape[1])]
            entry["cosine_along_mean"] = summary(along.mean(axis=1))  # each seed's mean over checkpoints
            entry["per_seed"]["cosine_along"] = along.tolist()
        else:
            at = simulated.index(index) * len(mc_seeds)
            values = mc[at : at + len(mc_seeds)]
            entry["exact"] = False
            entry["simulated_only"] = exact_support(first_update(variant))
            entry["cosine_initial"] = summary(np.array([c for c, _ in values]))
            entry["per_seed"]["cosine_initial"] = [c for c, _ in values]
            entry["cosine_initial_mc_error"] = float(max(e for _, e in values))
        entries[row] = entry
    return {
        "meta": {
            "toyrl_version": __version__,
            "command": "python scripts/families_study.py"
            + (f" --seeds {len(seeds)}" if len(seeds) != 100 else ""),
            "config": config.to_dict(),
            "seeds": seeds,
            "checkpoints": list(range(0, config.steps + 1, CHECKPOINT_EVERY)),
            "cosine_initial_seeds": mc_seeds,
            "mc_draws": MC_DRAWS,
            "alphas": ALPHAS,
        },
        "variants": entries,
    }


def markdown(data: dict[str, Any]) -> str:
    meta, entries = data["meta"], data["variants"]
    seeds = meta["seeds"]
    mc_error = max(e["cosine_initial_mc_error"] for e in entries.values() if not e["exact"])

    def cell(values: dict[str, float], digits: int) -> str:
        return f"{values['mean']:.{digits}f} ± {values['se']:.{digits}f}"

    lines = [
        f"Final step {meta['config']['steps']} at the article's settings, mean ± SE over seeds "
        f"0–{len(seeds) - 1} (exact expectations at each run's final policy); tokens per step: the "
        "tokens the sampler generated, mean over the run's steps; cos: E[g] of the first update to "
        f"grad J at seeds 0–{len(meta['cosine_initial_seeds']) - 1}'s initial policies, exact, or "
        f"(MC) the mean of {meta['mc_draws']:,} sampled first updates (its Monte Carlo error on the "
        f"cosine, from two halves of the draws, at most {mc_error:.4f}). Every variant of a seed shares "
        "its initial policy and step noise. Made by `python scripts/families_study.py`.",
        "",
        "| variant | accuracy % | E[L \\| incorrect] | E[L \\| correct] | tokens per step "
        "| cos(E[g], ∇J) at start | spec |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row, entry in entries.items():
        if row.startswith("alpha_"):
            continue
        cos = entry["cosine_initial"]
        cos_text = f"{cos['mean']:.3f}" + ("" if entry["exact"] else " (MC)")
        lines.append(
            f"| {row} | {cell(entry['accuracy_pct'], 1)} | {cell(entry['length_incorrect'], 0)} | "
            f"{cell(entry['length_correct'], 0)} | {cell(entry['tokens_per_step'], 0)} | {cos_text} | "
            f"`{entry['spec']}` |"
        )
    lines += [
        "",
        "The power family, `aggregation=length_power` with Dr. GRPO's centred advantage: "
        "D_i = |o_i|^(1 - alpha) L^alpha (alpha = 0: length_only's per-response mean; alpha = 1: "
        "Dr. GRPO). cos along training: the exact cosine at every checkpoint (steps 0, 50, ..., 400), "
        "each seed's mean over them, then mean ± SE over seeds.",
        "",
        "| alpha | accuracy % | E[L \\| incorrect] | E[L \\| correct] | cos at start | cos along training |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for alpha in meta["alphas"]:
        entry = entries[f"alpha_{alpha:.1f}"]
        lines.append(
            f"| {alpha:.1f} | {cell(entry['accuracy_pct'], 1)} | {cell(entry['length_incorrect'], 0)} | "
            f"{cell(entry['length_correct'], 0)} | {cell(entry['cosine_initial'], 3)} | "
            f"{cell(entry['cosine_along_mean'], 3)} |"
        )
    return "\n".join(lines) + "\n"


def render(data: dict[str, Any], folder: Path) -> list[Path]:
    return save_figures({"families": plot_families(data), "length_power": plot_length_power(data)}, folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds 0..N-1 (default 100)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    parser.add_argument("--out-dir", type=Path, default=Path("results"), help="default results")
    parser.add_argument("--figures", type=Path, default=Path("figures"), help="default figures")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figures from families.json")
    args = parser.parse_args()
    for option, folder in (("--out-dir", args.out_dir), ("--figures", args.figures)):
        if not folder.is_dir():
            parser.error(f"{option} {folder} is not a folder")
    path = args.out_dir / "families.json"
    if args.plot_only:
        if not path.is_file():
            parser.error(f"{path} does not exist: run the study first")
        data = json.loads(path.read_text())
    else:
        if not 2 <= args.seeds <= 10_000:
            parser.error("--seeds must be in 2..10000 (a standard error needs two)")
        data = study(list(range(args.seeds)), args.n_jobs)
        write_together(
            [
                (path, json.dumps(data, indent=1, allow_nan=False) + "\n"),
                (args.out_dir / "families.md", markdown(data)),
            ]
        )
        print(f"wrote {path} and families.md", file=sys.stderr)
    for written in render(data, args.figures):
        print(f"wrote {written}", file=sys.stderr)


if __name__ == "__main__":
    main()
