"""toyrl's side of the trainer conformance suite: toy batches as a trainer's tensors, and what
toyrl's own core says each token's advantage and gradient weight are.

A toy batch is one run of the ramble policy (`toyrl.policy`): B prompts, G responses each, the
G responses of a prompt adjacent (prompt-major, as every trainer lays out a group). Response i
has |o_i| = L_i + 1 tokens: position 0 is the approach token, positions 1..L_i the ramble, the
last of them the stop token when the response stopped (a truncated one has L_i = cap ramble
tokens and no stop token). Tensors are [N, T] with N = B G and T = cap + 1, padded on the right.

Everything toyrl-side goes through the package's own core (`Plan` for rewards, selection,
advantages and normalisers; `stages.weights` for the on-policy weight; `Epoch.coefficients` for
an update at ratios other than 1), never a restatement of it, so a test that compares these with a
trainer's installed code checks toyrl's core against the trainer.

The gradient weight of a token is d loss / d logp(token): what autograd gives on a leaf tensor of
per-token log-probabilities fed to a trainer's loss. toyrl's loss gradient is
-sum over tokens of c d log pi / d theta, so its weight is -c, per token kind:
- the first (on-policy) update: -w_i / n for every token of response i (w_i = A_i / D_i);
- a later update at theta: -(coefficient of the kind) / (tokens of that kind) for each token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toyrl.config import Config
from toyrl.objective import Variant
from toyrl.policy import Batch, OwnLogits, log_expit, sample_batch
from toyrl.stages import weights
from toyrl.train import Epoch, Part, Plan

# The suite's toy configuration: T = cap + 1 = 31 token positions, and length_norm = T, the constant a
# trainer's Dr. GRPO loss divides by when its maximum length is T (TRL's max_completion_length,
# verl's default loss_scale_factor, the response width; oat's generate_max_length).
CONFIG = Config(
    prompts=8,
    batch_prompts=4,
    group_size=4,
    cap=30,
    min_length=5,
    stop_prob_right=1 / 12,
    stop_prob_wrong=1 / 20,
    length_norm=31.0,
)


@dataclass(frozen=True)
class ToyBatch:
    """One run's sampled (or hand-made) batch, at the sampling policy theta_old [1, P + 2]."""

    config: Config
    theta_old: np.ndarray
    batch: Batch

    @property
    def shape(self) -> tuple[int, int]:
        """(B, G)."""
        _, prompts, group = self.batch.right.shape
        return prompts, group

    @property
    def responses(self) -> int:
        prompts, group = self.shape
        return prompts * group

    @property
    def width(self) -> int:
        """T = cap + 1 token positions."""
        return self.config.cap + 1

    def rewards(self, variant: Variant) -> np.ndarray:
        """The variant's rewards [N], prompt-major (toyrl's reward stage)."""
        return Plan.of([variant]).rewards(self.batch, self.config).reshape(-1)

    @property
    def ramble(self) -> np.ndarray:
        """L_i [N], ramble tokens."""
        return self.batch.length.reshape(-1)

    @property
    def stopped(self) -> np.ndarray:
        """[N] bool: the response ended with its stop token (not truncated at the cap)."""
        return self.batch.stopped.reshape(-1)

    @property
    def mask(self) -> np.ndarray:
        """[N, T] bool: the response's tokens (approach and ramble), False at padding."""
        return np.arange(self.width)[None, :] <= self.ramble[:, None]

    def kinds(self) -> np.ndarray:
        """[N, T] int: 0 approach token, 1 non-stop ramble token, 2 stop token, -1 padding."""
        position = np.arange(self.width)[None, :]
        kind = np.where(position == 0, 0, 1)
        kind = np.where(self.stopped[:, None] & (position == self.ramble[:, None]), 2, kind)
        return np.where(self.mask, kind, -1)

    def logp(self, theta: np.ndarray | None = None) -> np.ndarray:
        """[N, T] per-token log pi under theta [1, P + 2] (default theta_old), 0 at padding."""
        theta = self.theta_old if theta is None else theta
        group = self.shape[1]
        right = self.batch.right.reshape(-1)
        psi = np.repeat(theta[0, self.batch.prompt_index[0]], group)
        phi = np.where(right, theta[0, -2], theta[0, -1])
        approach = np.where(right, log_expit(psi), log_expit(-psi))[:, None]
        kinds = self.kinds()
        non_stop, stop = log_expit(-phi)[:, None], log_expit(phi)[:, None]
        return np.where(kinds == 0, approach, np.where(kinds == 1, non_stop, np.where(kinds == 2, stop, 0.0)))


def sampled(seed: int, config: Config, theta: np.ndarray | None = None) -> ToyBatch:
    """A batch sampled from the ramble policy theta [1, P + 2] (default: random prompt logits and
    the configuration's stop probabilities), with prompts and noise from `seed`."""
    rng = np.random.default_rng(seed)
    if theta is None:
        psi = rng.normal(config.prompt_logit_mean, max(config.prompt_logit_std, 1.0), size=config.prompts)
        phi = np.log([config.stop_prob_right, config.stop_prob_wrong]) - np.log1p(
            -np.array([config.stop_prob_right, config.stop_prob_wrong])
        )
        theta = np.concatenate([psi, phi])[None]
    prompt_index = rng.permutation(config.prompts)[: config.batch_prompts][None]
    shape = (1, config.batch_prompts, config.group_size)
    batch = sample_batch(theta, prompt_index, rng.random(shape), rng.standard_exponential(shape), config.cap)
    return ToyBatch(config, theta, batch)


def made(
    right: np.ndarray,
    ramble: np.ndarray,
    stopped: np.ndarray,
    config: Config,
    theta: np.ndarray | None = None,
) -> ToyBatch:
    """A hand-made batch: `right`, `ramble` (L) and `stopped`, [B, G] each (rewards follow from
    them: right, stopped and L >= min_length); prompts 0..B-1 of theta (default all logits 0.3,
    stop logits from the configuration)."""
    right, ramble, stopped = np.asarray(right, bool), np.asarray(ramble, np.int64), np.asarray(stopped, bool)
    if ((ramble < 1) | (ramble > config.cap) | (~stopped & (ramble != config.cap))).any():
        raise ValueError("ramble lengths are 1..cap, and a response that did not stop has L = cap")
    prompts = right.shape[0]
    if theta is None:
        stops = np.array([config.stop_prob_right, config.stop_prob_wrong])
        theta = np.concatenate([np.full(config.prompts, 0.3), np.log(stops) - np.log1p(-stops)])[None]
    batch = Batch(np.arange(prompts)[None], right[None], ramble[None], stopped[None])
    return ToyBatch(config, theta, batch)


def moved(toy: ToyBatch, seed: int, scale: float = 0.3) -> np.ndarray:
    """A policy theta [1, P + 2] near theta_old (every logit moved by Normal(0, scale)): ratios != 1."""
    return toy.theta_old + np.random.default_rng(seed).normal(0.0, scale, size=toy.theta_old.shape)


def stop_pushed(toy: ToyBatch, seed: int, shift: float = 3.5, scale: float = 1.0) -> np.ndarray:
    """`moved`'s policy but for the right-approach stop logit, theta_old's + `shift`: the stop tokens
    of right responses several times likelier (at the configuration's stop probability 1/12, ratio
    9: above 5 on tokens with A > 0, where a cap such as CISPO's 1 + 4 acts) and their other ramble
    tokens less likely (ratio 0.27)."""
    theta = moved(toy, seed, scale)
    theta[0, -2] = toy.theta_old[0, -2] + shift  # the stop logit of right-approach responses (logp's phi)
    return theta


def advantages(variant: Variant, toy: ToyBatch) -> np.ndarray:
    """toyrl's advantages [N] of the variant on the batch (its advantage stage, through `Plan`)."""
    plan = Plan.of([variant])
    rewards = plan.rewards(toy.batch, toy.config)
    tokens = toy.batch.token_count(toy.config.approach_tokens)
    return plan.advantages(rewards, toy.config, tokens).reshape(-1)


def token_weights(
    variant: Variant,
    toy: ToyBatch,
    theta: np.ndarray | None = None,
    theta_ref: np.ndarray | None = None,
    update: int = 0,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """d loss / d logp of every token [N, T] (0 at padding) as toyrl's core computes it.

    theta None: the first update of the batch, on-policy (ratio 1; with a KL term, the objective
    at ratio 1). Otherwise a later update at the policy theta [1, P + 2] (PPO's ratios and clip
    against theta_old; the KL term, in the loss or in the reward, against theta_ref, default
    theta_old). `update` is the index of
    the optimiser update of the variant's schedule (its mini-batch: tokens outside it weigh 0);
    `order` [N] the responses (prompt-major indices) in the order the update's epoch takes them,
    as a trainer's shuffle drew it (None: the batch's order), through `Plan.parts`.
    """
    plan = Plan.of([variant])
    config, batch = toy.config, toy.batch
    rewards = plan.rewards(batch, config)
    included = plan.included(batch, rewards)
    advantage = plan.advantages(rewards, config, batch.token_count(config.approach_tokens))
    if plan.whole_batch:
        denominator, n = plan.denominators(batch, included, config)
    else:
        positions = None
        if order is not None:
            ranks = np.empty(toy.responses, dtype=np.intp)
            ranks[np.asarray(order)] = np.arange(toy.responses)
            positions = ranks.reshape(1, 1, *toy.shape)
        parts = plan.parts(update, positions, batch.token_count(config.approach_tokens))
        denominator, n = plan.denominators(batch, included, config, parts)
        included = included & parts[0]
    kinds = toy.kinds()
    if theta is None and variant.kl.beta == 0:
        weight = -(weights(advantage, denominator, included) / n[:, None, None]).reshape(-1)
        return np.where(toy.mask, weight[:, None], 0.0)
    own = OwnLogits.of(batch, toy.theta_old.shape[-1])
    reference = toy.theta_old if theta_ref is None else theta_ref
    ref = own.table(reference) if variant.kl.beta > 0 else None
    part = Part.of(own.batch, included, denominator, n)
    epoch = Epoch.of(own, advantage, own.table(toy.theta_old), ref, plan.kl)
    at = toy.theta_old if theta is None else theta
    coefficients, _, _ = epoch.coefficients(at, plan, part)
    per_kind = np.stack([coefficients.approach, coefficients.non_stop, coefficients.stop]).reshape(3, -1)
    counts = epoch.counts.reshape(3, -1)
    per_token = np.divide(per_kind, counts, out=np.zeros(per_kind.shape), where=counts > 0)
    out = np.zeros(kinds.shape)
    for kind in range(3):
        out = np.where(kinds == kind, -per_token[kind][:, None], out)
    return out


def kind_sums(toy: ToyBatch, weights: np.ndarray) -> np.ndarray:
    """Per response, the sums of its token weights [N, T] over each kind of token [N, 3] (approach,
    non-stop, stop). Tokens of a kind share one score, so these sums are all of a weighting that the
    policy's gradient sees; where the weights vary within a kind (a KL reward's per-token returns),
    they are what toyrl's closed form has, and what a comparison with a trainer can check."""
    kinds = toy.kinds()
    return np.stack([np.where(kinds == kind, weights, 0.0).sum(axis=1) for kind in range(3)], axis=1)


def relative_difference(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / max |expected| (0 when both are all zero): the suite's measure, on
    the scale of the weights so that a clipped (zero) token does not divide by zero."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        raise ValueError(f"shapes differ: {got.shape} vs {expected.shape}")
    scale = np.abs(expected).max()
    difference = np.abs(got - expected).max()
    return float(difference / scale) if scale > 0 else float(difference)
