"""Each variant's bias, measured: its exact expected update E[g] against the true gradient grad J.

`bias_report` compares the two at given policy states; `replay_states` recovers the states of a
saved run by re-simulating it from its configuration and seed (runs are deterministic, so nothing
beyond the CSV and its sidecar needs saving), checking the replay against the saved exact metrics;
`bias_over_training` follows the comparison along every run of a results table.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from toyrl.config import Config, InvalidInput
from toyrl.expected import expected_update, true_gradient
from toyrl.objective import Variant, parse_variant
from toyrl.policy import FloatArray
from toyrl.presets import ALL_VARIANTS
from toyrl.train import EXACT_COLUMNS, simulate


def bias_report(
    theta: FloatArray, config: Config, variants: Sequence[Variant]
) -> list[dict[str, float | str]]:
    """Per variant: cosine and norm ratio of E[g] to grad J, and their components.

    theta [R, P + 2] holds one policy state per variant (R = len(variants)). Components: the
    psi block (norms and cosine), phi_right and phi_wrong (values; grad J's phi_wrong is 0).
    """
    update = expected_update(theta, config, variants)
    gradient = true_gradient(theta, config.cap, config.min_length)
    rows: list[dict[str, float | str]] = []
    for i, variant in enumerate(variants):
        u, g = update[i], gradient[i]
        rows.append(
            {
                "variant": variant.name,
                "cosine": float(u @ g / (np.linalg.norm(u) * np.linalg.norm(g))),
                "norm_ratio": float(np.linalg.norm(u) / np.linalg.norm(g)),
                "psi_cosine": float(u[:-2] @ g[:-2] / (np.linalg.norm(u[:-2]) * np.linalg.norm(g[:-2]))),
                "psi_norm": float(np.linalg.norm(u[:-2])),
                "true_psi_norm": float(np.linalg.norm(g[:-2])),
                "phi_right": float(u[-2]),
                "true_phi_right": float(g[-2]),
                "phi_wrong": float(u[-1]),
                "true_phi_wrong": float(g[-1]),
                "phi_wrong_share": float(u[-1] / np.linalg.norm(u)),
            }
        )
    return rows


def replay_states(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    steps: Sequence[int],
    check: pd.DataFrame | None = None,
    exact: bool = False,
) -> FloatArray:
    """theta [len(runs), len(steps), P + 2] of each run at each step, by re-simulating the runs.

    With `check` (the saved results), the replay's exact metrics must equal the saved ones at those
    steps to the last bit; otherwise the results were made by other code or settings, and
    InvalidInput says so. `exact`: the runs are mean-field runs (`toyrl run --exact`).
    """
    wanted = sorted(set(steps))
    states = np.empty((len(runs), len(wanted), config.prompts + 2))

    def keep(step: int, theta: FloatArray) -> None:
        if step in wanted:
            states[:, wanted.index(step)] = theta

    replay = simulate(config.replace(steps=max(wanted)), runs, exact=exact, on_step=keep)
    if check is not None:
        key = ["variant", "seed", "step"]
        saved = check[check["step"].isin(wanted)].set_index(key)[EXACT_COLUMNS]
        replayed = replay[replay["step"].isin(wanted)].set_index(key)[EXACT_COLUMNS]
        if not replayed.equals(saved.reindex(replayed.index)):
            raise InvalidInput(
                "replaying the runs does not reproduce the saved results (made by another toyrl version "
                "or with other settings?), so their policy states cannot be recovered"
            )
    return states[:, [wanted.index(step) for step in steps]]


def bias_over_training(
    frame: pd.DataFrame, config: Config, stride: int = 10, exact: bool = False
) -> pd.DataFrame:
    """For every run of a results table, every `stride` steps: cosine, norm ratio and phi_wrong share
    of its own variant's E[g] against grad J. A tidy frame, one row per (variant, seed, step)."""
    runs = [
        (parse_variant(name, ALL_VARIANTS), int(seed))
        for name, seed in frame[["variant", "seed"]].drop_duplicates().itertuples(index=False, name=None)
    ]
    last = int(frame["step"].max())
    steps = list(range(0, last + 1, stride)) + ([last] if last % stride else [])
    states = replay_states(config.replace(steps=last), runs, steps, check=frame, exact=exact)
    variants = [variant for variant, _ in runs for _ in steps]
    rows = bias_report(states.reshape(-1, states.shape[-1]), config, variants)
    table = pd.DataFrame(rows)
    table.insert(1, "seed", [seed for _, seed in runs for _ in steps])
    table.insert(2, "step", steps * len(runs))
    return table
