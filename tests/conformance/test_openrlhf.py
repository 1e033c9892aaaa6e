"""OpenRLHF (openrlhf==0.11.2) against toyrl's `openrlhf_*` presets.

Toy batches go through the installed trainer's own steps, in the order its PPO loop runs them:
rollout samples (one `Experience` per response, as `SamplesGenerator` makes them: a one-token
prompt, the response, `action_mask` over the response) -> `RemoteExperienceMaker.
split_rollout_samples` (micro rollout batches) -> `compute_advantages_and_returns` (the advantage
estimators, the KL-in-reward shaping, the per-token returns and whitening) -> `NaiveReplayBuffer.
append` / `collate_fn` and a `DataLoader` as in `ActorPPOTrainer.ppo_train` (shuffled micro
train batches) -> `iter_grad_accum_global_norm` (the loss normaliser of each optimiser step) ->
`ActorPPOTrainer.training_step` with its `PolicyLoss`. The methods are called on minimal stand-in
`self` objects; the actor's forward pass is a leaf tensor of per-token log-probabilities (float64),
so autograd gives d loss / d logp per token, which is compared with toyrl's (`toy.token_weights`).
Restated here, as glue only: DeepSpeed's engine, which scales every micro-batch loss by
1 / gradient_accumulation_steps before backward (`_optimizer_step_loss_norm` in
openrlhf/utils/loss_utils.py pre-compensates exactly that) and steps the optimiser at the end of
each accumulation window; what `make_experience` attaches from the Ray model forwards (the actor's
log-probs and `compute_approx_kl` against the reference's); the `PolicyLoss` arguments that
`ActorPPOTrainer.__init__` takes from the args.

What was found (0.11.2):
- The advantages of `group_norm`, `dr_grpo` and `rloo` are toyrl's `group_std_sample` (sample std,
  eps 1e-9), `none` and `rloo`, on every token of the response. `reinforce_baseline` then whitens
  the per-token returns over all the rollout's tokens (token-weighted mean, population variance,
  `var.clamp(min=1e-8).rsqrt()`, in float32): no toyrl stage does that, and its preset
  (`batch_whiten`) differs. `--reward.clip_range` (default -10, 10) clamps the estimator's output,
  so a group_norm advantage above 10 (a lone success in a group of more than ~100) is cut to 10.
- The policy loss defaults to `--actor.loss_agg_mode token-mean`: the masked token sum divided by
  the optimiser step's token count (`aggregate_loss` with `batch_num_tokens`), toyrl `token_mean`,
  so every `openrlhf_*` preset's `seq_mean_token_mean` is the wrong aggregation for the default.
  The other mode, `seq-mean-token-mean`, is toyrl's `seq_mean_token_mean` exactly (its
  `token_counts + 1e-8` is computed in float32 from the integer mask, where 1e-8 vanishes).
- Several micro-batches in one optimiser step give the full batch's gradient (since 0.10.4,
  `iter_grad_accum_global_norm`; 0.10.3 divided each micro-batch by its own tokens), exactly when
  the step's token count divides by gradient_accumulation_steps; otherwise the float32
  `num_tokens / gas` rounds (a relative ~1e-8). Several optimiser steps per rollout
  (train.batch_size < the rollout) are mini-batch updates, which toyrl does not have.
- The default KL (`--algo.kl.init_coef 0.01`, estimator k1, `use_loss` off) is a per-token penalty
  -0.01 (log pi_old - log pi_ref) added to the advantage after the group statistics and summed into
  each token's return: zero while the policy is the reference (the first rollout), a per-token
  change of the advantages afterwards; toyrl's KL (k3, in the loss) is not that. With a reference
  model the returns are float32 (`compute_approx_kl` is float32 and `compute_reward` casts to it).
- `--actor.dual_clip` (off by default) has no toyrl counterpart.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.conformance import toy
from tests.conformance.conftest import trainer_module
from tests.conformance.toy import CONFIG as toy_config
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


def spec(estimator: str, aggregation: str = "token_mean", **extra: float) -> str:
    """The toyrl spec text that an estimator with an aggregation (and clip / KL settings) spells."""
    text = f"{ADVANTAGE[estimator]},aggregation={aggregation}"
    text += "".join(f",{key}={value}" for key, value in extra.items())
    return parse_variant(text).spec_text()


# --- the installed trainer ------------------------------------------------------------------


@pytest.fixture(scope="module")
def orl() -> SimpleNamespace:
    """The installed OpenRLHF modules the tests call (skips, or fails under TOYRL_CONFORMANCE=1,
    when OpenRLHF is not installed)."""
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
    return SimpleNamespace(**modules)


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
        "actor.eps_clip_low_high": settings.eps_clip_low_high,
        "actor.dual_clip": settings.dual_clip,
        "actor.loss_agg_mode": settings.loss_agg_mode,
        "actor.policy_loss_type": "ppo",
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
    each sequence's prompt token (its response's index + 1), cut to the micro-batch's width."""

    def __init__(self, leaf: Any) -> None:
        self.leaf = leaf

    def train(self) -> None:
        pass

    def __call__(self, sequences: Any, action_mask: Any, **kwargs: Any) -> tuple[Any, None]:
        assert kwargs.get("ring_attn_group") is None and not kwargs.get("return_entropy")
        return self.leaf[sequences[:, 0] - 1, : action_mask.shape[1]], None


class AccumulatingStrategy:
    """DeepSpeed's engine as `training_step` uses it: `backward` scales the loss by 1 / gas (the
    engine's gradient-accumulation scaling), `optimizer_step` acts at the end of each window of gas
    micro-batches; there it records the accumulated gradient of the leaf and clears it."""

    ring_attn_group = None

    def __init__(self, leaf: Any, accumulated_gradient: int) -> None:
        self.leaf, self.accumulated_gradient = leaf, accumulated_gradient
        self.micro_steps = 0
        self.step_gradients: list[np.ndarray] = []

    def backward(self, loss: Any, model: Any, optimizer: Any) -> None:
        (loss / self.accumulated_gradient).backward()

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model") -> None:
        self.micro_steps += 1
        if self.micro_steps % self.accumulated_gradient == 0:
            self.step_gradients.append(self.leaf.grad.detach().numpy().copy())
            self.leaf.grad = None

    def get_grad_norm(self, model: Any) -> float:
        return 0.0


@dataclass
class Outcome:
    advantages: np.ndarray  # [N, T], the trainer's per-token advantages (0 at padding)
    step_gradients: list[np.ndarray]  # d loss / d logp [N, T] of each optimiser step
    clip_ratios: list[float]  # PolicyLoss's clip fraction of each micro-batch


def run(
    orl: SimpleNamespace,
    batch: toy.ToyBatch,
    settings: Settings,
    theta: np.ndarray | None = None,
    theta_ref: np.ndarray | None = None,
    seed: int = 0,
) -> Outcome:
    """One OpenRLHF PPO step on a toy batch sampled at theta_old: advantages, then the policy loss
    at theta (None: theta_old, ratio 1) with the reference policy theta_ref (None: no reference
    model, as with init_coef 0), through the trainer's own functions."""
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

    # The replay buffer and the DataLoader of ActorPPOTrainer.ppo_train (shuffled micro batches).
    micro = settings.micro_train_batch_size or count
    step_size = settings.train_batch_size or count
    # NaiveReplayBuffer.__init__ asks for the CUDA device; its other fields, on the CPU.
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
    loader = torch.utils.data.DataLoader(
        buffer,
        batch_size=buffer.sample_batch_size,
        shuffle=True,
        drop_last=True,
        collate_fn=buffer.collate_fn,
        generator=torch.Generator().manual_seed(seed),
    )
    at = old if theta is None else torch.tensor(batch.logp(theta), dtype=torch.float64)
    leaf = at.clone().requires_grad_(True)
    strategy = AccumulatingStrategy(leaf, step_size // micro)  # DeepspeedStrategy's, at world size 1
    # ActorPPOTrainer.__init__ needs torch.distributed and CUDA; the fields training_step reads.
    trainer = instance(
        orl.actor.ActorPPOTrainer,
        args=args,
        actor=LeafActor(leaf),
        actor_loss_fn=orl.loss.PolicyLoss(  # as ActorPPOTrainer.__init__ builds it from args
            clip_eps_low=args.actor.eps_clip_low_high[0],
            clip_eps_high=args.actor.eps_clip_low_high[1],
            dual_clip=args.actor.dual_clip,
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=args.algo.advantage.is_correction_level,
            is_correction_mode=args.algo.advantage.is_correction_mode,
            is_correction_gating=args.algo.advantage.is_correction_gating,
            is_correction_threshold=args.algo.advantage.is_correction_threshold,
        ),
        aux_loss=False,
        strategy=strategy,
        actor_optim=None,  # DeepSpeed's engine holds the optimiser; the stand-in strategy steps nothing
        ema_model=None,
        actor_scheduler=SimpleNamespace(get_last_lr=lambda: [0.0]),
        replay_buffer=buffer,
    )
    clip_ratios = []
    windows = orl.loss_utils.iter_grad_accum_global_norm(
        loader, strategy, strategy.accumulated_gradient, lambda e: e.action_mask
    )
    for step, (experience, loss_batch_info) in enumerate(windows):
        trainer.training_step(experience, 0.0, step, loss_batch_info)
        clip_ratios.append(float(experience.info["ppo_clip_ratio"]))
    assert strategy.micro_steps == count // micro and leaf.grad is None  # every window stepped
    return Outcome(advantages, strategy.step_gradients, clip_ratios)


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


def test_later_update_dual_clip(orl, conform) -> None:
    """--actor.dual_clip 1.5: tokens with A < 0 and ratio > 1.5 lose their gradient (the loss is
    -1.5 A there); toyrl has no dual clip, so it differs exactly where that bound acts."""
    batch = toy.sampled(1, CONFIG)
    theta = toy.moved(batch, 4, scale=1.0)
    dual = run(orl, batch, Settings("group_norm", dual_clip=1.5), theta=theta)
    ratio = np.exp(batch.logp(theta) - batch.logp())
    acting = (dual.advantages < 0) & (ratio > 1.5) & batch.mask
    assert acting.sum() > 0
    matching = spec("group_norm")
    expected = toy.token_weights(parse_variant(matching), batch, theta)
    (got,) = dual.step_gradients
    setting = "group_norm later update, dual_clip 1.5, sampled seed 1"
    conform(DIST, setting, matching, toy.relative_difference(got, expected), expected=False)
    assert (got[acting] == 0).all() and (expected[acting] != 0).all()
    conform(
        DIST,
        setting + ", tokens it spares",
        matching,
        toy.relative_difference(np.where(acting, 0, got), np.where(acting, 0, expected)),
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


def test_two_optimiser_steps_are_mini_batches(orl, conform) -> None:
    """train.batch_size = half the rollout: two optimiser steps (each of 2 micro-batches), each
    normalised by its own mini-batch's tokens and stepping on its own. toyrl has only full-batch
    updates (the project will add mini-batches): the first step's gradient is not the full batch's,
    nor is the second's."""
    batch = corner()
    outcome = run(orl, batch, Settings("group_norm", micro_train_batch_size=4, train_batch_size=8), seed=1)
    first, second = outcome.step_gradients
    matching = spec("group_norm")
    expected = toy.token_weights(parse_variant(matching), batch)
    conform(
        DIST,
        "group_norm ratio 1, 2 optimiser steps (mini-batches): the first",
        matching,
        toy.relative_difference(first, expected),
        expected=False,
    )
    # Each step covers its own 8 responses, divided by its own token count (not the rollout's).
    inside = np.abs(first).sum(axis=1) > 0
    assert inside.sum() <= 8 and (np.abs(second[inside]).sum() == 0)


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
    outside the group statistics. Neither the KL-free spec nor toyrl's k3-in-the-loss (beta 0.01)
    is that."""
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
    with_kl = spec("group_norm", beta=0.01)
    expected = toy.token_weights(parse_variant(with_kl), batch, theta_ref=reference)
    conform(
        DIST,
        "group_norm ratio 1, k1 KL 0.01 in the reward",
        with_kl,
        toy.relative_difference(got, expected),
        expected=False,
    )


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
