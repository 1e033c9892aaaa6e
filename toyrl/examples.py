"""The source documents' worked examples, computed by the package's own variant code.

Each example is an `Example`: a table and the conclusion the text draws from it, with the numbers
the text prints kept in `numbers` so that tests can hold them to the printed digits. Sources:
article, "Worked example by hand" and "Failure modes"; tutorial, sections 2.2 and 4.1.
The curves behind the teaching figures (`token_weight_curves`, `difficulty_profiles`) live here
too; `toyrl.plots` only draws them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from toyrl import kernels
from toyrl.expected import binomial_pmf
from toyrl.objective import advantages, variant_weights
from toyrl.policy import FloatArray
from toyrl.variants import VARIANTS


@dataclass(frozen=True)
class Example:
    """A worked example: a table (`columns`, `rows`) and what the text concludes from it."""

    name: str
    title: str
    source: str
    columns: list[str]
    rows: list[list[Any]]
    conclusions: list[str]
    numbers: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _weights(name: str, rewards: Any, tokens: Any, length_norm: float) -> FloatArray:
    """Per-token weights of a variant at std_eps = 0, as the texts compute them by hand."""
    return variant_weights(VARIANTS[name], rewards, tokens, std_eps=0.0, length_norm=length_norm)


def length_example(group_size: int = 8, correct: int = 2, length_norm: float = 2000.0) -> Example:
    """Article: G = 8 with two correct; a correct answer of 200 tokens and wrong ones of 800 and 200."""
    rewards = np.array([1.0] * correct + [0.0] * (group_size - correct))
    # Members 0 (correct, 200 tokens), `correct` (wrong, 800) and the last (wrong, 200) are shown;
    # a member's weight depends on its own length only.
    tokens = np.full(group_size, 800.0)
    tokens[0], tokens[-1] = 200.0, 200.0
    shown = [0, correct, group_size - 1]
    grpo, dr = (
        _weights("grpo", rewards, tokens, length_norm),
        _weights("dr_grpo", rewards, tokens, length_norm),
    )
    grpo_advantage = advantages(rewards, "group_std", std_eps=0.0)
    dr_advantage = advantages(rewards, "none", std_eps=0.0)
    rows = [
        [
            "correct" if rewards[i] else "wrong",
            int(tokens[i]),
            grpo_advantage[i],
            grpo[i],
            grpo[i] * tokens[i],
            dr_advantage[i],
            dr[i],
            dr[i] * tokens[i],
        ]
        for i in shown
    ]
    numbers = {
        "group_std": float(rewards.std()),
        "grpo_advantage_correct": grpo_advantage[0],
        "grpo_advantage_wrong": grpo_advantage[correct],
        "grpo_weight_correct": grpo[0],
        "grpo_weight_wrong_800": grpo[correct],
        "grpo_gentleness": grpo[0] / -grpo[correct],
        "dr_advantage_correct": dr_advantage[0],
        "dr_advantage_wrong": dr_advantage[correct],
        "dr_weight_correct": dr[0],
        "dr_weight_wrong": dr[correct],
        "dr_push_down_800_vs_200": (dr[correct] * 800) / (dr[-1] * 200),
        "grpo_push_down_800_vs_200": (grpo[correct] * 800) / (grpo[-1] * 200),
    }
    n = numbers
    conclusions = [
        f"GRPO (population std {n['group_std']:.3f}): advantages {n['grpo_advantage_correct']:+.3f} and "
        f"{n['grpo_advantage_wrong']:+.3f}; per-token weights {n['grpo_weight_correct']:.5f} and "
        f"{n['grpo_weight_wrong_800']:.5f}: each token of the long wrong answer is pushed down "
        f"{n['grpo_gentleness']:.0f} times more gently than each token of the short right one is pushed up.",
        f"GRPO gives the 800-token and the 200-token wrong answers the same total push-down "
        f"({n['grpo_push_down_800_vs_200']:.0f}x): length is free.",
        f"Dr. GRPO (L_norm = {length_norm:g}): advantages {n['dr_advantage_correct']:+.2f} and "
        f"{n['dr_advantage_wrong']:+.2f}; per-token weights {n['dr_weight_correct']:.6f} and "
        f"{n['dr_weight_wrong']:.6f} regardless of length, so the 800-token wrong answer receives "
        f"{n['dr_push_down_800_vs_200']:.0f} times the total push-down of a 200-token one.",
    ]
    return Example(
        name="length",
        title=f"Length bias: G = {group_size}, {correct} correct",
        source="article, 'Worked example by hand' (Length)",
        columns=[
            "response",
            "tokens",
            "GRPO advantage",
            "GRPO weight/token",
            "GRPO total",
            "Dr. GRPO advantage",
            "Dr. GRPO weight/token",
            "Dr. GRPO total",
        ],
        rows=rows,
        conclusions=conclusions,
        numbers=numbers,
    )


def group_mass(successes: Any, group_size: int, std_scaled: bool) -> FloatArray:
    """Total advantage mass sum_i |A_i| of a binary-reward group with k successes (k broadcasts)."""
    successes = np.asarray(successes)
    rewards = (np.arange(group_size) < successes[..., None]).astype(np.float64)
    return np.abs(advantages(rewards, "group_std" if std_scaled else "none", std_eps=0.0)).sum(axis=-1)


def difficulty_example(group_size: int = 8) -> Example:
    """Article: sum_i |A_i| of a group for k = 0..G successes, GRPO and Dr. GRPO, relative to k = G/2."""
    k = np.arange(group_size + 1)
    p_hat = k / group_size
    std = np.sqrt(p_hat * (1 - p_hat))
    grpo, dr = group_mass(k, group_size, True), group_mass(k, group_size, False)
    half = group_size // 2
    grpo_relative, dr_relative = grpo / grpo[half], dr / dr[half]
    rows = [
        [int(k[i]), p_hat[i], std[i], grpo[i], dr[i], grpo_relative[i], dr_relative[i]]
        for i in range(group_size + 1)
    ]
    inner = slice(1, group_size)
    single_64 = float(np.sqrt(1 / 64 * 63 / 64))
    one_success_16 = (np.arange(16) == 0).astype(np.float64)
    numbers = {
        "grpo_relative_k1": grpo_relative[1],
        "dr_relative_k1": dr_relative[1],
        "max_flattening": float(np.max(grpo_relative[inner] / dr_relative[inner])),
        "std_g64_single": single_64,
        "weight_g64_single": 1 / single_64,
        "advantage_g16_single_dr": float(advantages(one_success_16, "none", std_eps=0.0)[0]),
        "advantage_g16_single_grpo": float(advantages(one_success_16, "group_std", std_eps=0.0)[0]),
        "std_multiplier_half": 1 / std[half],
        "std_multiplier_k1": 1 / std[1],
    }
    n = numbers
    conclusions = [
        f"Relative to a 50/50 prompt, a 1-in-{group_size} prompt gets "
        f"{100 * n['dr_relative_k1']:.0f}% of the update under Dr. GRPO and "
        f"{100 * n['grpo_relative_k1']:.0f}% under GRPO.",
        f"The two agree on the shape; GRPO flattens it by a factor of up to {n['max_flattening']:.1f} at "
        f"G = {group_size}.",
        f"At G = 64 a single success gets a std of {n['std_g64_single']:.3f} and a weight (1/std) of "
        f"{n['weight_g64_single']:.1f}.",
        f"Without std scaling, a 1-in-16 success gets an advantage of {n['advantage_g16_single_dr']:.2f}, "
        f"not {n['advantage_g16_single_grpo']:.1f}.",
        f"GRPO's std division multiplies the step by {n['std_multiplier_half']:.0f} at std 0.5 and by "
        f"{n['std_multiplier_k1']:.1f} for a 1-in-{group_size} group.",
    ]
    return Example(
        name="difficulty",
        title=f"Difficulty bias: total advantage mass of a group, G = {group_size}",
        source="article, 'Worked example by hand' (Difficulty), 'Hyperparameters', 'Failure modes'",
        columns=[
            "k",
            "pass rate k/G",
            "group std",
            "GRPO mass",
            "Dr. GRPO mass",
            "GRPO rel. k=G/2",
            "Dr. rel.",
        ],
        rows=rows,
        conclusions=conclusions,
        numbers=numbers,
    )


def _fraction(value: float) -> str:
    fraction = Fraction(value).limit_denominator(10_000)
    return str(fraction) if abs(float(fraction) - value) < 1e-12 else f"{value:.6g}"


def four_responses_example(length_norm: float = 4.0) -> Example:
    """Tutorial 2.2: rewards [1, 1, 0, 0], lengths [2, 4, 2, 4], K = 4, L = 4, ratio 1, no std_eps.

    The coefficient on each token's log-probability gradient is w_i / K: GRPO's (A_i / T_i) / K,
    then without the std (length-only), then with the constant L in place of T_i (Dr. GRPO).
    """
    rewards, lengths = np.array([1.0, 1.0, 0.0, 0.0]), np.array([2.0, 4.0, 2.0, 4.0])
    group = len(rewards)
    steps = {
        name: _weights(name, rewards, lengths, length_norm) / group
        for name in ("grpo", "length_only", "dr_grpo")
    }
    rows = [
        [f"y{i + 1}", int(rewards[i]), int(lengths[i])] + [_fraction(steps[name][i]) for name in steps]
        for i in range(group)
    ]
    numbers = {f"{name}_y{i + 1}": float(steps[name][i]) for name in steps for i in range(group)}
    numbers |= {"mean": float(rewards.mean()), "std": float(rewards.std())}
    conclusions = [
        f"Mean {numbers['mean']:g}, population std {numbers['std']:g}. For y1 (reward 1, length 2) "
        f"the coefficient goes {_fraction(numbers['grpo_y1'])} -> {_fraction(numbers['length_only_y1'])} "
        f"(no std: advantage 1 -> 0.5) -> {_fraction(numbers['dr_grpo_y1'])} "
        f"(constant L = {length_norm:g} in place of its length 2).",
        f"GRPO gives the short correct answer's tokens twice the coefficient of the long one's "
        f"({_fraction(numbers['grpo_y1'])} vs {_fraction(numbers['grpo_y2'])}); Dr. GRPO gives both "
        f"{_fraction(numbers['dr_grpo_y2'])}.",
    ]
    return Example(
        name="four",
        title="Four responses: rewards [1, 1, 0, 0], lengths [2, 4, 2, 4], K = 4, L = 4",
        source="tutorial, section 2.2",
        columns=["response", "reward", "length", "GRPO", "std removed", "Dr. GRPO (constant L)"],
        rows=rows,
        conclusions=conclusions,
        numbers=numbers,
    )


def expected_estimators(pass_rate: float, group_size: int) -> tuple[float, float, float]:
    """(dJ/dtheta, E[group-mean estimator], E[RLOO estimator]) for a Bernoulli policy, exactly.

    The policy succeeds with p = sigma(theta), reward 1 on success; the score of an outcome o is
    o - p and dJ/dtheta = p (1 - p). The estimators average A_i (o_i - p) over the group; the
    expectation is a sum over all 2^G outcomes of the group.
    """
    outcomes = np.array(list(itertools.product([0.0, 1.0], repeat=group_size)))
    successes = outcomes.sum(axis=-1)
    probability = kernels.power(pass_rate, successes) * kernels.power(1 - pass_rate, group_size - successes)
    score = outcomes - pass_rate

    def expectation(advantage: FloatArray) -> float:
        return float((probability * (advantage * score).mean(axis=-1)).sum())

    mean_baseline = expectation(advantages(outcomes, "none", std_eps=0.0))
    return pass_rate * (1 - pass_rate), mean_baseline, expectation(advantages(outcomes, "rloo", std_eps=0.0))


def baseline_example(pass_rate: float = 0.3) -> Example:
    """Tutorial 4.1: the group mean scales the expected gradient by (K - 1)/K; RLOO removes it."""
    rewards = np.array([1.0, 1.0, 0.0, 0.0])
    centred, loo = advantages(rewards, "none", std_eps=0.0), advantages(rewards, "rloo", std_eps=0.0)
    numbers = {"identity_ratio": float(centred[0] / loo[0])}
    rows = []
    for group in (2, 4, 8):
        gradient, mean_baseline, rloo = expected_estimators(pass_rate, group)
        rows.append([group, gradient, mean_baseline, mean_baseline / gradient, rloo, rloo / gradient])
        numbers |= {f"mean_ratio_k{group}": mean_baseline / gradient, f"rloo_ratio_k{group}": rloo / gradient}
    n = numbers
    conclusions = [
        f"Rewards [1, 1, 0, 0]: group-mean advantages {np.round(centred, 3).tolist()}, leave-one-out "
        f"{np.round(loo, 3).tolist()}: each group-mean advantage is (K-1)/K = {n['identity_ratio']:.2f} "
        "times its leave-one-out one, since r_i - mean(r) = ((K-1)/K)(r_i - mean of the others).",
        f"Exactly, for a Bernoulli policy with pass rate {pass_rate:g} (sum over all 2^K outcomes): the "
        f"group-mean estimator's expectation is {n['mean_ratio_k2']:.3f}, {n['mean_ratio_k4']:.3f} and "
        f"{n['mean_ratio_k8']:.3f} of the true gradient at K = 2, 4, 8; RLOO's is 1 at every K.",
        "Dr. GRPO is therefore RLOO up to the constant (K-1)/K, which a learning rate absorbs.",
    ]
    return Example(
        name="baseline",
        title="The group mean's (K-1)/K factor and the leave-one-out baseline",
        source="tutorial, section 4.1; article, 'The Dr. GRPO objective'",
        columns=["K", "true gradient p(1-p)", "E[group mean]", "ratio", "E[RLOO]", "ratio"],
        rows=rows,
        conclusions=conclusions,
        numbers=numbers,
    )


EXAMPLES: dict[str, Callable[[], Example]] = {
    "length": length_example,
    "difficulty": difficulty_example,
    "four": four_responses_example,
    "baseline": baseline_example,
}


def token_weight_curves(
    lengths: FloatArray, group_size: int = 8, correct: int = 2, length_norm: float = 2000.0
) -> dict[str, FloatArray]:
    """Per-token weight of a correct and of a wrong response against its length, GRPO and Dr. GRPO."""
    rewards = np.array([1.0] * correct + [0.0] * (group_size - correct))
    curves = {}
    for name in ("grpo", "dr_grpo"):
        # Weights depend on a response's own length only: put every length in both positions.
        tokens = np.broadcast_to(lengths[:, None], (len(lengths), group_size))
        weights = _weights(name, np.broadcast_to(rewards, tokens.shape), tokens, length_norm)
        curves[f"{name}_correct"], curves[f"{name}_wrong"] = weights[:, 0], weights[:, -1]
    return curves


def difficulty_profiles(group_sizes: list[int], pass_rates: FloatArray) -> dict[str, Any]:
    """Total update mass against pass rate, relative to a 50/50 group, for each G and both variants.

    `observed[G][name]`: mass of a group with k successes at p = k/G (the article's table).
    `expected[G][name]`: E[mass] over k ~ Binomial(G, p) at each true pass rate p: what a prompt of
    pass rate p receives on average. Dr. GRPO's is 2 (G - 1) p (1 - p), the exact gradient's shape.
    """
    observed: dict[int, dict[str, FloatArray]] = {}
    expected: dict[int, dict[str, FloatArray]] = {}
    for group in group_sizes:
        k = np.arange(group + 1)
        pmf = binomial_pmf(k[None, :].astype(np.float64), group, pass_rates[:, None])
        observed[group], expected[group] = {"p": k / group}, {}
        for name, std_scaled in (("grpo", True), ("dr_grpo", False)):
            mass = group_mass(k, group, std_scaled)
            observed[group][name] = mass / mass[group // 2] if group % 2 == 0 else mass / mass.max()
            mean_mass = (pmf * mass).sum(axis=-1)  # not `@`: BLAS sums in a CPU-dependent order
            at_half = (binomial_pmf(k.astype(np.float64), group, np.full(k.shape, 0.5)) * mass).sum()
            expected[group][name] = mean_mass / at_half
    return {
        "pass_rates": pass_rates,
        "gradient": pass_rates * (1 - pass_rates) / 0.25,
        "observed": observed,
        "expected": expected,
    }
