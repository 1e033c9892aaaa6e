"""Each variant's bias, measured: its exact expected update E[g] against the true gradient grad J.

`bias_report` compares the two at given policy states; `replay_states` recovers the states of a
saved run by re-simulating it from its configuration and seed (runs are deterministic, so nothing
beyond the CSV and its sidecar needs saving), checking the replay against the saved exact metrics;
`bias_over_training` follows the comparison along every run of a results table; `verdict` says
what a report's numbers mean, in words (`toyrl bias` ends with it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from toyrl.config import Config, InvalidInput
from toyrl.expected import expected_update, true_gradient
from toyrl.experiment import simulate_runs
from toyrl.objective import Variant
from toyrl.policy import FloatArray
from toyrl.variants import display_name, saved_variant

RUNS_PER_REPLAY = 32  # runs replayed together by bias_over_training (its exact sums are [states, cap])
ZERO = 1e-9  # `verdict`: a cosine within this of 0 (phi_wrong) or of 1 (grad J's direction) is exact


def bias_report(
    theta: FloatArray, config: Config, variants: Sequence[Variant]
) -> list[dict[str, float | str]]:
    """Per variant: cosine and norm ratio of E[g] to grad J, and their components.

    theta [R, P + 2] holds one policy state per variant (R = len(variants)). Components: the
    psi block (norms and cosine), phi_right and phi_wrong (values; grad J's phi_wrong is 0), and
    how much of E[g] lies along phi_wrong: the cosine with that axis, u_w / |u| (signed: negative
    when E[g] lowers the wrong approach's stop logit), and its share of the squared norm,
    u_w^2 / |u|^2 (between 0 and 1; the shares of all P + 2 axes add up to 1). A cosine, ratio or
    share of a vector that is 0 (grad J where every sigmoid has saturated to exactly 0 or 1, theta
    of +-1e308) is NaN: it has no direction.
    """
    update = expected_update(theta, config, variants)
    gradient = true_gradient(theta, config.cap, config.min_length)

    # Dot products as elementwise products and numpy's pairwise sum, not BLAS (whose order of
    # additions depends on the CPU's kernels), of vectors scaled by a power of two to a largest entry
    # in [0.5, 1): the same bits as unscaled where nothing under- or overflows, and no square of a
    # tiny gradient (1e-301, at a saturated policy) lost to 0, nor of a huge one to inf.
    def unit(a: FloatArray) -> tuple[FloatArray, int]:
        largest = float(np.abs(a).max())
        exponent = math.frexp(largest)[1] if math.isfinite(largest) else 0
        return np.ldexp(a, -exponent), exponent

    def dot(a: FloatArray, b: FloatArray) -> float:
        return float((a * b).sum())

    def ratio(a: float, b: float) -> float:
        return a / b if b else math.nan

    def norm(a: FloatArray) -> float:
        scaled, exponent = unit(a)
        with np.errstate(over="ignore"):
            return float(np.ldexp(math.sqrt(dot(scaled, scaled)), exponent))

    def cosine(a: FloatArray, b: FloatArray) -> float:
        (a, _), (b, _) = unit(a), unit(b)
        return ratio(dot(a, b), math.sqrt(dot(a, a)) * math.sqrt(dot(b, b)))

    rows: list[dict[str, float | str]] = []
    for i, variant in enumerate(variants):
        u, g = update[i], gradient[i]
        unit_u = unit(u)[0]
        rows.append(
            {
                "variant": variant.name,
                "cosine": cosine(u, g),
                "norm_ratio": ratio(norm(u), norm(g)),
                "psi_cosine": cosine(u[:-2], g[:-2]),
                "psi_norm": norm(u[:-2]),
                "true_psi_norm": norm(g[:-2]),
                "phi_right": float(u[-2]),
                "true_phi_right": float(g[-2]),
                "phi_wrong": float(u[-1]),
                "true_phi_wrong": float(g[-1]),
                # E[g]'s cosine with the phi_wrong axis, and that axis's share of its squared norm.
                "phi_wrong_cosine": ratio(float(unit_u[-1]), math.sqrt(dot(unit_u, unit_u))),
                "phi_wrong_share": ratio(float(unit_u[-1] * unit_u[-1]), dot(unit_u, unit_u)),
            }
        )
    return rows


def replay_states(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    steps: Sequence[int],
    check: pd.DataFrame | None = None,
    mean_field: bool = False,
) -> FloatArray:
    """theta [len(runs), len(steps), P + 2] of each run at each step, by re-simulating the runs.

    With `check` (the saved results), every replayed row up to the last wanted step must agree with
    the saved one to the bit (`toyrl.results.compare_results`); otherwise InvalidInput names the
    first difference.
    `mean_field`: the runs are mean-field runs (`toyrl run --mean-field`).
    """
    from toyrl.results import compare_results

    wanted = sorted(set(steps))
    states = np.empty((len(runs), len(wanted), config.prompts + 2))

    def keep(step: int, theta: FloatArray) -> None:
        if step in wanted:
            states[:, wanted.index(step)] = theta

    last = max(wanted)
    replay = simulate_runs(config.replace(steps=max(last, 1)), runs, mean_field, on_step=keep)
    replay = replay[replay["step"] <= last].reset_index(drop=True)
    if check is not None:
        key = ["variant", "seed", "step"]
        saved_rows = check.set_index(key)
        replayed_rows = pd.MultiIndex.from_frame(replay[key])
        missing = ~replayed_rows.isin(saved_rows.index)
        if missing.any():
            variant, seed, step = replay.loc[int(missing.argmax()), key]
            raise InvalidInput(
                f"the saved results have no row for variant {variant}, seed {seed}, step {step}"
            )
        saved = saved_rows.reindex(replayed_rows).reset_index()[replay.columns]
        comparison = compare_results(saved, replay)
        if not comparison.same:
            raise InvalidInput(
                "replaying the runs does not reproduce the saved results, so their policy states cannot "
                f"be recovered (other settings, or another toyrl version?): {comparison.describe()}"
            )
    return states[:, [wanted.index(step) for step in steps]]


def bias_over_training(
    frame: pd.DataFrame, config: Config, stride: int = 10, mean_field: bool = False
) -> pd.DataFrame:
    """For every run of a results table, every `stride` steps: cosine, norm ratio and phi_wrong
    cosine and share of its own variant's E[g] against grad J. A tidy frame, one row per (variant,
    seed, step). Runs are replayed RUNS_PER_REPLAY at a time, so memory does not grow with the table.
    """
    recorded = frame.attrs.get("toyrl", {}).get("variants")  # the specs of labelled variants
    runs = [
        (saved_variant(name, recorded), int(seed))
        for name, seed in frame[["variant", "seed"]].drop_duplicates().itertuples(index=False, name=None)
    ]
    last = int(frame["step"].max())
    steps = list(range(0, last + 1, stride)) + ([last] if last % stride else [])
    tables = []
    for start in range(0, len(runs), RUNS_PER_REPLAY):
        chunk = runs[start : start + RUNS_PER_REPLAY]
        names = {variant.name for variant, _ in chunk}
        rows = frame[frame["variant"].isin(names) & frame["seed"].isin({seed for _, seed in chunk})]
        states = replay_states(config, chunk, steps, check=rows, mean_field=mean_field)
        variants = [variant for variant, _ in chunk for _ in steps]
        table = pd.DataFrame(bias_report(states.reshape(-1, states.shape[-1]), config, variants))
        table.insert(1, "seed", [seed for _, seed in chunk for _ in steps])
        table.insert(2, "step", steps * len(chunk))
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


def _names(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


def _cosine(value: float) -> str:
    """A cosine to three decimals, or to as many as tell it apart from 1 (0.99983, not 1.000)."""
    below_one = math.isfinite(value) and 0 <= value < 1
    # The decimal exponent of 1 - value from its text, not log10 (the platform's, in the numbers' path).
    digits = max(3, 1 - int(f"{1 - value:e}".split("e")[1])) if below_one else 3
    return f"{value:.{digits}f}"


def verdict(rows: Sequence[dict[str, float | str]], step: int | None = None) -> str:
    """`bias_report`'s rows in words, two or three sentences: which variants' expected update (the
    first, at an initial policy; or at training step `step`) points toward longer or shorter wrong
    answers and by how much (its phi_wrong cosine and that axis's share of |E[g]|^2), which of those
    point against grad J, which are along grad J (unbiased up to scale) and which are neither.
    Worded from the numbers alone: a cosine within ZERO of 0 or of 1 is taken as exact."""
    by_name = {str(row["variant"]): row for row in rows}

    def value(name: str, key: str) -> float:
        return float(by_name[name][key])

    def cosines(names: Sequence[str], key: str = "cosine") -> str:
        return _names([_cosine(value(n, key)) if key == "cosine" else f"{value(n, key):.3f}" for n in names])

    def named(names: Sequence[str]) -> str:  # as people read them: "GRPO without std division"
        return _names([display_name(n) for n in names])

    update = "expected update" if step is not None else "expected first update"
    at = f" at step {step}" if step is not None else ""
    longer = [n for n in by_name if value(n, "phi_wrong_cosine") < -ZERO]
    shorter = [n for n in by_name if value(n, "phi_wrong_cosine") > ZERO]
    along = [n for n in by_name if n not in longer + shorter and value(n, "cosine") >= 1 - ZERO]
    tilted = [n for n in by_name if n not in longer + shorter + along]
    sentences = []
    for names, direction in ((longer, "longer"), (shorter, "shorter")):
        if not names:
            continue
        shares = _names([f"{value(n, 'phi_wrong_share'):.0%}" for n in names])
        against = [n for n in names if value(n, "cosine") < 0]
        sentences.append(
            f"The {update} of {named(names)}{at} points toward {direction} wrong answers, a direction "
            f"grad J does not have: phi_wrong cosine {cosines(names, 'phi_wrong_cosine')}, {shares} of "
            "|E[g]|^2"
            + (
                f", and against grad J itself (cosine {cosines(against)})"
                if against == names
                else f"; that of {named(against)} also points against grad J (cosine {cosines(against)})"
                if against
                else ""
            )
            + "."
        )
    if not longer + shorter:
        sentences.append(
            f"No variant's {update}{at} moves the length of wrong answers (phi_wrong cosine 0 within 1e-9)."
        )
    parts = []
    if along:
        parts.append(f"of {named(along)} is along grad J (cosine 1 within 1e-9), unbiased up to its scale")
    if tilted:
        parts.append(
            f"of {named(tilted)} has no phi_wrong component but is tilted off grad J "
            f"(cosine {cosines(tilted)})"
        )
    if parts:
        sentences.append(f"The {update} " + "; that ".join(parts) + ".")
    return " ".join(sentences)
