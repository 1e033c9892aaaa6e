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
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed, effective_n_jobs, parallel_config
from numpy.typing import NDArray
from scipy.special import expit, log_expit, logit

from toyrl.config import Config, ConfigError, InvalidInput
from toyrl.expected import check_exact_supported, expected_update
from toyrl.objective import Variant, Weights, advantages, parse_variant, rows_by, token_denominators
from toyrl.policy import Batch, FloatArray, exact_metrics, prompt_logits, response_scores, sample_batch
from toyrl.presets import ALL_VARIANTS

NOISE_BLOCK_STEPS = 50  # noise is drawn at most this many steps at a time ...
VALUES_PER_BLOCK = 2**22  # ... and at most about this many values per array (32 MB), to bound memory
RUNS_PER_CHUNK = 256  # runs simulated together as one array, at most ...
VALUES_PER_CHUNK = 2**16  # ... and so many sampled responses (or exact-sum terms) per step
MAX_ROWS = 20_000_000  # rows of one results table (about 4 GB in memory): beyond, refuse up front
MAX_UPDATES = 100_000_000  # optimiser updates of one run (steps x num_iterations): beyond, refuse

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
    "clip_fraction",
]
COLUMNS = ["variant", "seed", "step", *EXACT_COLUMNS, *BATCH_COLUMNS]


def initial_theta(config: Config, rng: np.random.Generator) -> FloatArray:
    """theta_0 [P + 2]: psi_j ~ Normal(prompt_logit_mean, prompt_logit_std), phi at the set stops."""
    psi = config.prompt_logit_mean + config.prompt_logit_std * rng.standard_normal(config.prompts)
    phi = logit([config.stop_prob_right, config.stop_prob_wrong])
    return np.concatenate([psi, phi])


@dataclass(frozen=True)
class Plan:
    """Every run's variant and its settings as arrays [R], grouped for vectorised weights."""

    variants: tuple[Variant, ...]
    advantage_groups: tuple[tuple[tuple[str, float | None], NDArray[np.intp] | slice], ...]
    aggregation_groups: tuple[tuple[str, NDArray[np.intp] | slice], ...]
    mask_truncated: NDArray[np.bool_]
    iterations: NDArray[np.int64]
    clip_low: FloatArray
    clip_high: FloatArray
    beta: FloatArray

    @classmethod
    def of(cls, variants: Sequence[Variant]) -> Plan:
        def groups(keys: list[Any]) -> tuple[tuple[Any, NDArray[np.intp] | slice], ...]:
            # One group spanning every run is a slice: no copies on the common single-variant path.
            return tuple(
                (key, slice(None) if len(index) == len(keys) else index)
                for key, index in rows_by(keys).items()
            )

        return cls(
            variants=tuple(variants),
            advantage_groups=groups([(v.advantage, v.eps) for v in variants]),
            aggregation_groups=groups([v.aggregation for v in variants]),
            mask_truncated=np.array([v.mask_truncated for v in variants]),
            iterations=np.array([v.num_iterations for v in variants]),
            clip_low=np.array([v.epsilon for v in variants]),
            clip_high=np.array([v.clip_high for v in variants]),
            beta=np.array([v.beta for v in variants]),
        )

    def weights(self, batch: Batch, rewards: FloatArray, config: Config) -> Weights:
        """Every run's per-token weights [R, B, G] under its own variant, and n [R]
        (`toyrl.objective.token_weights`, a group of runs sharing a mode at a time)."""
        tokens = (batch.length + config.approach_tokens).astype(np.float64)
        included = ~(self.mask_truncated[:, None, None] & ~batch.stopped)
        advantage, denominator = np.empty(rewards.shape), np.empty(rewards.shape)
        n = np.empty(len(self.variants))
        # Each mode is computed on the whole batch and kept for its own runs: on these small arrays
        # that is cheaper than gathering and scattering each group's rows.
        for (mode, eps), rows in self.advantage_groups:
            advantage[rows] = advantages(rewards, mode, config.std_eps if eps is None else eps)[rows]
        for aggregation, rows in self.aggregation_groups:
            whole, count = token_denominators(aggregation, tokens, included, config.length_norm_value)
            denominator[rows], n[rows] = whole[rows], count
        return Weights(advantage, denominator, n, included)


def loss_gradient(
    theta: FloatArray, prompt_index: NDArray[np.intp], batch: Batch, weight: FloatArray, n: FloatArray
) -> FloatArray:
    """Gradient [R, P + 2] of every run's loss -(1/n) sum_i w_i log pi(o_i) at ratio 1 (on-policy).

    w_i = A_i / D_i is the variant's per-token weight (`toyrl.objective`); the token scores of a
    response are summed in closed form (`toyrl.policy.response_scores`), so each response costs O(1).
    """
    score_approach, score_stop = response_scores(theta, prompt_index, batch)
    weighted_stop = weight * score_stop
    grad = np.zeros_like(theta)
    prompt_grad = -(weight * score_approach).sum(axis=-1) / n[:, None]
    grad[np.arange(len(grad))[:, None], prompt_index] = prompt_grad
    grad[:, -2] = -np.where(batch.right, weighted_stop, 0.0).sum(axis=(1, 2)) / n
    grad[:, -1] = -np.where(batch.right, 0.0, weighted_stop).sum(axis=(1, 2)) / n
    return grad


def clipped_gradient(
    theta: FloatArray,
    theta_old: FloatArray,
    theta_ref: FloatArray,
    prompt_index: NDArray[np.intp],
    batch: Batch,
    weights: Weights,
    plan: Plan,
) -> tuple[FloatArray, FloatArray]:
    """(loss gradient [R, P + 2], clip fraction [R]) of PPO's clipped objective minus beta k3.

    Per token: min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A) - beta k3(ref, theta),
    aggregated with the variant's 1/(D n). A response has three kinds of token (approach, non-stop,
    stop), and all tokens of a kind share one ratio rho = pi_theta / pi_old, so clipping and the KL
    term stay closed-form: the objective's gradient on a token is (A u rho + beta (pi_ref/pi - 1))
    grad log pi, u = 0 where the clip is active (rho > 1 + epsilon_high with A > 0, rho < 1 - epsilon
    with A < 0). The clip fraction is over the included tokens, as TRL counts it.
    """
    psi = prompt_logits(theta[:, :-2], prompt_index)[..., None]
    phi_right, phi_wrong = theta[:, -2], theta[:, -1]
    grad = np.zeros_like(theta)
    advantage = weights.advantage
    scale = (
        np.where(
            weights.included,
            np.divide(1.0, weights.denominator, out=np.zeros(advantage.shape), where=weights.denominator > 0),
            0.0,
        )
        / np.asarray(weights.n)[:, None, None]
    )
    non_stop = (batch.length - batch.stopped).astype(np.float64)
    counts = {
        "approach": np.ones(advantage.shape),
        "non_stop": non_stop,
        "stop": batch.stopped.astype(np.float64),
    }

    def token_log_prob(point: FloatArray, kind: str) -> FloatArray:
        p = prompt_logits(point[:, :-2], prompt_index)[..., None]
        phi = np.where(batch.right, point[:, -2, None, None], point[:, -1, None, None])
        if kind == "approach":
            return np.where(batch.right, log_expit(p), log_expit(-p))
        return log_expit(phi) if kind == "stop" else log_expit(-phi)

    low, high = plan.clip_low[:, None, None], plan.clip_high[:, None, None]
    beta = plan.beta[:, None, None]
    stop_prob = expit(np.where(batch.right, phi_right[:, None, None], phi_wrong[:, None, None]))
    scores = {"approach": batch.right - expit(psi), "non_stop": -stop_prob, "stop": 1 - stop_prob}
    clipped_tokens = np.zeros(advantage.shape)
    coefficient = {}
    for kind in counts:
        log_prob = token_log_prob(theta, kind)
        ratio = np.exp(log_prob - token_log_prob(theta_old, kind))
        clipped = ((advantage > 0) & (ratio > 1 + high)) | ((advantage < 0) & (ratio < 1 - low))
        kl_term = beta * (np.exp(token_log_prob(theta_ref, kind) - log_prob) - 1)
        coefficient[kind] = scale * (np.where(clipped, 0.0, advantage * ratio) + kl_term) * counts[kind]
        clipped_tokens += np.where(weights.included & clipped, counts[kind], 0.0)
    prompt_grad = -(coefficient["approach"] * scores["approach"]).sum(axis=-1)
    grad[np.arange(len(grad))[:, None], prompt_index] = prompt_grad
    stop_grad = coefficient["non_stop"] * scores["non_stop"] + coefficient["stop"] * scores["stop"]
    grad[:, -2] = -np.where(batch.right, stop_grad, 0.0).sum(axis=(1, 2))
    grad[:, -1] = -np.where(batch.right, 0.0, stop_grad).sum(axis=(1, 2))
    tokens = np.where(weights.included, batch.length + 1.0, 0.0).sum(axis=(1, 2))
    return grad, np.divide(
        clipped_tokens.sum(axis=(1, 2)), tokens, out=np.zeros(len(tokens)), where=tokens > 0
    )


class Adam:
    """Adam (Kingma and Ba, bias-corrected) over every run's parameters, with a step count per run.

    The bias corrections 1 - beta^t are Python floats computed per distinct step count, so a run's
    numbers do not depend on how many runs share the array, and nothing is sized by the number of
    updates a run will take.
    """

    def __init__(self, theta: FloatArray, config: Config) -> None:
        self.config = config
        self.moment1, self.moment2 = np.zeros_like(theta), np.zeros_like(theta)
        self.count = np.zeros(theta.shape[0], dtype=np.int64)

    def _corrections(self, counts: NDArray[np.int64]) -> tuple[FloatArray, FloatArray]:
        """(1 - beta1^t, 1 - beta2^t) [rows, 1] for each row's step count t."""
        b1, b2 = self.config.adam_beta1, self.config.adam_beta2
        if counts[0] == counts[-1] and (counts == counts[0]).all():  # the common case: one count
            t = int(counts[0])
            return np.full((len(counts), 1), 1 - b1**t), np.full((len(counts), 1), 1 - b2**t)
        unique, inverse = np.unique(counts, return_inverse=True)
        first = np.array([1 - b1 ** int(t) for t in unique])[inverse]
        second = np.array([1 - b2 ** int(t) for t in unique])[inverse]
        return first[:, None], second[:, None]

    def step(self, theta: FloatArray, grad: FloatArray, active: NDArray[np.bool_]) -> None:
        """One step on the `active` runs' theta, in place."""
        c = self.config
        rows: NDArray[np.intp] | slice = slice(None) if active.all() else np.flatnonzero(active)
        self.count[rows] += 1
        m = self.moment1[rows] * c.adam_beta1 + (1 - c.adam_beta1) * grad[rows]
        v = self.moment2[rows] * c.adam_beta2 + (1 - c.adam_beta2) * grad[rows] ** 2
        self.moment1[rows], self.moment2[rows] = m, v
        correction1, correction2 = self._corrections(self.count[rows])
        theta[rows] -= c.lr * (m / correction1) / (np.sqrt(v / correction2) + c.adam_eps)


def batch_statistics(length: FloatArray, rewards: FloatArray, grad: FloatArray) -> dict[str, FloatArray]:
    """The sampled batches' own accuracy and lengths [...]; NaN where a batch has no such response.

    length, rewards [..., B, G], grad [..., P + 2], for any leading axes (runs, or steps and runs).
    Rewards are 0/1 and lengths whole numbers, so every sum here is exact in float64: the means
    are derived from three sums (fewer passes over the batch than one reduction per statistic).
    """
    responses = rewards.shape[-2] * rewards.shape[-1]
    group_correct = rewards.sum(axis=-1)
    n_correct = group_correct.sum(axis=-1)
    n_incorrect = responses - n_correct
    length_sum = length.sum(axis=(-2, -1))
    correct_length_sum = (length * rewards).sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        length_correct = correct_length_sum / n_correct
        length_incorrect = (length_sum - correct_length_sum) / n_incorrect
    uniform = (group_correct == 0) | (group_correct == rewards.shape[-1])
    return {
        "batch_accuracy": n_correct / responses,
        "batch_length_mean": length_sum / responses,
        "batch_length_correct": np.where(n_correct > 0, length_correct, np.nan),
        "batch_length_incorrect": np.where(n_incorrect > 0, length_incorrect, np.nan),
        "zero_variance_fraction": uniform.mean(axis=-1),
        "grad_norm": np.linalg.norm(grad, axis=-1),
    }


def run_streams(seed: int) -> list[np.random.Generator]:
    """The run's four independent streams: init, prompt choice, approach, ramble length."""
    return [np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(4)]


def noise_block_steps(config: Config, n_runs: int) -> int:
    """Steps of noise drawn (and of metrics evaluated) at a time: NOISE_BLOCK_STEPS, or fewer when a
    step's arrays are large (many prompts, responses or runs), so that each stays near VALUES_PER_BLOCK."""
    per_step = n_runs * (config.prompts + config.batch_prompts * config.group_size)
    return max(1, min(NOISE_BLOCK_STEPS, VALUES_PER_BLOCK // per_step))


def step_noise(
    streams: list[list[np.random.Generator]], config: Config
) -> Iterator[tuple[NDArray[np.intp], FloatArray, FloatArray]]:
    """Each step's (prompt_index [R, B], approach_uniform, length_exponential [R, B, G]).

    Drawn `noise_block_steps` steps at a time per run and stream, so memory stays bounded; a
    stream's draws follow one another whatever their blocks, so a run's numbers do not depend on
    the block size.
    """
    shape = (config.batch_prompts, config.group_size)
    block = noise_block_steps(config, len(streams))
    for start in range(0, config.steps + 1, block):
        n = min(block, config.steps + 1 - start)
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
    runs: Sequence[tuple[Variant, int]],
    exact: bool = False,
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> pd.DataFrame:
    """Train every (variant, seed) of `runs` together; a tidy frame of `COLUMNS`, (steps + 1) rows a run.

    Each step samples a batch from theta_t and takes the variant's `num_iterations` Adam updates on
    it: the first on-policy (ratio 1), the later ones on PPO's clipped objective with exact ratios.
    With `exact`, Adam is driven by the exact expected update E[g] (`toyrl.expected`) instead: the
    mean-field trajectory, without noise (batch columns are NaN; one update per step).
    `on_step(step, theta)` is called with every policy state theta_t [R, P + 2] (do not modify it).
    """
    n_runs, steps = len(runs), config.steps
    plan = Plan.of([variant for variant, _ in runs])
    if exact:
        check_exact_supported(plan.variants)
    streams = [run_streams(seed) for _, seed in runs]
    theta = np.stack([initial_theta(config, init) for init, *_ in streams])
    theta_ref = theta.copy()  # the KL term's reference: the initial policy
    adam = Adam(theta, config)
    record = {name: np.empty((n_runs, steps + 1)) for name in EXACT_COLUMNS + BATCH_COLUMNS}
    noise = None if exact else step_noise(streams, config)
    kl_runs = plan.beta > 0
    every_run = np.ones(n_runs, dtype=bool)
    # Exact metrics depend on theta alone, batch statistics on the batch and gradient alone: both
    # are evaluated for a block of steps at once, from these buffers.
    block = noise_block_steps(config, n_runs)
    states, grads = np.empty((block, *theta.shape)), np.empty((block, *theta.shape))
    shape = (block, n_runs, config.batch_prompts, config.group_size)
    lengths, all_rewards = np.zeros(shape), np.zeros(shape)
    clip_fractions = np.zeros((block, n_runs))
    for step in range(steps + 1):
        if on_step is not None:
            on_step(step, theta)
        slot = step % block
        states[slot] = theta
        if noise is None:
            grad = -expected_update(theta, config, plan.variants)
            grads[slot] = grad
            if step < steps:
                adam.step(theta, grad, every_run)
        else:
            prompt_index, approach, exponential = next(noise)
            batch = sample_batch(theta, prompt_index, approach, exponential, config.cap)
            rewards = batch.rewards(config.min_length)
            weights = plan.weights(batch, rewards, config)
            grad = loss_gradient(theta, prompt_index, batch, weights.weight, np.asarray(weights.n))
            if kl_runs.any():  # the KL term acts from the first update on (theta is theta_old here)
                kl_grad, _ = clipped_gradient(theta, theta, theta_ref, prompt_index, batch, weights, plan)
                grad = np.where(kl_runs[:, None], kl_grad, grad)
            grads[slot], lengths[slot], all_rewards[slot] = grad, batch.length, rewards
            clip_sum = np.zeros(n_runs)
            if step < steps:
                theta_old = theta.copy()
                adam.step(theta, grad, every_run)
                for iteration in range(2, int(plan.iterations.max()) + 1):
                    active = plan.iterations >= iteration
                    later, clipped = clipped_gradient(
                        theta, theta_old, theta_ref, prompt_index, batch, weights, plan
                    )
                    clip_sum += np.where(active, clipped, 0.0)
                    adam.step(theta, later, active)
            clip_fractions[slot] = clip_sum / plan.iterations
        if slot == block - 1 or step == steps:
            first, used = step - slot, slot + 1
            metrics = exact_metrics(states[:used], config.cap, config.min_length)
            metrics |= batch_statistics(lengths[:used], all_rewards[:used], grads[:used])
            metrics["clip_fraction"] = clip_fractions[:used]
            if noise is None:  # mean-field runs draw no batch
                metrics |= {name: np.full((used, n_runs), np.nan) for name in BATCH_COLUMNS[:-2]}
            for name, values in metrics.items():
                record[name][:, first : step + 1] = values.T
    frame = pd.DataFrame(
        {
            "variant": np.repeat([variant.name for variant, _ in runs], steps + 1),
            "seed": np.repeat([seed for _, seed in runs], steps + 1),
            "step": np.tile(np.arange(steps + 1), n_runs),
        }
    )
    for name, values in record.items():
        frame[name] = values.ravel()
    return frame


def runs_per_chunk(config: Config, exact: bool = False) -> int:
    """Runs simulated together: RUNS_PER_CHUNK, or fewer when a run's step is large (its sampled
    responses, or for mean-field runs its exact sums over the cap's lengths), so that a chunk's
    arrays stay near VALUES_PER_CHUNK values per step. Chunking changes no number."""
    per_run = config.cap if exact else config.batch_prompts * config.group_size
    return max(1, min(RUNS_PER_CHUNK, VALUES_PER_CHUNK // per_run))


def estimated_cost(
    config: Config, variants: Sequence[Variant], seeds: int, exact: bool = False
) -> tuple[float, float, float]:
    """A rough (core-seconds of simulation, seconds to write the CSV, bytes of the results table) of
    running every variant with `seeds` seeds. Per run-step costs measured on a 2-core x86-64
    machine: a sampled update about 5 us plus 0.15 us a response, each later PPO epoch about three
    updates, a mean-field step 100 us plus 0.1 us per cap token; writing about 32 us a row (floats
    formatted to round-trip, in one process); the table's float64 columns twice over (the chunks and
    their join)."""
    run_steps = seeds * (config.steps + 1)
    if exact:
        per_run_step = len(variants) * (100e-6 + 0.1e-6 * config.cap)
    else:
        update = 5e-6 + 0.15e-6 * config.batch_prompts * config.group_size
        per_run_step = sum(update * (1 + 3 * (v.num_iterations - 1)) for v in variants)
    rows = run_steps * len(variants)
    return run_steps * per_run_step, 32e-6 * rows, 2.0 * 8 * len(COLUMNS) * rows


_watched_parent: int | None = None


def die_with_parent(parent: int | None = None) -> None:
    """In a worker process: exit as soon as the process that started it (pid `parent`; by default
    the current parent) is gone.

    A parent killed by SIGKILL cannot stop its workers; without this they would compute on (and
    hold the terminal's output open) for minutes. A daemon thread polls the parent's pid twice a
    second; started once per process. The pid is best passed from the parent itself: a worker that
    starts after its parent died would otherwise watch the process it was handed to.
    """
    global _watched_parent
    parent = os.getppid() if parent is None else parent
    if _watched_parent == parent:
        return
    _watched_parent = parent

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="toyrl-parent-watch", daemon=True).start()


def simulate_in_worker(
    config: Config, runs: Sequence[tuple[Variant, int]], exact: bool = False
) -> pd.DataFrame:
    """`simulate` in a worker process that ends with its parent (see `die_with_parent`)."""
    die_with_parent()
    return simulate(config, runs, exact)


def check_experiment(config: Config, variants: Sequence[Variant], seeds: Sequence[int], n_jobs: int) -> int:
    """InvalidInput unless the experiment fits its bounds (seeds, workers, rows of the table, updates
    of a run), checked before any work; returns the worker processes it will use (`worker_count`)."""
    if not seeds or min(seeds) < 0:
        raise ConfigError("seeds", "must be a non-empty list of integers >= 0", list(seeds))
    check_n_jobs(n_jobs)
    n_runs = len(variants) * len(seeds)
    if n_runs * (config.steps + 1) > MAX_ROWS:
        raise InvalidInput(
            f"{n_runs:,} runs x {config.steps + 1:,} steps would be {n_runs * (config.steps + 1):,} rows; "
            f"the limit is {MAX_ROWS:,}: use fewer variants, seeds or steps (or toyrl sweep)"
        )
    updates = config.steps * max(variant.num_iterations for variant in variants)
    if updates > MAX_UPDATES:
        raise InvalidInput(
            f"{config.steps:,} steps x num_iterations would be {updates:,} updates per run; "
            f"the limit is {MAX_UPDATES:,}"
        )
    return worker_count(n_jobs, n_runs)


def check_n_jobs(n_jobs: int) -> None:
    """ConfigError unless `n_jobs` is -1 (every core) or a positive number of workers."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0 or n_jobs < -1:
        raise ConfigError("n_jobs", "must be -1 (all cores) or an integer >= 1", n_jobs)


def worker_count(n_jobs: int, tasks: int) -> int:
    """Worker processes for `tasks` pieces of work asked to run on `n_jobs` (-1: every core): never
    more than the cores or the tasks, which would only add start-up time and memory."""
    return max(1, min(effective_n_jobs(n_jobs), os.cpu_count() or 1, tasks))


def run_experiment(
    config: Config,
    variants: Sequence[Variant | str],
    seeds: Sequence[int],
    n_jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    exact: bool = False,
) -> pd.DataFrame:
    """Every (variant, seed) pair, variant-major, spread over `n_jobs` joblib workers (-1: all cores;
    never more than the cores or the runs).

    The numbers of a run do not depend on `n_jobs` or on the chunking (see the module docstring).
    `exact`: the mean-field trajectories (see `simulate`).
    `progress(done, total)` is called as chunks of runs finish.
    """
    resolved = [v if isinstance(v, Variant) else parse_variant(v, ALL_VARIANTS) for v in variants]
    workers = check_experiment(config, resolved, seeds, n_jobs)
    runs = [(variant, seed) for variant in resolved for seed in seeds]
    n_chunks = max(math.ceil(len(runs) / runs_per_chunk(config, exact)), workers)
    chunks = [list(chunk) for chunk in np.array_split(np.arange(len(runs)), n_chunks)]
    jobs = ([runs[i] for i in chunk] for chunk in chunks)
    if workers == 1:
        results = (simulate(config, job, exact) for job in jobs)
    else:
        # Each worker watches its parent from the moment it starts, idle or busy.
        with parallel_config(backend="loky", initializer=die_with_parent, initargs=(os.getpid(),)):
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
