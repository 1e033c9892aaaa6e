"""OpenRLHF (openrlhf==0.11.2; 0.10.3 and 0.6.4 where built) against toyrl's `openrlhf_*` presets,
and every release toyrl models (0.6.0 to 0.11.2) against its own wheel.

Toy batches go through the installed trainer's own steps, in the order its PPO loop runs them:
rollout samples (one `Experience` per response, as `SamplesGenerator` makes them: a one-token
prompt, the response, `action_mask` over the response) -> `RemoteExperienceMaker.
split_rollout_samples` (micro rollout batches) -> `compute_advantages_and_returns` (the advantage
estimators, the KL-in-reward shaping, the per-token returns and whitening) -> `NaiveReplayBuffer.
append` -> `ActorPPOTrainer.ppo_train` itself: its DataLoader over the buffer (shuffle=True unless
tensor / sequence parallel or dynamic batching, drop_last, iterated anew each of `max_epochs`
epochs), `iter_grad_accum_global_norm` (windows of gas micro-batches, each given the window's
loss normaliser) and `training_step` with its `PolicyLoss`. The methods are called on minimal
stand-in `self` objects; the actor's forward pass is a leaf tensor of per-token log-probabilities
(float64) whose rows are named by each sequence's prompt token (the response's index + 1): that
token is the row index the samples carry through the buffer and the DataLoader, so the recorded
rows of each forward call are the DataLoader's own order (its RNG is torch's global one, seeded
before the call; nothing here redraws it). Autograd gives d loss / d logp per token and optimiser
step, compared with toyrl's (`toy.token_weights(spec, batch, theta, update=u, order=that epoch's
order)`); a later step's loss is evaluated at the same moved theta, since toyrl compares losses at
a given policy (no optimiser runs). Two data-parallel ranks run as two forked processes joined by
torch.distributed over gloo, each with its contiguous chunk of the micro rollout batches (as
`ActorModelGroup.async_run_method_batch` deals them out) and the same seed (DeepspeedStrategy's
`transformers.set_seed(train.seed)` on every rank).

Restated here, as glue only: DeepSpeed's engine (`AccumulatingStrategy`), which scales every
micro-batch loss by 1 / gradient_accumulation_steps before backward (`_optimizer_step_loss_norm`
in openrlhf/utils/loss_utils.py pre-compensates exactly that), steps the optimiser at each gas-th
micro-batch of its own count (across epochs) and averages the gradient over the data-parallel
ranks; DeepspeedStrategy's `accumulated_gradient` formula and its `is_rank_0` / metric
`all_reduce` at one rank; what `make_experience` attaches from the Ray model forwards (the actor's
log-probs and `compute_approx_kl` against the reference's); the `PolicyLoss` arguments and the
buffer's fields that `ActorPPOTrainer.__init__` sets (it needs CUDA and torch.distributed, so the
trainer is built without it); and, while ppo_train runs, `torch.cuda.current_device()` answering
"cpu" (the device it moves each micro-batch to) with no pinned memory.

What was found (0.11.2):
- The advantages of `group_norm`, `dr_grpo` and `rloo` are toyrl's `group_std_sample` (sample std,
  eps 1e-9), `none` and `rloo`, on every token of the response. `reinforce_baseline` then whitens
  the per-token returns over all the rollout's tokens (token-weighted mean, population variance,
  `var.clamp(min=1e-8).rsqrt()`, in float32): toyrl's `token_whiten` to float32 rounding.
  `--reward.clip_range` (default -10, 10) clamps the estimator's output, so a group_norm advantage
  above 10 (a lone success in a group of more than ~100) is cut to 10.
- The policy loss defaults to `--actor.loss_agg_mode token-mean`: the masked token sum divided by
  the optimiser step's token count (`aggregate_loss` with `batch_num_tokens`), toyrl `token_mean`.
  The other mode, `seq-mean-token-mean`, is toyrl's `seq_mean_token_mean` exactly (its
  `token_counts + 1e-8` is computed in float32 from the integer mask, where 1e-8 vanishes).
- Several micro-batches in one optimiser step give the step's whole-batch gradient (since 0.10.4,
  `iter_grad_accum_global_norm`; 0.10.3 divided each micro-batch by its own tokens, toyrl's
  per_micro_batch=true, which differs), exactly when the step's token count divides by
  gradient_accumulation_steps; otherwise the float32 `num_tokens / gas` rounds (a relative ~1e-8).
  The normaliser is summed over the window's micro-batches and all-reduced over the data-parallel
  ranks (times dp_size, which DeepSpeed's gradient average cancels): one token mean (or mean of
  response means, `global_batch_size`) over the whole step on every rank.
- train.batch_size < the rollout's samples: rollout / train.batch_size optimiser steps an epoch,
  each a consecutive part of the DataLoader's order, for max_epochs epochs, the order redrawn each
  epoch: toyrl's mini_batches = rollout / train.batch_size, micro_batches = gas, num_iterations =
  max_epochs, shuffle=epoch, in the recovered order; with tensor parallelism (or ring attention,
  or dynamic batching) the DataLoader does not shuffle: shuffle=none.
- The default KL (`--algo.kl.init_coef 0.01`, estimator k1, `use_loss` off) is a per-token penalty
  -0.01 (log pi_old - log pi_ref) added to the advantage after the group statistics and summed into
  each token's return: zero while the policy is the reference (the first rollout), a per-token
  change of the advantages afterwards; toyrl's KL (k3, in the loss) is not that. With a reference
  model the returns are float32 (`compute_approx_kl` is float32 and `compute_reward` casts to it).
- `--actor.dual_clip c` (off by default) is toyrl's ppo_clip dual_clip=c: for A < 0 the loss is
  -max(min(rho A, clip(rho) A), c A), no gradient where rho > c. OpenRLHF reports no dual-clip
  fraction (`ppo_clip_ratio` counts surr2 < surr1 only), so the tests show it acting by the same
  run without it.

Older releases (`bash scripts/conformance.sh openrlhf@0.10.3 openrlhf@0.6.4` builds them): the tests
follow the release they find, by its code (`installed`: its loss normaliser's scope).
- 0.10.3, the last release before `iter_grad_accum_global_norm`: the same ppo_train, advantages and
  PolicyLoss, but training_step calls `get_loss_batch_info` on each micro-batch, so its masked token
  sum is divided by its own tokens (all-reduced over the ranks' same-numbered micro-batches, times
  dp_size, which DeepSpeed's average cancels) and a step is the mean of its micro-batches' token
  means: toyrl's token_mean with per_micro_batch=true (`test_micro_batch_scope_*`; the step-scope
  token mean differs). It has no --actor.loss_agg_mode (new in 0.11.2: PolicyLoss keeps
  token_level_loss=True) and builds PolicyLoss with its vLLM IS-correction arguments
  (`policy_loss`). The tests of 0.11.2's step normaliser and of loss_agg_mode skip there
  (`step_scope`); every other test runs and agrees as in 0.11.2 (advantages, clip-low / clip-high,
  dual clip, the k1 KL in the reward).
- 0.6.4, the last release whose PolicyLoss is `masked_mean(loss, action_mask, dim=-1).mean()`: flat
  args and `ActorPPOTrainer.ppo_train_actor` / `training_step` (`test_legacy_*`). Each micro-batch's
  loss is the mean of its responses' token means and DeepSpeed's 1 / gas averages the micro-batches
  (all of micro_train_batch_size responses, by drop_last): toyrl's seq_mean_token_mean (per
  micro-batch, the same number as over the step); token_mean differs. PolicyLoss(eps_clip) has one
  symmetric clip and no dual clip. ActorPPOTrainer.fit whitens the advantages over the rollout's
  tokens (`NaiveReplayBuffer.normalize`, float32) for every estimator but group_norm and dr_grpo, so
  rloo's, G / (G - 1) times the centred reward, come out as token_whiten (0.11.2's rloo is not
  whitened). Restated for it, as plumbing (`legacy_rollout`, `legacy_run`): the micro rollout
  batches of `Samples` that generation makes and the `Experience` that make_experience builds from
  the models' forwards (no reference model: kl 0), fit()'s normalize condition, "cuda" as the CPU
  (`cuda_is_the_cpu`), the left-padded actor forward (`LeftPaddedLeafActor`), the fields
  BasePPOTrainer.__init__ sets; ppo_train's Ray and torch.distributed calls around ppo_train_actor
  are not made. Two names its modules import are stood in for by `legacy_standins`.

Every release toyrl models (toyrl/trainers/openrlhf.py's RELEASES): the default build downloads
each one's wheel (never installed) and the tests read it with `ast`, never running it: its
train_ppo_ray.py arguments against toyrl's table of that release (names, defaults, choices,
store_true; `test_each_release_s_settings_are_its_parser_s`), and its loss path against the
mapping (`test_each_release_s_loss_path_is_toyrl_s`): which estimators it whitens over the tokens,
whether its token mean is each response's, each micro-batch's or the optimiser step's, whether gspo
averages each sample's token mean, and what keeps the replay buffer's order. What runs is the
installed release's code only (0.11.2; 0.10.3 and 0.6.4 in their own builds).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import multiprocessing
import os
import runpy
import sys
import tempfile
import textwrap
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.conformance import toy
from tests.conformance.conftest import trainer_module, version_of
from tests.conformance.toy import CONFIG as toy_config
from toyrl.trainers.check import resolve
from toyrl.variants import parse_variant

DIST = "openrlhf"
CONFIG = toy_config  # its length_norm is unused: OpenRLHF has no constant-length aggregation
PRESETS = {
    "group_norm": "openrlhf_group_norm",
    "dr_grpo": "openrlhf_dr_grpo",
    "rloo": "openrlhf_rloo",
    "reinforce_baseline": "openrlhf_reinforce_baseline",
}
# The toyrl advantage stage that each estimator's code computes.
ADVANTAGE = {
    "group_norm": "advantage=group_std_sample,std_eps=1e-09",
    "dr_grpo": "advantage=none",
    "rloo": "advantage=rloo",
    "reinforce_baseline": "advantage=token_whiten",
}
# Matched to 1e-10. reinforce_baseline's whitening runs in float32 (`.float()` on the advantages
# before the token statistics), so it agrees with toyrl's token_whiten to float32 rounding only.
MATCHED = ("group_norm", "dr_grpo", "rloo")
FLOAT32 = 1e-6


def conform_float32(conform, setting: str, preset: str, difference: float) -> None:
    """reinforce_baseline: a known difference, and float32 rounding at most."""
    conform(DIST, setting, preset, difference, expected=False)
    assert difference < FLOAT32, f"{setting}: {difference:.3g} is more than float32 rounding"


def spec(estimator: str, aggregation: str = "token_mean", **extra: float | str) -> str:
    """The toyrl spec text that an estimator with an aggregation (and clip / KL / schedule
    settings) spells."""
    text = f"{ADVANTAGE[estimator]},aggregation={aggregation}"
    text += "".join(f",{key}={value}" for key, value in extra.items())
    return parse_variant(text).spec_text()


# --- the installed trainer ------------------------------------------------------------------

# How the installed release normalises its policy loss, read from its code (not its version number):
STEP = "step"  # >= 0.10.4: iter_grad_accum_global_norm hands every micro-batch the step's totals
MICRO_BATCH = "micro-batch"  # 0.10.3: training_step's get_loss_batch_info, each micro-batch's own
RESPONSE = "response"  # 0.6.4: PolicyLoss is the mean of the micro-batch's per-response token means


@pytest.fixture(scope="module")
def installed() -> SimpleNamespace:
    """The installed release: its version and its loss's normaliser scope (`STEP`, `MICRO_BATCH`
    with 0.10.3's hierarchical args, `RESPONSE` with 0.6.4's flat-args trainer, None for a layout
    these tests do not know). Skips, or fails under TOYRL_CONFORMANCE=1, when OpenRLHF is not
    installed."""
    loss = trainer_module("openrlhf.models.loss", DIST)
    hierarchical = importlib.util.find_spec("openrlhf.utils.config") is not None
    loss_utils = importlib.util.find_spec("openrlhf.utils.loss_utils") is not None
    scope = None
    if hierarchical and loss_utils:
        module = trainer_module("openrlhf.utils.loss_utils", DIST)
        scope = STEP if hasattr(module, "iter_grad_accum_global_norm") else MICRO_BATCH
    elif not hierarchical and "token_level_loss" not in inspect.signature(loss.PolicyLoss).parameters:
        scope = RESPONSE
    return SimpleNamespace(version=version_of(DIST), scope=scope)


@pytest.fixture(scope="module")
def orl(installed: SimpleNamespace) -> SimpleNamespace:
    """The installed OpenRLHF modules the tests call, in a release with the hierarchical args and
    `ActorPPOTrainer.ppo_train(kl_ctl)` (0.11.2, 0.10.3); skips in 0.6.4 (`legacy`)."""
    if installed.scope not in (STEP, MICRO_BATCH):
        layout = (
            "has the flat-args trainer of 0.6.x (test_legacy_* test 0.6.4)"
            if installed.scope == RESPONSE
            else "has a trainer these tests do not know (they know 0.11.2, 0.10.3 and 0.6.4)"
        )
        pytest.skip(f"openrlhf {installed.version} {layout}")
    names = {
        "torch": "torch",
        "loss": "openrlhf.models.loss",
        "utils": "openrlhf.models.utils",
        "maker": "openrlhf.trainer.ppo_utils.experience_maker",
        "experience": "openrlhf.trainer.ppo_utils.experience",
        "replay": "openrlhf.trainer.ppo_utils.replay_buffer",
        "kl": "openrlhf.trainer.ppo_utils.kl_controller",
        "actor": "openrlhf.trainer.ray.ppo_actor",
        "loss_utils": "openrlhf.utils.loss_utils",
        "config": "openrlhf.utils.config",
    }
    modules: dict[str, ModuleType] = {key: trainer_module(name, DIST) for key, name in names.items()}
    return SimpleNamespace(**modules, version=installed.version, scope=installed.scope)


@pytest.fixture
def step_scope(orl: SimpleNamespace) -> None:
    """Marks a test of 0.11.2's optimiser-step normaliser or of its --actor.loss_agg_mode: skips in
    a release without them (0.10.3, whose own normaliser test_micro_batch_scope_* test)."""
    if orl.scope != STEP:
        pytest.skip(
            f"openrlhf {orl.version} normalises each micro-batch by its own tokens (the step's since "
            "0.10.4) and has no --actor.loss_agg_mode (since 0.11.2): test_micro_batch_scope_* test it"
        )


@pytest.fixture(scope="module")
def micro_batch_scope(orl: SimpleNamespace) -> SimpleNamespace:
    """OpenRLHF 0.10.3, whose training_step normalises each micro-batch by its own totals."""
    if orl.scope != MICRO_BATCH:
        pytest.skip(
            f"openrlhf {orl.version} hands every micro-batch the optimiser step's normaliser "
            "(iter_grad_accum_global_norm): test_mini_batches_token_mean tests it"
        )
    return orl


@dataclass(frozen=True)
class Settings:
    """One OpenRLHF run's settings (CLI defaults of openrlhf/cli/train_ppo_ray.py unless set)."""

    estimator: str
    loss_agg_mode: str = "token-mean"  # --actor.loss_agg_mode (default token-mean)
    eps_clip_low_high: tuple[float, float] = (0.2, 0.2)  # --actor.eps_clip 0.2 on both sides
    dual_clip: float | None = None  # --actor.dual_clip
    kl_coef: float = 0.0  # --algo.kl.init_coef (CLI default 0.01: `test_default_kl_*`)
    rollout_micro_batch_size: int = 1  # --rollout.micro_batch_size
    micro_train_batch_size: int | None = None  # --train.micro_batch_size (None: the whole batch)
    train_batch_size: int | None = None  # --train.batch_size, one optimiser step (None: the whole batch)
    max_epochs: int = 1  # --train.max_epochs (default 1)
    tensor_parallel_size: int = 1  # --ds.tensor_parallel_size (default 1)
    policy_loss_type: str = "ppo"  # --actor.policy_loss_type (ppo or gspo, >= 0.11)


def trainer_args(orl: SimpleNamespace, settings: Settings, group: int) -> Any:
    """The nested args namespace OpenRLHF's code reads, built by its own `hierarchize`."""
    flat = {
        "algo.advantage.estimator": settings.estimator,
        "algo.advantage.gamma": 1.0,
        "algo.advantage.lambd": 1.0,
        "algo.advantage.no_std_norm": False,
        "algo.advantage.is_correction_level": "off",
        "algo.advantage.is_correction_mode": "mask",
        "algo.advantage.is_correction_gating": "ratio",
        "algo.advantage.is_correction_threshold": [0.5, 5.0],
        "algo.kl.init_coef": settings.kl_coef,
        "algo.kl.use_loss": False,
        "algo.kl.estimator": "k1",
        "rollout.n_samples_per_prompt": group,
        "rollout.micro_batch_size": settings.rollout_micro_batch_size,
        "reward.clip_range": (-10, 10),
        "reward.overlong_buffer_len": None,
        "reward.stop_properly_penalty_coef": None,
        "train.dynamic_batch_enable": False,
        "train.max_epochs": settings.max_epochs,
        "ds.tensor_parallel_size": settings.tensor_parallel_size,
        "actor.eps_clip_low_high": settings.eps_clip_low_high,
        "actor.dual_clip": settings.dual_clip,
        "actor.loss_agg_mode": settings.loss_agg_mode,
        "actor.policy_loss_type": settings.policy_loss_type,
        "actor.entropy_coef": None,
        "actor.aux_loss_coef": 0,
    }
    return orl.config.hierarchize(SimpleNamespace(**flat))


def instance(cls: type, **fields: Any) -> Any:
    """An instance of a trainer class without its __init__ (which starts GPU and Ray machinery),
    holding just the fields that the called methods read."""
    obj = cls.__new__(cls)
    obj.__dict__.update(fields)
    return obj


class LeafActor:
    """The actor's forward pass: the rows of a leaf tensor of per-token log-probs [N, T] named by
    each sequence's prompt token (its response's index + 1, carried through the trainer's buffer
    and DataLoader), cut to the micro-batch's width. It records the rows of every call: the order
    in which the trainer's DataLoader took the responses."""

    def __init__(self, leaf: Any) -> None:
        self.leaf = leaf
        self.rows: list[list[int]] = []

    def train(self) -> None:
        pass

    def __call__(self, sequences: Any, action_mask: Any, **kwargs: Any) -> tuple[Any, None]:
        assert kwargs.get("ring_attn_group") is None and not kwargs.get("return_entropy")
        rows = sequences[:, 0] - 1
        self.rows.append(rows.tolist())
        return self.leaf[rows, : action_mask.shape[1]], None


class AccumulatingStrategy:
    """DeepSpeed's engine and OpenRLHF's DeepspeedStrategy, as `ppo_train` and `training_step`
    use them: `backward` scales the loss by 1 / gas (the engine's gradient-accumulation scaling),
    `optimizer_step` acts at the end of each window of gas micro-batches (the engine's own count,
    across epochs); there it averages the accumulated gradient of the leaf over the data-parallel
    ranks (the engine's all-reduce; nothing at world size 1), records it and clears it.
    `all_reduce` (ppo_train's logged metrics only) returns its data."""

    ring_attn_group = None

    def __init__(self, leaf: Any, accumulated_gradient: int, world_size: int = 1) -> None:
        self.leaf, self.accumulated_gradient, self.world_size = leaf, accumulated_gradient, world_size
        self.micro_steps = 0
        self.step_gradients: list[np.ndarray] = []

    def backward(self, loss: Any, model: Any, optimizer: Any) -> None:
        (loss / self.accumulated_gradient).backward()

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model") -> None:
        self.micro_steps += 1
        if self.micro_steps % self.accumulated_gradient == 0:
            gradient = self.leaf.grad.detach().clone()
            if self.world_size > 1:
                dist = importlib.import_module("torch.distributed")
                dist.all_reduce(gradient)
                gradient /= self.world_size
            self.step_gradients.append(gradient.numpy())
            self.leaf.grad = None

    def get_grad_norm(self, model: Any) -> float:
        return 0.0

    def is_rank_0(self) -> bool:
        return True

    def all_reduce(self, data: Any, op: str = "mean") -> Any:
        return data


class RecordingLoss:
    """The trainer's own PolicyLoss, called as training_step calls it; it keeps what each
    micro-batch's call was given and returned: the step's normaliser (`batch_num_tokens`,
    `global_batch_size`, `dp_size` from iter_grad_accum_global_norm) and the clip fraction."""

    def __init__(self, loss: Any) -> None:
        self.loss = loss
        self.normalisers: list[dict[str, float]] = []
        self.clip_ratios: list[float] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.loss(*args, **kwargs)
        keys = ("batch_num_tokens", "global_batch_size", "dp_size")
        self.normalisers.append({key: float(kwargs[key]) for key in keys})
        self.clip_ratios.append(float(out[1]))
        return out


@dataclass
class Outcome:
    advantages: np.ndarray  # [N, T], the trainer's per-token advantages (0 at padding)
    step_gradients: list[np.ndarray]  # d loss / d logp [N, T] of each optimiser step
    clip_ratios: list[float]  # PolicyLoss's clip fraction of each micro-batch
    orders: list[np.ndarray]  # [N] per epoch: the responses in the order the DataLoader took them
    micro_rows: list[list[int]]  # the responses of each micro-batch, in the order they ran
    normalisers: list[dict[str, float]]  # what PolicyLoss was given for each micro-batch


@dataclass
class Rollout:
    """What the driver's experience maker hands the actors: the micro rollout batches with their
    advantages and returns, and the trainer's args."""

    args: Any
    experiences: list[Any]
    advantages: np.ndarray  # [N, T], the trainer's per-token advantages (0 at padding)


def rollout(
    orl: SimpleNamespace, batch: toy.ToyBatch, settings: Settings, theta_ref: np.ndarray | None = None
) -> Rollout:
    """A toy batch sampled at theta_old as OpenRLHF's experiences, through the trainer's own
    split_rollout_samples and compute_advantages_and_returns, with the reference policy theta_ref
    (None: no reference model, as with init_coef 0)."""
    torch = orl.torch
    _, group = batch.shape
    count, width = batch.responses, batch.width
    args = trainer_args(orl, settings, group)
    variant = parse_variant(PRESETS[settings.estimator])
    rewards = torch.tensor(batch.rewards(variant), dtype=torch.float64)
    lengths = batch.ramble + 1
    old = torch.tensor(batch.logp(), dtype=torch.float64)
    ref = None if theta_ref is None else torch.tensor(batch.logp(theta_ref), dtype=torch.float64)

    # Rollout samples as SamplesGenerator._process_response_into_experience makes them.
    samples = []
    for i in range(count):
        size = int(lengths[i])
        sequence = torch.cat([torch.tensor([i + 1]), torch.full((size,), 7)])
        samples.append(
            orl.experience.Experience(
                sequences=sequence[None],
                attention_mask=torch.ones(1, size + 1, dtype=torch.long),
                action_mask=torch.ones(1, size, dtype=torch.long),
                rewards=rewards[i : i + 1].clone(),
                response_length=torch.tensor([size]),
                truncated=torch.tensor([not bool(batch.stopped[i])]),
                total_length=torch.tensor([size + 1]),
                info={},
            )
        )
    # The experience maker without its Ray actor groups (RemoteExperienceMaker.__init__ sets these).
    maker = instance(
        orl.maker.RemoteExperienceMaker,
        strategy=SimpleNamespace(args=args),
        args=args,
        advantage_estimator=settings.estimator,
        kl_ctl=orl.kl.FixedKLController(settings.kl_coef),
        tokenizer=SimpleNamespace(pad_token_id=0),
    )
    experiences = maker.split_rollout_samples(samples)
    # What make_experience adds from the model forwards (Ray calls, replaced here by the toy's
    # log-probs): the actor's log-probs, and the k1 KL to the reference model when there is one.
    for experience in experiences:
        rows = torch.tensor(experience.index)
        span = experience.action_mask.shape[1]
        experience.action_log_probs = old[rows, :span]
        if ref is None:
            experience.kl = torch.zeros_like(experience.action_log_probs)
        else:
            experience.kl = orl.utils.compute_approx_kl(
                experience.action_log_probs, ref[rows, :span], kl_estimator=args.algo.kl.estimator
            )
    experiences = maker.compute_advantages_and_returns(experiences)
    advantages = np.zeros((count, width))
    for experience in experiences:
        span = experience.action_mask.shape[1]
        masked = experience.advantages * experience.action_mask
        advantages[np.asarray(experience.index), :span] = masked.numpy()
    return Rollout(args, experiences, advantages)


@dataclass
class Training:
    """One actor rank's ppo_train on its experiences."""

    step_gradients: list[np.ndarray]  # d loss / d logp [N, T] of each optimiser step (all ranks')
    micro_rows: list[list[int]]  # the responses of each of this rank's micro-batches, in order
    normalisers: list[dict[str, float]]  # what PolicyLoss was given for each micro-batch
    clip_ratios: list[float]  # PolicyLoss's clip fraction of each micro-batch


def policy_loss(orl: SimpleNamespace, args: Any) -> Any:
    """The trainer's PolicyLoss, as the installed ActorPPOTrainer.__init__ builds it from args."""
    if "is_correction_level" in inspect.signature(orl.loss.PolicyLoss).parameters:  # 0.11.2
        return orl.loss.PolicyLoss(
            clip_eps_low=args.actor.eps_clip_low_high[0],
            clip_eps_high=args.actor.eps_clip_low_high[1],
            dual_clip=args.actor.dual_clip,
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=args.algo.advantage.is_correction_level,
            is_correction_mode=args.algo.advantage.is_correction_mode,
            is_correction_gating=args.algo.advantage.is_correction_gating,
            is_correction_threshold=args.algo.advantage.is_correction_threshold,
        )
    # 0.10.3 (to 0.11.1): no loss_agg_mode (token_level_loss keeps its default, True) and the vLLM
    # importance correction off (--algo.advantage.is_correction_enable, default False).
    assert args.actor.loss_agg_mode == "token-mean", f"openrlhf {orl.version} has no --actor.loss_agg_mode"
    return orl.loss.PolicyLoss(
        clip_eps_low=args.actor.eps_clip_low_high[0],
        clip_eps_high=args.actor.eps_clip_low_high[1],
        dual_clip=args.actor.dual_clip,
        policy_loss_type=args.actor.policy_loss_type,
        enable_vllm_is_correction=False,
        vllm_is_truncated_threshold=None,
        vllm_is_correction_type="tis",
    )


def train(
    orl: SimpleNamespace,
    batch: toy.ToyBatch,
    settings: Settings,
    made: Rollout,
    experiences: list[Any],
    theta: np.ndarray | None,
    seed: int,
    world_size: int = 1,
) -> Training:
    """ActorPPOTrainer.ppo_train on `experiences` (this rank's share of the rollout's, one of
    `world_size` data-parallel ranks) with the policy at theta (None: theta_old, ratio 1), the
    actor a leaf of per-token log-probs."""
    torch, args = orl.torch, made.args
    old = torch.tensor(batch.logp(), dtype=torch.float64)
    # The replay buffer; NaiveReplayBuffer.__init__ asks for the CUDA device, its other fields
    # are as ActorPPOTrainer.__init__ gives them (buffer_cpu_offload aside: on the CPU already).
    micro = settings.micro_train_batch_size or batch.responses
    step_size = settings.train_batch_size or batch.responses
    buffer = instance(
        orl.replay.NaiveReplayBuffer,
        sample_batch_size=micro,
        limit=0,
        cpu_offload=False,
        packing_samples=False,
        dynamic_batch=False,
        items=[],
    )
    for experience in experiences:
        buffer.append(experience)
    at = old if theta is None else torch.tensor(batch.logp(theta), dtype=torch.float64)
    leaf = at.clone().requires_grad_(True)
    # DeepspeedStrategy.accumulated_gradient, train_batch_size * tensor_parallel_size //
    # micro_train_batch_size // (all its ranks: data-parallel x tensor-parallel).
    strategy = AccumulatingStrategy(leaf, step_size // micro // world_size, world_size)
    loss = RecordingLoss(policy_loss(orl, args))
    actor = LeafActor(leaf)
    # ActorPPOTrainer.__init__ needs torch.distributed and CUDA; the fields ppo_train and
    # training_step read.
    trainer = instance(
        orl.actor.ActorPPOTrainer,
        args=args,
        actor=actor,
        actor_loss_fn=loss,
        aux_loss=False,
        strategy=strategy,
        actor_optim=None,  # DeepSpeed's engine holds the optimiser; the stand-in strategy steps nothing
        ema_model=None,
        actor_scheduler=SimpleNamespace(get_last_lr=lambda: [0.0]),
        replay_buffer=buffer,
        max_epochs=args.train.max_epochs,
        dataloader_pin_memory=False,  # no accelerator to pin for
    )
    # ppo_train builds its DataLoader (shuffle=True, drop_last=True, no generator: the sampler
    # draws each epoch's permutation from torch's global RNG), seeded here, and moves each
    # micro-batch to torch.cuda.current_device(): the CPU on this machine.
    with torch.random.fork_rng(devices=[]), mock.patch.object(torch.cuda, "current_device", lambda: "cpu"):
        torch.manual_seed(seed)
        trainer.ppo_train(0.0)
    local = sum(len(e.sequences) for e in experiences)
    assert strategy.micro_steps == args.train.max_epochs * (local // micro)  # DataLoader batches
    assert leaf.grad is None  # every accumulation window stepped
    return Training(strategy.step_gradients, actor.rows, loss.normalisers, loss.clip_ratios)


def run(
    orl: SimpleNamespace,
    batch: toy.ToyBatch,
    settings: Settings,
    theta: np.ndarray | None = None,
    theta_ref: np.ndarray | None = None,
    seed: int = 0,
) -> Outcome:
    """One OpenRLHF PPO round on a toy batch sampled at theta_old, at one rank: advantages, then
    ppo_train's steps with the policy at theta (None: theta_old, ratio 1), the reference policy
    theta_ref (None: no reference model, as with init_coef 0), through the trainer's own functions."""
    made = rollout(orl, batch, settings, theta_ref)
    trained = train(orl, batch, settings, made, made.experiences, theta, seed)
    micro = settings.micro_train_batch_size or batch.responses
    per_epoch = batch.responses // micro
    orders = [
        np.concatenate(trained.micro_rows[e * per_epoch : (e + 1) * per_epoch])
        for e in range(settings.max_epochs)
    ]
    assert all(sorted(order.tolist()) == list(range(batch.responses)) for order in orders)
    return Outcome(
        made.advantages,
        trained.step_gradients,
        trained.clip_ratios,
        orders,
        trained.micro_rows,
        trained.normalisers,
    )


# --- toy batches ----------------------------------------------------------------------------


def corner() -> toy.ToyBatch:
    """Hand-made: unequal lengths and padding everywhere; group 0 mixed with a truncated response,
    group 1 all rewarded, group 2 all unrewarded (wrong approach, truncated, too short), group 3
    two truncated responses and a lone winner; responses of 2 to 31 tokens."""
    right = [[1, 1, 0, 1], [1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]]
    ramble = [[5, 12, 3, 30], [5, 9, 20, 29], [7, 30, 2, 4], [30, 30, 6, 1]]
    stopped = [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 1, 1], [0, 0, 1, 1]]
    return toy.made(np.array(right), np.array(ramble), np.array(stopped), CONFIG)


BATCHES = {
    "corner batch": corner,
    "sampled seed 0": lambda: toy.sampled(0, CONFIG),
    "sampled seed 1": lambda: toy.sampled(1, CONFIG),
    "sampled seed 2": lambda: toy.sampled(2, CONFIG),
}


def test_corner_batch_has_its_corner_cases() -> None:
    batch = corner()
    rewards = batch.rewards(parse_variant("openrlhf_group_norm")).reshape(4, 4)
    assert rewards.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 1, 0]]
    assert (~batch.stopped).sum() == 4 and len(set((batch.ramble + 1).tolist())) > 8


# --- advantages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch_name, rollout_micro",
    [
        ("corner batch", 1),
        ("corner batch", 5),
        ("sampled seed 0", 1),
        ("sampled seed 1", 5),
        ("sampled seed 2", 3),
    ],
)
@pytest.mark.parametrize("estimator", list(PRESETS))
def test_advantages(orl, conform, estimator: str, batch_name: str, rollout_micro: int) -> None:
    """compute_advantages_and_returns over micro rollout batches of 1 (the CLI default), 3 or 5
    (uneven): every token of response i carries toyrl's A_i."""
    batch = BATCHES[batch_name]()
    settings = Settings(estimator, rollout_micro_batch_size=rollout_micro)
    got = run(orl, batch, settings).advantages
    preset = PRESETS[estimator]
    expected = toy.advantages(parse_variant(preset), batch)[:, None] * batch.mask
    setting = f"advantages {estimator}, {batch_name}, rollout micro-batch {rollout_micro}"
    if estimator == "reinforce_baseline":
        # OpenRLHF whitens the per-token returns over all the rollout's tokens (a token-weighted
        # mean, population variance, rsqrt of var.clamp(min=1e-8)), in float32: toyrl's
        # token_whiten, to float32 rounding.
        conform_float32(conform, setting, preset, toy.relative_difference(got, expected))
    else:
        conform(DIST, setting, preset, toy.relative_difference(got, expected))


@pytest.mark.parametrize("estimator", ["group_norm", "rloo"])
def test_advantages_are_clipped_at_10(orl, conform, estimator: str) -> None:
    """--reward.clip_range defaults to (-10, 10), and compute_reward clamps the estimator's output
    (not the raw reward) to it: a lone success in a group of 128 has group_norm advantage
    (1 - 1/128) sqrt(128) = 11.2 and rloo advantage 1, so group_norm is cut to 10 there."""
    group = 128
    right = np.zeros((1, group), bool)
    right[0, 0] = True
    batch = toy.made(right, np.full((1, group), 9), np.ones((1, group), bool), CONFIG)
    got = run(orl, batch, Settings(estimator, rollout_micro_batch_size=group)).advantages
    preset = PRESETS[estimator]
    expected = toy.advantages(parse_variant(preset), batch)[:, None] * batch.mask
    setting = f"advantages {estimator}, a lone success in a group of {group}"
    clipped = estimator == "group_norm"
    conform(DIST, setting, preset, toy.relative_difference(got, expected), expected=not clipped)
    if clipped:
        assert got.max() == 10.0 and expected.max() > 11


# --- the policy loss: first update (ratio 1) and a later update ------------------------------


@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 0"])
@pytest.mark.parametrize("estimator", list(PRESETS))
def test_first_update_token_mean(orl, conform, estimator: str, batch_name: str) -> None:
    """The default loss_agg_mode token-mean at ratio 1, one optimiser step of the whole batch:
    toyrl's token_mean, the presets' aggregation."""
    batch = BATCHES[batch_name]()
    outcome = run(orl, batch, Settings(estimator))
    (got,) = outcome.step_gradients
    assert outcome.clip_ratios == [0.0]
    setting = f"{estimator} ratio 1, token-mean, {batch_name}"
    preset = PRESETS[estimator]
    assert parse_variant(preset).spec() == parse_variant(spec(estimator)).spec()
    difference = toy.relative_difference(got, toy.token_weights(parse_variant(preset), batch))
    if estimator in MATCHED:
        conform(DIST, setting, preset, difference)
    else:
        conform_float32(conform, setting, preset, difference)


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize("micro", [16, 4])
@pytest.mark.parametrize("estimator", list(PRESETS))
def test_first_update_seq_mean_token_mean(orl, conform, estimator: str, micro: int) -> None:
    """The non-default loss_agg_mode seq-mean-token-mean, in one micro-batch and in 4 (gas 4):
    toyrl's seq_mean_token_mean, not the presets' token_mean. aggregate_loss divides each
    response's sum by `token_counts + 1e-8`, but the counts of the integer action_mask are added
    to 1e-8 in float32, where it vanishes; the step's response count (`global_batch_size`) is
    exact too."""
    batch = corner()
    settings = Settings(estimator, loss_agg_mode="seq-mean-token-mean", micro_train_batch_size=micro)
    (got,) = run(orl, batch, settings, seed=micro).step_gradients
    setting = f"{estimator} ratio 1, seq-mean-token-mean, corner batch, gas {batch.responses // micro}"
    matching = spec(estimator, "seq_mean_token_mean")
    difference = toy.relative_difference(got, toy.token_weights(parse_variant(matching), batch))
    if estimator in MATCHED:
        conform(DIST, setting, matching, difference)
    else:
        conform_float32(conform, setting, matching, difference)
    preset = PRESETS[estimator]
    expected = toy.token_weights(parse_variant(preset), batch)
    conform(DIST, setting, preset, toy.relative_difference(got, expected), expected=False)


@pytest.mark.parametrize(
    "eps, theta_seed",
    [((0.2, 0.2), 1), ((0.2, 0.28), 23), ((0.1, 0.3), 1)],
)
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 1"])
@pytest.mark.parametrize("estimator", MATCHED)
def test_later_update(
    orl, conform, estimator: str, batch_name: str, eps: tuple[float, float], theta_seed: int
):
    """A later PPO update at theta != theta_old, clipping active (clip-low / clip-high): toyrl's
    ppo_clip with epsilon / epsilon_high and token_mean."""
    batch = BATCHES[batch_name]()
    theta = toy.moved(batch, theta_seed, scale=1.0)
    outcome = run(orl, batch, Settings(estimator, eps_clip_low_high=eps), theta=theta)
    (got,) = outcome.step_gradients
    assert outcome.clip_ratios[0] > 0.02
    ratio, advantage = np.exp(batch.logp(theta) - batch.logp()), outcome.advantages
    low, high = eps
    assert ((advantage < 0) & (ratio < 1 - low) & batch.mask).any()  # the low clip acts
    assert ((advantage > 0) & (ratio > 1 + high) & batch.mask).any()  # the high clip acts
    if high > low:  # and spares tokens that a symmetric clip at `low` would cut
        assert ((advantage > 0) & (ratio > 1 + low) & (ratio <= 1 + high) & batch.mask).any()
    matching = spec(estimator, epsilon=eps[0], epsilon_high=eps[1])
    expected = toy.token_weights(parse_variant(matching), batch, theta)
    setting = f"{estimator} later update, eps {eps[0]}/{eps[1]}, {batch_name}"
    conform(DIST, setting, matching, toy.relative_difference(got, expected))


@pytest.mark.parametrize("dual", [1.5, 3.0])
def test_later_update_dual_clip(orl, conform, dual: float) -> None:
    """--actor.dual_clip c (PolicyLoss's dual_clip), one step of the whole batch: for A < 0 the
    loss is -max(min(rho A, clip(rho) A), c A), so tokens with A < 0 and ratio > c lose their
    gradient; toyrl's ppo_clip with dual_clip=c. The spec without it differs exactly there."""
    batch = toy.sampled(1, CONFIG)
    theta = toy.moved(batch, 4 if dual == 1.5 else MOVED, scale=1.0)
    outcome = run(orl, batch, Settings("group_norm", dual_clip=dual), theta=theta)
    ratio = np.exp(batch.logp(theta) - batch.logp())
    acting = (outcome.advantages < 0) & (ratio > dual) & batch.mask
    assert acting.sum() > 0
    (got,) = outcome.step_gradients
    assert (got[acting] == 0).all()
    setting = f"group_norm later update, dual_clip {dual}, sampled seed 1"
    matching = spec("group_norm", dual_clip=dual)
    expected = toy.token_weights(parse_variant(matching), batch, theta)
    conform(DIST, setting, matching, toy.relative_difference(got, expected))
    without = spec("group_norm")
    plain = toy.token_weights(parse_variant(without), batch, theta)
    assert (plain[acting] != 0).all()
    conform(DIST, setting, without, toy.relative_difference(got, plain), expected=False)


@pytest.mark.parametrize("theta_name", ["ratio 1", "moved"])
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 1"])
@pytest.mark.parametrize("eps", [0.2, 0.003])
def test_gspo(orl, conform, eps: float, batch_name: str, theta_name: str) -> None:
    """--actor.policy_loss_type gspo (PolicyLoss's policy_loss_type, >= 0.11): the sequence's ratio
    exp(mean of its tokens' log-ratios) in PPO's clip at eps_clip, each sample's token mean
    (token_level_loss False, whatever loss_agg_mode says): toyrl's gspo with epsilon = epsilon_high
    = eps_clip and seq_mean_token_mean, as `toyrl check` maps it; at a moved policy the sequence
    clip acts and the token-level clip (ppo) is the control that differs."""
    if "policy_loss_type" not in inspect.signature(orl.loss.PolicyLoss).parameters:
        pytest.skip("this release's PolicyLoss has no policy_loss_type")
    batch = BATCHES[batch_name]()
    theta = None if theta_name == "ratio 1" else toy.moved(batch, MOVED, scale=0.1 if eps < 0.1 else 1.0)
    settings = Settings("group_norm", eps_clip_low_high=(eps, eps), policy_loss_type="gspo")
    outcome = run(orl, batch, settings, theta=theta)
    (got,) = outcome.step_gradients
    matching = spec("group_norm", "seq_mean_token_mean", objective="gspo", epsilon=eps, epsilon_high=eps)
    expected = toy.token_weights(parse_variant(matching), batch, theta)
    assert np.abs(expected).max() > 0
    setting = f"policy_loss_type=gspo, eps_clip {eps}, {batch_name}, {theta_name}"
    conform(DIST, setting, matching, toy.relative_difference(got, expected))
    mapped = resolve(
        DIST,
        None,
        {
            "algo.advantage.estimator": "group_norm",
            "actor.policy_loss_type": "gspo",
            "actor.eps_clip": eps,
            "algo.kl.init_coef": 0.0,
        },
    )
    mapped_spec = {
        k: v
        for k, v in parse_variant(mapped.mapping.spec).spec().items()
        if k not in ("mini_batches", "shuffle")
    }
    assert mapped_spec == parse_variant(matching).spec()
    if theta is not None and eps < 0.1:
        assert outcome.clip_ratios[0] > 0  # the sequence clip acts (at 0.2 the moved means stay inside)
        token_level = spec("group_norm", "seq_mean_token_mean", epsilon=eps)
        control = toy.token_weights(parse_variant(token_level), batch, theta)
        conform(
            DIST,
            f"{setting} (control: token ratios)",
            token_level,
            toy.relative_difference(got, control),
            False,
        )


@pytest.mark.parametrize("token_level_loss", [True, False])
def test_policy_loss_called_alone(orl, conform, token_level_loss: bool) -> None:
    """PolicyLoss() by itself (no optimiser-step totals: `aggregate_loss` falls back to the masked
    mean of the batch it is given) at a later update: token_level_loss True is toyrl's token_mean,
    False its seq_mean_token_mean, with ppo_clip at eps 0.2."""
    torch = orl.torch
    batch = toy.sampled(2, CONFIG)
    theta = toy.moved(batch, 7, scale=1.0)
    aggregation = "token_mean" if token_level_loss else "seq_mean_token_mean"
    variant = parse_variant(spec("group_norm", aggregation))
    advantages = torch.tensor(toy.advantages(variant, batch))[:, None].expand(-1, batch.width)
    leaf = torch.tensor(batch.logp(theta), dtype=torch.float64).requires_grad_(True)
    old = torch.tensor(batch.logp(), dtype=torch.float64)
    mask = torch.tensor(batch.mask, dtype=torch.long)
    loss, clip_ratio, *_ = orl.loss.PolicyLoss(token_level_loss=token_level_loss)(leaf, old, advantages, mask)
    loss.backward()
    assert float(clip_ratio) > 0.02
    expected = toy.token_weights(variant, batch, theta)
    setting = f"PolicyLoss(token_level_loss={token_level_loss}) alone, later update, sampled seed 2"
    conform(DIST, setting, variant.spec_text(), toy.relative_difference(leaf.grad.numpy(), expected))


# --- micro-batches and optimiser steps -------------------------------------------------------


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize("later", [False, True])
@pytest.mark.parametrize("micro", [8, 4, 2])
@pytest.mark.parametrize("estimator", ["group_norm", "rloo"])
def test_micro_batches_in_one_optimiser_step(orl, conform, estimator: str, micro: int, later: bool) -> None:
    """train.micro_batch_size < train.batch_size = the rollout (gas 2, 4, 8 shuffled micro
    batches of unequal token counts): iter_grad_accum_global_norm normalises every micro-batch by
    the whole step's tokens, so the accumulated gradient is the full batch's token_mean."""
    batch = corner() if estimator == "group_norm" else toy.sampled(3, CONFIG)
    theta = toy.moved(batch, 5, scale=1.0) if later else None
    outcome = run(orl, batch, Settings(estimator, micro_train_batch_size=micro), theta=theta, seed=micro)
    (got,) = outcome.step_gradients
    assert len(outcome.clip_ratios) == batch.responses // micro
    if later:
        assert max(outcome.clip_ratios) > 0
    matching = spec(estimator)
    expected = toy.token_weights(parse_variant(matching), batch, theta)
    when = "later update" if later else "ratio 1"
    setting = f"{estimator} {when}, {batch.responses // micro} micro-batches (gas {batch.responses // micro})"
    conform(DIST, setting, matching, toy.relative_difference(got, expected))


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize("seed, divisible", [(4, True), (6, False), (7, False)])
def test_micro_batches_gas_3_round_in_float32(orl, conform, seed: int, divisible: bool) -> None:
    """gas 3 (12 responses, micro-batches of 4): `_optimizer_step_loss_norm` returns
    num_tokens / gas in float32, exact when the step's token count is a multiple of 3, else
    rounded: the gradient is then the full batch's token_mean only to float32 precision (a
    relative 2^-24 or so). DeepSpeed's 1 / gas scaling (float64 here) is not rounded."""
    batch = toy.sampled(seed, dataclasses.replace(CONFIG, batch_prompts=3))
    tokens = int(batch.mask.sum())
    assert (tokens % 3 == 0) == divisible
    (got,) = run(orl, batch, Settings("group_norm", micro_train_batch_size=4), seed=seed).step_gradients
    matching = spec("group_norm")
    difference = toy.relative_difference(got, toy.token_weights(parse_variant(matching), batch))
    setting = f"group_norm ratio 1, 3 micro-batches (gas 3), {tokens} tokens, sampled seed {seed}"
    conform(DIST, setting, matching, difference, expected=divisible)
    assert difference < 2.0**-23


# --- several optimiser steps per rollout: mini-batches, epochs, the DataLoader's shuffle ----------

# (train.batch_size, train.micro_batch_size, train.max_epochs) on a rollout of 16 samples:
# 16 / batch_size optimiser steps an epoch, each of batch_size / micro_batch_size micro-batches.
SCHEDULES = {
    "2 steps x 2 micro-batches, 2 epochs": (8, 4, 2),
    "4 steps x 2 micro-batches": (4, 2, 1),
    "2 steps x 4 micro-batches": (8, 2, 1),
}
SHUFFLE_SEED = 3  # torch.manual_seed before ppo_train: its DataLoader's permutations come from it
MOVED = 5  # toy.moved(batch, 5, scale=1.0): the PPO clip acts in every step of every schedule


def schedule_spec(estimator: str, settings: Settings, responses: int, **extra: float | str) -> str:
    """The toy spec of a run of `settings` on a rollout of `responses` samples: one update per
    optimiser step (mini_batches = responses / train.batch_size per epoch, num_iterations =
    max_epochs), micro_batches = gas, and a new random order each epoch (the DataLoader's
    shuffle=True, iterated once per epoch)."""
    step = settings.train_batch_size or responses
    micro = settings.micro_train_batch_size or step
    aggregation = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean"}
    schedule: dict[str, float | str] = (
        {"num_iterations": settings.max_epochs} if settings.max_epochs > 1 else {}
    )
    schedule.update(mini_batches=responses // step, micro_batches=step // micro, shuffle="epoch")
    schedule.update(extra)
    return spec(estimator, aggregation[settings.loss_agg_mode], **schedule)


def flat(lists: Any) -> list[int]:
    """The items of an iterable of lists, in order."""
    return [item for items in lists for item in items]


@dataclass(frozen=True)
class Step:
    """Optimiser step u of a run: its epoch's order, its mini-batch and its micro-batches."""

    update: int
    order: np.ndarray  # [N] the epoch's order, as the DataLoader took the responses
    members: np.ndarray  # the responses of the step, in that order
    micro: slice  # the step's micro-batches among the run's (Outcome.micro_rows / normalisers)


def steps(outcome: Outcome, settings: Settings, responses: int) -> list[Step]:
    """Every optimiser step of a run, checked against the trainer's own records: the step's
    micro-batches are gas consecutive DataLoader batches of its epoch's order (so its mini-batch is
    a consecutive part of that order), and each of them got the step's normaliser (the step's
    tokens / gas, its non-empty responses / gas: `_optimizer_step_loss_norm`)."""
    step = settings.train_batch_size or responses
    micro = settings.micro_train_batch_size or step
    per_epoch, gas = responses // step, step // micro
    assert len(outcome.step_gradients) == settings.max_epochs * per_epoch
    out = []
    for update in range(len(outcome.step_gradients)):
        order = outcome.orders[update // per_epoch]
        members = order[update % per_epoch * step : (update % per_epoch + 1) * step]
        at = slice(update * gas, (update + 1) * gas)
        assert flat(outcome.micro_rows[at]) == members.tolist()
        out.append(Step(update, order, members, at))
    return out


def step_normaliser_checks(outcome: Outcome, batch: toy.ToyBatch, step: Step) -> None:
    """The normaliser each of the step's micro-batches was given is the whole step's (at one rank,
    dp_size 1), not its own micro-batch's; and the step's gradient lies on its mini-batch."""
    gas = step.micro.stop - step.micro.start
    tokens = int(batch.mask[step.members].sum())
    for info in outcome.normalisers[step.micro]:
        assert info["dp_size"] == 1
        assert info["batch_num_tokens"] * gas == tokens
        assert info["global_batch_size"] * gas == len(step.members)
    got = outcome.step_gradients[step.update]
    outside = np.ones(batch.responses, bool)
    outside[step.members] = False
    assert (got[outside] == 0).all() and np.abs(got).max() > 0


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize("later", [False, True])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 1"])
def test_mini_batches_token_mean(orl, conform, batch_name: str, schedule: str, later: bool) -> None:
    """train.batch_size < the rollout: ppo_train's DataLoader (shuffle=True, reshuffled each
    epoch) cut into micro-batches, iter_grad_accum_global_norm's windows of gas of them, one
    optimiser step each, all steps of every epoch: step u is toyrl's update u of mini_batches =
    16 / train.batch_size (num_iterations = max_epochs), micro_batches = gas, shuffle=epoch, in the
    order recovered from the trainer's DataLoader, with token-mean's normaliser the step's whole
    token count (the mini-batch's, not each micro-batch's). At ratio 1, and at a moved theta with
    the clip acting in every step (the loss of each step evaluated there).

    Known differences, each asserted: the whole batch in one update (the preset), the toy's
    mini-batches in the batch's own order (no shuffle), the toy's per-micro-batch token mean
    (OpenRLHF <= 0.10.3's scope; with gas > 1), and the first epoch's order kept for the second
    (shuffle=once; with 2 epochs)."""
    batch = BATCHES[batch_name]()
    step_size, micro, epochs = SCHEDULES[schedule]
    settings = Settings(
        "group_norm", micro_train_batch_size=micro, train_batch_size=step_size, max_epochs=epochs
    )
    theta = toy.moved(batch, MOVED, scale=1.0) if later else None
    outcome = run(orl, batch, settings, theta=theta, seed=SHUFFLE_SEED)
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses))
    when = "moved theta" if later else "ratio 1"
    # The known differences: name -> (toy spec, its weights for a step).
    alternatives: dict[str, tuple[Any, Callable[[Step], np.ndarray]]] = {}
    preset = parse_variant(PRESETS["group_norm"])
    alternatives["the whole batch in one update"] = (
        preset,
        lambda step: toy.token_weights(preset, batch, theta),
    )
    alternatives["in the batch's own order"] = (
        matching,
        lambda step: toy.token_weights(matching, batch, theta, update=step.update),
    )
    if step_size > micro:
        per_micro = parse_variant(
            schedule_spec("group_norm", settings, batch.responses, per_micro_batch="true")
        )
        alternatives["token mean per micro-batch"] = (
            per_micro,
            lambda step: toy.token_weights(per_micro, batch, theta, update=step.update, order=step.order),
        )
    if epochs > 1:
        once = parse_variant(matching.spec_text().replace("shuffle=epoch", "shuffle=once"))
        alternatives["the first epoch's order kept (shuffle=once)"] = (
            once,
            lambda step: toy.token_weights(once, batch, theta, update=step.update, order=outcome.orders[0]),
        )
        assert not np.array_equal(outcome.orders[0], outcome.orders[1])  # reshuffled
    known = dict.fromkeys(alternatives, 0.0)
    for step in steps(outcome, settings, batch.responses):
        step_normaliser_checks(outcome, batch, step)
        clip = outcome.clip_ratios[step.micro]
        assert sum(clip) > 0 if later else not any(clip)
        got = outcome.step_gradients[step.update]
        expected = toy.token_weights(matching, batch, theta, update=step.update, order=step.order)
        setting = f"group_norm {when}, {schedule}, {batch_name}: step {step.update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        for name, (_, weights_of) in alternatives.items():
            known[name] = max(known[name], toy.relative_difference(got, weights_of(step)))
    for name, difference in known.items():
        setting = f"group_norm {when}, {schedule}, {batch_name}: max over steps vs {name}"
        conform(DIST, setting, alternatives[name][0].spec_text(), difference, expected=False)
    assert not np.array_equal(outcome.orders[0], np.arange(batch.responses))  # the DataLoader shuffles


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize("later", [False, True])
@pytest.mark.parametrize("schedule", ["2 steps x 2 micro-batches, 2 epochs", "2 steps x 4 micro-batches"])
def test_mini_batches_seq_mean_token_mean(orl, conform, schedule: str, later: bool) -> None:
    """loss_agg_mode seq-mean-token-mean over several steps: each response's token mean, summed
    over the micro-batch and divided by the step's non-empty responses / gas (`global_batch_size`
    of `_optimizer_step_loss_norm`): toyrl's seq_mean_token_mean with n the mini-batch's responses,
    in the DataLoader's order. (Its micro-batches all hold micro_batch_size responses, so a
    per-micro-batch mean of response means would be the same number: the scope is the step's by
    the code, not by this comparison.) The default's token_mean schedule differs."""
    batch = corner()
    step_size, micro, epochs = SCHEDULES[schedule]
    settings = Settings(
        "group_norm",
        loss_agg_mode="seq-mean-token-mean",
        micro_train_batch_size=micro,
        train_batch_size=step_size,
        max_epochs=epochs,
    )
    theta = toy.moved(batch, MOVED, scale=1.0) if later else None
    outcome = run(orl, batch, settings, theta=theta, seed=SHUFFLE_SEED)
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses))
    token_mean = parse_variant(
        schedule_spec(
            "group_norm", dataclasses.replace(settings, loss_agg_mode="token-mean"), batch.responses
        )
    )
    when = "moved theta" if later else "ratio 1"
    known = 0.0
    for step in steps(outcome, settings, batch.responses):
        step_normaliser_checks(outcome, batch, step)
        got = outcome.step_gradients[step.update]
        if later:
            assert sum(outcome.clip_ratios[step.micro]) > 0
        expected = toy.token_weights(matching, batch, theta, update=step.update, order=step.order)
        setting = f"group_norm {when}, seq-mean-token-mean, {schedule}, corner batch: step {step.update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        other = toy.token_weights(token_mean, batch, theta, update=step.update, order=step.order)
        known = max(known, toy.relative_difference(got, other))
    setting = (
        f"group_norm {when}, seq-mean-token-mean, {schedule}, corner batch: max over steps vs token-mean"
    )
    conform(DIST, setting, token_mean.spec_text(), known, expected=False)


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize("dual", [1.5, 3.0])
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 1"])
def test_mini_batches_dual_clip(orl, conform, batch_name: str, dual: float) -> None:
    """--actor.dual_clip c over 2 epochs of 2 steps of 2 micro-batches, at a moved theta where
    some tokens with A < 0 have ratio > c (each such response falls in one step per epoch):
    OpenRLHF reports no dual-clip fraction (ppo_clip_ratio counts surr2 < surr1 only), so the same
    run without dual_clip (the same seed, so the same DataLoader orders) shows it acting: those
    tokens' gradient is 0 with it and not without, every other token's is unchanged. Each step is
    toyrl's update with dual_clip=c, and differs from the spec without it in the steps holding
    such tokens."""
    batch = BATCHES[batch_name]()
    schedule = "2 steps x 2 micro-batches, 2 epochs"
    step_size, micro, epochs = SCHEDULES[schedule]
    settings = Settings(
        "group_norm",
        dual_clip=dual,
        micro_train_batch_size=micro,
        train_batch_size=step_size,
        max_epochs=epochs,
    )
    theta = toy.moved(batch, MOVED, scale=1.0)
    outcome = run(orl, batch, settings, theta=theta, seed=SHUFFLE_SEED)
    plain = run(orl, batch, dataclasses.replace(settings, dual_clip=None), theta=theta, seed=SHUFFLE_SEED)
    assert all(np.array_equal(a, b) for a, b in zip(outcome.orders, plain.orders, strict=True))
    ratio = np.exp(batch.logp(theta) - batch.logp())
    acting = (outcome.advantages < 0) & (ratio > dual) & batch.mask
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses, dual_clip=dual))
    without = parse_variant(schedule_spec("group_norm", settings, batch.responses))
    acted = []
    for step in steps(outcome, settings, batch.responses):
        step_normaliser_checks(outcome, batch, step)
        got, got_plain = outcome.step_gradients[step.update], plain.step_gradients[step.update]
        here = acting.copy()
        here[np.setdiff1d(np.arange(batch.responses), step.members)] = False
        assert (got[here] == 0).all() and (got_plain[here] != 0).all()
        assert np.allclose(np.where(here, 0, got), np.where(here, 0, got_plain), rtol=1e-14, atol=0)
        expected = toy.token_weights(matching, batch, theta, update=step.update, order=step.order)
        setting = f"group_norm moved theta, dual_clip {dual}, {schedule}, {batch_name}: step {step.update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        if here.any():
            acted.append(step.update)
            other = toy.token_weights(without, batch, theta, update=step.update, order=step.order)
            conform(
                DIST,
                setting + f", {int(here.sum())} dual-clipped tokens",
                without.spec_text(),
                toy.relative_difference(got, other),
                expected=False,
            )
    assert len(acted) >= epochs  # every acting response is in one step of each epoch


@pytest.mark.usefixtures("step_scope")
def test_no_shuffle_with_tensor_parallelism(orl, conform) -> None:
    """--ds.tensor_parallel_size 2 (one data-parallel rank made of two tensor-parallel ones, fed
    the same micro-batches for one gradient: the run here is that rank's, gas = 8 * 2 // 4 // 2):
    ppo_train's DataLoader then has shuffle=False (as with ring attention or dynamic batching), so
    every epoch takes the buffer's order, the rollout's: toyrl's shuffle=none. The same run's steps
    in the order the default DataLoader draws from the same seed differ."""
    batch = corner()
    schedule = "2 steps x 2 micro-batches, 2 epochs"
    step_size, micro, epochs = SCHEDULES[schedule]
    settings = Settings(
        "group_norm",
        micro_train_batch_size=micro,
        train_batch_size=step_size,
        max_epochs=epochs,
        tensor_parallel_size=2,
    )
    theta = toy.moved(batch, MOVED, scale=1.0)
    outcome = run(orl, batch, settings, theta=theta, seed=SHUFFLE_SEED)
    assert all(np.array_equal(order, np.arange(batch.responses)) for order in outcome.orders)
    shuffled = run(
        orl, batch, dataclasses.replace(settings, tensor_parallel_size=1), theta=theta, seed=SHUFFLE_SEED
    )
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses, shuffle="none"))
    epoch = parse_variant(schedule_spec("group_norm", settings, batch.responses))
    known = 0.0
    for step in steps(outcome, settings, batch.responses):
        step_normaliser_checks(outcome, batch, step)
        got = outcome.step_gradients[step.update]
        expected = toy.token_weights(matching, batch, theta, update=step.update)
        setting = f"group_norm moved theta, tp 2, {schedule}, corner batch: step {step.update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        order = shuffled.orders[step.update // 2]
        known = max(
            known,
            toy.relative_difference(got, toy.token_weights(epoch, batch, theta, step.update, order=order)),
        )
    setting = "group_norm moved theta, tp 2, corner batch: max over steps vs the shuffled order"
    conform(DIST, setting, epoch.spec_text(), known, expected=False)


def rank_worker(
    rank: int,
    world_size: int,
    init_file: str,
    job: tuple[SimpleNamespace, toy.ToyBatch, Settings, Rollout, np.ndarray | None, int],
    queue: Any,
) -> None:
    """One actor rank (a forked process): joins a gloo process group, takes its contiguous chunk
    of the rollout's micro rollout batches (as ActorModelGroup.async_run_method_batch deals them
    out) and runs `train` there; puts (rank, Training or None, error text) on the queue."""
    orl, batch, settings, made, theta, seed = job
    torch = orl.torch
    torch.set_num_threads(1)
    try:
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
        )
        chunk = -(-len(made.experiences) // world_size)
        mine = made.experiences[rank * chunk : (rank + 1) * chunk]
        queue.put((rank, train(orl, batch, settings, made, mine, theta, seed, world_size), ""))
    except BaseException:  # reported to the parent, which fails the test
        queue.put((rank, None, traceback.format_exc()))
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def run_ranks(
    orl: SimpleNamespace,
    batch: toy.ToyBatch,
    settings: Settings,
    theta: np.ndarray | None,
    seed: int,
    world_size: int = 2,
) -> list[Training]:
    """ppo_train on `world_size` data-parallel ranks (forked processes: the parent's imports are
    shared), each seeded alike (DeepspeedStrategy.setup_distributed's transformers.set_seed(seed)
    on every rank)."""
    made = rollout(orl, batch, settings)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        job = (orl, batch, settings, made, theta, seed)
        processes = [
            context.Process(target=rank_worker, args=(rank, world_size, f"{folder}/init", job, queue))
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        try:
            results = [queue.get(timeout=120) for _ in processes]
        finally:
            for process in processes:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
    errors = [error for _, _, error in results if error]
    assert not errors, "\n".join(errors)
    return [training for _, training in sorted((rank, training) for rank, training, _ in results)]


@pytest.mark.usefixtures("step_scope")
@pytest.mark.parametrize(
    "loss_agg_mode, later", [("token-mean", False), ("token-mean", True), ("seq-mean-token-mean", True)]
)
def test_two_data_parallel_ranks(orl, conform, loss_agg_mode: str, later: bool) -> None:
    """2 actor ranks (torch.distributed over gloo), train.batch_size 8 of the 16 samples,
    micro_batch_size 2, 2 epochs: gas = 8 // 2 // 2 = 2 micro-batches per rank and step. Each rank
    holds its half of the rollout in its own replay buffer and DataLoader (its own shuffle, anew
    each epoch). `_optimizer_step_loss_norm` all-reduces the window's tokens (and non-empty
    responses) over the ranks and the loss is multiplied by dp_size, which DeepSpeed's gradient
    average cancels: each step is one token mean (or mean of response means) over both ranks'
    windows. toyrl: mini_batches 2, micro_batches 4 (2 per rank), shuffle=epoch, in the order
    rank 0's window then rank 1's, step by step. Known difference: each rank normalising by its
    own window alone (toyrl's per_micro_batch over micro-batches of one rank's window)."""
    world, gas, per_epoch = 2, 2, 2  # ranks, micro-batches per rank and step, steps per epoch
    batch = corner()
    settings = Settings(
        "group_norm", loss_agg_mode=loss_agg_mode, micro_train_batch_size=2, train_batch_size=8, max_epochs=2
    )
    theta = toy.moved(batch, MOVED, scale=1.0) if later else None
    trained = run_ranks(orl, batch, settings, theta, SHUFFLE_SEED, world)
    half = batch.responses // world
    # window[u][r]: the responses of rank r's micro-batches in step u, in the order they ran
    window = [
        [flat(training.micro_rows[u * gas : (u + 1) * gas]) for training in trained]
        for u in range(settings.max_epochs * per_epoch)
    ]
    for rank, training in enumerate(trained):
        assert len(training.micro_rows) == settings.max_epochs * per_epoch * gas
        epochs = [flat(window[u][rank] for u in range(e * per_epoch, (e + 1) * per_epoch)) for e in range(2)]
        assert all(sorted(rows) == list(range(rank * half, (rank + 1) * half)) for rows in epochs)
        assert epochs[0] != epochs[1]  # each rank reshuffles its own half every epoch
    for a, b in zip(trained[0].step_gradients, trained[1].step_gradients, strict=True):
        assert np.array_equal(a, b)  # one all-reduced gradient per step
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses, micro_batches=4))
    own = parse_variant(
        schedule_spec("group_norm", settings, batch.responses, micro_batches=2, per_micro_batch="true")
    )
    when = "moved theta" if later else "ratio 1"
    known = 0.0
    for update, ranks in enumerate(window):
        epoch = update // per_epoch
        order = np.array(flat(flat(w) for w in window[epoch * per_epoch : (epoch + 1) * per_epoch]))
        members = flat(ranks)
        for training in trained:
            for info in training.normalisers[update * gas : (update + 1) * gas]:
                assert info["dp_size"] == world
                assert info["batch_num_tokens"] * gas == batch.mask[members].sum()
                assert info["global_batch_size"] * gas == len(members)
        clipped = sum(sum(training.clip_ratios[update * gas : (update + 1) * gas]) for training in trained)
        assert clipped > 0 if later else clipped == 0
        got = trained[0].step_gradients[update]
        expected = toy.token_weights(matching, batch, theta, update=update, order=order)
        setting = f"group_norm {when}, {loss_agg_mode}, 2 dp ranks x 2 micro-batches, 2 epochs: step {update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        other = toy.token_weights(own, batch, theta, update=update, order=order)
        known = max(known, toy.relative_difference(got, other))
    setting = f"group_norm {when}, {loss_agg_mode}, 2 dp ranks: max over steps vs each rank's own normaliser"
    if loss_agg_mode == "token-mean":
        conform(DIST, setting, own.spec_text(), known, expected=False)
    else:  # a mean of response means over equal halves is the same number either way
        assert known < 1e-12


# --- 0.10.3: each micro-batch normalised by its own tokens ----------------------------------------


def own_normaliser_checks(outcome: Outcome, batch: toy.ToyBatch, step: Step) -> None:
    """0.10.3's training_step at one rank: `get_loss_batch_info` takes each micro-batch's own totals
    (its tokens and non-empty responses), not the step's; and the step's gradient lies on its
    mini-batch."""
    for rows, info in zip(outcome.micro_rows[step.micro], outcome.normalisers[step.micro], strict=True):
        assert info["dp_size"] == 1
        assert info["batch_num_tokens"] == batch.mask[rows].sum()
        assert info["global_batch_size"] == len(rows)
    got = outcome.step_gradients[step.update]
    outside = np.ones(batch.responses, bool)
    outside[step.members] = False
    assert (got[outside] == 0).all() and np.abs(got).max() > 0


@pytest.mark.parametrize("later", [False, True])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 1"])
def test_micro_batch_scope_token_mean(
    micro_batch_scope, conform, batch_name: str, schedule: str, later: bool
) -> None:
    """0.10.3's ppo_train over several optimiser steps (train.batch_size < the rollout, gas micro
    batches each, 1 or 2 epochs, the DataLoader's shuffle): training_step calls
    `get_loss_batch_info` on each micro-batch, so PolicyLoss divides its masked token sum by that
    micro-batch's own tokens, and DeepSpeed's 1 / gas makes the step's loss the mean of its
    micro-batches' token means: toyrl's token_mean with per_micro_batch=true (micro_batches = gas),
    update u in the trainer's recovered order, at ratio 1 and at a moved theta (clip acting). The
    known difference: 0.11.2's step-scope token mean (the same schedule without per_micro_batch)."""
    orl = micro_batch_scope
    batch = BATCHES[batch_name]()
    step_size, micro, epochs = SCHEDULES[schedule]
    settings = Settings(
        "group_norm", micro_train_batch_size=micro, train_batch_size=step_size, max_epochs=epochs
    )
    theta = toy.moved(batch, MOVED, scale=1.0) if later else None
    outcome = run(orl, batch, settings, theta=theta, seed=SHUFFLE_SEED)
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses, per_micro_batch="true"))
    whole_step = parse_variant(schedule_spec("group_norm", settings, batch.responses))
    when = "moved theta" if later else "ratio 1"
    known = 0.0
    for step in steps(outcome, settings, batch.responses):
        own_normaliser_checks(outcome, batch, step)
        clip = outcome.clip_ratios[step.micro]
        assert sum(clip) > 0 if later else not any(clip)
        got = outcome.step_gradients[step.update]
        expected = toy.token_weights(matching, batch, theta, update=step.update, order=step.order)
        setting = f"group_norm {when}, {schedule}, {batch_name}: step {step.update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        other = toy.token_weights(whole_step, batch, theta, update=step.update, order=step.order)
        known = max(known, toy.relative_difference(got, other))
    setting = f"group_norm {when}, {schedule}, {batch_name}: max over steps vs the step's token mean"
    conform(DIST, setting, whole_step.spec_text(), known, expected=False)
    assert not np.array_equal(outcome.orders[0], np.arange(batch.responses))  # the DataLoader shuffles


@pytest.mark.parametrize("later", [False, True])
def test_micro_batch_scope_two_data_parallel_ranks(micro_batch_scope, conform, later: bool) -> None:
    """0.10.3 on 2 actor ranks (gloo), train.batch_size 8 of 16, micro_batch_size 2, 2 epochs: gas 2
    micro-batches per rank and step. `get_loss_batch_info` all-reduces each micro-batch's tokens
    over the ranks and multiplies the loss by dp_size, which DeepSpeed's gradient average cancels:
    the k-th micro-batches of both ranks form one token mean, and the step is the mean of the gas
    such means. toyrl: per_micro_batch=true with micro_batches 2, each step's responses in the order
    rank 0's k-th micro-batch, rank 1's k-th, for k = 0, 1. Known differences: one token mean over
    the whole step (0.11.2), and each rank's micro-batch alone (micro_batches 4, no all-reduce)."""
    orl = micro_batch_scope
    world, gas, per_epoch = 2, 2, 2
    batch = corner()
    settings = Settings("group_norm", micro_train_batch_size=2, train_batch_size=8, max_epochs=2)
    theta = toy.moved(batch, MOVED, scale=1.0) if later else None
    trained = run_ranks(orl, batch, settings, theta, SHUFFLE_SEED, world)
    for a, b in zip(trained[0].step_gradients, trained[1].step_gradients, strict=True):
        assert np.array_equal(a, b)  # one all-reduced gradient per step
    # step u's micro-batch k on rank r: trained[r].micro_rows[u * gas + k]
    interleaved = [
        flat(trained[r].micro_rows[u * gas + k] for k in range(gas) for r in range(world))
        for u in range(settings.max_epochs * per_epoch)
    ]
    matching = parse_variant(
        schedule_spec("group_norm", settings, batch.responses, micro_batches=2, per_micro_batch="true")
    )
    whole_step = parse_variant(schedule_spec("group_norm", settings, batch.responses, micro_batches=4))
    alone = parse_variant(
        schedule_spec("group_norm", settings, batch.responses, micro_batches=4, per_micro_batch="true")
    )
    when = "moved theta" if later else "ratio 1"
    known = {"the step's token mean": 0.0, "each rank's micro-batch alone": 0.0}
    for update in range(len(interleaved)):
        for k in range(gas):
            pair = flat(trained[r].micro_rows[update * gas + k] for r in range(world))
            for training in trained:
                info = training.normalisers[update * gas + k]
                assert info["dp_size"] == world
                assert info["batch_num_tokens"] == batch.mask[pair].sum()  # both ranks' k-th
                assert info["global_batch_size"] == len(pair)
        epoch = update // per_epoch
        order = np.array(flat(interleaved[epoch * per_epoch : (epoch + 1) * per_epoch]))
        # each rank's own micro-batches one after the other, for the no-all-reduce control
        by_rank = np.array(
            flat(
                flat(trained[r].micro_rows[u * gas + k] for r in range(world) for k in range(gas))
                for u in range(epoch * per_epoch, (epoch + 1) * per_epoch)
            )
        )
        got = trained[0].step_gradients[update]
        expected = toy.token_weights(matching, batch, theta, update=update, order=order)
        setting = f"group_norm {when}, 2 dp ranks x 2 micro-batches, 2 epochs: step {update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        other = toy.token_weights(whole_step, batch, theta, update=update, order=order)
        known["the step's token mean"] = max(
            known["the step's token mean"], toy.relative_difference(got, other)
        )
        other = toy.token_weights(alone, batch, theta, update=update, order=by_rank)
        known["each rank's micro-batch alone"] = max(
            known["each rank's micro-batch alone"], toy.relative_difference(got, other)
        )
    for (name, difference), control in zip(known.items(), (whole_step, alone), strict=True):
        setting = f"group_norm {when}, 2 dp ranks: max over steps vs {name}"
        conform(DIST, setting, control.spec_text(), difference, expected=False)


# --- the default KL: k1 in the reward -------------------------------------------------------


def test_default_kl_is_zero_while_the_policy_is_the_reference(orl, conform) -> None:
    """init_coef 0.01 with the reference model at the sampling policy (the first rollout): the k1
    penalty is 0 on every token, and advantages and gradient are the KL-free ones, but in float32:
    compute_approx_kl works in float32 (`log_probs.float()`) and compute_reward casts the
    advantage to the KL's dtype (`r.unsqueeze(1).to(kl.dtype)`), so with a reference model the
    per-token returns are float32 whatever the rewards' dtype."""
    batch = corner()
    outcome = run(orl, batch, Settings("group_norm", kl_coef=0.01), theta_ref=batch.theta_old)
    preset = PRESETS["group_norm"]
    expected = toy.advantages(parse_variant(preset), batch)[:, None] * batch.mask
    difference = toy.relative_difference(outcome.advantages, expected)
    conform(
        DIST,
        "group_norm advantages, k1 KL 0.01, policy = reference (float32)",
        preset,
        difference,
        expected=False,
    )
    assert difference < 2.0**-24
    matching = spec("group_norm")
    (got,) = outcome.step_gradients
    difference = toy.relative_difference(got, toy.token_weights(parse_variant(matching), batch))
    conform(
        DIST,
        "group_norm ratio 1, k1 KL 0.01, policy = reference (float32)",
        matching,
        difference,
        expected=False,
    )
    assert difference < 2.0**-24


def test_default_kl_shapes_each_tokens_return(orl, conform) -> None:
    """init_coef 0.01 once the policy has left the reference: each token's advantage becomes
    A_i - 0.01 sum over the later tokens t' >= t of (log pi_old - log pi_ref)(t'), per token and
    outside the group statistics: toyrl's `kl=k1_reward,beta=0.01`. OpenRLHF computes the KL, and
    so the returns, in float32, so they agree to float32 rounding (< 1e-6), recorded as such; the
    KL-free spec and toyrl's k3 in the loss are the controls that differ."""
    batch = toy.sampled(0, CONFIG)
    reference = toy.moved(batch, 6, scale=0.3)
    outcome = run(orl, batch, Settings("group_norm", kl_coef=0.01), theta_ref=reference)
    preset = PRESETS["group_norm"]
    plain = toy.advantages(parse_variant(preset), batch)[:, None] * batch.mask
    conform(
        DIST,
        "group_norm advantages, k1 KL 0.01, policy != reference",
        preset,
        toy.relative_difference(outcome.advantages, plain),
        expected=False,
    )
    k1 = (batch.logp() - batch.logp(reference)) * batch.mask
    to_go = np.cumsum(k1[:, ::-1], axis=1)[:, ::-1]
    assert toy.relative_difference(outcome.advantages, plain - 0.01 * to_go) < 1e-6  # float32 KL
    (got,) = outcome.step_gradients
    # the per-token returns vary along a response, and toyrl's closed form has their sum per token
    # kind (all a kind's tokens share one score): compare those sums (`toy.kind_sums`)
    in_reward = spec("group_norm", kl="k1_reward", beta=0.01)
    expected = toy.token_weights(parse_variant(in_reward), batch, theta_ref=reference)
    difference = toy.relative_difference(toy.kind_sums(batch, got), toy.kind_sums(batch, expected))
    setting = "group_norm ratio 1, k1 KL 0.01 in the reward, per-kind sums (float32)"
    conform(DIST, setting, in_reward, difference, expected=False)
    assert difference < 1e-6
    with_k3 = spec("group_norm", beta=0.01)
    expected = toy.token_weights(parse_variant(with_k3), batch, theta_ref=reference)
    control = toy.relative_difference(toy.kind_sums(batch, got), toy.kind_sums(batch, expected))
    setting = "group_norm ratio 1, k1 KL 0.01 in the reward, per-kind sums (control: k3 in the loss)"
    conform(DIST, setting, with_k3, control, expected=False)
    assert control > 1e-4


# --- 0.6.4: the flat-args trainer, a mean of per-response token means ---------------------------


def legacy_standins() -> None:
    """Two names 0.6.4's tested modules import at load time that tests/conformance/standins/openrlhf/
    (made for 0.11.2's imports) does not define, registered as stand-ins of the same kind (classes
    that raise if instantiated): `deepspeed.ops.adam` (DeepSpeedCPUAdam and FusedAdam, imported by
    openrlhf.utils.deepspeed) and `ray.actor.ActorHandle` (an annotation of ActorModelRayActor.fit,
    evaluated when openrlhf.trainer.ray.ppo_actor loads). scripts/conformance/openrlhf.sh's import
    check registers the same."""
    standin = importlib.import_module("_standin")
    ray = importlib.import_module("ray")
    adam = ModuleType("deepspeed.ops.adam")
    adam.DeepSpeedCPUAdam = standin.never_instantiated("deepspeed.ops.adam.DeepSpeedCPUAdam")
    adam.FusedAdam = standin.never_instantiated("deepspeed.ops.adam.FusedAdam")
    actor = ModuleType("ray.actor")
    actor.ActorHandle = standin.never_instantiated("ray.actor.ActorHandle")
    ray.actor = actor
    sys.modules.update({"deepspeed.ops": ModuleType("deepspeed.ops"), "deepspeed.ops.adam": adam})
    sys.modules["ray.actor"] = actor


@pytest.fixture(scope="module")
def legacy(installed: SimpleNamespace) -> SimpleNamespace:
    """OpenRLHF 0.6.4's modules (flat args; `ActorPPOTrainer.ppo_train_actor`; PolicyLoss(clip_eps)
    without token_level_loss); skips in a release with the hierarchical args."""
    if installed.scope != RESPONSE:
        pytest.skip(
            f"openrlhf {installed.version} is not a 0.6.x release (its PolicyLoss takes token_level_loss "
            "or its args are hierarchical): test_legacy_* test 0.6.4"
        )
    legacy_standins()
    names = {
        "torch": "torch",
        "loss": "openrlhf.models.loss",
        "utils": "openrlhf.models.utils",
        "maker": "openrlhf.trainer.ppo_utils.experience_maker",
        "replay": "openrlhf.trainer.ppo_utils.replay_buffer",
        "kl": "openrlhf.trainer.ppo_utils.kl_controller",
        "actor": "openrlhf.trainer.ray.ppo_actor",
    }
    modules = {key: trainer_module(name, DIST) for key, name in names.items()}
    return SimpleNamespace(**modules, version=installed.version, scope=installed.scope)


# What each estimator's 0.6.4 code computes: its fit() whitens the advantages over the rollout's
# tokens (NaiveReplayBuffer.normalize) for every estimator but group_norm and dr_grpo, so rloo's
# advantages, G / (G - 1) (r - group mean), come out as reinforce_baseline's: token_whiten.
LEGACY_ADVANTAGE = {
    "group_norm": "advantage=group_std_sample,std_eps=1e-09",
    "dr_grpo": "advantage=none",
    "rloo": "advantage=token_whiten",
    "reinforce_baseline": "advantage=token_whiten",
}
LEGACY_MATCHED = ("group_norm", "dr_grpo")  # in float64; the whitened ones in float32


def legacy_spec(estimator: str, aggregation: str = "seq_mean_token_mean", **extra: float | str) -> str:
    """The toyrl spec of a 0.6.4 estimator's advantages with an aggregation and schedule."""
    text = f"{LEGACY_ADVANTAGE[estimator]},aggregation={aggregation}"
    text += "".join(f",{key}={value}" for key, value in extra.items())
    return parse_variant(text).spec_text()


def legacy_args(settings: Settings, group: int) -> SimpleNamespace:
    """0.6.4's flat args (openrlhf/cli/train_ppo_ray.py's names and defaults) that the called code
    reads."""
    assert settings.dual_clip is None and settings.eps_clip_low_high == (0.2, 0.2)  # --eps_clip only
    return SimpleNamespace(
        advantage_estimator=settings.estimator,
        n_samples_per_prompt=group,
        reward_clip_range=(-10, 10),
        no_advantage_std_norm=False,
        use_kl_loss=False,
        aux_loss_coef=0,
        packing_samples=False,
    )


@contextlib.contextmanager
def cuda_is_the_cpu(torch: ModuleType) -> Iterator[None]:
    """0.6.4's compute_advantages_and_returns moves its tensors to "cuda" and back (`.to(device=
    "cuda")`, `Experience.to_device("cuda")`), and ppo_train_actor to torch.cuda.current_device():
    here "cuda" is the CPU (plumbing only: no value changes)."""
    to = torch.Tensor.to

    def on_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        args = tuple("cpu" if isinstance(a, str) and a.startswith("cuda") else a for a in args)
        if isinstance(kwargs.get("device"), str) and kwargs["device"].startswith("cuda"):
            kwargs["device"] = "cpu"
        return to(self, *args, **kwargs)

    with (
        mock.patch.object(torch.Tensor, "to", on_cpu),
        mock.patch.object(torch.cuda, "current_device", lambda: "cpu"),
    ):
        yield


def legacy_rollout(
    orl: SimpleNamespace, batch: toy.ToyBatch, settings: Settings
) -> tuple[Any, Any, np.ndarray]:
    """A toy batch as 0.6.4's experiences, through its own compute_advantages_and_returns and
    NaiveReplayBuffer (append, and `normalize` where fit() calls it); returns (args, buffer, the
    buffer's per-token advantages [N, T]). Restated, as plumbing: the micro rollout batches of
    `Samples` that generation makes (a one-token prompt, the response right-padded, a bool
    action_mask) and the `Experience` that make_experience builds from them with the models'
    forwards (the old log-probs from the toy; no reference model, so kl is 0; the info it records)."""
    torch = orl.torch
    _, group = batch.shape
    args = legacy_args(settings, group)
    rewards = torch.tensor(batch.rewards(parse_variant(PRESETS[settings.estimator])), dtype=torch.float64)
    old = torch.tensor(batch.logp(), dtype=torch.float64)
    lengths = batch.ramble + 1
    size = settings.rollout_micro_batch_size
    assert batch.responses % size == 0  # compute_advantages_and_returns chunks the rewards evenly
    experiences = []
    for start in range(0, batch.responses, size):
        rows = np.arange(start, start + size)
        width = int(lengths[rows].max())
        sequences = torch.zeros(size, 1 + width, dtype=torch.long)
        attention_mask = torch.zeros(size, 1 + width, dtype=torch.long)
        action_mask = torch.zeros(size, width, dtype=torch.bool)
        for k, i in enumerate(rows):
            sequences[k, 0], sequences[k, 1 : 1 + lengths[i]] = int(i) + 1, 7
            attention_mask[k, : 1 + lengths[i]] = 1
            action_mask[k, : lengths[i]] = True
        log_probs = old[rows, :width]
        kl = torch.zeros_like(log_probs)
        info = {
            "kl": orl.utils.masked_mean(kl, action_mask, dim=-1),
            "reward": rewards[rows],
            "response_length": torch.tensor(lengths[rows], dtype=torch.float),
            "total_length": torch.tensor(lengths[rows] + 1, dtype=torch.float),
            "num_actions": width,
        }
        experiences.append(
            orl.maker.Experience(
                sequences, log_probs, None, None, None, None, attention_mask, action_mask, info, kl
            )
        )
    maker = instance(
        orl.maker.RemoteExperienceMaker,
        strategy=SimpleNamespace(args=args),
        advantage_estimator=settings.estimator,
        kl_ctl=orl.kl.FixedKLController(0.0),
        packing_samples=False,
    )
    with cuda_is_the_cpu(torch):
        experiences = maker.compute_advantages_and_returns(experiences, gamma=1.0, lambd=1.0)
    buffer = instance(
        orl.replay.NaiveReplayBuffer,
        sample_batch_size=settings.micro_train_batch_size or batch.responses,
        limit=0,
        cpu_offload=False,
        packing_samples=False,
        items=[],
    )
    for experience in experiences:
        buffer.append(experience)
    if settings.estimator not in ["group_norm", "dr_grpo"]:  # as ActorPPOTrainer.fit calls it
        one_rank = SimpleNamespace(all_reduce=lambda data, op="mean": data)
        buffer.normalize(one_rank, "advantages", divide_by_std=not args.no_advantage_std_norm)
    advantages = np.zeros((batch.responses, batch.width))
    for item in buffer.items:
        advantages[int(item.sequences[0]) - 1, : len(item.advantages)] = item.advantages.numpy()
    return args, buffer, advantages


class LeftPaddedLeafActor:
    """0.6.4's actor forward, `actor(sequences, num_actions, attention_mask, ...)`, on a leaf of
    per-token log-probs [N, T]: its buffer collates every field left-padded, so in a micro-batch
    response i's tokens are the last |o_i| of the num_actions columns; each row is named by its
    prompt token (the first attended one). Records the rows of every call, the DataLoader's order."""

    def __init__(self, leaf: Any) -> None:
        self.leaf = leaf
        self.rows: list[list[int]] = []

    def train(self) -> None:
        pass

    def __call__(
        self, sequences: Any, num_actions: int, attention_mask: Any, **kwargs: Any
    ) -> tuple[Any, None]:
        torch = importlib.import_module("torch")
        assert kwargs.get("ring_attn_group") is None and kwargs.get("packed_seq_lens") is None
        first = attention_mask.long().argmax(dim=1)
        rows = sequences[torch.arange(len(sequences)), first] - 1
        lengths = sequences.shape[1] - 1 - first
        position = torch.arange(num_actions)[None, :] - (num_actions - lengths)[:, None]
        self.rows.append(rows.tolist())
        picked = self.leaf[rows[:, None], position.clamp(min=0)]
        return torch.where(position >= 0, picked, torch.zeros((), dtype=picked.dtype)), None


def legacy_run(
    orl: SimpleNamespace,
    batch: toy.ToyBatch,
    settings: Settings,
    theta: np.ndarray | None = None,
    seed: int = 0,
) -> Outcome:
    """One 0.6.4 PPO round on a toy batch at one rank: advantages (legacy_rollout), then
    `ActorPPOTrainer.ppo_train_actor` itself (its DataLoader, shuffle=True unless ring attention,
    drop_last, one pass per epoch; `training_step` with its PolicyLoss(eps_clip)) with the policy
    at theta (None: theta_old). Restated, as glue: DeepSpeed's engine (`AccumulatingStrategy`, gas =
    train_batch_size // micro_train_batch_size) and the fields BasePPOTrainer.__init__ sets (it
    needs CUDA); ppo_train's Ray / torch.distributed calls around ppo_train_actor are not made."""
    torch = orl.torch
    args, buffer, advantages = legacy_rollout(orl, batch, settings)
    micro = settings.micro_train_batch_size or batch.responses
    step_size = settings.train_batch_size or batch.responses
    at = batch.logp() if theta is None else batch.logp(theta)
    leaf = torch.tensor(at, dtype=torch.float64).requires_grad_(True)
    strategy = AccumulatingStrategy(leaf, step_size // micro)
    actor = LeftPaddedLeafActor(leaf)
    trainer = instance(
        orl.actor.ActorPPOTrainer,
        args=args,
        strategy=strategy,
        actor=actor,
        actor_loss_fn=orl.loss.PolicyLoss(0.2),  # BasePPOTrainer: PolicyLoss(eps_clip), --eps_clip 0.2
        aux_loss=False,
        kl_ctl=orl.kl.FixedKLController(0.0),  # read only with --use_kl_loss (off)
        initial_model=None,
        pretrain_dataloader=None,
        actor_optim=None,
        actor_scheduler=SimpleNamespace(get_last_lr=lambda: [0.0]),
        ema_model=None,
        replay_buffer=buffer,
        max_epochs=settings.max_epochs,
        dataloader_pin_memory=False,
    )
    with torch.random.fork_rng(devices=[]), cuda_is_the_cpu(torch):
        torch.manual_seed(seed)
        trainer.ppo_train_actor(0)
    assert strategy.micro_steps == settings.max_epochs * (batch.responses // micro) and leaf.grad is None
    per_epoch = batch.responses // micro
    orders = [
        np.concatenate(actor.rows[e * per_epoch : (e + 1) * per_epoch]) for e in range(settings.max_epochs)
    ]
    assert all(sorted(order.tolist()) == list(range(batch.responses)) for order in orders)
    return Outcome(advantages, strategy.step_gradients, [], orders, actor.rows, [])


def legacy_run_advantages(orl: SimpleNamespace, batch: toy.ToyBatch, settings: Settings) -> np.ndarray:
    """The per-token advantages [N, T] that 0.6.4 trains on."""
    return legacy_rollout(orl, batch, settings)[2]


@pytest.mark.parametrize("rollout_micro", [1, 4, 8])
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 0", "sampled seed 2"])
@pytest.mark.parametrize("estimator", list(PRESETS))
def test_legacy_advantages(legacy, conform, estimator: str, batch_name: str, rollout_micro: int) -> None:
    """0.6.4's compute_advantages_and_returns over micro rollout batches of 1, 4 or 8 (its CLI's
    default), then its replay buffer's whitening where fit() applies it: group_norm and dr_grpo are
    toyrl's group_std_sample (eps 1e-9) and none, as in 0.11.2; reinforce_baseline is token_whiten
    (float32), as in 0.11.2; rloo is whitened too (0.11.2's is not): token_whiten, not rloo."""
    batch = BATCHES[batch_name]()
    got = legacy_run_advantages(legacy, batch, Settings(estimator, rollout_micro_batch_size=rollout_micro))
    matching = legacy_spec(estimator)
    expected = toy.advantages(parse_variant(matching), batch)[:, None] * batch.mask
    setting = f"advantages {estimator}, {batch_name}, rollout micro-batch {rollout_micro}"
    difference = toy.relative_difference(got, expected)
    if estimator in LEGACY_MATCHED:
        conform(DIST, setting, matching, difference)
    else:
        conform_float32(conform, setting, matching, difference)
    if estimator == "rloo":
        preset = PRESETS[estimator]
        plain = toy.advantages(parse_variant(preset), batch)[:, None] * batch.mask
        conform(DIST, setting, preset, toy.relative_difference(got, plain), expected=False)


@pytest.mark.parametrize("micro", [16, 4])
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 0"])
@pytest.mark.parametrize("estimator", list(PRESETS))
def test_legacy_first_update(legacy, conform, estimator: str, batch_name: str, micro: int) -> None:
    """0.6.4 at ratio 1, one optimiser step of the whole rollout in 1 or 4 micro-batches: PolicyLoss
    is `masked_mean(loss, action_mask, dim=-1).mean()`, each response's token mean averaged over the
    micro-batch, and DeepSpeed's 1 / gas averages the micro-batches: toyrl's seq_mean_token_mean
    (per micro-batch; the micro-batches are equal-sized, so it is the step's mean too), not the
    0.11.2 presets' token_mean."""
    batch = BATCHES[batch_name]()
    settings = Settings(estimator, loss_agg_mode="seq-mean-token-mean", micro_train_batch_size=micro)
    (got,) = legacy_run(legacy, batch, settings, seed=micro).step_gradients
    gas = batch.responses // micro
    extra: dict[str, float | str] = {"micro_batches": gas, "per_micro_batch": "true"} if gas > 1 else {}
    matching = legacy_spec(estimator, **extra)
    difference = toy.relative_difference(got, toy.token_weights(parse_variant(matching), batch))
    setting = f"{estimator} ratio 1, {batch_name}, gas {gas}"
    if estimator in LEGACY_MATCHED:
        conform(DIST, setting, matching, difference)
    else:
        conform_float32(conform, setting, matching, difference)
    step_mean = toy.token_weights(parse_variant(legacy_spec(estimator)), batch)
    assert toy.relative_difference(got, step_mean) < FLOAT32  # equal micro-batches: the same mean
    token_mean = legacy_spec(estimator, "token_mean")
    expected = toy.token_weights(parse_variant(token_mean), batch)
    conform(DIST, setting, token_mean, toy.relative_difference(got, expected), expected=False)


@pytest.mark.parametrize("later", [False, True])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("batch_name", ["corner batch", "sampled seed 1"])
def test_legacy_mini_batches(legacy, conform, batch_name: str, schedule: str, later: bool) -> None:
    """0.6.4's ppo_train_actor over several optimiser steps (train_batch_size < the rollout, gas
    micro-batches each, 1 or 2 epochs, its DataLoader reshuffled each epoch), group_norm, at ratio 1
    and at a moved theta (the clip at --eps_clip 0.2 acting in every step): step u is toyrl's
    update u with seq_mean_token_mean per micro-batch, micro_batches = gas, in the recovered order.
    The micro-batches hold micro_train_batch_size responses each (drop_last), so the step's mean of
    response means is the same number (asserted). Known differences: token_mean over the step
    (0.11.2) and per micro-batch (0.10.3)."""
    batch = BATCHES[batch_name]()
    step_size, micro, epochs = SCHEDULES[schedule]
    settings = Settings(
        "group_norm",
        loss_agg_mode="seq-mean-token-mean",
        micro_train_batch_size=micro,
        train_batch_size=step_size,
        max_epochs=epochs,
    )
    theta = toy.moved(batch, MOVED, scale=1.0) if later else None
    outcome = legacy_run(legacy, batch, settings, theta=theta, seed=SHUFFLE_SEED)
    matching = parse_variant(schedule_spec("group_norm", settings, batch.responses, per_micro_batch="true"))
    step_mean = parse_variant(schedule_spec("group_norm", settings, batch.responses))
    token_settings = dataclasses.replace(settings, loss_agg_mode="token-mean")
    controls = {
        "the step's token mean": parse_variant(schedule_spec("group_norm", token_settings, batch.responses)),
        "each micro-batch's token mean": parse_variant(
            schedule_spec("group_norm", token_settings, batch.responses, per_micro_batch="true")
        ),
    }
    ratio = np.exp(batch.logp(theta) - batch.logp()) if later else np.ones(batch.mask.shape)
    clipped = ((ratio < 0.8) | (ratio > 1.2)) & batch.mask & (outcome.advantages != 0)
    when = "moved theta" if later else "ratio 1"
    known = dict.fromkeys(controls, 0.0)
    for step in steps(outcome, settings, batch.responses):
        got = outcome.step_gradients[step.update]
        outside = np.ones(batch.responses, bool)
        outside[step.members] = False
        assert (got[outside] == 0).all() and np.abs(got).max() > 0
        assert clipped[step.members].any() if later else not clipped.any()
        expected = toy.token_weights(matching, batch, theta, update=step.update, order=step.order)
        setting = f"group_norm {when}, {schedule}, {batch_name}: step {step.update}"
        conform(DIST, setting, matching.spec_text(), toy.relative_difference(got, expected))
        same = toy.token_weights(step_mean, batch, theta, update=step.update, order=step.order)
        assert toy.relative_difference(got, same) < 1e-12
        for name, control in controls.items():
            other = toy.token_weights(control, batch, theta, update=step.update, order=step.order)
            known[name] = max(known[name], toy.relative_difference(got, other))
    for name, difference in known.items():
        setting = f"group_norm {when}, {schedule}, {batch_name}: max over steps vs {name}"
        conform(DIST, setting, controls[name].spec_text(), difference, expected=False)
    assert not np.array_equal(outcome.orders[0], np.arange(batch.responses))  # the DataLoader shuffles


def test_stand_ins_are_not_the_real_packages() -> None:
    """The stand-ins carry no metadata (so transformers / accelerate / peft treat deepspeed and
    flash_attn as absent) and raise if the tested code ever called them."""
    trainer_module("openrlhf.models.loss", DIST)
    standin = importlib.import_module("_standin")
    ray = importlib.import_module("ray")
    with pytest.raises(standin.StandInCalled):
        ray.get(None)
    metadata = importlib.import_module("importlib.metadata")
    for name in ("deepspeed", "flash_attn", "vllm", "ray"):
        with pytest.raises(metadata.PackageNotFoundError):
            metadata.version(name)


# --- DAPO's soft overlong punishment ----------------------------------------------------------


@pytest.mark.parametrize(("buffer", "factor"), [(8.0, 1.0), (20.0, 0.5)])
@pytest.mark.parametrize("batch_name", ["corner", "sampled 0"])
def test_overlong_penalty_is_soft_overlong(conform, batch_name: str, buffer: float, factor: float) -> None:
    """`--reward.overlong_buffer_len` (openrlhf/trainer/ppo_utils/length_penalty.py's
    apply_overlong_penalty): the reward plus -min(|o| - (max_new_tokens - len), len) / len x factor
    where positive, on the reward function's own score (0 / 1 here), is toyrl's
    `reward=soft_overlong,incorrect=0` with buffer = len / max_new_tokens (max_new_tokens the
    response width, T = cap + 1); the unpunished 0 / 1 reward is the control."""
    import importlib.util

    trainer_module("openrlhf.models.loss", DIST)  # skips (fails under the suite) without OpenRLHF
    if importlib.util.find_spec("openrlhf.trainer.ppo_utils.length_penalty") is None:
        pytest.skip("this OpenRLHF release has no length_penalty.apply_overlong_penalty (0.11.x has)")
    torch = pytest.importorskip("torch")
    penalty = trainer_module("openrlhf.trainer.ppo_utils.length_penalty", DIST)
    batch = corner() if batch_name == "corner" else toy.sampled(0, CONFIG)
    plain = batch.rewards(parse_variant("dr_grpo"))
    experiences = [
        SimpleNamespace(
            rewards=torch.tensor(plain[rows], dtype=torch.float64),
            response_length=torch.tensor((batch.ramble + 1)[rows]),  # |o|: the approach token and the ramble
        )
        for rows in np.array_split(np.arange(batch.responses), 2)
    ]
    penalised = penalty.apply_overlong_penalty(experiences, batch.width, buffer, factor)
    got = torch.cat([e.rewards for e in experiences]).numpy()
    spec = f"advantage=none,reward=soft_overlong,buffer={buffer / batch.width!r},penalty_factor={factor}"
    spec += ",incorrect=0"
    want = batch.rewards(parse_variant(spec))
    assert penalised > 0 and (want < plain).sum() == penalised  # the punishment acts, on as many
    setting = f"overlong penalty, buffer {buffer:g} of {batch.width} x {factor} | {batch_name}"
    conform(DIST, setting, spec, toy.relative_difference(got, want))
    control = toy.relative_difference(got, plain)
    conform(DIST, f"{setting} (control: no punishment)", "dr_grpo", control, expected=False)


@pytest.mark.parametrize("estimator", ["group_norm", "dr_grpo"])
def test_micro_batch_scope_defaults_are_the_versioned_presets(
    micro_batch_scope, conform, estimator: str
) -> None:
    """0.10.3 at its default train.micro_batch_size=1: each micro-batch is one sample, so the token
    mean of each is that response's own mean, and one optimiser step over the rollout is the
    per-response mean averaged: the presets openrlhf_group_norm@0.10.3 and openrlhf_dr_grpo@0.10.3.
    0.11.2's token mean over the step is the control that differs."""
    orl = micro_batch_scope
    batch = corner()
    settings = Settings(estimator, micro_train_batch_size=1, train_batch_size=batch.responses, max_epochs=1)
    outcome = run(orl, batch, settings, seed=SHUFFLE_SEED)
    (got,) = outcome.step_gradients
    preset = f"openrlhf_{estimator}@0.10.3"
    setting = f"{estimator} ratio 1, train.micro_batch_size=1 (the default), one step"
    conform(
        DIST, setting, preset, toy.relative_difference(got, toy.token_weights(parse_variant(preset), batch))
    )
    newer = "openrlhf_group_norm" if estimator == "group_norm" else "openrlhf_dr_grpo"
    control = toy.relative_difference(got, toy.token_weights(parse_variant(newer), batch))
    conform(DIST, f"{setting} (control: 0.11.2's step token mean)", newer, control, expected=False)


# --- train_ppo_ray.py's own arguments ----------------------------------------------------------


GROUPS = ["--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2"]  # no critic


def launched(orl: SimpleNamespace, *argv: str) -> tuple[argparse.ArgumentParser, Any]:
    """train_ppo_ray.py run as `python -m openrlhf.cli.train_ppo_ray GROUPS ARGV` (GROUPS: an
    estimator without a critic, whose model path gae would need) up to train(args): its
    parser (recorded by parse_args) and its args as the script's checks leave them (recorded by
    hierarchize, then completed in place); train's first call, ray.is_initialized, is the Ray
    stand-in's, which stops it."""
    from _standin import StandInCalled  # tests/conformance/standins/openrlhf, on the environment's path

    config, seen = orl.config, {}
    parse, hierarchize = argparse.ArgumentParser.parse_args, config.hierarchize

    def recording_parse(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        seen["parser"] = self
        return parse(self, *args, **kwargs)

    def recording_hierarchize(args: Any) -> Any:
        seen["args"] = hierarchize(args)
        return seen["args"]

    with (
        mock.patch.object(sys, "argv", ["train_ppo_ray.py", *GROUPS, *argv]),
        mock.patch.object(argparse.ArgumentParser, "parse_args", recording_parse),
        mock.patch.object(config, "hierarchize", recording_hierarchize),
        pytest.raises(StandInCalled, match=r"ray\.is_initialized"),
    ):
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    return seen["parser"], seen["args"]


def test_every_argument_is_known_and_none_misspelt(orl) -> None:
    """Every option of the installed parser (its names without dashes, `--actor.muon.no_nesterov`
    too) is a name toyrl's OpenRLHF knows, and a command line of all of them has no key called
    misspelt (those toyrl reads at their defaults, the estimator group_norm)."""
    from toyrl.trainers import registry

    parser, _ = launched(orl)
    names = [
        option[2:]
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    ]
    trainer = registry()["openrlhf"]
    release = trainer.releases[orl.version]
    assert len(names) > 150 and not [name for name in names if not trainer.knows(name)]
    given = {name: release.settings[name].default if name in release.settings else "x" for name in names}
    given |= {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 8}
    assert resolve("openrlhf", orl.version, given, frozenset(names)).misspelt == {}


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--actor.eps_clip", "0.3"],
        ["--actor.eps_clip_low_high", "0.1", "0.28"],
        ["--actor.eps_clip", "0.3", "--actor.eps_clip_low_high", "0.1", "0.28"],
        ["--actor.eps_clip_low_high", "10", "0.28"],
    ],
    ids=" ".join,
)
def test_the_clip_range_is_the_scripts(orl, argv: list[str]) -> None:
    """PolicyLoss's clip is args.actor.eps_clip_low_high (ActorPPOTrainer.__init__), which
    train_ppo_ray.py sets to (eps_clip, eps_clip) where it is not given: toyrl's epsilon and
    epsilon_high from the same command line are the script's pair (a LOW above 1, a bound below 0
    that no ratio reaches, is the toy's 1: the same clip)."""
    _, args = launched(orl, *argv)
    low, high = args.actor.eps_clip_low_high
    settings: dict[str, Any] = {"algo.advantage.estimator": "group_norm"}
    for word in argv:  # each option's words, as argparse groups them
        if word.startswith("--"):
            name = word[2:]
            settings[name] = []
        else:
            settings[name].append(word)
    settings = {key: value[0] if len(value) == 1 else value for key, value in settings.items()}
    objective = parse_variant(resolve("openrlhf", orl.version, settings).mapping.spec).stage("objective")
    assert (objective.epsilon, objective.clip_high) == (min(low, 1.0), high)


def test_the_replay_buffer_s_order_is_kept_where_toyrl_says(orl) -> None:
    """ppo_train's DataLoader shuffles unless `should_shuffle` is false: the names it reads are ring
    attention's group, --ds.tensor_parallel_size and --train.dynamic_batch_enable (its syntax
    tree); toyrl keeps the buffer's order (shuffle=none) for each of those settings
    (--ds.ring_attn_size above 1 makes the ring group, DeepspeedStrategy.setup_ring_attn), and
    shuffles each epoch otherwise. test_no_shuffle_with_tensor_parallelism runs one of them."""
    source = inspect.getsource(orl.actor.ActorPPOTrainer.ppo_train)
    tree = ast.parse(textwrap.dedent(source))
    (assignment,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "should_shuffle"
    ]
    read = {ast.unparse(node) for node in ast.walk(assignment.value) if isinstance(node, ast.Attribute)}
    read = {name for name in read if not any(other.startswith(name + ".") for other in read)}
    assert read == {
        "self.strategy.ring_attn_group",
        "self.args.ds.tensor_parallel_size",
        "self.args.train.dynamic_batch_enable",
    }, read
    base = {
        "algo.advantage.estimator": "group_norm",
        "rollout.batch_size": 16,
        "rollout.n_samples_per_prompt": 8,
    }
    base |= {"train.batch_size": 32}
    assert parse_variant(resolve("openrlhf", orl.version, base).mapping.spec).schedule.shuffle == "epoch"
    for setting, value in (
        ("train.dynamic_batch_enable", True),
        ("ds.tensor_parallel_size", 2),
        ("ds.ring_attn_size", 2),
    ):
        variant = parse_variant(resolve("openrlhf", orl.version, base | {setting: value}).mapping.spec)
        assert variant.schedule.shuffle == "none" and variant.schedule.mini_batches == 4, setting


# --- each release toyrl models, from its own wheel ----------------------------------------------

RELEASE_WHEELS = os.path.join(
    sys.prefix, "openrlhf-releases"
)  # scripts/conformance/openrlhf.sh downloads them
RELEASE_FILES = (
    "openrlhf/cli/train_ppo_ray.py",
    "openrlhf/models/loss.py",
    "openrlhf/utils/loss_utils.py",
    "openrlhf/trainer/ppo_trainer.py",
    "openrlhf/trainer/ray/ppo_actor.py",
    "openrlhf/trainer/ppo_utils/experience_maker.py",
)


def release_files(version: str) -> dict[str, str]:
    """A release's files that toyrl's table follows (those it has): the installed release's, or
    those in its wheel (under openrlhf/ or openrlhf-VERSION.data/purelib/openrlhf/), never imported."""
    import glob
    import zipfile

    if version == version_of(DIST):
        spec = importlib.util.find_spec("openrlhf")
        assert spec is not None and spec.origin is not None
        root = os.path.dirname(os.path.dirname(spec.origin))
        paths = [path for path in RELEASE_FILES if os.path.exists(os.path.join(root, path))]
        return {path: open(os.path.join(root, path)).read() for path in paths}
    wheels = glob.glob(os.path.join(RELEASE_WHEELS, f"openrlhf-{version}-*.whl"))
    assert len(wheels) == 1, (
        f"openrlhf {version}'s wheel is missing: scripts/conformance/openrlhf.sh downloads it"
    )
    with zipfile.ZipFile(wheels[0]) as archive:
        members = {name.split("/purelib/")[-1]: name for name in archive.namelist()}
        return {path: archive.read(members[path]).decode() for path in RELEASE_FILES if path in members}


def parser_arguments(source: str) -> dict[str, dict[str, Any]]:
    """train_ppo_ray.py's `add_argument` calls, read with `ast`: each option's name without its
    dashes -> its default (store_true: False; a non-literal: `...`), choices (or None), action,
    type and nargs. An option named by an f-string in a `for prefix in ("actor", "critic")` loop
    is one option per value of the loop."""
    arguments: dict[str, dict[str, Any]] = {}

    def literal(keywords: dict[str, ast.expr], key: str, absent: Any) -> Any:
        try:
            return ast.literal_eval(keywords[key]) if key in keywords else absent
        except ValueError:
            return ...

    def names(option: ast.expr, loop: dict[str, str]) -> list[str]:
        if isinstance(option, ast.Constant):
            return [str(option.value)]
        if isinstance(option, ast.JoinedStr):
            parts = [
                str(part.value) if isinstance(part, ast.Constant) else loop[ast.unparse(part.value)]
                for part in option.values
            ]
            return ["".join(parts)]
        return []

    def visit(node: ast.AST, loop: dict[str, str]) -> None:
        literal_loop = isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple | ast.List)
        if isinstance(node, ast.For) and literal_loop and isinstance(node.target, ast.Name):
            for value in ast.literal_eval(node.iter):
                for child in node.body:
                    visit(child, loop | {node.target.id: value})
            return
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
            action = literal(keywords, "action", None)
            argument = {
                "default": literal(keywords, "default", False if action == "store_true" else None),
                "choices": tuple(literal(keywords, "choices", ())) or None,
                "action": action,
                "type": ast.unparse(keywords["type"]) if "type" in keywords else None,
                "nargs": literal(keywords, "nargs", None),
            }
            for option in node.args:
                for name in names(option, loop):
                    if name.startswith("--"):
                        arguments[name[2:]] = argument
        for child in ast.iter_child_nodes(node):
            visit(child, loop)

    visit(ast.parse(source), {})
    return arguments


@pytest.fixture(scope="module")
def releases(installed: SimpleNamespace) -> Any:
    """toyrl's OpenRLHF table, where the environment holds the release wheels: the default build
    (the newest release modelled) downloads them; the builds of older releases skip."""
    from toyrl.trainers.openrlhf import TRAINER

    if installed.version != TRAINER.latest:
        pytest.skip(
            f"openrlhf {installed.version}: the wheels of the releases come with the {TRAINER.latest} build"
        )
    return TRAINER


def test_each_release_s_settings_are_its_parser_s(releases) -> None:
    """Per release modelled, from its own train_ppo_ray.py: every setting toyrl reads is an
    argument with the same default, choices and kind (store_true: bool; nargs 2: the clip pair);
    every argument that toyrl reads in some release of the same naming (flat before 0.10.2,
    dotted since) is a setting of it, unless toyrl reads it no more (`UNREAD_FROM`); every name it
    refuses, and every other release's name it reads as its own, is not an argument."""
    from toyrl.trainers.openrlhf import RENAMED_IN, UNREAD_FROM, ClipPair, _at

    assert len(releases.releases) >= 20
    for version, release in releases.releases.items():
        arguments = parser_arguments(release_files(version)["openrlhf/cli/train_ppo_ray.py"])
        assert len(arguments) > 80, version
        for name, setting in release.settings.items():
            assert name in arguments, (version, name)
            argument = arguments[name]
            default = argument["default"]
            assert setting.default == default and (setting.default is None) == (default is None), (
                version,
                name,
                default,
            )
            assert (setting.choices or None) == argument["choices"], (version, name, argument["choices"])
            assert (setting.kind is bool) == (argument["action"] == "store_true"), (version, name)
            if isinstance(setting, ClipPair):
                assert (argument["type"], argument["nargs"]) == ("float", 2), (version, name)
            elif setting.kind is not bool and not setting.choices:
                assert argument["type"] == setting.kind.__name__, (version, name, argument["type"])
        flat = _at(version) < _at(RENAMED_IN)
        read = {
            name
            for other in releases.releases.values()
            for name in other.settings
            if ("." not in name) == flat
        }
        unread = {name for name, since in UNREAD_FROM.items() if _at(version) >= _at(since)}
        assert not (read & set(arguments)) - unread - set(release.settings), version
        assert not set(release.refuses) & set(arguments), version
        assert not set(release.aliases) & set(arguments), version
        # a command line of every argument (those toyrl reads at their defaults): none misspelt
        given = {
            name: release.settings[name].default if name in release.settings else "x" for name in arguments
        }
        estimator = "algo.advantage.estimator" if not flat else "advantage_estimator"
        given[estimator] = "group_norm"
        assert resolve("openrlhf", version, given, frozenset(arguments)).misspelt == {}, version


def test_each_release_s_loss_path_is_toyrl_s(releases) -> None:
    """Per release modelled, from its own code read with `ast`: the estimators whose advantages it
    whitens over the tokens (the `if` on the estimator around `normalize` / `rsqrt`), the scope of
    its token mean (PolicyLoss's token_level_loss from 0.7.0, iter_grad_accum_global_norm from
    0.10.4), gspo's per-sample mean (PolicyLoss turning token_level_loss off, from 0.8.9) and what
    keeps the replay buffer's order (the DataLoader's `shuffle`): toyrl's mapping of that release
    says the same."""
    from toyrl.trainers.openrlhf import ADVANTAGE, RENAMED_0_10_2, RENAMED_IN, _at

    modelled = set(ADVANTAGE)
    for version, release in releases.releases.items():
        files = release_files(version)
        flat = _at(version) < _at(RENAMED_IN)
        own = {new: old for old, new in RENAMED_0_10_2.items() if old in release.settings} if flat else {}

        def spec(settings: dict[str, Any], own: dict[str, str] = own, version: str = version) -> Any:
            given = {own.get(key, key): value for key, value in settings.items()}
            return parse_variant(resolve("openrlhf", version, given).mapping.spec)

        estimators = [
            e
            for e in release.settings[own.get("algo.advantage.estimator", "algo.advantage.estimator")].choices
        ]
        whitened = set()
        for path in (
            "openrlhf/trainer/ppo_utils/experience_maker.py",
            "openrlhf/trainer/ray/ppo_actor.py",
            "openrlhf/trainer/ppo_trainer.py",
        ):
            for node in ast.walk(ast.parse(files.get(path, ""))):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
                    continue
                if not ast.unparse(node.test.left).endswith(("advantage_estimator", "advantage.estimator")):
                    continue
                called = {
                    n.func.attr
                    for b in node.body
                    for n in ast.walk(b)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                }
                if not called & {"normalize", "rsqrt"}:
                    continue
                (op,), (right,) = node.test.ops, node.test.comparators
                listed = {right.value} if isinstance(right, ast.Constant) else set(ast.literal_eval(right))
                whitened |= listed if isinstance(op, ast.In | ast.Eq) else set(estimators) - listed
        assert whitened, version
        for estimator in modelled & set(estimators):
            group = {"algo.advantage.estimator": estimator, "rollout.n_samples_per_prompt": 8}
            names = spec(group).names()
            assert (names["advantage"] == "token_whiten") == (estimator in whitened), (version, estimator)

        loss = ast.parse(files["openrlhf/models/loss.py"])
        (policy,) = [n for n in loss.body if isinstance(n, ast.ClassDef) and n.name == "PolicyLoss"]
        (init,) = [n for n in policy.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        token_level = "token_level_loss" in [a.arg for a in init.args.args]
        gspo_by_sample = any(
            isinstance(n, ast.If)
            and "gspo" in ast.unparse(n.test)
            and "token_level_loss" in ast.unparse(n.body[0])
            for n in ast.walk(init)
        )
        utils = ast.parse(files.get("openrlhf/utils/loss_utils.py", ""))
        step = "iter_grad_accum_global_norm" in {n.name for n in utils.body if isinstance(n, ast.FunctionDef)}
        steps = {"algo.advantage.estimator": "dr_grpo" if "dr_grpo" in estimators else "group_norm"}
        steps |= {"train.batch_size": 8, "rollout.batch_size": 2, "rollout.n_samples_per_prompt": 4}
        if own.get("train.micro_batch_size", "train.micro_batch_size") in release.settings:
            steps["train.micro_batch_size"] = 2  # 4 micro-batches a step where their size matters
        variant = spec(steps)
        scope = "step" if step else "micro-batch" if token_level else "response"
        got = (
            "micro-batch"
            if variant.normaliser.per_micro_batch
            else "response"
            if variant.names()["normaliser"] == "seq_mean_token_mean"
            else "step"
        )
        assert got == scope, (version, got, scope)
        if "actor.policy_loss_type" in release.settings or "policy_loss_type" in release.settings:
            gspo = spec(steps | {"actor.policy_loss_type": "gspo"})
            by_sample = gspo.names()["normaliser"] == "seq_mean_token_mean"
            assert by_sample == (gspo_by_sample or scope == "response"), version

        tree = ast.parse(
            files["openrlhf/trainer/ray/ppo_actor.py"] + "\n" + files["openrlhf/trainer/ppo_trainer.py"]
        )
        read: set[str] = set()
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for call in ast.walk(function):
                keywords = {k.arg: k.value for k in getattr(call, "keywords", [])}
                if (
                    not (isinstance(call, ast.Call) and ast.unparse(call.func).endswith("DataLoader"))
                    or "shuffle" not in keywords
                ):
                    continue
                if not any("replay_buffer" in ast.unparse(a) for a in call.args):
                    continue
                names = {n.id for n in ast.walk(keywords["shuffle"]) if isinstance(n, ast.Name)}
                sources = [keywords["shuffle"]] + [
                    a.value
                    for a in ast.walk(function)
                    if isinstance(a, ast.Assign) and ast.unparse(a.targets[0]) in names
                ]
                read |= {
                    ast.unparse(n).rpartition(".")[2]
                    for s in sources
                    for n in ast.walk(s)
                    if isinstance(n, ast.Attribute)
                }
        keepers = {
            "ring_attn_group": "ds.ring_attn_size",
            "ds_tensor_parallel_size": "ds.tensor_parallel_size",
            "tensor_parallel_size": "ds.tensor_parallel_size",
            "use_dynamic_batch": "train.dynamic_batch_enable",
            "dynamic_batch_enable": "train.dynamic_batch_enable",
        }
        keeping = {keepers[name] for name in read if name in keepers}
        assert "ds.ring_attn_size" in keeping, (version, read)
        base = {
            "algo.advantage.estimator": "group_norm",
            "rollout.batch_size": 16,
            "rollout.n_samples_per_prompt": 8,
            "train.batch_size": 32,
        }
        for setting, value in (
            ("ds.ring_attn_size", 2),
            ("ds.tensor_parallel_size", 2),
            ("train.dynamic_batch_enable", True),
        ):
            if own.get(setting, setting) not in release.settings:
                assert setting not in keeping, (version, setting)
                continue
            shuffle = spec(base | {setting: value}).schedule.shuffle
            assert (shuffle == "none") == (setting in keeping), (version, setting, shuffle)
