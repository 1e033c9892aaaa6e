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
import itertools
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toyrl.config import MAX_SEED, MAX_SEEDS, Config, ConfigError, InvalidInput, plain

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


# The arguments are checked as the CLI's options are, with the same words: a count is a whole
# number (a Python or numpy integer; not a bool, a float or text), a flag is True or False, a path
# is text or a path. Nothing is built from an argument before it is checked.


def _count(name: str, value: Any, low: int, high: int, why: str = "") -> int:
    """`value` as a whole number in low..high, else ConfigError naming `name` and the range."""
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(name, f"must be an integer in {low:,}..{high:,}{why}", value)
    return value


def _flag(name: str, value: Any) -> bool:
    value = plain(value)
    if not isinstance(value, bool):
        raise ConfigError(name, "must be True or False", value)
    return value


def _text(name: str, value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(name, f"must be {what}", value)
    return value


def _path(name: str, value: Any) -> Path:
    if not isinstance(value, str | os.PathLike) or not str(value):
        raise ConfigError(name, "must be a file's path (text or a pathlib.Path)", value)
    return Path(value)


def _variants(variants: str | Variant | Sequence[str | Variant]) -> list[Variant]:
    """Names, specs ("advantage=rloo,aggregation=token_mean"), labelled ones ("mine=dr_grpo",
    "advantage=none,label=mine"), "all" (the article's four) or Variant objects, one or several;
    each once (a name given twice is one variant, as on the command line; two specs under one
    name are refused)."""
    from toyrl.objective import Variant
    from toyrl.variants import distinct, parse_variants

    what = "a variant's name, a spec, 'all', a Variant or a list of them"
    if isinstance(variants, str | Variant):
        given: list[Any] = [variants]
    elif isinstance(variants, list | tuple):
        given = list(variants)
    else:
        raise ConfigError("variants", f"must be {what}", variants)
    if not given:
        raise InvalidInput("no variants given; name one (toyrl variants lists them), a spec, or 'all'")
    chosen: list[Variant] = []
    for item in given:
        if not isinstance(item, str | Variant):
            raise ConfigError("variants", f"must be {what}", item)
        chosen += [item] if isinstance(item, Variant) else parse_variants([item])
    return distinct(chosen)


def _seeds(seeds: int | Sequence[int]) -> list[int]:
    """A number of seeds (0 .. n-1) or a list of distinct seeds, checked before a list is built."""
    from toyrl.experiment import check_seeds

    seeds = plain(seeds)
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        return list(range(_count("seeds", seeds, 1, MAX_SEEDS)))
    if isinstance(seeds, str | bytes | bool) or not isinstance(seeds, Iterable):
        raise ConfigError(
            "seeds", f"must be a number of seeds in 1..{MAX_SEEDS:,} or a list of integer seeds", seeds
        )
    chosen = [plain(seed) for seed in itertools.islice(seeds, MAX_SEEDS + 1)]
    if len(chosen) > MAX_SEEDS:
        raise InvalidInput(f"seeds must list at most {MAX_SEEDS:,} seeds (got more)")
    check_seeds(chosen)
    if len(set(chosen)) < len(chosen):
        repeated = next(seed for seed, count in Counter(chosen).items() if count > 1)
        raise InvalidInput(f"seeds must be distinct (seed {repeated} is given twice)")
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
      article's four: grpo, std_only, length_only, dr_grpo), a Variant, or a list of them; a
      label names one in the table (`label=NAME` among a spec's pairs, or "NAME=SPEC").
    - `seeds`: how many (seeds 0 .. n-1), or which.
    - `mean_field`: Adam driven by the exact expected update instead of sampled batches (the
      variants with a closed form only).
    - `n_jobs`: worker processes (-1: every core); the numbers do not depend on it.
    - `progress`: report on stderr, as the commands do.
    - `settings`: any Config field (`toyrl run --help` lists them), e.g. steps=300, group_size=8.

    The columns are described in `frame.attrs["toyrl"]["columns"]`. InvalidInput (a ValueError)
    names any argument out of its range before any work.
    """
    from toyrl.experiment import check_experiment, run_experiment
    from toyrl.progress import Progress
    from toyrl.results import metadata

    chosen_config = _config(**settings)
    chosen = _variants(variants)
    seed_list = _seeds(seeds)
    mean_field, progress, n_jobs = _flag("mean_field", mean_field), _flag("progress", progress), plain(n_jobs)
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
    are kept unless `force`. A frame `load` would refuse (a run twice, a column dropped, a step
    missing, a configuration that did not make it) is refused before anything is written.
    Returns the path."""
    import pandas as pd

    from toyrl.files import check_output_path, claim
    from toyrl.results import check_overwrite, check_saved, save_results

    if not isinstance(frame, pd.DataFrame):
        raise ConfigError("frame", "must be a pandas DataFrame of toyrl.run or toyrl.load", frame)
    out, force = _path("path", path), _flag("force", force)
    meta = frame.attrs.get("toyrl")
    if not isinstance(meta, dict):
        raise InvalidInput(
            "the frame carries no configuration (frame.attrs['toyrl']); make it with toyrl.run"
        )
    check_saved(frame, meta)  # what load would refuse is never written
    check_output_path(out)
    with claim(out, "results"):
        check_overwrite(out, meta, force, option="path")
        save_results(frame, out, meta)
    return out


def load(path: str | Path) -> pd.DataFrame:
    """A results CSV of `toyrl run` (or `save`), checked, with its configuration (from the
    sidecar PATH.json, when there is one) in `frame.attrs["toyrl"]`."""
    from toyrl.results import load_results

    frame, meta = load_results(_path("path", path))
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
    seed = plain(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError("seed", "must be an integer >= 0 (and below 2**63)", seed)  # toyrl bias --seed's
    if theta is None:
        policy = initial_theta(chosen_config, run_streams(seed)[0])
    else:
        wanted = (
            f"theta must hold {size} finite numbers (prompts = {chosen_config.prompts} prompt logits, "
            "then 2 stop logits)"
        )
        if isinstance(theta, str | bytes):
            raise ConfigError("theta", wanted.removeprefix("theta "), theta)
        try:
            policy = np.asarray(theta, dtype=float)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError("theta", wanted.removeprefix("theta "), theta) from None
        if policy.shape != (size,) or not np.isfinite(policy).all():
            raise InvalidInput(f"{wanted}; got shape {policy.shape}")
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
    moves = gradient.any()  # grad J is 0 where every sigmoid has saturated: it has no direction
    frame["cosine"] = [float(row["cosine"]) for row in report] + [1.0 if moves else float("nan")]
    # grad J never moves the wrong approach's stop logit: a wrong approach earns nothing at any length
    frame["stop_logit_wrong_share"] = [float(row["phi_wrong_share"]) for row in report] + [
        0.0 if moves else float("nan")
    ]
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

    - `config_file`: a trainer's configuration file (.json, .yaml, .yml, .toml), a .sh script
      holding a trainer's launch command, Python source or a Jupyter notebook holding a
      `GRPOConfig(...)` call, or a launch command line as a list of words.
    - `settings`: trainer settings over the file's (as `--set KEY=VALUE`), e.g.
      {"loss_type": "dr_grpo"}.
    - `trainer`: a name of `toyrl.trainers.registry()` (trl, verl, openrlhf, oat, ms-swift,
      unsloth, skyrl, areal, nemo-rl, roll, slime, prime-rl, easyr1; default: told from the
      input, when it fits one trainer only).
    - `version`: the trainer's release (default: the newest modelled).
    - `seeds`, `n_jobs`, `progress`: as for `run`; `toy_settings`: Config fields of the toy.

    Returns the check: `print(result)` shows the command's report, `result.verdict()` its
    verdict in words, `result.fix` the settings that make it Dr. GRPO, `result.setting` and
    `result.reference` the per-seed final numbers.
    """
    from toyrl.progress import Progress
    from toyrl.trainers.check import resolve_input, run_check

    seeds = _count("seeds", seeds, 2, 10_000, " (a standard error needs two)")
    progress, n_jobs = _flag("progress", progress), plain(n_jobs)
    what = "a file's path, a command line as a list of words, or None"
    if config_file is None:
        arguments: list[str] = []
    elif isinstance(config_file, str | os.PathLike):
        arguments = [str(_path("config_file", config_file))]
    elif isinstance(config_file, list | tuple) and all(isinstance(word, str) for word in config_file):
        arguments = list(config_file)
        if len(arguments) == 1:
            raise InvalidInput(
                "a command line needs its words: python -m openrlhf.cli.train_ppo_ray --flag ..."
            )
    else:
        raise ConfigError("config_file", f"must be {what}", config_file)
    trainer = _text("trainer", trainer, "a trainer's name (toyrl.trainers.registry())")
    version = _text("version", version, "a release as text, such as '0.16.1'")
    resolved = resolve_input(arguments, trainer, _settings(settings), version)
    config = _config(**toy_settings)
    with Progress("toyrl.check", quiet=not progress) as shown:
        shown.begin("simulating")
        return run_check(resolved, config, list(range(seeds)), n_jobs, progress=shown.update)


def _settings(settings: Any) -> dict[str, Any]:
    """A trainer's settings as `check` takes them: names (text) to text, numbers or booleans, as
    `--set KEY=VALUE` gives them (numpy scalars as the numbers they hold)."""
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise ConfigError("settings", "must be a dict of setting names to values", settings)
    chosen: dict[str, Any] = {}
    for key, value in settings.items():
        value = plain(value)
        if not isinstance(key, str) or not key.strip():
            raise ConfigError("settings", "must be keyed by setting names (text)", key)
        if not isinstance(value, str | int | float):  # a bool is an int
            raise ConfigError(f"settings[{key!r}]", "must be text, a number or True/False", value)
        chosen[key] = value
    return chosen
