"""Training loop: Adam driven by the exact score-function update, many runs advancing together.

Article, "Toy run": each step samples B distinct prompts and G responses to each, scores them, and
takes one on-policy update (ratio 1, so PPO's clipping is inactive) with Adam.

Every run (variant, seed) owns four random streams spawned from `SeedSequence(seed)`: initial
prompt logits, prompt choice, approach choice and ramble length. A run's numbers therefore depend on
its seed alone, not on which runs share its array or its worker; and the variants of one seed start
from the same prompt logits and draw the same noise (common random numbers), so their differences are
the objective's, not the luck of the draw.

Row `step` = t of the results describes the policy theta_t: its exact metrics, a batch sampled from
it, and the gradient that batch gives. theta_{t+1} = Adam(theta_t, that gradient) for t < steps; the
final row's batch and gradient are evaluated but not applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pandas as pd
from joblib import Parallel, delayed, effective_n_jobs
from numpy.typing import NDArray
from scipy.special import logit

from toyrl.config import Config, ConfigError
from toyrl.expected import expected_update
from toyrl.objective import VARIANTS, advantages, token_weights
from toyrl.policy import Batch, FloatArray, exact_metrics, response_scores, sample_batch

NOISE_BLOCK_STEPS = 50  # noise is drawn this many steps at a time, to bound memory
RUNS_PER_CHUNK = 256  # runs simulated together as one array

EXACT_COLUMNS = [
    "accuracy",
    "length_mean",
    "length_correct",
    "length_incorrect",
    "length_right_approach",
    "length_wrong_approach",
    "p_right_approach",
    "stop_prob_right",
    "stop_prob_wrong",
]
BATCH_COLUMNS = [
    "batch_accuracy",
    "batch_length_mean",
    "batch_length_correct",
    "batch_length_incorrect",
    "zero_variance_fraction",
    "grad_norm",
]
COLUMNS = ["variant", "seed", "step", *EXACT_COLUMNS, *BATCH_COLUMNS]


def initial_theta(config: Config, rng: np.random.Generator) -> FloatArray:
    """theta_0 [P + 2]: psi_j ~ Normal(prompt_logit_mean, prompt_logit_std), phi at the set stops."""
    psi = config.prompt_logit_mean + config.prompt_logit_std * rng.standard_normal(config.prompts)
    phi = logit([config.stop_prob_right, config.stop_prob_wrong])
    return np.concatenate([psi, phi])


def loss_gradient(
    theta: FloatArray,
    prompt_index: NDArray[np.intp],
    batch: Batch,
    rewards: FloatArray,
    std_scaled: NDArray[np.bool_],
    length_mean: NDArray[np.bool_],
    config: Config,
) -> FloatArray:
    """Gradient [R, P + 2] of every run's loss -(1/(B G)) sum_i w_i log pi(o_i) at ratio 1.

    w_i = A_i / D_i is the variant's per-token weight (`toyrl.objective`); the token scores of a
    response are summed in closed form (`toyrl.policy.response_scores`), so each response costs O(1).
    """
    advantage = advantages(rewards, std_scaled, config.std_eps)
    weight = token_weights(advantage, batch.length + 1, length_mean, config.length_norm_value)
    score_approach, score_stop = response_scores(theta, prompt_index, batch)
    responses = config.batch_prompts * config.group_size
    weighted_stop = weight * score_stop
    grad = np.zeros_like(theta)
    prompt_grad = -(weight * score_approach).sum(axis=-1) / responses
    np.put_along_axis(grad[:, :-2], prompt_index, prompt_grad, axis=-1)
    grad[:, -2] = -np.where(batch.right, weighted_stop, 0.0).sum(axis=(1, 2)) / responses
    grad[:, -1] = -np.where(batch.right, 0.0, weighted_stop).sum(axis=(1, 2)) / responses
    return grad


def adam_step(
    theta: FloatArray,
    grad: FloatArray,
    moment1: FloatArray,
    moment2: FloatArray,
    step: int,
    config: Config,
) -> None:
    """One Adam step (Kingma and Ba, bias-corrected) on theta in place; `step` counts from 1."""
    moment1 *= config.adam_beta1
    moment1 += (1 - config.adam_beta1) * grad
    moment2 *= config.adam_beta2
    moment2 += (1 - config.adam_beta2) * grad**2
    mean = moment1 / (1 - config.adam_beta1**step)
    second = moment2 / (1 - config.adam_beta2**step)
    theta -= config.lr * mean / (np.sqrt(second) + config.adam_eps)


def batch_statistics(batch: Batch, rewards: FloatArray, grad: FloatArray) -> dict[str, FloatArray]:
    """The sampled batch's own accuracy and lengths [R]; NaN where a batch has no such response."""
    n_correct = rewards.sum(axis=(1, 2))
    n_incorrect = rewards[0].size - n_correct
    length = batch.length.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        length_correct = (length * rewards).sum(axis=(1, 2)) / n_correct
        length_incorrect = (length * (1 - rewards)).sum(axis=(1, 2)) / n_incorrect
    return {
        "batch_accuracy": rewards.mean(axis=(1, 2)),
        "batch_length_mean": length.mean(axis=(1, 2)),
        "batch_length_correct": np.where(n_correct > 0, length_correct, np.nan),
        "batch_length_incorrect": np.where(n_incorrect > 0, length_incorrect, np.nan),
        "zero_variance_fraction": (rewards.min(axis=-1) == rewards.max(axis=-1)).mean(axis=-1),
        "grad_norm": np.linalg.norm(grad, axis=-1),
    }


def run_streams(seed: int) -> list[np.random.Generator]:
    """The run's four independent streams: init, prompt choice, approach, ramble length."""
    return [np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(4)]


def _noise(
    streams: list[list[np.random.Generator]], config: Config
) -> Iterator[tuple[NDArray[np.intp], FloatArray, FloatArray]]:
    """Each step's (prompt_index [R, B], approach_uniform, length_exponential [R, B, G]).

    Drawn NOISE_BLOCK_STEPS steps at a time per run and stream, so memory stays bounded and a
    run's numbers do not depend on the block size.
    """
    shape = (config.batch_prompts, config.group_size)
    for start in range(0, config.steps + 1, NOISE_BLOCK_STEPS):
        n = min(NOISE_BLOCK_STEPS, config.steps + 1 - start)
        # A uniformly random permutation's first B entries: B distinct prompts.
        prompt_index = np.stack(
            [
                s.random((n, config.prompts)).argsort(axis=-1)[:, : config.batch_prompts]
                for _, s, _, _ in streams
            ],
            axis=1,
        )
        approach = np.stack([s.random((n, *shape)) for _, _, s, _ in streams], axis=1)
        exponential = np.stack([s.standard_exponential((n, *shape)) for *_, s in streams], axis=1)
        for offset in range(n):
            yield prompt_index[offset], approach[offset], exponential[offset]


def simulate(
    config: Config,
    runs: Sequence[tuple[str, int]],
    exact: bool = False,
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> pd.DataFrame:
    """Train every (variant, seed) of `runs` together; a tidy frame of `COLUMNS`, (steps + 1) rows a run.

    With `exact`, Adam is driven by the exact expected update E[g] (`toyrl.expected`) instead of a
    sampled batch: the mean-field trajectory, without noise (batch columns are NaN).
    `on_step(step, theta)` is called with every policy state theta_t [R, P + 2] (do not modify it).
    """
    n_runs, steps = len(runs), config.steps
    std_scaled = np.array([VARIANTS[name].std_scaled for name, _ in runs])
    length_mean = np.array([VARIANTS[name].length_mean for name, _ in runs])
    streams = [run_streams(seed) for _, seed in runs]
    theta = np.stack([initial_theta(config, init) for init, *_ in streams])
    moment1, moment2 = np.zeros_like(theta), np.zeros_like(theta)
    record = {name: np.empty((n_runs, steps + 1)) for name in EXACT_COLUMNS + BATCH_COLUMNS}
    noise = None if exact else _noise(streams, config)
    for step in range(steps + 1):
        if on_step is not None:
            on_step(step, theta)
        for name, values in exact_metrics(theta, config.cap, config.min_length).items():
            record[name][:, step] = values
        if noise is None:
            grad = -expected_update(theta, config, std_scaled, length_mean)
            statistics = {name: np.full(n_runs, np.nan) for name in BATCH_COLUMNS}
            statistics["grad_norm"] = np.linalg.norm(grad, axis=-1)
        else:
            prompt_index, approach, exponential = next(noise)
            batch = sample_batch(theta, prompt_index, approach, exponential, config.cap)
            rewards = batch.rewards(config.min_length)
            grad = loss_gradient(
                theta,
                prompt_index,
                batch,
                rewards,
                std_scaled[:, None, None],
                length_mean[:, None, None],
                config,
            )
            statistics = batch_statistics(batch, rewards, grad)
        for name, values in statistics.items():
            record[name][:, step] = values
        if step < steps:
            adam_step(theta, grad, moment1, moment2, step + 1, config)
    frame = pd.DataFrame(
        {
            "variant": np.repeat([name for name, _ in runs], steps + 1),
            "seed": np.repeat([seed for _, seed in runs], steps + 1),
            "step": np.tile(np.arange(steps + 1), n_runs),
        }
    )
    for name, values in record.items():
        frame[name] = values.ravel()
    return frame


def run_experiment(
    config: Config,
    variants: Sequence[str],
    seeds: Sequence[int],
    n_jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    exact: bool = False,
) -> pd.DataFrame:
    """Every (variant, seed) pair, variant-major, spread over `n_jobs` joblib workers (-1: all cores).

    The numbers of a run do not depend on `n_jobs` or on the chunking (see the module docstring).
    `exact`: the mean-field trajectories (see `simulate`).
    `progress(done, total)` is called as chunks of runs finish.
    """
    unknown = [name for name in variants if name not in VARIANTS]
    if unknown:
        raise ConfigError("variant", f"must be one of {', '.join(VARIANTS)}", unknown[0])
    if not seeds or min(seeds) < 0:
        raise ConfigError("seeds", "must be a non-empty list of integers >= 0", list(seeds))
    if n_jobs == 0 or n_jobs < -1:
        raise ConfigError("n_jobs", "must be -1 (all cores) or an integer >= 1", n_jobs)
    runs = [(variant, seed) for variant in variants for seed in seeds]
    workers = min(effective_n_jobs(n_jobs), len(runs))
    n_chunks = max(math.ceil(len(runs) / RUNS_PER_CHUNK), workers)
    chunks = [list(chunk) for chunk in np.array_split(np.arange(len(runs)), n_chunks)]
    jobs = ([runs[i] for i in chunk] for chunk in chunks)
    if workers == 1:
        results = (simulate(config, job, exact) for job in jobs)
    else:
        results = Parallel(n_jobs=workers, return_as="generator")(
            delayed(simulate)(config, job, exact) for job in jobs
        )
    frames, done = [], 0
    for frame in results:
        frames.append(frame)
        done += len(frame) // (config.steps + 1)
        if progress is not None:
            progress(done, len(runs))
    return pd.concat(frames, ignore_index=True)
