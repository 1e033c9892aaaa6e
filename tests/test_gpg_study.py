"""The GPG study (scripts/gpg_study.py): its core gives toyrl's own numbers, its committed files are
what it makes, and every number docs/variants.md states of it comes from results/gpg_scale.json."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.test_studies import load_script
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.plots import figure_files, plot_gpg_scale

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOC = ROOT / "docs" / "variants.md"
PLACEHOLDER = re.compile(r"\{([^{}:]+):([^{}]*)\}")


study = load_script("gpg_study")


def committed() -> dict[str, Any]:
    return json.loads((RESULTS / "gpg_scale.json").read_text())


def test_the_core_gives_what_toyrl_s_api_gives_for_the_same_runs() -> None:
    """2 seeds x 6 steps of each arm, through the study's core and through `run_experiment`."""
    config = Config(steps=6)
    seeds = [0, 1]
    for arm, (variant, _, _) in study.ARMS.items():
        core = study.train(arm, seeds, config)
        frame = run_experiment(study.arm_config(arm, config), [variant], seeds)
        for key in ("accuracy", "batch_accuracy"):
            api = frame.pivot(index="seed", columns="step", values=key).to_numpy()
            assert np.array_equal(core[key], api), (arm, key)
    data = study.study(seeds, n_jobs=1, config=config)
    frame = run_experiment(config, ["gpg", study.WITHOUT_SCALE], seeds)
    final = frame[frame["step"] == config.steps].set_index(["variant", "seed"])["accuracy"] * 100
    gpg, without = final["gpg"].to_numpy(), final[study.WITHOUT_SCALE].to_numpy()
    assert data["arms"]["gpg"]["final_accuracy_pct"]["per_seed"] == gpg.tolist()
    assert data["arms"]["without_scale"]["final_accuracy_pct"]["per_seed"] == without.tolist()
    difference = gpg - without
    assert data["paired"]["gpg_minus_without_scale"]["mean"] == float(difference.mean())
    assert data["paired"]["gpg_minus_without_scale"]["se"] == float(difference.std(ddof=1) / np.sqrt(2))
    # N / M is the factor GPG's loss used: at step 0 both arms share the policy and the batch, so
    # GPG's gradient is N / M times the other's.
    step0 = frame[frame["step"] == 0]

    def first(variant: str, column: str) -> np.ndarray:
        return step0.loc[step0["variant"] == variant, column].to_numpy()

    ratio = first("gpg", "grad_norm") / first(study.WITHOUT_SCALE, "grad_norm")
    factor = study.scale_factor(first("gpg", "batch_accuracy"), config)
    np.testing.assert_allclose(ratio, factor, rtol=1e-12)
    assert data["scale"]["start"] == float(factor.mean()) and len(data["scale"]["by_step"]["mean"]) == 6


def test_the_committed_study_is_made_from_its_kept_seeds() -> None:
    data = committed()
    seeds = data["meta"]["seeds"]
    assert seeds == list(range(100)) and Config.from_dict(data["meta"]["config"]) == Config()
    assert list(data["arms"]) == list(study.ARMS)
    final = {arm: np.array(entry["final_accuracy_pct"]["per_seed"]) for arm, entry in data["arms"].items()}
    for arm, entry in data["arms"].items():
        assert len(final[arm]) == 100
        assert entry["final_accuracy_pct"] == study.summary(final[arm]) | {"per_seed": final[arm].tolist()}
        assert entry["accuracy_pct_by_step"]["mean"][-1] == pytest.approx(entry["final_accuracy_pct"]["mean"])
    for name, (a, b) in study.PAIRS.items():
        assert data["paired"][name] == study.paired(final[a], final[b])
    by_step = data["scale"]["by_step"]["mean"]
    assert len(by_step) == data["meta"]["config"]["steps"]
    assert data["scale"]["start"] == by_step[0] and data["scale"]["end"] == by_step[-1]
    assert (RESULTS / "gpg_scale.md").read_text() == study.markdown(data)


def test_the_study_regenerates_its_committed_seeds_and_scale() -> None:
    """Seeds 0 and 57 of every arm, trained afresh; and N / M at step 0 over all 100 seeds (a run's
    first steps are those of a longer one)."""
    data = committed()
    config = Config()
    for arm in study.ARMS:
        fresh = study.train(arm, [0, 57], config)["accuracy"][:, -1] * 100
        kept = data["arms"][arm]["final_accuracy_pct"]["per_seed"]
        assert fresh.tolist() == [kept[0], kept[57]], arm
    first = study.train("gpg", data["meta"]["seeds"], config.replace(steps=1))["batch_accuracy"][:, 0]
    start = float(study.scale_factor(first, config).mean())  # summed in another order than the study's
    assert start == pytest.approx(data["scale"]["start"], rel=1e-14)


@pytest.mark.slow
def test_the_whole_study_regenerates_its_committed_json() -> None:
    data = committed()
    fresh = json.loads(json.dumps(study.study(data["meta"]["seeds"], n_jobs=2)))
    assert fresh == data | {"meta": data["meta"] | {"matplotlib": fresh["meta"]["matplotlib"]}}


def test_plot_only_redraws_the_committed_figure(tmp_path: Path) -> None:
    """`--plot-only` draws the figure of the committed results/gpg_scale.json: the files this
    process draws of it, which show what the committed figure does (tests/test_figures.py, on any
    matplotlib allowed)."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gpg_study.py"),
            "--plot-only",
            "--out-dir",
            str(RESULTS),
            "--figures",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for filename, data in figure_files("gpg_scale", plot_gpg_scale(committed())):
        assert (tmp_path / filename).read_bytes() == (data if isinstance(data, bytes) else data.encode())


# Every number of the section "GPG's scale N / M under Adam" of docs/variants.md, as a phrase with
# `{key:format}` for keys of results/gpg_scale.json (flattened with dots) and `values`' own.
FRAGMENTS = [
    "over seeds {meta.seeds.0:d}–{meta.seeds.99:d}",
    "(N = {meta.responses_per_batch:d} responses), its mean over the {seed_count:d} seeds is "
    "{scale.start:.2f}",
    "at step 0 and {scale.end:.2f} at step {last_update:d}",
    "Final accuracy is {arms.gpg.final_accuracy_pct.mean:.2f} ± {arms.gpg.final_accuracy_pct.se:.2f} %",
    "against {arms.without_scale.final_accuracy_pct.mean:.2f} ± "
    "{arms.without_scale.final_accuracy_pct.se:.2f} %",
    "a paired difference of {paired.gpg_minus_without_scale.mean:.2f} ± "
    "{paired.gpg_minus_without_scale.se:.2f}",
    "its SE would be {paired.gpg_minus_without_scale.unpaired_se:.2f}",
    "multiplied by {meta.constant_factor:d} (L_norm = {arms.constant.settings.length_norm:.0f}",
    "instead of the cap, {meta.config.cap:,d}) ends {paired.constant_minus_dr_grpo.mean:+.3f}",
    "± {paired.constant_minus_dr_grpo.se:.3f} points from Dr. GRPO",
    "Adam with learning rate {meta.config.lr:g}, β = ({meta.config.adam_beta1:g}, "
    "{meta.config.adam_beta2:g})",
    "ε = {eps:s}, {meta.config.steps:d} steps, batches of {meta.config.batch_prompts:d}",
    "prompts × {meta.config.group_size:d} responses",
    "over about 1 / (1 − β₂) = {b2:,.0f} steps",
    "mean ± sd over {seed_count:d} seeds",
]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}.").items()}
    if isinstance(value, list) and len(value) <= 100 and all(isinstance(v, int) for v in value):
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}.").items()}
    return {prefix[:-1]: value}


def values() -> dict[str, Any]:
    """The JSON's values by dotted key, and a few derived: the seed count, the last step that
    updates, Adam's epsilon as the docs write it, and 1 / (1 - beta2)."""
    data = committed()
    config = data["meta"]["config"]
    return flatten(data) | {
        "seed_count": len(data["meta"]["seeds"]),
        "last_update": config["steps"] - 1,
        "eps": f"{config['adam_eps']:.0e}".replace("e-0", "e-"),
        "b2": 1 / (1 - config["adam_beta2"]),
    }


def rendered(fragment: str) -> str:
    found = values()
    return PLACEHOLDER.sub(lambda m: format(found[m.group(1)], m.group(2)), " ".join(fragment.split()))


def section() -> str:
    text = DOC.read_text(encoding="utf-8").split("### GPG's scale N / M under Adam", 1)[1].split("\n#", 1)[0]
    return " ".join(text.split())


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_every_number_of_the_docs_section_comes_from_the_study(fragment: str) -> None:
    assert rendered(fragment) in section(), rendered(fragment)


def test_the_docs_section_quotes_no_other_number_and_shows_the_study_s_tables() -> None:
    """Every number of the section's prose is in a fragment's rendering or a name (GPG's N / M, 0/1
    rewards, float32/64, step 0, β₂), and its tables are results/gpg_scale.md's."""
    prose = section().split("![", 1)[0]
    renderings = " ".join(rendered(fragment) for fragment in FRAGMENTS)
    named = {"0/1", "float64", "float32", "step 0", "₂"}
    for number in re.findall(r"[-+]?\d[\d,.]*(?:e-\d+)?", prose):
        number = number.rstrip(".,")
        assert number in renderings or any(number in name for name in named), number
    tables = (RESULTS / "gpg_scale.md").read_text(encoding="utf-8").split("\n\n", 1)[1].strip()
    assert tables in DOC.read_text(encoding="utf-8")
    assert "(../figures/gpg_scale.png)" in section()
