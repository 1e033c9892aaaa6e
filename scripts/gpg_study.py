"""GPG's scale N / M under Adam: GPG against the same loss without it, paired over seeds.

    python scripts/gpg_study.py [--seeds 100] [--n-jobs 2] [--out-dir results] [--figures figures]
    python scripts/gpg_study.py --plot-only      # the figure again, from results/gpg_scale.json

GPG (Chu et al. 2025; the preset `gpg`: advantage=gpg,aggregation=token_mean,objective=gpg)
multiplies the centred advantage r_i - group mean by N / M, N the batch's responses and M how many
of them have a nonzero reward, at least 1 (`toyrl.stages.advantage.RescaledCentred`). The
registered advantage `none` (`Centred`) is r_i - group mean by the same operations without that
factor, so `advantage=none,aggregation=token_mean,objective=gpg` is GPG without N / M, and nothing
else differs. Under Adam a constant factor on the whole update cancels but for Adam's epsilon; N / M
is not constant, since with the toy's 0 / 1 rewards M is the batch's correct answers. A control
measures a constant factor: Dr. GRPO with L_norm = cap / 5, its whole update times 5, against
Dr. GRPO.

Every arm is trained at the article's settings (`Config()`, the control's L_norm aside), seeds
0..N-1. A seed's runs share their initial policy and their noise streams (common random numbers;
once their policies differ they draw different batches from the same streams), so differences are
paired per seed. N / M is computed from each step's sampled batch, as GPG's loss uses it: M is the
number of correct responses in the batch of GPG's run (its `batch_accuracy` times N), for the
batches of steps 0..steps-1, the ones that make the updates. About 10 s on 2 cores; progress on
stderr. Writes:

- `results/gpg_scale.json`: `meta` (toyrl version, command, configuration, seeds, N, the control's
  factor, where N / M comes from, the matplotlib that drew the figure), `arms.{arm}` its variant,
  spec, settings (Config changes) and label, `arms.{arm}.final_accuracy_pct` {mean, sd, se} over
  seeds and `per_seed`, `arms.{arm}.accuracy_pct_by_step` (mean and sd over seeds, steps 0..steps);
  `scale.by_step` (N / M, mean and sd over seeds, steps 0..steps-1), `scale.start`, `scale.end`
  (the mean at the first and last of them), `scale.min`, `scale.max` (of the mean),
  `scale.batches_without_reward` (batches with M = 0, where N / M is N); `paired.{name}` {mean,
  sd, se, unpaired_se} of a per-seed difference of final accuracies in points:
  `gpg_minus_without_scale`, `constant_minus_dr_grpo`;
- `results/gpg_scale.md`: a table of the same;
- `figures/gpg_scale.png|svg` (`toyrl.plots.plot_gpg_scale`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from joblib import Parallel, delayed

from toyrl import __version__
from toyrl.config import Config
from toyrl.files import write_together
from toyrl.plots import plot_gpg_scale, save_figures
from toyrl.train import simulate
from toyrl.variants import parse_variant

WITHOUT_SCALE = "advantage=none,aggregation=token_mean,objective=gpg"
CONSTANT_FACTOR = 5  # the control's factor: L_norm = cap / 5
ARMS: dict[str, tuple[str, dict[str, Any], str]] = {  # arm: (variant, Config changes, label)
    "gpg": ("gpg", {}, "GPG: (N / M)(r − group mean)"),
    "without_scale": (WITHOUT_SCALE, {}, "the same without N / M: r − group mean"),
    "dr_grpo": ("dr_grpo", {}, "Dr. GRPO, L_norm = cap"),
    "constant": ("dr_grpo", {"length_norm": Config().cap / CONSTANT_FACTOR}, "Dr. GRPO, L_norm = cap / 5"),
}
PAIRS = {
    "gpg_minus_without_scale": ("gpg", "without_scale"),
    "constant_minus_dr_grpo": ("constant", "dr_grpo"),
}
CHUNK = 25  # seeds per job


def arm_config(arm: str, config: Config) -> Config:
    return config.replace(**ARMS[arm][1])


def train(arm: str, seeds: list[int], config: Config) -> dict[str, np.ndarray]:
    """One arm's runs at seeds `seeds`: exact accuracy [seeds, steps + 1] and the sampled batch's
    accuracy [seeds, steps + 1] (the batch drawn at each step; the last one makes no update)."""
    variant = parse_variant(ARMS[arm][0])
    columns = simulate(arm_config(arm, config), [(variant, seed) for seed in seeds]).columns
    return {"accuracy": columns["accuracy"], "batch_accuracy": columns["batch_accuracy"]}


def scale_factor(batch_accuracy: np.ndarray, config: Config) -> np.ndarray:
    """GPG's N / M of each batch: N the batch's responses, M its correct ones (at least 1)."""
    responses = config.batch_prompts * config.group_size
    correct = np.rint(batch_accuracy * responses)
    return responses / np.maximum(correct, 1)


def summary(values: np.ndarray) -> dict[str, float]:
    values = np.asarray(values, dtype=float)
    sd = float(values.std(ddof=1))
    return {"mean": float(values.mean()), "sd": sd, "se": sd / math.sqrt(len(values))}


def paired(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Mean, sd and se of the per-seed difference a - b, and the se the two would have unpaired."""
    difference = summary(a - b)
    unpaired = math.sqrt(summary(a)["se"] ** 2 + summary(b)["se"] ** 2)
    return difference | {"unpaired_se": unpaired}


def study(seeds: list[int], n_jobs: int, config: Config | None = None) -> dict[str, Any]:
    """Every arm at `seeds` (in chunks of CHUNK seeds over `n_jobs` joblib workers), summarised."""
    config = config or Config()
    jobs = [(arm, seeds[i : i + CHUNK]) for arm in ARMS for i in range(0, len(seeds), CHUNK)]
    print(f"{len(ARMS)} arms x {len(seeds)} seeds x {config.steps} steps, {len(jobs)} jobs", file=sys.stderr)
    started = time.perf_counter()
    parts: list[dict[str, np.ndarray]] = []
    tasks = (delayed(train)(arm, part, config) for arm, part in jobs)
    for done, part in enumerate(Parallel(n_jobs=n_jobs, return_as="generator")(tasks), 1):
        parts.append(part)
        print(f"  {done}/{len(jobs)} jobs done, {time.perf_counter() - started:.1f} s", file=sys.stderr)
    runs = {
        arm: {
            key: np.concatenate([p[key] for (a, _), p in zip(jobs, parts, strict=True) if a == arm])
            for key in ("accuracy", "batch_accuracy")
        }
        for arm in ARMS
    }
    final = {arm: runs[arm]["accuracy"][:, -1] * 100 for arm in ARMS}
    batches = runs["gpg"]["batch_accuracy"][:, : config.steps]  # the batches that make the updates
    responses = config.batch_prompts * config.group_size
    factor = scale_factor(batches, config)
    by_step = factor.mean(axis=0)
    arms = {
        arm: {
            "variant": ARMS[arm][0],
            "spec": parse_variant(ARMS[arm][0]).spec_text(),
            "settings": ARMS[arm][1],
            "label": ARMS[arm][2],
            "final_accuracy_pct": summary(final[arm]) | {"per_seed": final[arm].tolist()},
            "accuracy_pct_by_step": {
                "mean": (runs[arm]["accuracy"].mean(axis=0) * 100).tolist(),
                "sd": (runs[arm]["accuracy"].std(axis=0, ddof=1) * 100).tolist(),
            },
        }
        for arm in ARMS
    }
    return {
        "meta": {
            "toyrl_version": __version__,
            "command": "python scripts/gpg_study.py"
            + (f" --seeds {len(seeds)}" if len(seeds) != 100 else ""),
            "config": config.to_dict(),
            "seeds": seeds,
            "responses_per_batch": responses,
            "constant_factor": CONSTANT_FACTOR,
            "scale_from": "each step's sampled batch of GPG's run: N / max(M, 1), M its correct responses",
            "matplotlib": matplotlib.__version__,  # the figure's bytes depend on it
        },
        "arms": arms,
        "scale": {
            "by_step": {"mean": by_step.tolist(), "sd": factor.std(axis=0, ddof=1).tolist()},
            "start": float(by_step[0]),
            "end": float(by_step[-1]),
            "min": float(by_step.min()),
            "max": float(by_step.max()),
            "batches_without_reward": int((np.rint(batches * responses) == 0).sum()),
        },
        "paired": {name: paired(final[a], final[b]) for name, (a, b) in PAIRS.items()},
    }


def markdown(data: dict[str, Any]) -> str:
    meta, arms, scale = data["meta"], data["arms"], data["scale"]
    seeds, steps = meta["seeds"], meta["config"]["steps"]

    def cell(values: dict[str, float], digits: int = 2) -> str:
        return f"{values['mean']:.{digits}f} ± {values['se']:.{digits}f}"

    lines = [
        f"Final step {steps} at the article's settings, mean ± SE over seeds {seeds[0]}–{seeds[-1]}; "
        "a seed's arms share their initial policy and noise streams. GPG's N / M from each step's "
        f"sampled batch (N = {meta['responses_per_batch']}), mean over seeds: {scale['start']:.2f} at "
        f"step 0, {scale['end']:.2f} at step {steps - 1}. Made by `{meta['command']}`.",
        "",
        "| arm | spec | settings | accuracy % |",
        "| --- | --- | --- | ---: |",
    ]
    for arm in arms.values():
        settings = ", ".join(f"{k} = {v:g}" for k, v in arm["settings"].items()) or "–"
        lines.append(f"| {arm['label']} | `{arm['spec']}` | {settings} | {cell(arm['final_accuracy_pct'])} |")
    lines += ["", "| paired difference, points | mean ± SE | SE if unpaired |", "| --- | ---: | ---: |"]
    for name, values in data["paired"].items():
        lines.append(f"| {name} | {values['mean']:+.3f} ± {values['se']:.3f} | {values['unpaired_se']:.3f} |")
    return "\n".join(lines) + "\n"


def render(data: dict[str, Any], folder: Path) -> list[Path]:
    return save_figures({"gpg_scale": plot_gpg_scale(data)}, folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds 0..N-1 (default 100)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    parser.add_argument("--out-dir", type=Path, default=Path("results"), help="default results")
    parser.add_argument("--figures", type=Path, default=Path("figures"), help="default figures")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from gpg_scale.json")
    args = parser.parse_args()
    for option, folder in (("--out-dir", args.out_dir), ("--figures", args.figures)):
        if not folder.is_dir():
            parser.error(f"{option} {folder} is not a folder")
    path = args.out_dir / "gpg_scale.json"
    started = time.perf_counter()
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
                (args.out_dir / "gpg_scale.md", markdown(data)),
            ]
        )
        print(f"wrote {path} and gpg_scale.md", file=sys.stderr)
    for written in render(data, args.figures):
        print(f"wrote {written}", file=sys.stderr)
    print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
