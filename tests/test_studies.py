"""The committed studies (scripts/seed_study.py, scripts/init_sensitivity.py, scripts/presets_study.py,
scripts/trainer_defaults_study.py, scripts/families_study.py, scripts/verl_width_study.py),
their files under results/, and docs/initialisation.md, which quotes them (tests/test_docs.py ties
the README, docs/bias.md and docs/variants.md to the same files).

- Regenerating the studies gives the committed numbers, to the bit (slow: about a minute on 2 cores).
- The committed markdown is what the scripts make from the committed numbers, and the doc pastes
  its tables verbatim.
- Every number in the doc's prose is rendered here from the committed files (`PHRASES`), and every
  decimal number of its prose is one of those renderings (or a parameter of the grid).
- The 6-seed headline of seed_study.json is the committed article run's (results/article.csv).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.scripts import load_script
from toyrl.config import Config
from toyrl.results import load_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOC = ROOT / "docs" / "initialisation.md"

# Placeholder -> template: the doc's prose holds each rendering (minus signs as U+2212; the names are
# only labels for failure messages). Contexts: h headline, a article, c convention (seed_study.json);
# s calibration (init_sensitivity.json, "<convention>.<field>"); g grid rows of init_sensitivity.csv
# ("<l_plus_1|l>.<psi mean>.<psi std>.<variant>.<column>"); x ranges over the grid (see `derived`).
PHRASES = {
    "INIT_SIX": "{h[six.initial.accuracy_pct.mean]:.1f}",
    "INIT_ALL": "{h[all.initial.accuracy_pct.mean]:.1f}",
    "GRPO_SIX": "{h[six.grpo.final.accuracy_pct.mean]:.2f} ± {h[six.grpo.final.accuracy_pct.se]:.2f}%",
    "GRPO_ALL": "{h[all.grpo.final.accuracy_pct.mean]:.2f} ± {h[all.grpo.final.accuracy_pct.se]:.2f}%",
    "GRPO_ALL_DIFF": "{a[l_plus_1.sampled_all.grpo.accuracy_pct.diff]:.2f}",
    "GRPO_ALL_Z": "{a[l_plus_1.sampled_all.grpo.accuracy_pct.z]:.1f}",
    "GRPO_SIX_SE": "{h[six.grpo.final.accuracy_pct.se]:.2f}",
    "CAL_ALL_MEAN": "{s[L + 1.closest_mean]:g}",
    "CAL_ALL_ACC": "{s[L + 1.closest_accuracy_pct]:.2f} ± {s[L + 1.closest_se]:.2f}%",
    "CAL_ALL_CROSS": "{s[L + 1.crossing_mean]:.2f}",
    "CAL_SIX_MEAN": "{s[L + 1, seeds 0-5.closest_mean]:g}",
    "CAL_SIX_CROSS": "{s[L + 1, seeds 0-5.crossing_mean]:.2f}",
    "CAL_L_SIX_CROSS": "{s[L, seeds 0-5.crossing_mean]:.2f}",
    "CAL_L_ALL_CROSS": "{s[L.crossing_mean]:.2f}",
    "CONV_GRPO_ACC": "{c[all.grpo.accuracy_pct.paired_mean]:.2f} ± {c[all.grpo.accuracy_pct.paired_se]:.2f}",
    "CONV_GRPO_WRONG": (
        "{c[all.grpo.length_wrong_approach.paired_mean]:.1f} ± "
        "{c[all.grpo.length_wrong_approach.paired_se]:.1f}"
    ),
    "CONV_LO_ACC": (
        "{c[all.length_only.accuracy_pct.paired_mean]:.2f} ± {c[all.length_only.accuracy_pct.paired_se]:.2f}"
    ),
    "CONV_LO_WRONG": (
        "{c[all.length_only.length_wrong_approach.paired_mean]:.1f} ± "
        "{c[all.length_only.length_wrong_approach.paired_se]:.1f}"
    ),
    "GRID_ACC_LO": "{g[l_plus_1.-1.5.1.grpo.accuracy_pct_mean]:.2f}%",
    "GRID_ACC_HI": "{g[l_plus_1.0.1.grpo.accuracy_pct_mean]:.2f}%",
    "RANGE_INC_LP1": "{x[l_plus_1.length_incorrect.min]:,.1f}–{x[l_plus_1.length_incorrect.max]:,.1f}",
    "RANGE_WRONG_LP1": (
        "{x[l_plus_1.length_wrong_approach.min]:,.1f}–{x[l_plus_1.length_wrong_approach.max]:,.1f}"
    ),
    "RANGE_INC_L": "{x[l.length_incorrect.min]:,.1f}–{x[l.length_incorrect.max]:,.1f}",
    "RANGE_WRONG_L": "{x[l.length_wrong_approach.min]:,.1f}–{x[l.length_wrong_approach.max]:,.1f}",
    "SHIFT_ACC": "{x[shift.accuracy_pct.min]:.2f} to {x[shift.accuracy_pct.max]:.2f}",
    "SHIFT_WRONG": "{x[shift.length_wrong_approach.min]:.1f} to {x[shift.length_wrong_approach.max]:.1f}",
    "DR_INC_LO": "{x[dr_grpo.length_incorrect.min]:.1f}",
    "DR_INC_HI": "{x[dr_grpo.length_incorrect.max]:.1f}",
    "L_GRPO_ALL": (
        "{a[l.sampled_all.grpo.accuracy_pct.mean]:.2f} ± {a[l.sampled_all.grpo.accuracy_pct.se]:.2f}%"
    ),
    "L_GRPO_ALL_Z": "{a[l.sampled_all.grpo.accuracy_pct.z]:.1f}",
    "LP1_SIX_WRONG": (
        "{a[l_plus_1.sampled_six.grpo.length_wrong_approach.mean]:,.1f} ± "
        "{a[l_plus_1.sampled_six.grpo.length_wrong_approach.se]:.1f}"
    ),
    "LP1_SIX_WRONG_Z": "{a[l_plus_1.sampled_six.grpo.length_wrong_approach.z]:+.1f}",
    "LP1_SIX_LO_WRONG": (
        "{a[l_plus_1.sampled_six.length_only.length_wrong_approach.mean]:,.1f} ± "
        "{a[l_plus_1.sampled_six.length_only.length_wrong_approach.se]:.1f}"
    ),
    "LP1_SIX_LO_WRONG_Z": "{a[l_plus_1.sampled_six.length_only.length_wrong_approach.z]:+.1f}",
    "LP1_SIX_INC": (
        "{a[l_plus_1.sampled_six.grpo.length_incorrect.mean]:,.1f} ± "
        "{a[l_plus_1.sampled_six.grpo.length_incorrect.se]:.1f}"
    ),
    "LP1_SIX_INC_Z": "{a[l_plus_1.sampled_six.grpo.length_incorrect.z]:+.1f}",
    "LP1_ALL_WRONG_DIFF": "{a[l_plus_1.sampled_all.grpo.length_wrong_approach.diff]:+.1f}",
    "LP1_ALL_LO_WRONG_DIFF": "{a[l_plus_1.sampled_all.length_only.length_wrong_approach.diff]:+.1f}",
    "LP1_ALL_WRONG_Z": "{a[l_plus_1.sampled_all.grpo.length_wrong_approach.z]:+.1f}",
    "LP1_ALL_LO_WRONG_Z": "{a[l_plus_1.sampled_all.length_only.length_wrong_approach.z]:+.1f}",
    "LP1_ALL_INC_DIFF": "{a[l_plus_1.sampled_all.grpo.length_incorrect.diff]:+.1f}",
    "LP1_ALL_INC_Z": "{a[l_plus_1.sampled_all.grpo.length_incorrect.z]:+.1f}",
    "L_ALL_WRONG": (
        "{a[l.sampled_all.grpo.length_wrong_approach.mean]:,.1f} ± "
        "{a[l.sampled_all.grpo.length_wrong_approach.se]:.1f}"
    ),
    "L_ALL_WRONG_Z": "{a[l.sampled_all.grpo.length_wrong_approach.z]:+.1f}",
    "L_ALL_INC": (
        "{a[l.sampled_all.grpo.length_incorrect.mean]:,.1f} ± {a[l.sampled_all.grpo.length_incorrect.se]:.1f}"
    ),
    "L_MEAN0_ACC": "{g[l.0.1.grpo.accuracy_pct_mean]:.2f} ± {g[l.0.1.grpo.accuracy_pct_se]:.2f}%",
    "L_MEAN0_WRONG": (
        "{g[l.0.1.grpo.length_wrong_approach_mean]:,.1f} ± {g[l.0.1.grpo.length_wrong_approach_se]:.1f}"
    ),
    "L_MEAN0_INC": "{g[l.0.1.grpo.length_incorrect_mean]:,.1f} ± {g[l.0.1.grpo.length_incorrect_se]:.1f}",
    "MF_LP1_INC": "{a[l_plus_1.meanfield_six.grpo.length_incorrect.mean]:,.1f}",
    "MF_LP1_WRONG": "{a[l_plus_1.meanfield_six.grpo.length_wrong_approach.mean]:,.1f}",
    "MF_L_INC": "{a[l.meanfield_six.grpo.length_incorrect.mean]:,.1f}",
    "MF_L_WRONG": "{a[l.meanfield_six.grpo.length_wrong_approach.mean]:,.1f}",
    "MF_LP1_ACC": "{a[l_plus_1.meanfield_six.grpo.accuracy_pct.mean]:.2f}%",
    "MF_L_ACC": "{a[l.meanfield_six.grpo.accuracy_pct.mean]:.2f}%",
}


def convention_key(counted: Any) -> str:
    return "l_plus_1" if bool(counted) else "l"


def derived(grid: pd.DataFrame) -> dict[str, float]:
    """Ranges over the sensitivity grid: lengths of GRPO and length-only per convention, Dr. GRPO's
    E[L | incorrect], and the convention's shift (L minus L + 1) of GRPO's means per setting."""
    out: dict[str, float] = {}
    per_response = grid[grid["variant"].isin(["grpo", "length_only"])]
    for counted, rows in per_response.groupby("count_approach_token"):
        for metric in ("length_incorrect", "length_wrong_approach"):
            out[f"{convention_key(counted)}.{metric}.min"] = float(rows[f"{metric}_mean"].min())
            out[f"{convention_key(counted)}.{metric}.max"] = float(rows[f"{metric}_mean"].max())
    dr = grid[grid["variant"] == "dr_grpo"]["length_incorrect_mean"]
    out["dr_grpo.length_incorrect.min"], out["dr_grpo.length_incorrect.max"] = (
        float(dr.min()),
        float(dr.max()),
    )
    grpo = (
        grid[grid["variant"] == "grpo"]
        .set_index(["count_approach_token", "psi_mean", "psi_std"])
        .sort_index()
    )
    for metric in ("accuracy_pct", "length_wrong_approach"):
        shift = grpo.loc[False, f"{metric}_mean"] - grpo.loc[True, f"{metric}_mean"]
        out[f"shift.{metric}.min"], out[f"shift.{metric}.max"] = float(shift.min()), float(shift.max())
    return out


def contexts() -> dict[str, dict[str, Any]]:
    study = json.loads((RESULTS / "seed_study.json").read_text())
    sensitivity = json.loads((RESULTS / "init_sensitivity.json").read_text())
    table = pd.read_csv(RESULTS / "init_sensitivity.csv")
    grid = table[table["study"] == "grid"]
    g = {}
    for row in grid.to_dict("records"):
        prefix = f"{convention_key(row['count_approach_token'])}.{row['psi_mean']:g}.{row['psi_std']:g}"
        for column, value in row.items():
            g[f"{prefix}.{row['variant']}.{column}"] = value
    s = {
        f"{convention}.{field}": value
        for convention, fields in sensitivity["calibration"].items()
        for field, value in fields.items()
    }
    return {
        "h": study["headline"],
        "a": study["article"],
        "c": study["convention"],
        "s": s,
        "g": g,
        "x": derived(grid),
    }


def rendered() -> dict[str, str]:
    """Each placeholder's text, from the committed files; minus signs as in the doc (U+2212)."""
    context = contexts()
    return {name: template.format(**context).replace("-", "−") for name, template in PHRASES.items()}


def normalised(text: str) -> str:
    return " ".join(text.replace("−", "-").split())


def blocks(markdown: str) -> list[str]:
    """Paragraphs and tables of a markdown text (split at blank lines)."""
    return [block.strip() for block in re.split(r"\n\s*\n", markdown) if block.strip()]


def block_after(markdown: str, prefix: str) -> str:
    """The first table of `markdown` after the line that starts with `prefix`."""
    parts = blocks(markdown)
    start = next(i for i, block in enumerate(parts) if block.startswith(prefix))
    return next(block for block in parts[start + 1 :] if block.startswith("| "))


def verbatim_blocks() -> list[str]:
    """What the doc must include verbatim: all of init_sensitivity.md, and two tables of seed_study.md."""
    seed_md = (RESULTS / "seed_study.md").read_text()
    return [
        *blocks((RESULTS / "init_sensitivity.md").read_text()),
        block_after(seed_md, "## The \\|o_i\\| convention"),
        block_after(seed_md, "Orderings"),
    ]


def prose(doc: str) -> str:
    """The doc without code blocks, tables and verbatim generated paragraphs."""
    for block in verbatim_blocks():
        doc = doc.replace(block, "")
    doc = re.sub(r"```.*?```", "", doc, flags=re.DOTALL)
    return "\n".join(line for line in doc.splitlines() if not line.lstrip().startswith("| "))


def test_every_quoted_number_agrees_with_the_generated_files() -> None:
    doc = normalised(DOC.read_text())
    missing = [f"{name}: {text!r}" for name, text in rendered().items() if normalised(text) not in doc]
    assert not missing, "docs/initialisation.md does not quote: " + "; ".join(missing)


def test_every_decimal_number_of_the_prose_is_a_quoted_one() -> None:
    """No number of the prose is typed by hand: every decimal number is inside a rendered phrase, or
    a parameter of the studies (psi grid and scan, the article's figures)."""
    text = normalised(prose(DOC.read_text()))
    for phrase in sorted(rendered().values(), key=len, reverse=True):
        # Whole numbers only: "-1" must not take the "-1" of a stray "-1.37".
        text = re.sub(rf"(?<![\d.,]){re.escape(normalised(phrase))}(?![\d]|[.,]\d)", " ", text)
    sensitivity = json.loads((RESULTS / "init_sensitivity.json").read_text())
    allowed = {f"{v:g}" for setting in sensitivity["grid"] for v in setting}
    allowed |= {f"{v:g}" for v in sensitivity["calibration_means"]} | {"0.1"}
    allowed |= {f"{sensitivity['article_accuracy_pct']:g}"}
    numbers = re.findall(r"-?\d[\d,]*\.\d+", text)
    stray = [n for n in numbers if n not in allowed and n.lstrip("-") not in allowed]
    assert not stray, f"numbers in docs/initialisation.md's prose not taken from the results: {stray}"


def test_the_generated_tables_are_in_the_doc_verbatim() -> None:
    doc = normalised(DOC.read_text())
    absent = [block.splitlines()[0][:80] for block in verbatim_blocks() if normalised(block) not in doc]
    assert not absent, f"not pasted verbatim into docs/initialisation.md: {absent}"


def test_the_committed_markdown_is_made_from_the_committed_numbers() -> None:
    seed_study = load_script("seed_study")
    result = json.loads((RESULTS / "seed_study.json").read_text())
    result["curve_table"] = pd.read_csv(RESULTS / "seed_study_curves.csv")
    assert seed_study.markdown(result) == (RESULTS / "seed_study.md").read_text()
    init = load_script("init_sensitivity")
    table = pd.read_csv(RESULTS / "init_sensitivity.csv")
    meta = json.loads((RESULTS / "init_sensitivity.json").read_text())
    assert init.calibration_summary(table) == meta["calibration"]
    expected = init.markdown(table, meta["calibration"], len(meta["seeds"]))
    assert expected == (RESULTS / "init_sensitivity.md").read_text()


def test_rounding_residue_of_an_exact_value_is_not_reported_as_a_measurement() -> None:
    """seed_study.md's bias tables: Dr. GRPO's and std_only's exact zero along phi_wrong is "0" in every
    cell, not ~8e-17 with an SE that makes it look like a z of hundreds from zero; a real value (GRPO's,
    or one 1e-13 off) is still shown."""
    seed_study = load_script("seed_study")
    rows = [line.split(" | ") for line in (RESULTS / "seed_study.md").read_text().splitlines()]
    residue = [row for row in rows if len(row) > 3 and row[1] in ("`std_only`", "`dr_grpo`")]
    residue = [row for row in residue if row[2].startswith("phi_wrong")]
    assert len(residue) == 2 * 2 * 3 * 2  # variants, metrics, states, tables
    assert all(cell.strip(" |") in ("0", "–") for row in residue for cell in row[3:]), residue
    assert not any("±" in "".join(row) for row in residue)
    assert seed_study.bias_cell("phi_wrong_cosine", 8.2e-17, -1.04e-15) == "0"
    assert seed_study.bias_cell("phi_wrong_cosine", 8.2e-17, 1e-13) is None
    assert seed_study.bias_cell("cosine", 1 - 1e-12) is None
    assert seed_study.bias_cell("norm_ratio", 0.0) is None


def test_the_six_seed_headline_is_the_committed_article_run() -> None:
    frame, meta = load_results(RESULTS / "article.csv")
    study = json.loads((RESULTS / "seed_study.json").read_text())
    assert meta is not None and meta["config"] == study["meta"]["config"]
    assert sorted(set(frame["seed"])) == study["meta"]["seeds"]["six"]
    headline = study["headline"]
    final = frame[frame["step"] == study["meta"]["final_step"]].groupby("variant")
    initial = frame[frame["step"] == 0]
    checked = 0
    for variant in study["meta"]["variants"]:
        rows = final.get_group(variant)
        for metric in (
            "accuracy_pct",
            "length_mean",
            "length_correct",
            "length_incorrect",
            "length_wrong_approach",
        ):
            column, scale = ("accuracy", 100) if metric == "accuracy_pct" else (metric, 1)
            key = f"six.{variant}.final.{metric}"
            assert math.isclose(headline[f"{key}.mean"], rows[column].mean() * scale, rel_tol=1e-12), key
            assert math.isclose(headline[f"{key}.sd"], rows[column].std() * scale, rel_tol=1e-12), key
            checked += 2
    for metric in ("accuracy_pct", "length_correct", "length_incorrect"):
        column, scale = ("accuracy", 100) if metric == "accuracy_pct" else (metric, 1)
        key = f"six.initial.{metric}.mean"
        assert math.isclose(headline[key], initial[column].mean() * scale, rel_tol=1e-12), key
        checked += 1
    assert checked == 43


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}/").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}/").items()}
    return {prefix.rstrip("/"): value}


def assert_same_numbers(saved: dict[str, Any], fresh: dict[str, Any], what: str) -> None:
    assert saved.keys() == fresh.keys(), f"{what}: different keys {sorted(saved.keys() ^ fresh.keys())[:5]}"
    bad = []
    for key, a in saved.items():
        b = fresh[key]
        same = a == b or (a != a and b != b)  # equal to the bit (NaN where NaN): the same on any machine
        if not same:
            bad.append(f"{key}: {a!r} against {b!r}")
    assert not bad, f"{what}: {len(bad)} values differ, first {bad[:3]}"


def csv_values(path: Path) -> dict[str, Any]:
    frame = pd.read_csv(path)
    return {
        f"{i}/{column}": value
        for i, row in enumerate(frame.to_dict("records"))
        for column, value in row.items()
    }


# Each study and the files it writes (one test each, so that they run on different workers).
STUDY_FILES = {
    "seed_study": ("seed_study.json", "seed_study_curves.csv"),
    "init_sensitivity": ("init_sensitivity.json", "init_sensitivity.csv"),
    "presets_study": ("presets.json",),
    "trainer_defaults_study": ("trainer_defaults.json",),
    "verl_width_study": ("verl_width.json",),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", list(STUDY_FILES))
def test_the_studies_regenerate_the_committed_numbers(script: str, tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / f"{script}.py"), "--out-dir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=280,
    )
    for name in STUDY_FILES[script]:
        if name.endswith(".json"):
            saved, fresh = (json.loads((folder / name).read_text()) for folder in (RESULTS, tmp_path))
            assert_same_numbers(flatten(saved), flatten(fresh), name)
        else:
            assert_same_numbers(csv_values(RESULTS / name), csv_values(tmp_path / name), name)


def test_the_trainer_defaults_are_what_toyrl_check_maps_today() -> None:
    """results/trainer_defaults.json records, per case, the variant and reference `toyrl check` map
    the settings to now (a mapping change without a rerun fails here), and oat's defaults are Dr.
    GRPO's loss itself (the README says so)."""
    from toyrl.trainers import resolve
    from toyrl.trainers.check import dr_grpo_in, toy_variant

    study = load_script("trainer_defaults_study")
    saved = json.loads((RESULTS / "trainer_defaults.json").read_text())
    assert list(saved["cases"]) == list(study.CASES)
    for key, (trainer, settings, label) in study.CASES.items():
        resolved = resolve(trainer, None, study.TOY_SCALE[trainer] | settings)
        variant, _ = toy_variant(resolved, Config())
        case = saved["cases"][key]
        assert (case["label"], case["setting"]["spec"]) == (label, variant.spec_text()), key
        assert case["dr_grpo"]["spec"] == dr_grpo_in(variant).spec_text(), key
    oat = saved["cases"]["oat_default"]
    assert oat["setting"]["spec"] == oat["dr_grpo"]["spec"]


def test_the_verl_width_study_runs_the_preset_s_divisor() -> None:
    """Each size's variant is verl_dr_grpo's loss at that micro-batch size, and the reference Dr.
    GRPO itself: the study measures the presets' divisor, not another."""
    from toyrl.variants import VARIANTS, parse_variant

    data = json.loads((RESULTS / "verl_width.json").read_text())
    responses = Config().batch_prompts * Config().group_size
    assert data["dr_grpo"]["spec"] == VARIANTS["dr_grpo"].spec_text()
    assert set(data["sizes"]) >= {"1", "4", "16", str(responses)}
    for size, entry in data["sizes"].items():
        keys = VARIANTS["verl_dr_grpo"].spec() | {"micro_batches": responses // int(size)}
        preset = parse_variant(",".join(f"{key}={value}" for key, value in keys.items()))
        assert parse_variant(entry["spec"]).spec() == preset.spec(), size


# The families study (scripts/families_study.py, 100 seeds: about 15 minutes on 2 cores) keeps every
# seed's values; these tests regenerate a few seeds of a few variants and check the rest is derived.
FAMILIES_REGENERATED = ("grpo", "gspo", "gfpo", "dynamic_sampling", "opo", "alpha_0.5")


def families() -> tuple[ModuleType, dict[str, Any]]:
    return load_script("families_study"), json.loads((RESULTS / "families.json").read_text())


def test_the_families_summaries_and_table_are_made_from_the_kept_seeds() -> None:
    study, data = families()
    rows = [row for row, _, _ in study.FAMILIES] + [f"alpha_{a:.1f}" for a in study.ALPHAS]
    assert list(data["variants"]) == rows and data["meta"]["seeds"] == list(range(100))
    for row, entry in data["variants"].items():
        per_seed = entry["per_seed"]
        for key, column, scale in (
            ("accuracy_pct", "accuracy", 100.0),
            ("length_incorrect", "length_incorrect", 1.0),
            ("length_correct", "length_correct", 1.0),
            ("tokens_per_step", "tokens_sampled", 1.0),
        ):
            assert len(per_seed[column]) == 100, (row, column)
            assert entry[key] == study.summary(np.array(per_seed[column]), scale), (row, key)
        if entry["exact"]:
            along = np.array(per_seed["cosine_along"])
            assert along.shape == (100, len(data["meta"]["checkpoints"]))
            assert entry["cosine_along"] == [study.summary(along[:, k]) for k in range(along.shape[1])]
            assert entry["cosine_initial"] == study.summary(along[:10, 0])
            assert entry["cosine_along_mean"] == study.summary(along.mean(axis=1))
        else:
            assert entry["cosine_initial"] == study.summary(np.array(per_seed["cosine_initial"]))
            assert entry["simulated_only"] and entry["cosine_initial_mc_error"] < 0.01
    assert study.markdown(data) == (RESULTS / "families.md").read_text()
    # What the README says of them: at the toy's learning rate no ratio leaves PPO's clip range in
    # four mini-batches, so CISPO's runs are PPO's to the bit, and SAPO's gate keeps them close.
    rows = data["variants"]
    assert rows["cispo"]["per_seed"] == rows["token_mean_mb4"]["per_seed"]
    assert rows["sapo"]["per_seed"] != rows["seq_mean_mb4"]["per_seed"]


@pytest.mark.slow
def test_the_families_study_regenerates_its_committed_seeds() -> None:
    study, data = families()
    config = Config()
    for row in FAMILIES_REGENERATED:
        spec = dict((r, s) for r, s, _ in study.FAMILIES).get(row)
        variant = study.power_variant(0.5) if spec is None else study.variant_of(row, spec)
        assert variant.spec_text() == data["variants"][row]["spec"]
        fresh = study.train(variant, [0, 57], config)
        kept = data["variants"][row]["per_seed"]
        for column in study.PER_SEED:
            saved = [kept[column][0], kept[column][57]]
            assert fresh[column].tolist() == saved, (row, column)
        if "cosine_along" in fresh:
            saved = np.array(kept["cosine_along"])[[0, 57]]
            assert fresh["cosine_along"].tolist() == saved.tolist(), row
    cosine, _ = study.sampled_mean_update(study.variant_of("opo", "opo"), 3, config)
    assert cosine == data["variants"]["opo"]["per_seed"]["cosine_initial"][3]
