"""The Python API, for notebooks and scripts: what the `toyrl` commands do, returning tables.

    import toyrl

    frame = toyrl.run(["grpo", "dr_grpo"], seeds=4, steps=300)  # any Config field by name
    toyrl.plot.length_by_correctness(frame)  # cap and variants read from it
    toyrl.expected_update("all")  # E[g] at a seed's initial policy
    print(toyrl.check("grpo_config.json", trainer="trl"))  # `toyrl check`'s report

A frame from `run` carries the configuration it was made with in `frame.attrs["toyrl"]`, the dict
`toyrl run` writes beside its CSV (`toyrl.results.metadata`); `save` writes both, `load` reads them
back, and the figure functions of `toyrl.plot` read the cap and min_length from there. The
numbers are those of the commands, bit for bit: `toyrl.run(v, seeds=n, **s)` is `toyrl run
--variant v --seeds n` with the same settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toyrl.config import Config, InvalidInput

if TYPE_CHECKING:
    import pandas as pd

    from toyrl.objective import Variant
    from toyrl.trainers.check import Check


def _config(**settings: Any) -> Config:
    """The configuration with `settings` (Config field -> value) over the defaults; InvalidInput
    naming an unknown field, ConfigError (an InvalidInput) naming a value out of its range."""
    known = [field.name for field in dataclasses.fields(Config)]
    unknown = [name for name in settings if name not in known]
    if unknown:
        raise InvalidInput(f"unknown setting {unknown[0]!r}; Config's fields are {', '.join(known)}")
    return Config(**settings)


def _variants(variants: str | Variant | Sequence[str | Variant]) -> list[Variant]:
    """Names, specs ("advantage=rloo,aggregation=token_mean"), "all" (the article's four) or
    Variant objects, one or several."""
    from toyrl.objective import Variant
    from toyrl.variants import parse_variants

    chosen = [variants] if isinstance(variants, str | Variant) else list(variants)
    if not chosen:
        raise InvalidInput("no variants given; name one (toyrl variants lists them), a spec, or 'all'")
    parsed: list[Variant] = []
    for item in chosen:
        parsed += [item] if isinstance(item, Variant) else parse_variants([item])
    return parsed


def _seeds(seeds: int | Sequence[int]) -> list[int]:
    from toyrl.experiment import check_seeds

    if isinstance(seeds, int):
        if seeds < 1:
            raise InvalidInput(f"seeds must be a number of seeds >= 1 or a list of seeds (got {seeds})")
        return list(range(seeds))
    chosen = [int(seed) for seed in seeds]
    check_seeds(chosen)
    return chosen


def run(
    variants: str | Variant | Sequence[str | Variant] = "all",
    seeds: int | Sequence[int] = 6,
    *,
    mean_field: bool = False,
    n_jobs: int = 1,
    progress: bool = False,
    **settings: Any,
) -> pd.DataFrame:
    """Train every (variant, seed) pair; the tidy table `toyrl run` writes, one row per (variant,
    seed, step), with its configuration in `frame.attrs["toyrl"]`.

    - `variants`: a name (`toyrl variants` lists them), a spec of key=value pairs, "all" (the
      article's four: grpo, std_only, length_only, dr_grpo), a Variant, or a list of them.
    - `seeds`: how many (seeds 0 .. n-1), or which.
    - `mean_field`: Adam driven by the exact expected update instead of sampled batches (the
      variants with a closed form only).
    - `n_jobs`: worker processes (-1: every core); the numbers do not depend on it.
    - `progress`: report on stderr, as the commands do.
    - `settings`: any Config field (`toyrl run --help` lists them), e.g. steps=300, group_size=8.

    The columns are described in `frame.attrs["toyrl"]["columns"]`. InvalidInput (a ValueError)
    names any argument out of its range before any work.
    """
    from toyrl.cli.terminal import Progress
    from toyrl.experiment import check_experiment, run_experiment
    from toyrl.results import metadata

    chosen_config = _config(**settings)
    chosen = _variants(variants)
    seed_list = _seeds(seeds)
    if mean_field:
        from toyrl.expected import check_exact_supported

        check_exact_supported(chosen)
    workers = check_experiment(chosen_config, chosen, seed_list, n_jobs)
    with Progress("toyrl.run", quiet=not progress) as shown:
        shown.begin(f"simulating {len(chosen) * len(seed_list):,} runs")
        frame = run_experiment(
            chosen_config,
            chosen,
            seed_list,
            n_jobs=n_jobs,
            progress=shown.update,
            mean_field=mean_field,
            workers=workers,
        )
    command = "toyrl run --mean-field" if mean_field else "toyrl run"
    frame.attrs["toyrl"] = metadata(chosen_config, chosen, seed_list, command, mean_field=mean_field)
    return frame


def save(frame: pd.DataFrame, path: str | Path, force: bool = False) -> Path:
    """Write a frame of `run` (or `load`) to `path` as `toyrl run --out` does: the CSV and its
    configuration beside it (PATH.json), together or not at all, so that `toyrl plot PATH`,
    `toyrl bias --results PATH` and `load` read it. Results of other settings already at `path`
    are kept unless `force`. Returns the path."""
    from toyrl.files import check_output_path, claim
    from toyrl.results import check_overwrite, save_results

    meta = frame.attrs.get("toyrl")
    if not isinstance(meta, dict):
        raise InvalidInput(
            "the frame carries no configuration (frame.attrs['toyrl']); make it with toyrl.run"
        )
    out = Path(path)
    check_output_path(out)
    with claim(out, "results"):
        check_overwrite(out, meta, force, option="path")
        save_results(frame, out, meta)
    return out


def load(path: str | Path) -> pd.DataFrame:
    """A results CSV of `toyrl run` (or `save`), checked, with its configuration (from the
    sidecar PATH.json, when there is one) in `frame.attrs["toyrl"]`."""
    from toyrl.results import load_results

    frame, meta = load_results(Path(path))
    if meta is not None:
        frame.attrs["toyrl"] = meta
    return frame


def expected_update(
    variants: str | Variant | Sequence[str | Variant] = "all",
    *,
    seed: int = 0,
    theta: Sequence[float] | None = None,
    **settings: Any,
) -> pd.DataFrame:
    """Each variant's exact expected update E[g] (the ascent direction: minus the expected loss
    gradient of one batch) beside grad J, the true gradient of expected accuracy, at one policy.

    The policy is `theta` (P prompt logits, then the right and the wrong approach's stop logits)
    or else the initial policy of `seed`. One row per variant, then a row "grad J"; columns
    `prompt_logit_0` .. `prompt_logit_{P-1}`, `stop_logit_right`, `stop_logit_wrong`, then
    `cosine` (of the row with grad J) and `stop_logit_wrong_share` (the part of the row's squared
    norm along the wrong approach's stop logit: what drives the length of wrong answers, which
    grad J does not move). A negative `stop_logit_wrong` makes wrong answers longer. Exact for
    the variants with a closed form (`toyrl variants` says which); the rest are refused, naming
    why. `toyrl bias` prints the same comparison.
    """
    import numpy as np
    import pandas as pd

    from toyrl.bias import bias_report
    from toyrl.expected import check_exact_supported, true_gradient
    from toyrl.expected import expected_update as exact_update
    from toyrl.train import initial_theta, run_streams

    chosen_config = _config(**settings)
    chosen = _variants(variants)
    check_exact_supported(chosen)
    size = chosen_config.prompts + 2
    if theta is None:
        if not 0 <= seed < 2**63:
            raise InvalidInput(f"seed must be an integer >= 0 and below 2**63 (got {seed})")
        policy = initial_theta(chosen_config, run_streams(seed)[0])
    else:
        policy = np.asarray(theta, dtype=float)
        if policy.shape != (size,) or not np.isfinite(policy).all():
            raise InvalidInput(
                f"theta must hold {size} finite numbers (prompts = {chosen_config.prompts} prompt logits, "
                f"then 2 stop logits); got shape {policy.shape}"
            )
    states = np.repeat(policy[None], len(chosen), axis=0)
    update = exact_update(states, chosen_config, chosen)
    gradient = true_gradient(policy[None], chosen_config.cap, chosen_config.min_length)
    columns = [f"prompt_logit_{j}" for j in range(chosen_config.prompts)]
    columns += ["stop_logit_right", "stop_logit_wrong"]
    frame = pd.DataFrame(
        np.concatenate([update, gradient]),
        index=pd.Index([variant.name for variant in chosen] + ["grad J"], name="variant"),
        columns=columns,
    )
    report = bias_report(states, chosen_config, chosen)
    frame["cosine"] = [float(row["cosine"]) for row in report] + [1.0]
    # grad J never moves the wrong approach's stop logit: a wrong approach earns nothing at any length
    frame["stop_logit_wrong_share"] = [float(row["phi_wrong_share"]) for row in report] + [0.0]
    frame.attrs["toyrl"] = {"config": chosen_config.to_dict(), "seed": None if theta is not None else seed}
    return frame


def check(
    config_file: str | Path | Sequence[str] | None = None,
    *,
    trainer: str | None = None,
    settings: dict[str, Any] | None = None,
    version: str | None = None,
    seeds: int = 6,
    n_jobs: int = 1,
    progress: bool = False,
    **toy_settings: Any,
) -> Check:
    """`toyrl check`: what a trainer's own settings do to response length, run on the toy beside
    Dr. GRPO on the same seeds and noise.

    - `config_file`: a trainer's configuration file (.json, .yaml, .yml), a .sh script holding an
      OpenRLHF command, or an OpenRLHF command line as a list of words.
    - `settings`: trainer settings over the file's (as `--set KEY=VALUE`), e.g.
      {"loss_type": "dr_grpo"}.
    - `trainer`: trl, verl, openrlhf or oat (default: told from the input, when it fits one
      trainer only).
    - `version`: the trainer's release (default: the newest modelled).
    - `seeds`, `n_jobs`, `progress`: as for `run`; `toy_settings`: Config fields of the toy.

    Returns the check: `print(result)` shows the command's report, `result.verdict()` its
    verdict in words, `result.fix` the settings that make it Dr. GRPO, `result.setting` and
    `result.reference` the per-seed final numbers.
    """
    from toyrl.cli.terminal import Progress
    from toyrl.trainers.check import resolve_input, run_check

    if not 2 <= seeds <= 10_000:
        raise InvalidInput(f"seeds must be in 2..10,000, a standard error needs two (got {seeds})")
    if config_file is None:
        arguments: list[str] = []
    elif isinstance(config_file, str | Path):
        arguments = [str(config_file)]
    else:
        arguments = [str(word) for word in config_file]
        if len(arguments) == 1:
            raise InvalidInput(
                "a command line needs its words: python -m openrlhf.cli.train_ppo_ray --flag ..."
            )
    resolved = resolve_input(arguments, trainer, dict(settings or {}), version)
    with Progress("toyrl.check", quiet=not progress) as shown:
        shown.begin("simulating")
        return run_check(resolved, _config(**toy_settings), list(range(seeds)), n_jobs, progress=shown.update)
