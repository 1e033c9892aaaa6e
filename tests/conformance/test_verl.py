"""verl's installed code (pinned verl==0.9.1, `.trainers/verl`) against toyrl's verl presets.

Advantages: verl/trainer/ppo/core_algos.py's estimators, called as
`verl.trainer.ppo.ray_trainer.compute_advantage` calls them (GRPO directly, with
`norm_adv_by_std_in_grpo`; every other estimator through `get_adv_estimator_fn`, with its keyword
arguments), on the rollout tensors a step holds (`token_level_rewards`: the reward on each
response's last token, `response_mask`, the prompt `uid`s).

Per-token gradient weights: d loss / d logp by autograd through the actor's loss as a 0.9.1 update
runs it. `verl/workers/utils/losses.py`'s `ppo_loss` is the loss function `engine_workers` hands to
every training engine; it reads the policy's log-probs from the model's output (a nested tensor over
prompt + response positions, shifted by one), slices them with `no_padding_2_padding`, and calls the
registered "vanilla" policy loss (`compute_policy_loss_vanilla`: PPO clip, clip_ratio_high, dual-clip
clip_ratio_c) and `agg_loss`. Here the model's output is built from a leaf tensor of per-token
log-probs (at theta_old for the first update, at `toy.moved`'s theta for a later one), and the data
go through verl's own plumbing: `left_right_2_no_padding` (as `ray_trainer._update_actor` does),
`tensordict_utils.make_iterator` (the mini-batch loop of `TrainingWorker.train_mini_batch`), and
micro-batches cut by `tensordict_utils.chunk_tensordict` (fixed micro-batch size) or
`seqlen_balancing.rearrange_micro_batches` (use_dynamic_bsz), the two calls of
`verl.workers.engine.utils.prepare_micro_batches`. Restated here, because their modules cannot be
imported without a GPU stack (`verl.workers.engine` imports every engine backend): that choice
between the two calls; the global batch info `FSDPEngine.forward_backward_batch` attaches
(batch_num_tokens = the mini-batch's loss-mask sum, all-reduced over data-parallel ranks, and dp_size)
and `_update_actor` attaches (global_batch_size = ppo_mini_batch_size * rollout.n); one backward per
micro-batch into the same leaf (gradient accumulation); and FSDP's mean of the ranks' gradients.
Only one mini-batch (= one optimiser step) per batch: ppo_mini_batch_size < the batch makes several
optimiser steps, which toyrl does not have yet.

In a release that still has `verl.workers.actor` (<= 0.7.0, built with `scripts/conformance/verl.sh
.trainers/verl-0.7.0 0.7.0`), the engine tests skip and `test_legacy_update_policy` records what
its default actor, `DataParallelPPOActor.update_policy`, computes instead (its micro-batch loop
restated, see `legacy_update`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.conformance import toy
from tests.conformance.conftest import trainer_module, version_of
from tests.conformance.toy import CONFIG as toy_config
from toyrl.objective import Variant
from toyrl.variants import parse_variant

torch = pytest.importorskip("torch")

TRAINER = "verl"
Conform = Callable[..., None]  # the conform fixture (tests/conformance/conftest.py)
CONFIG = toy_config  # verl's default loss_scale_factor: the response width, T = cap + 1
PROMPT_WIDTH = 4  # prompts are 2..4 tokens, left-padded to this width
PAD, APPROACH_RIGHT, APPROACH_WRONG, RAMBLE, STOP = 0, 11, 12, 13, 14
CLIP_HIGH = 0.28  # DAPO's clip-higher

# specs that verl settings match where no toyrl preset does
DR_GRPO_SPEC = "advantage=none,aggregation=seq_mean_token_sum_norm"
CLIP_HIGHER_SPEC = "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.28,std_eps=1e-06"


@dataclasses.dataclass(frozen=True)
class Verl:
    core: ModuleType  # verl.trainer.ppo.core_algos
    workers_config: ModuleType  # verl.workers.config
    trainer_config: ModuleType  # verl.trainer.config
    tensordict: ModuleType
    legacy: bool  # the release still has verl.workers.actor (dp_actor's update_policy: <= 0.7)
    # the engine path's modules (0.9.1), None in a legacy release
    losses: ModuleType | None = None  # verl.workers.utils.losses
    padding: ModuleType | None = None  # verl.workers.utils.padding
    tu: ModuleType | None = None  # verl.utils.tensordict_utils
    balancing: ModuleType | None = None  # verl.utils.seqlen_balancing


@pytest.fixture(scope="module")
def verl() -> Verl:
    core = trainer_module("verl.trainer.ppo.core_algos", TRAINER)
    common = [
        trainer_module(name, TRAINER) for name in ("verl.workers.config", "verl.trainer.config", "tensordict")
    ]
    if importlib.util.find_spec("verl.workers.actor") is not None:
        return Verl(core, *common, legacy=True)
    names = (
        "verl.workers.utils.losses",
        "verl.workers.utils.padding",
        "verl.utils.tensordict_utils",
        "verl.utils.seqlen_balancing",
    )
    return Verl(core, *common, False, *(trainer_module(name, TRAINER) for name in names))


@pytest.fixture(scope="module")
def engine(verl: Verl) -> Verl:
    """verl with the engine path's loss (0.9.1: the only path; its workers' default)."""
    if verl.legacy:
        pytest.skip(f"verl {version_of(TRAINER)} updates the actor with dp_actor: test_legacy_update_policy")
    return verl


@pytest.fixture(scope="module")
def legacy(verl: Verl) -> Verl:
    """verl with dp_actor's update_policy (<= 0.7.0: its default worker, use_legacy_worker_impl=auto)."""
    if not verl.legacy:
        pytest.skip(f"verl {version_of(TRAINER)} has no legacy dp_actor (the engine path is tested)")
    return verl


# --- toy batches --------------------------------------------------------------------------------


def corners() -> toy.ToyBatch:
    """All corner cases in one batch: unequal lengths and padding everywhere; group 0 all wrong
    (rewards all 0, one truncated), group 1 all rewarded (rewards all 1), group 2 mixed with a
    truncated right response and a 1-token ramble, group 3 mixed with a right response too short."""
    right = [[0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 1], [1, 0, 1, 1]]
    ramble = [[3, 30, 12, 7], [5, 17, 29, 8], [6, 30, 2, 1], [20, 9, 4, 11]]
    stopped = [[1, 0, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]]
    return toy.made(right, ramble, stopped, CONFIG)


BATCHES: dict[str, Callable[[], toy.ToyBatch]] = {
    "corners": corners,
    "sampled 0": lambda: toy.sampled(0, CONFIG),
    "sampled 1": lambda: toy.sampled(1, CONFIG),
}
LOSS_BATCHES = ("corners", "sampled 0")


def rollout(batch: toy.ToyBatch) -> dict[str, torch.Tensor]:
    """The batch as a verl rollout's tensors: prompts left-padded (2..4 tokens), responses
    right-padded (approach token, ramble, stop token as EOS), attention_mask over both, position_ids,
    response_mask = attention_mask[:, -T:] (ray_trainer.compute_response_mask), and the reward on
    each response's last token (as verl's reward managers place it)."""
    n, width = batch.responses, batch.width
    _, group = batch.shape
    prompt = np.repeat(batch.batch.prompt_index[0], group)
    prompt_length = 2 + prompt % 3
    prompt_mask = np.arange(PROMPT_WIDTH)[None, :] >= (PROMPT_WIDTH - prompt_length)[:, None]
    prompt_ids = np.where(prompt_mask, 3 + prompt[:, None], PAD)
    kinds = batch.kinds()
    approach = np.where(batch.batch.right.reshape(-1), APPROACH_RIGHT, APPROACH_WRONG)
    response_ids = np.select(
        [kinds == 0, kinds == 1, kinds == 2], [approach[:, None], RAMBLE, STOP], default=PAD
    )
    attention = np.concatenate([prompt_mask, batch.mask], axis=1).astype(np.int64)
    rewards = np.zeros((n, width))
    rewards[np.arange(n), batch.ramble] = batch.rewards(parse_variant("verl_default"))
    as_long = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64))  # noqa: E731
    input_ids = np.concatenate([prompt_ids, response_ids], axis=1)
    return {
        "prompts": as_long(prompt_ids),
        "responses": as_long(response_ids),
        "input_ids": as_long(input_ids),
        "attention_mask": as_long(attention),
        "position_ids": as_long(np.clip(np.cumsum(attention, axis=1) - 1, 0, None)),
        "response_mask": as_long(attention[:, -width:]),
        "token_level_rewards": torch.as_tensor(rewards),
    }


def uids(batch: toy.ToyBatch) -> np.ndarray:
    """data.non_tensor_batch["uid"]: one id per prompt, repeated over its G responses."""
    _, group = batch.shape
    return np.array([f"prompt-{j}" for j in np.repeat(batch.batch.prompt_index[0], group)], dtype=object)


def broadcast(values: np.ndarray, batch: toy.ToyBatch) -> np.ndarray:
    """A per-response value on each of the response's tokens [N, T], 0 at padding."""
    return np.where(batch.mask, values[:, None], 0.0)


# --- verl's side ------------------------------------------------------------------------------


def verl_advantages(
    verl: Verl, batch: toy.ToyBatch, estimator: str, norm: bool = True, registry: bool = False
) -> np.ndarray:
    """verl's advantages [N, T], called as ray_trainer.compute_advantage calls the estimator with
    algorithm.adv_estimator = estimator and algorithm.norm_adv_by_std_in_grpo = norm: GRPO directly,
    with the flag; any other estimator (or GRPO with `registry`) through get_adv_estimator_fn, with
    compute_advantage's keyword arguments (the algorithm config, not the flag)."""
    data = rollout(batch)
    if estimator == "grpo" and not registry:
        advantages, _ = verl.core.compute_grpo_outcome_advantage(
            token_level_rewards=data["token_level_rewards"],
            response_mask=data["response_mask"],
            index=uids(batch),
            norm_adv_by_std_in_grpo=norm,
        )
    else:
        advantages, _ = verl.core.get_adv_estimator_fn(estimator)(
            token_level_rewards=data["token_level_rewards"],
            response_mask=data["response_mask"],
            config=verl.trainer_config.AlgoConfig(adv_estimator=estimator, norm_adv_by_std_in_grpo=norm),
            index=uids(batch),
        )
    return advantages.numpy()


@dataclasses.dataclass(frozen=True)
class Layout:
    """How an update's mini-batch is cut: data-parallel ranks, then micro-batches per rank."""

    name: str
    micro_batch_size: int | None = 4  # responses per micro-batch; None: use_dynamic_bsz
    max_token_len: int = 0  # use_dynamic_bsz's ppo_max_token_len_per_gpu
    dp: int = 1


ONE = Layout("1 micro-batch", micro_batch_size=16)
FOUR = Layout("4 micro-batches")
LAYOUTS = (
    ONE,
    Layout("16 micro-batches", micro_batch_size=1),
    Layout("dynamic bsz", micro_batch_size=None, max_token_len=90),
    Layout("2 dp ranks x 2 micro-batches", dp=2),
)


@dataclasses.dataclass
class Update:
    weights: np.ndarray  # d loss / d logp [N, T]
    clipfrac: float  # the largest pg_clipfrac of the micro-batches
    clipfrac_lower: float  # the largest pg_clipfrac_lower (dual-clip) of the micro-batches
    micro_batches: int


def actor_config(verl: Verl, batch: toy.ToyBatch, layout: Layout, **overrides: Any) -> Any:
    """verl's FSDPActorConfig, its defaults but for the batch sizes and `overrides`."""
    prompts, group = batch.shape
    sizes: dict[str, object] = {"ppo_mini_batch_size": prompts, "rollout_n": group}
    if layout.micro_batch_size is None:
        sizes |= {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": layout.max_token_len}
    else:
        sizes["ppo_micro_batch_size_per_gpu"] = layout.micro_batch_size
    return verl.workers_config.FSDPActorConfig(strategy="fsdp", **sizes, **overrides)


def model_output(micro_batch: Any, log_probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The actor's forward output for a micro-batch: per-token log-probs as a nested tensor over
    each sequence's prompt + response positions, the log-prob of token t at position t - 1 (what
    no_padding_2_padding slices back out), from the rows of the leaf `log_probs`."""
    attention = micro_batch["attention_mask"]
    prompt_lengths = attention[:, :PROMPT_WIDTH].sum(dim=1).tolist()
    response_lengths = attention[:, PROMPT_WIDTH:].sum(dim=1).tolist()
    pieces = []
    for row, prompt_length, response_length in zip(
        micro_batch["row"].tolist(), prompt_lengths, response_lengths, strict=True
    ):
        pieces += [
            torch.zeros(prompt_length - 1, dtype=torch.float64),
            log_probs[row, :response_length],
            torch.zeros(1, dtype=torch.float64),  # the prediction after the last token
        ]
    lengths = torch.tensor([p + r for p, r in zip(prompt_lengths, response_lengths, strict=True)])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    return {"log_probs": torch.nested.nested_tensor_from_jagged(torch.cat(pieces), offsets=offsets)}


def verl_update(
    verl: Verl,
    batch: toy.ToyBatch,
    advantages: np.ndarray,
    actor: Any,
    layout: Layout,
    theta: np.ndarray | None = None,
) -> Update:
    """d loss / d logp of one optimiser step of verl's actor on the batch (one mini-batch of
    ppo_mini_batch_size * rollout_n = N responses), its log-probs at theta (default theta_old)."""
    assert not verl.legacy and verl.tu is not None and verl.padding is not None and verl.losses is not None
    tu = verl.tu
    n = batch.responses
    data = rollout(batch)
    del data["token_level_rewards"]
    td = verl.tensordict.TensorDict(
        {
            **data,
            "old_log_probs": torch.as_tensor(batch.logp()),
            "advantages": torch.as_tensor(advantages),
            "row": torch.arange(n),  # travels with each response, to find its leaf row again
        },
        batch_size=[n],
    )
    td = verl.padding.left_right_2_no_padding(td)
    tu.assign_non_tensor(td, global_batch_size=actor.ppo_mini_batch_size * actor.rollout_n)
    leaf = torch.tensor(batch.logp(theta), dtype=torch.float64, requires_grad=True)
    ranks = tu.chunk_tensordict(td, layout.dp)  # the dispatch's contiguous split over dp ranks
    batch_num_tokens = sum(rank["loss_mask"].sum().item() for rank in ranks)  # the all-reduce
    clipfrac, clipfrac_lower, count = 0.0, 0.0, 0
    for rank, shard in enumerate(ranks):
        mini_batches = list(
            tu.make_iterator(
                shard,
                mini_batch_size=n // layout.dp,
                epochs=actor.ppo_epochs,
                seed=actor.data_loader_seed + rank,
                dataloader_kwargs={"shuffle": actor.shuffle},
            )
        )
        assert len(mini_batches) == 1
        (mini_batch,) = mini_batches
        tu.assign_non_tensor(mini_batch, batch_num_tokens=batch_num_tokens, dp_size=layout.dp)
        if layout.micro_batch_size is None:
            micro_batches, _ = verl.balancing.rearrange_micro_batches(
                mini_batch, max_token_len=layout.max_token_len
            )
        else:
            micro_batches = tu.chunk_tensordict(mini_batch, len(mini_batch) // layout.micro_batch_size)
        for micro_batch in micro_batches:
            loss, metrics = verl.losses.ppo_loss(actor, model_output(micro_batch, leaf), micro_batch)
            loss.backward()
            clipfrac = max(clipfrac, metrics["actor/pg_clipfrac"].aggregate())
            clipfrac_lower = max(clipfrac_lower, metrics["actor/pg_clipfrac_lower"].aggregate())
            count += 1
    assert leaf.grad is not None
    weights = leaf.grad.numpy() / layout.dp  # FSDP averages the ranks' gradients
    return Update(weights, clipfrac, clipfrac_lower, count)


def ratios(batch: toy.ToyBatch, theta: np.ndarray) -> np.ndarray:
    """pi_theta / pi_old per token [N, T] (1 at padding)."""
    return np.exp(batch.logp(theta) - batch.logp())


THETAS = ("ratio 1", "moved")
# toy.moved's seed per batch, at scale 1: the PPO clip acts on both sides, some tokens with A > 0 sit
# between 1 + 0.2 and 1 + 0.28 (so clip_ratio_high matters) and beyond, and no token with A < 0
# passes the dual clip's ratio 3 (check_update asserts all of it)
MOVES = {"corners": 4, "sampled 0": 6, "sampled 1": 1}


def theta_of(batch: toy.ToyBatch, batch_name: str, theta_name: str) -> np.ndarray | None:
    return None if theta_name == "ratio 1" else toy.moved(batch, MOVES[batch_name], scale=1.0)


# --- advantages ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Estimator:
    name: str  # algorithm.adv_estimator
    preset: str
    norm: bool = True  # algorithm.norm_adv_by_std_in_grpo
    registry: bool = False  # GRPO through get_adv_estimator_fn, as for any other estimator
    expected: bool = True
    float32_agrees_with: str = ""  # a preset it agrees with to float32 rounding (1e-6) only


ESTIMATORS = [
    Estimator("grpo", "verl_default"),
    Estimator("grpo", "verl_dr_grpo", norm=False),
    Estimator("grpo", "verl_default", registry=True),
    # group_mean_std (verl/utils/groupwise.py) computes in float32: grpo's advantages to float32
    # rounding (~3e-8 relative), not to 1e-10. And compute_advantage passes it the algorithm config,
    # never norm_adv_by_std_in_grpo, which it does not read: it divides by the std whatever the flag.
    Estimator("grpo_vectorized", "verl_default", expected=False, float32_agrees_with="verl_default"),
    Estimator(
        "grpo_vectorized", "verl_dr_grpo", norm=False, expected=False, float32_agrees_with="verl_default"
    ),
    Estimator("rloo", "advantage=rloo,aggregation=token_mean"),
    Estimator("rloo_vectorized", "advantage=rloo,aggregation=token_mean"),
    # masked_whiten whitens the centred rewards over the batch's *tokens* (each response weighted by
    # its length; masked_var's Bessel factor over tokens; eps 1e-8 inside the sqrt): toyrl's
    # token_whiten_sample, to about 1e-8 relative, not to 1e-10 (masked_mean's + 1e-8 on the token
    # count accounts for far less; the residual is not explained yet). batch_whiten, over
    # responses, is not it.
    Estimator(
        "reinforce_plus_plus_baseline",
        "advantage=token_whiten_sample,aggregation=token_mean",
        expected=False,
        float32_agrees_with="advantage=token_whiten_sample,aggregation=token_mean",
    ),
    Estimator(
        "reinforce_plus_plus_baseline",
        "advantage=batch_whiten,aggregation=token_mean,std_eps=1e-08",
        expected=False,
    ),
]


def estimator_id(estimator: Estimator) -> str:
    via = " (registry)" if estimator.registry else ""
    flag = f" norm_adv_by_std_in_grpo={estimator.norm}" if estimator.name.startswith("grpo") else ""
    return f"{estimator.name}{via}{flag}"


@pytest.mark.parametrize("batch_name", list(BATCHES))
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=estimator_id)
def test_advantages(verl: Verl, conform: Conform, estimator: Estimator, batch_name: str) -> None:
    batch = BATCHES[batch_name]()
    got = verl_advantages(verl, batch, estimator.name, estimator.norm, estimator.registry)
    want = broadcast(toy.advantages(parse_variant(estimator.preset), batch), batch)
    assert np.abs(want).max() > 0
    if estimator.float32_agrees_with:
        close = broadcast(toy.advantages(parse_variant(estimator.float32_agrees_with), batch), batch)
        assert toy.relative_difference(got, close) < 1e-6
    difference = toy.relative_difference(got, want)
    conform(
        TRAINER,
        f"adv {estimator_id(estimator)} | {batch_name}",
        estimator.preset,
        difference,
        estimator.expected,
    )


def test_defaults_are_the_presets(verl: Verl) -> None:
    """verl_default is verl's defaults: AlgoConfig's norm_adv_by_std_in_grpo, the estimator's
    epsilon, the actor's loss_agg_mode, loss_scale_factor, policy loss and clip ratios, no KL or
    entropy term, one PPO epoch (what the settings below leave unset)."""
    import inspect

    assert verl.trainer_config.AlgoConfig().norm_adv_by_std_in_grpo is True
    epsilon = inspect.signature(verl.core.compute_grpo_outcome_advantage).parameters["epsilon"].default
    assert epsilon == parse_variant("verl_default").stage("advantage").std_eps
    actor = actor_config(verl, corners(), ONE)
    assert (actor.loss_agg_mode, actor.loss_scale_factor, actor.policy_loss.loss_mode) == (
        "token-mean",
        None,
        "vanilla",
    )
    assert (actor.clip_ratio, actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (
        0.2,
        0.2,
        0.2,
        3.0,
    )
    assert not actor.use_kl_loss and actor.entropy_coeff == 0 and actor.ppo_epochs == 1


# --- the actor's loss ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    overrides: dict[str, object]  # FSDPActorConfig fields
    norm: bool = True  # algorithm.norm_adv_by_std_in_grpo
    checks: tuple[tuple[str, bool], ...] = (("verl_default", True),)  # (preset or spec, expected)
    length_norm: float = CONFIG.length_norm


# verl 0.9.1's agg_loss divides seq-mean-token-sum-norm's token sums by global_batch_size and then by
# loss_scale_factor (None: the response width T): D_i = L_norm, n = N, toyrl's seq_mean_token_sum_norm.
# token_sum_norm (n = 1; what verl <= 0.7.0's dp_actor computes with a single micro-batch, and what
# toyrl's verl_sum_norm_only and verl_dr_grpo spelled before) is N times too large: relative 1 - 1/N.
OLD_SUM_NORM = "advantage=group_std_sample,aggregation=token_sum_norm,std_eps=1e-06"
OLD_DR_GRPO = "advantage=none,aggregation=token_sum_norm"

SETTINGS = [
    Setting("token-mean (defaults)", {}),
    Setting(
        "seq-mean-token-mean",
        {"loss_agg_mode": "seq-mean-token-mean"},
        checks=(("verl_seq_mean_token_mean", True),),
    ),
    Setting(
        "seq-mean-token-sum",
        {"loss_agg_mode": "seq-mean-token-sum"},
        checks=(("verl_seq_mean_token_sum", True),),
    ),
    Setting(
        "seq-mean-token-sum-norm",
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        checks=(("verl_sum_norm_only", True), (OLD_SUM_NORM, False)),
    ),
    Setting(
        "seq-mean-token-sum-norm, norm_adv_by_std_in_grpo=False",
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        norm=False,
        checks=(("verl_dr_grpo", True), (OLD_DR_GRPO, False)),
    ),
    Setting(
        "seq-mean-token-sum-norm, loss_scale_factor=64, norm_adv_by_std_in_grpo=False",
        {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 64},
        norm=False,
        checks=((f"{DR_GRPO_SPEC} (length_norm=64)", True),),
        length_norm=64.0,
    ),
    Setting(
        "token-sum",
        {"loss_agg_mode": "token-sum"},
        checks=(("advantage=group_std_sample,aggregation=token_sum,std_eps=1e-06", True),),
    ),
    # DAPO's clip-higher. verl 0.9.1 ships no overlong filtering (no loss mask for truncated
    # responses; its DAPORewardManager only shapes long responses' rewards, off by default; the DAPO
    # recipe is not in the package), so toyrl's dapo preset (mask_truncated=True) differs on any
    # batch with a truncated response; the same spec without mask_truncated matches.
    Setting(
        "clip_ratio_high=0.28",
        {"clip_ratio_high": CLIP_HIGH},
        checks=(("dapo", False), (CLIP_HIGHER_SPEC, True)),
    ),
]


def variant_of(preset: str) -> Variant:
    """The variant of a preset name or spec (a trailing note in parentheses is not part of it)."""
    return parse_variant(preset.split(" (")[0])


def check_update(
    verl: Verl, conform: Conform, batch_name: str, setting: Setting, layout: Layout, theta_name: str
) -> None:
    """verl's weights for the setting against each of its presets / specs."""
    batch = BATCHES[batch_name]()
    batch = dataclasses.replace(batch, config=batch.config.replace(length_norm=setting.length_norm))
    theta = theta_of(batch, batch_name, theta_name)
    advantages = verl_advantages(verl, batch, "grpo", setting.norm)
    actor = actor_config(verl, batch, layout, **setting.overrides)
    update = verl_update(verl, batch, advantages, actor, layout, theta)
    assert update.micro_batches >= (1 if layout is ONE else 2)
    if theta is not None:
        rho = ratios(batch, theta)
        assert update.clipfrac > 0  # the PPO clip acts
        assert update.clipfrac_lower == 0 and not ((advantages < 0) & (rho > 3)).any()  # the dual clip not
        assert ((advantages > 0) & (rho > 1.2) & (rho <= 1 + CLIP_HIGH)).any()  # clip_ratio_high matters
        assert ((advantages > 0) & (rho > 1 + CLIP_HIGH)).any()
    for preset, expected in setting.checks:
        variant = variant_of(preset)
        if not variant.stage("selector").keeps_truncated:
            assert not batch.stopped.all()  # mask_truncated has something to mask
        want = toy.token_weights(variant, batch, theta)
        assert np.abs(want).max() > 0
        difference = toy.relative_difference(update.weights, want)
        label = f"{setting.name} | {batch_name} | {theta_name} | {layout.name}"
        conform(TRAINER, label, preset, difference, expected)


@pytest.mark.parametrize("theta_name", THETAS)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_policy_loss(
    engine: Verl, conform: Conform, setting: Setting, batch_name: str, theta_name: str
) -> None:
    """ppo_loss on 4 micro-batches of 4 responses (gradient accumulation) against toyrl's
    full-batch update, on-policy and at a moved policy with the clip active."""
    check_update(engine, conform, batch_name, setting, FOUR, theta_name)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)
@pytest.mark.parametrize(
    "setting",
    [s for s in SETTINGS if "loss_scale_factor" not in s.overrides and s.norm],
    ids=lambda s: s.name,
)
def test_micro_batch_layouts(engine: Verl, conform: Conform, setting: Setting, layout: Layout) -> None:
    """verl 0.9.1 normalises every micro-batch's loss by the mini-batch's global token count or
    response count, so any cut (fixed size, by token budget, over dp ranks) gives the full batch's
    gradient: each layout is compared with toyrl's full-batch update, at a moved policy."""
    check_update(engine, conform, "sampled 1", setting, layout, "moved")


def test_dual_clip_is_not_in_toyrl(engine: Verl, conform: Conform) -> None:
    """verl's dual clip (clip_ratio_c = 3, on by default): where A < 0 and the ratio exceeds 3 the
    token's loss is the constant -3 A, so its weight is 0; toyrl's PPOClip has no such bound and keeps
    the weight A rho. A policy whose wrong-approach stop tokens are ~4.5 times likelier than under
    theta_old makes it act: a known mismatch."""
    batch = corners()
    theta = batch.theta_old.copy()
    theta[0, -1] += 1.5  # the wrong approach's stop logit
    advantages = verl_advantages(engine, batch, "grpo", True)
    update = verl_update(engine, batch, advantages, actor_config(engine, batch, FOUR), FOUR, theta)
    dual = (advantages < 0) & (ratios(batch, theta) > 3.0)
    assert update.clipfrac_lower > 0 and dual.any()
    assert np.all(update.weights[dual] == 0)
    want = toy.token_weights(parse_variant("verl_default"), batch, theta)
    assert np.all(want[dual] != 0)
    difference = toy.relative_difference(update.weights, want)
    conform(
        TRAINER,
        "dual-clip clip_ratio_c=3 active | corners | stop logit +1.5 | 4 micro-batches",
        "verl_default",
        difference,
        False,
    )
    # away from the dual-clipped tokens the two agree
    kept = ~dual
    assert toy.relative_difference(update.weights[kept], want[kept]) <= 1e-10


# --- verl <= 0.7.0: dp_actor's update_policy ------------------------------------------------------


def legacy_update(
    verl: Verl, batch: toy.ToyBatch, advantages: np.ndarray, actor: Any, theta: np.ndarray | None
) -> np.ndarray:
    """d loss / d logp of one optimiser step of verl <= 0.7.0's DataParallelPPOActor.update_policy
    on the batch as one mini-batch. Its micro-batch loop is inline (and the actor needs a model), so
    it is restated: fsdp_workers makes ppo_mini_batch_size N = ppo_mini_batch_size * rollout.n
    responses (one dp rank); the mini-batch is split into micro-batches of
    ppo_micro_batch_size_per_gpu; each micro-batch's loss is the registered policy loss called with
    the actor config (whose global_batch_info the legacy worker never fills, so agg_loss normalises
    within the micro-batch) times loss_scale_factor = 1 / gradient_accumulation, backpropagated
    into the same leaf."""
    n = batch.responses
    gradient_accumulation = actor.ppo_mini_batch_size * actor.rollout_n // actor.ppo_micro_batch_size_per_gpu
    data = rollout(batch)
    old, adv = torch.as_tensor(batch.logp()), torch.as_tensor(advantages)
    leaf = torch.tensor(batch.logp(theta), dtype=torch.float64, requires_grad=True)
    policy_loss = verl.core.get_policy_loss_fn(actor.policy_loss.get("loss_mode", "vanilla"))
    assert actor.global_batch_info == {}
    for rows in torch.arange(n).split(actor.ppo_micro_batch_size_per_gpu):
        pg_loss, _ = policy_loss(
            old_log_prob=old[rows],
            log_prob=leaf[rows],
            advantages=adv[rows],
            response_mask=data["response_mask"][rows],
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
            rollout_is_weights=None,
        )
        (pg_loss * (1 / gradient_accumulation)).backward()
    assert leaf.grad is not None
    return leaf.grad.numpy()


LEGACY = [
    # (setting with the checks of verl <= 0.7.0, layout)
    (Setting("token-mean (defaults)", {}), ONE),
    # each micro-batch's token mean, averaged over micro-batches: not the batch's token mean
    (Setting("token-mean (defaults)", {}, checks=(("verl_default", False),)), FOUR),
    (SETTINGS[1], ONE),
    (SETTINGS[1], FOUR),
    (SETTINGS[2], ONE),
    (SETTINGS[2], FOUR),
    # the micro-batch's token sums / T, times 1 / gradient_accumulation: D_i = L_norm and n = the
    # number of micro-batches (token_sum_norm with one micro-batch; no toyrl stage with more)
    (dataclasses.replace(SETTINGS[3], checks=((OLD_SUM_NORM, True), ("verl_sum_norm_only", False))), ONE),
    (dataclasses.replace(SETTINGS[3], checks=((OLD_SUM_NORM, False), ("verl_sum_norm_only", False))), FOUR),
    (dataclasses.replace(SETTINGS[4], checks=((OLD_DR_GRPO, True), ("verl_dr_grpo", False))), ONE),
    (dataclasses.replace(SETTINGS[4], checks=((OLD_DR_GRPO, False), ("verl_dr_grpo", False))), FOUR),
    (SETTINGS[7], ONE),
]


@pytest.mark.parametrize("theta_name", THETAS)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize(("setting", "layout"), LEGACY, ids=lambda x: x.name)
def test_legacy_update_policy(
    legacy: Verl, conform: Conform, setting: Setting, layout: Layout, batch_name: str, theta_name: str
) -> None:
    """dp_actor's update (restated loop, verl's own policy loss and agg_loss) against toyrl's
    full-batch update, with one micro-batch and with four, on-policy and at a moved policy."""
    batch = BATCHES[batch_name]()
    theta = theta_of(batch, batch_name, theta_name)
    advantages = verl_advantages(legacy, batch, "grpo", setting.norm)
    weights = legacy_update(
        legacy, batch, advantages, actor_config(legacy, batch, layout, **setting.overrides), theta
    )
    for preset, expected in setting.checks:
        want = toy.token_weights(variant_of(preset), batch, theta)
        label = f"dp_actor {setting.name} | {batch_name} | {theta_name} | {layout.name}"
        conform(TRAINER, label, preset, toy.relative_difference(weights, want), expected)
