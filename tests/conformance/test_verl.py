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
between the two calls; the dispatch's contiguous split of the batch over data-parallel ranks; the
global batch info `FSDPEngine.forward_backward_batch` attaches to each mini-batch (batch_num_tokens
= that mini-batch's loss-mask sum, all-reduced over the ranks, and dp_size) and `_update_actor`
attaches (global_batch_size = ppo_mini_batch_size * rollout.n); one zeroed leaf per optimiser step
(`train_batch`'s optimizer_zero_grad) and one backward per micro-batch into it (gradient
accumulation); and FSDP's mean of the ranks' gradients.

Several optimiser steps per batch (`verl_updates`): ppo_mini_batch_size (prompts, x rollout.n
responses) < the batch cuts it into mini-batches, ppo_epochs repeats them, and actor.shuffle makes
`make_iterator`'s DataLoader draw a new permutation each epoch (from its generator, seeded
data_loader_seed + rank); the order verl took is read back from a `row` index carried through the
pipeline, never re-drawn here, and step u is compared with toyrl's update u (`toy.token_weights(...,
update=u, order=...)`, spec keys mini_batches, num_iterations, shuffle=epoch), the first at theta_old
and the later ones at a moved policy with the clip active. trainer.balance_batch (True by default)
reorders the batch by sequence length before the update, so that its mini-batches are not the
batch's prompt-major parts: `balanced_order` runs `RayPPOTrainer._balance_batch` itself, compiled
from the installed ray_trainer.py's source (that module does not import here: it needs torchdata
and ray's cluster API). verl's dual clip (clip_ratio_c = 3, on by default) is toyrl's dual_clip=3.0.

The newer families (`FAMILIES`, `FAMILY_PRESETS`): the registered "cispo", "sapo" and "gpg"
policy losses through the same ppo_loss path (verl's clip_ratio_low / clip_ratio_high, tau_pos /
tau_neg, loss_agg_mode; sapo aggregates seq-mean-token-mean whatever loss_agg_mode says), at ratio
1 and at moved policies where CISPO's bounds act, and the "opo" and "gpg" estimators (gpg's scale
N / M is computed in float32: `test_gpg_advantages`); and each new toyrl preset (opo, gpg,
reinforce_pp, reinforce_pp_baseline, cispo, sapo, gspo) against the verl settings it names, every
optimiser step of its schedule.

In a release that still has `verl.workers.actor` (<= 0.7.0, built with `scripts/conformance/verl.sh
.trainers/verl-0.7.0 0.7.0`), the engine tests skip and `test_legacy_update_policy` and
`test_legacy_mini_batches` record what its default actor, `DataParallelPPOActor.update_policy`,
computes instead (its mini- and micro-batch loop restated, see `legacy_updates`): consecutive
mini-batches (it never reads actor.shuffle) and a normaliser taken on each micro-batch, toyrl's
per_micro_batch=true (token-mean: token_mean; seq-mean-token-sum-norm: token_sum_norm).

The older releases toyrl models (toyrl/trainers/verl.py RELEASES, 0.4.0 to 0.9.0), each from its
own wheel (downloaded, never installed, by the default build of `scripts/conformance/verl.sh`):
`test_each_release_*` read its full configuration with OmegaConf and its code with `ast` (the
estimators, policy losses, loss_agg_modes it has, dp_actor's micro-batch loop, GSPO's aggregation,
where main_ppo takes the DAPO manager's settings), and run its own agg_loss, compiled alone from its
core_algos.py with its own masked_sum / masked_mean, against toyrl's normaliser for that release.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import pathlib
import sys
import types
import zipfile
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
yaml = pytest.importorskip("yaml")  # after torch: without either, the module skips

TRAINER = "verl"
Conform = Callable[..., None]  # the conform fixture (tests/conformance/conftest.py)
CONFIG = toy_config  # verl's default loss_scale_factor: the response width, T = cap + 1
PROMPT_WIDTH = 4  # prompts are 2..4 tokens, left-padded to this width
PAD, APPROACH_RIGHT, APPROACH_WRONG, RAMBLE, STOP = 0, 11, 12, 13, 14
CLIP_HIGH = 0.28  # DAPO's clip-higher

# specs that verl settings match where no toyrl preset does
DR_GRPO_SPEC = "advantage=none,aggregation=seq_mean_token_sum_norm"
CLIP_HIGHER_SPEC = "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.28,std_eps=1e-06"
NO_DUAL_CLIP = "advantage=group_std_sample,aggregation=token_mean,std_eps=1e-06"  # verl_default, c unset


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


def rollout(batch: toy.ToyBatch, prompt_tokens: int | None = None) -> dict[str, torch.Tensor]:
    """The batch as a verl rollout's tensors: prompts left-padded (2..4 tokens, or all
    `prompt_tokens`: toyrl's layout counts one prompt length), responses
    right-padded (approach token, ramble, stop token as EOS), attention_mask over both, position_ids,
    response_mask = attention_mask[:, -T:] (ray_trainer.compute_response_mask), and the reward on
    each response's last token (as verl's reward managers place it)."""
    n, width = batch.responses, batch.width
    _, group = batch.shape
    prompt = np.repeat(batch.batch.prompt_index[0], group)
    prompt_length = 2 + prompt % 3 if prompt_tokens is None else np.full(n, prompt_tokens)
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


def v1_data(
    batch: toy.ToyBatch, advantages: np.ndarray, prompt_tokens: int | None = None
) -> dict[str, torch.Tensor]:
    """The batch as verl 0.9.1's V1 trainer (trainer.use_v1, its default) hands it to the actor: each
    response stored on its own (`AgentLoopManagerTQ`: prompt and response ids, input_ids = both,
    attention ones, loss_mask = response_mask, position ids; the advantages written back cut to each
    response's length, `padding.response_to_nested`) and fetched as jagged nested tensors. Nothing is
    padded until `ppo_loss` pads each micro-batch to its own longest response (to_padded_tensor,
    no_padding_2_padding with no max_response_len set)."""
    padded = rollout(batch, prompt_tokens)
    prompt_mask = padded["attention_mask"][:, :PROMPT_WIDTH].bool()
    response_lengths = padded["response_mask"].sum(dim=1).tolist()
    old = torch.as_tensor(batch.logp())
    per_response: dict[str, list[torch.Tensor]] = {name: [] for name in FIELDS_V1}
    for i, length in enumerate(response_lengths):
        prompt, response = padded["prompts"][i][prompt_mask[i]], padded["responses"][i, :length]
        sequence = torch.cat([prompt, response])
        per_response["prompts"].append(prompt)
        per_response["responses"].append(response)
        per_response["input_ids"].append(sequence)
        per_response["attention_mask"].append(torch.ones_like(sequence))
        per_response["position_ids"].append(torch.arange(len(sequence)))
        per_response["response_mask"].append(torch.ones(length, dtype=torch.int64))
        per_response["loss_mask"].append(torch.ones(length, dtype=torch.int64))
        per_response["old_log_probs"].append(old[i, :length])
        per_response["advantages"].append(torch.as_tensor(advantages[i, :length]))
    return {
        name: torch.nested.as_nested_tensor(values, layout=torch.jagged)
        for name, values in per_response.items()
    }


FIELDS_V1 = (
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "loss_mask",
    "old_log_probs",
    "advantages",
)


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
    """One optimiser step of verl's actor: its mini-batch's loss at a policy."""

    weights: np.ndarray  # d loss / d logp [N, T] (0 outside the mini-batch)
    clipfrac: float  # the largest pg_clipfrac of the micro-batches
    clipfrac_lower: float  # the largest pg_clipfrac_lower (dual-clip) of the micro-batches
    micro_batches: int  # per rank
    rows: np.ndarray  # the mini-batch's responses (prompt-major indices), rank 0's first, as verl took them


def actor_config(
    verl: Verl, batch: toy.ToyBatch, layout: Layout, mini_batch_prompts: int | None = None, **overrides: Any
) -> Any:
    """verl's FSDPActorConfig, its defaults but for the batch sizes and `overrides`;
    ppo_mini_batch_size = `mini_batch_prompts` (default the batch's B prompts: one mini-batch),
    checked with the config's own validate(n_gpus, train_batch_size) as the trainer does. A
    `policy_loss` override given as a dict (`{"loss_mode": "cispo"}`) becomes verl's
    PolicyLossConfig, as the trainer's config builds it from actor.policy_loss.*."""
    if isinstance(overrides.get("policy_loss"), dict):
        overrides = {
            **overrides,
            "policy_loss": verl.workers_config.PolicyLossConfig(**overrides["policy_loss"]),
        }
    prompts, group = batch.shape
    sizes: dict[str, object] = {"ppo_mini_batch_size": mini_batch_prompts or prompts, "rollout_n": group}
    if layout.micro_batch_size is None:
        sizes |= {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": layout.max_token_len}
    else:
        sizes["ppo_micro_batch_size_per_gpu"] = layout.micro_batch_size
    actor = verl.workers_config.FSDPActorConfig(strategy="fsdp", **sizes, **overrides)
    actor.validate(n_gpus=layout.dp, train_batch_size=prompts)
    return actor


def model_output(micro_batch: Any, log_probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The actor's forward output for a micro-batch: per-token log-probs as a nested tensor over
    each sequence's prompt + response positions, the log-prob of token t at position t - 1 (what
    no_padding_2_padding slices back out), from the rows of the leaf `log_probs`."""
    if micro_batch["prompts"].is_nested:  # the V1 trainer's responses, each its own length
        prompt_lengths = micro_batch["prompts"].offsets().diff().tolist()
        response_lengths = micro_batch["responses"].offsets().diff().tolist()
    else:
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


@functools.cache
def balance_batch_method() -> Callable[..., None]:
    """`RayPPOTrainer._balance_batch` (trainer.balance_batch, True by default: it reorders the batch
    before the actor update), compiled from the installed ray_trainer.py's own source: that module
    cannot be imported here (it needs torchdata and ray's cluster API), so its one method is compiled
    alone, in a namespace holding the names it uses from the module (torch and seqlen_balancing's)."""
    spec = importlib.util.find_spec("verl.trainer.ppo.ray_trainer")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(pathlib.Path(spec.origin).read_text())
    (trainer,) = [
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "RayPPOTrainer"
    ]
    (method,) = [
        node for node in trainer.body if isinstance(node, ast.FunctionDef) and node.name == "_balance_batch"
    ]
    balancing = importlib.import_module("verl.utils.seqlen_balancing")
    names = ("calculate_workload", "get_seqlen_balanced_partitions", "log_seqlen_unbalance")
    namespace: dict[str, Any] = {"torch": torch, **{name: getattr(balancing, name) for name in names}}
    exec(compile(ast.Module(body=[method], type_ignores=[]), spec.origin, "exec"), namespace)
    return namespace["_balance_batch"]


def balanced_order(attention_mask: torch.Tensor, dp: int) -> np.ndarray:
    """The order trainer.balance_batch puts the batch in (rows of the batch as it was), from verl's
    own _balance_batch on a DataProto of the batch's attention mask and a row index, with the worker
    group's data-parallel size `dp` (its only use of the trainer object, apart from use_prefix_grouper,
    unset, and the mini-batch size, read only with keep_minibatch, which fit() leaves False)."""
    from verl.protocol import DataProto

    n = len(attention_mask)
    proto = DataProto.from_dict(tensors={"attention_mask": attention_mask, "row": torch.arange(n)})
    trainer = types.SimpleNamespace(_get_dp_size=lambda worker_group, role: dp, actor_rollout_wg=None)
    balance_batch_method()(trainer, proto, metrics={})
    return proto.batch["row"].numpy()


def v1_rank_order(verl: Verl, nested: dict[str, torch.Tensor], dp: int) -> np.ndarray:
    """The order the V1 trainer deals the batch to its `dp` ranks in (rows of the batch as it was):
    `_balance_batch` of verl/trainer/ppo/v1/trainer_base.py, which the V1 trainer calls on every
    step (it does not read trainer.balance_batch), is verl's own get_seqlen_balanced_partitions of
    calculate_workload of each sequence's length (prompt and response) into dp parts of equal size,
    concatenated; restated here (its class needs ray and transfer_queue), the calls verl's own."""
    seq_lens = torch.as_tensor(nested["input_ids"].offsets().diff(), dtype=torch.int64)
    workloads = verl.balancing.calculate_workload(seq_lens)
    parts = verl.balancing.get_seqlen_balanced_partitions(workloads, k_partitions=dp, equal_size=True)
    return np.array([index for part in parts for index in part])


Theta = np.ndarray | None | Callable[[int], np.ndarray | None]


def verl_updates(
    verl: Verl,
    batch: toy.ToyBatch,
    advantages: np.ndarray,
    actor: Any,
    layout: Layout,
    theta: Theta = None,
    balance: bool | str = False,
    v1: bool = True,
    prompt_tokens: int | None = None,
) -> list[Update]:
    """d loss / d logp of every optimiser step of verl's actor on the batch: ppo_epochs epochs of
    mini-batches of ppo_mini_batch_size * rollout_n responses, each step's log-probs at `theta` (a
    policy, None for theta_old, or a function of the step's index), after trainer.balance_batch's
    reordering if `balance` (the legacy trainer's) or "v1" (the V1 trainer's, `v1_rank_order`);
    the responses as the V1 trainer holds them (`v1_data`, each its own length, each prompt
    `prompt_tokens` long if given), or with `v1` False as the legacy RayPPOTrainer
    (trainer.use_v1=False) does, padded to the rollout's width and unpadded by
    `left_right_2_no_padding` (ray_trainer._update_actor).

    As the trainer and the worker run it: the batch is split into `layout.dp`
    contiguous shards (the dispatch), and each rank's TrainingWorker.train_mini_batch iterates its
    shard with verl's own tensordict_utils.make_iterator (mini-batches of mini_batch_size / dp,
    ppo_epochs epochs, seed data_loader_seed + rank, shuffle from the actor config); mini-batch u
    of every rank together make optimiser step u. Each step is FSDPEngine.train_batch: zero the
    gradient, forward_backward_batch (batch_num_tokens = that step's mini-batch's loss-mask sum,
    all-reduced over the ranks, then micro-batches and one backward each) and FSDP's mean of the
    ranks' gradients."""
    assert not verl.legacy and verl.tu is not None and verl.padding is not None and verl.losses is not None
    tu = verl.tu
    n = batch.responses
    data = rollout(batch)
    del data["token_level_rewards"]
    row = torch.arange(n)  # travels with each response, to find its leaf row again
    if balance == "v1":
        row = torch.as_tensor(v1_rank_order(verl, v1_data(batch, advantages, prompt_tokens), layout.dp))
    elif balance:
        row = torch.as_tensor(balanced_order(data["attention_mask"], layout.dp))
    if v1:
        nested = v1_data(batch, advantages, prompt_tokens)
        nested = {
            name: torch.nested.as_nested_tensor([values[i] for i in row.tolist()], layout=torch.jagged)
            for name, values in nested.items()
        }
        td = verl.tensordict.TensorDict({**nested, "row": row}, batch_size=[n])
    else:
        fields = {
            **data,
            "old_log_probs": torch.as_tensor(batch.logp()),
            "advantages": torch.as_tensor(advantages),
        }
        td = verl.tensordict.TensorDict(
            {name: values[row] for name, values in fields.items()} | {"row": row}, batch_size=[n]
        )
        td = verl.padding.left_right_2_no_padding(td)
    mini_batch_size = actor.ppo_mini_batch_size * actor.rollout_n  # _update_actor's, in responses
    tu.assign_non_tensor(td, global_batch_size=mini_batch_size)
    shards = tu.chunk_tensordict(td, layout.dp)  # the dispatch's contiguous split over dp ranks
    iterators = [
        tu.make_iterator(
            shard,
            mini_batch_size=mini_batch_size // layout.dp,  # train_mini_batch's mini_batch_size_per_gpu
            epochs=actor.ppo_epochs,
            seed=actor.data_loader_seed + rank,
            dataloader_kwargs={"shuffle": actor.shuffle},
        )
        for rank, shard in enumerate(shards)
    ]
    updates = []
    for step, mini_batches in enumerate(zip(*iterators, strict=True)):
        at = theta(step) if callable(theta) else theta
        leaf = torch.tensor(batch.logp(at), dtype=torch.float64, requires_grad=True)
        batch_num_tokens = sum(tokens(m["loss_mask"]) for m in mini_batches)  # the all-reduce
        clipfrac, clipfrac_lower, count = 0.0, 0.0, 0
        # use_dynamic_bsz: the FSDP engine passes its dp group with same_micro_num_in_dp, so the
        # ranks agree on the count (all-reduce MAX, raised together until every rank's parts fit);
        # without a process group, verl's own min_num_micro_batch raised to every rank's count
        # until they agree gives the same count
        agreed = None
        while layout.micro_batch_size is None:
            counts = [
                len(
                    verl.balancing.rearrange_micro_batches(
                        m, max_token_len=layout.max_token_len, min_num_micro_batch=agreed
                    )[0]
                )
                for m in mini_batches
            ]
            if agreed == max(counts):
                break
            agreed = max(counts)
        for mini_batch in mini_batches:
            tu.assign_non_tensor(mini_batch, batch_num_tokens=batch_num_tokens, dp_size=layout.dp)
            if layout.micro_batch_size is None:
                micro_batches, _ = verl.balancing.rearrange_micro_batches(
                    mini_batch, max_token_len=layout.max_token_len, min_num_micro_batch=agreed
                )
            else:
                micro_batches = tu.chunk_tensordict(mini_batch, len(mini_batch) // layout.micro_batch_size)
            for micro_batch in micro_batches:
                loss, metrics = verl.losses.ppo_loss(actor, model_output(micro_batch, leaf), micro_batch)
                loss.backward()
                # (the gpg policy loss reports no clip metrics: it has no ratio to clip)
                if "actor/pg_clipfrac" in metrics:
                    clipfrac = max(clipfrac, metrics["actor/pg_clipfrac"].aggregate())
                    clipfrac_lower = max(clipfrac_lower, metrics["actor/pg_clipfrac_lower"].aggregate())
            count = len(micro_batches)
        assert leaf.grad is not None
        weights = leaf.grad.numpy() / layout.dp  # FSDP averages the ranks' gradients
        rows = torch.cat([m["row"] for m in mini_batches]).numpy()
        updates.append(Update(weights, clipfrac, clipfrac_lower, count, rows))
    assert len(updates) == actor.ppo_epochs * (n // mini_batch_size)
    return updates


def tokens(mask: torch.Tensor) -> int:
    """The tokens of a loss mask, nested (V1) or padded."""
    return int((mask.values() if mask.is_nested else mask).sum().item())


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
    # its length; masked_var's Bessel factor over tokens; eps 1e-8 inside the sqrt). The response
    # mask is int64 (attention_mask's slice), and torch promotes an integer tensor's true division,
    # and its sum plus a Python float, to the default dtype, float32: masked_var's
    # bessel_correction = mask_sum / (mask_sum - 1) is n / (n - 1) rounded to float32, and
    # masked_mean's mask.sum() + 1e-8 is n in float32 (the 1e-8 vanishes). Everything else is
    # float64 (the rewards here; a reward manager's are float32). toyrl's token_whiten_sample rounds
    # that one factor too (float32_bessel) and matches to 1e-10; the same whitening with the float64
    # factor is off by 7e-9 to 1.6e-8 (test_reinforce_plus_plus_baseline_bessel). batch_whiten, over
    # responses, is not it.
    Estimator("reinforce_plus_plus_baseline", "advantage=token_whiten_sample,aggregation=token_mean"),
    # reinforce_plus_plus at gamma 1 (AlgoConfig's default): each token's return is its response's
    # reward, whitened over the batch's tokens the same way, with no group mean (on the corner batch
    # the group-centred token_whiten_sample differs from it by 0.59; on sampled 0 the groups' means
    # happen to shift every reward alike, which the whitening removes)
    Estimator("reinforce_plus_plus", "advantage=reinforce_pp,aggregation=token_mean"),
    Estimator(
        "reinforce_plus_plus_baseline",
        "advantage=batch_whiten,aggregation=token_mean,std_eps=1e-08",
        expected=False,
    ),
    # OPO's length-weighted baseline, b = sum |o| r / sum |o| over the group (|o| the response
    # mask's tokens: approach and ramble): toyrl's preset opo (advantage=opo). GPG's estimator:
    # test_gpg_advantages (its scale is computed in float32)
    Estimator("opo", "opo"),
    # grpo_passk: only each group's first best response has an advantage, r_max - r_second over the
    # group's sample std + 1e-6 (without the flag, the margin alone)
    Estimator("grpo_passk", "verl_grpo_passk"),
    Estimator("grpo_passk", "advantage=passk,aggregation=token_mean,std_scaled=False", norm=False),
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


@pytest.mark.parametrize("batch_name", list(BATCHES))
def test_reinforce_plus_plus_baseline_bessel(verl: Verl, batch_name: str) -> None:
    """reinforce_plus_plus_baseline's whitening is masked_whiten with masked_var's Bessel factor
    computed in float32 (the int64 mask's mask_sum / (mask_sum - 1)): verl's advantages are
    masked_whiten restated in float64 with that one factor rounded to float32 (a = r - group mean
    on each token, n = tokens, m = sum a / n, v = sum (a - m)^2 / n * fl32(n / (n - 1)),
    A = (a - m) / sqrt(v + 1e-8)), to 1e-14, and so is toyrl's token_whiten_sample; with the float64
    factor the same lines differ from verl by more than 1e-10."""
    mask = torch.ones(3, dtype=torch.int64)
    assert (mask.sum() / (mask.sum() - 1)).dtype == (mask.sum() + 1e-8).dtype == torch.float32
    batch = BATCHES[batch_name]()
    got = verl_advantages(verl, batch, "reinforce_plus_plus_baseline")
    _, group = batch.shape
    rewards = batch.rewards(parse_variant("verl_default")).reshape(-1, group)
    centred = broadcast((rewards - rewards.mean(axis=1, keepdims=True)).reshape(-1), batch)
    n = float(batch.mask.sum())
    mean = centred[batch.mask].sum() / n
    squares = ((centred - mean) ** 2)[batch.mask].sum() / n

    def whitened(bessel: float) -> np.ndarray:
        return np.where(batch.mask, (centred - mean) / np.sqrt(squares * bessel + 1e-8), 0.0)

    float32_bessel = float(np.float32(n) / np.float32(n - 1))
    assert float32_bessel != n / (n - 1)
    assert toy.relative_difference(got, whitened(float32_bessel)) <= 1e-14
    assert toy.relative_difference(got, whitened(n / (n - 1))) > 1e-10
    want = toy.advantages(parse_variant("advantage=token_whiten_sample,aggregation=token_mean"), batch)
    assert toy.relative_difference(broadcast(want, batch), whitened(float32_bessel)) <= 1e-14


def test_defaults_are_the_presets(verl: Verl) -> None:
    """verl_default is verl's defaults: AlgoConfig's norm_adv_by_std_in_grpo, the estimator's
    epsilon, the actor's loss_agg_mode, loss_scale_factor, policy loss and clip ratios, no KL or
    entropy term, one PPO epoch, no shuffle (what the settings below leave unset); and
    trainer.balance_batch on in the trainer's default config (ppo_trainer.yaml)."""
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
    assert actor.shuffle is False and (verl.legacy or actor.data_loader_seed == 42)
    spec = importlib.util.find_spec("verl.trainer")
    assert spec is not None and spec.origin is not None
    defaults = yaml.safe_load((pathlib.Path(spec.origin).parent / "config" / "ppo_trainer.yaml").read_text())
    assert defaults["trainer"]["balance_batch"] is True


def test_the_settings_defaults_are_verl_s(verl: Verl) -> None:
    """Every setting `toyrl check` reads for verl 0.9.1 defaults to what the installed release's
    full configuration (_generated_ppo_trainer.yaml, interpolations resolved) holds, the layout's
    included (8 GPUs a node, ppo_max_token_len_per_gpu 16384, prompts and responses of 512); the
    DAPO reward manager's keyword arguments are not in it (the manager reads them when given)."""
    if verl.legacy:
        pytest.skip("the settings are 0.9.1's")
    from omegaconf import OmegaConf

    from toyrl.trainers.verl import SETTINGS_0_9_1

    spec = importlib.util.find_spec("verl.trainer")
    assert spec is not None and spec.origin is not None
    config = OmegaConf.load(pathlib.Path(spec.origin).parent / "config" / "_generated_ppo_trainer.yaml")
    absent = object()
    read = 0
    for key, setting in SETTINGS_0_9_1.items():
        value = OmegaConf.select(config, key, default=absent)
        if value is absent:
            assert key.startswith("reward.reward_kwargs."), key
            continue
        assert value == setting.default, (key, value, setting.default)
        read += 1
    assert read == len(SETTINGS_0_9_1) - 4  # all but the reward manager's four


# --- the actor's loss ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    overrides: dict[str, object]  # FSDPActorConfig fields
    norm: bool = True  # algorithm.norm_adv_by_std_in_grpo
    checks: tuple[tuple[str, bool], ...] = (("verl_default", True),)  # (preset or spec, expected)
    length_norm: float = CONFIG.length_norm
    estimator: str = "grpo"  # algorithm.adv_estimator
    # the policy loss reports pg_clipfrac > 0 at the moved policy (PPO's clip, CISPO's); False: it
    # reports 0 or nothing (SAPO's soft gate, GPG's loss without a ratio)
    clips: bool = True
    # checks at the moved policy only: controls that agree at ratio 1, where every objective here
    # is the on-policy gradient
    moved_checks: tuple[tuple[str, bool], ...] = ()
    # the divisor is each micro-batch's longest response (seq-mean-token-sum-norm without
    # loss_scale_factor in the V1 trainer): each check takes the layout's micro-batches
    # (`micro_keys`); a token budget over these prompts of 2..4 tokens is skipped (the toy's prompts
    # have one length; `test_v1_layout_by_lengths` lays budgets and ranks out on prompts of one length)
    width: bool = False
    v1: bool = True  # trainer.use_v1 (the default); False: the legacy RayPPOTrainer's padded batch


def micro_keys(setting: Setting, layout: Layout, step_responses: int) -> str | None:
    """The spec keys that give toyrl the layout's micro-batches (the toy cuts each optimiser step's
    responses into consecutive parts, as verl's ranks and micro-batches do without balancing), ""
    when the setting's normaliser ignores them, None when the toy does not model the layout's."""
    if not setting.width:
        return ""
    if layout.micro_batch_size is None:
        return None
    return f"micro_batches={step_responses // layout.micro_batch_size}"


# verl 0.9.1's agg_loss divides seq-mean-token-sum-norm's token sums by global_batch_size and then by
# loss_scale_factor, or when that is None by the width of the loss mask it is given. The V1 trainer
# (the default) pads each micro-batch to its own longest response only in ppo_loss, so that width
# varies: D_i = the longest response of i's micro-batch, n = N, toyrl's seq_mean_token_sum_longest
# with per_micro_batch (verl_sum_norm_only, verl_dr_grpo). The legacy RayPPOTrainer (use_v1=False)
# keeps the rollout's padded width T: D_i = T, toyrl's seq_mean_token_sum_norm at L_norm = T, as
# with loss_scale_factor = T (verl_dr_grpo_constant). toyrl's verl_dr_grpo before 0.5 was that
# constant form; token_sum_norm (n = 1; what verl <= 0.7.0's dp_actor computes with a single
# micro-batch) is N times too large.
OLD_SUM_NORM = "advantage=group_std_sample,aggregation=seq_mean_token_sum_norm,std_eps=1e-06"
OLD_DR_GRPO = DR_GRPO_SPEC
LEGACY_SUM_NORM = "advantage=group_std_sample,aggregation=token_sum_norm,std_eps=1e-06"
LEGACY_DR_GRPO = "advantage=none,aggregation=token_sum_norm"

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
        width=True,
    ),
    Setting(
        "seq-mean-token-sum-norm, norm_adv_by_std_in_grpo=False",
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        norm=False,
        checks=(("verl_dr_grpo", True), (OLD_DR_GRPO, False)),
        width=True,
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
        checks=(("verl_token_sum", True),),
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
    Setting(
        "seq-mean-token-sum-norm, norm_adv_by_std_in_grpo=False, trainer.use_v1=False",
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        norm=False,
        checks=(("verl_dr_grpo_constant", True), ("verl_dr_grpo", False)),
        v1=False,
    ),
]


def variant_of(preset: str) -> Variant:
    """The variant of a preset name or spec, or of a preset name followed by more spec keys
    ('verl_default,mini_batches=2'); a trailing note in parentheses is not part of it."""
    text = preset.split(" (")[0]
    head, _, keys = text.partition(",")
    if "=" in head or not keys:
        return parse_variant(text)
    spec = {key: str(value) for key, value in parse_variant(head).spec().items()}
    spec |= dict(item.split("=", 1) for item in keys.split(","))  # a key given again: the later one
    return parse_variant(",".join(f"{key}={value}" for key, value in spec.items()))


def check_update(
    verl: Verl,
    conform: Conform,
    batch_name: str,
    setting: Setting,
    layout: Layout,
    theta_name: str,
    controls: bool = True,
) -> Update:
    """verl's weights for the setting against each of its presets / specs (its update returned);
    without `controls`, against those it should agree with only (the known mismatches are recorded
    by test_policy_loss, where every micro-batch's longest response is shorter than the cap)."""
    batch = BATCHES[batch_name]()
    batch = dataclasses.replace(batch, config=batch.config.replace(length_norm=setting.length_norm))
    theta = theta_of(batch, batch_name, theta_name)
    advantages = verl_advantages(verl, batch, setting.estimator, setting.norm)
    actor = actor_config(verl, batch, layout, **setting.overrides)
    (update,) = verl_updates(verl, batch, advantages, actor, layout, theta, v1=setting.v1)
    assert update.micro_batches >= (1 if layout is ONE else 2)
    keys = micro_keys(setting, layout, batch.responses)
    assert keys is not None, f"{layout.name}: micro-batches the toy does not cut"
    if theta is not None:
        rho = ratios(batch, theta)
        assert (update.clipfrac > 0) == setting.clips  # the PPO (or CISPO) clip acts
        assert update.clipfrac_lower == 0 and not ((advantages < 0) & (rho > 3)).any()  # the dual clip not
        assert ((advantages > 0) & (rho > 1.2) & (rho <= 1 + CLIP_HIGH)).any()  # clip_ratio_high matters
        assert ((advantages > 0) & (rho > 1 + CLIP_HIGH)).any()
    for check, expected in setting.checks + (setting.moved_checks if theta is not None else ()):
        if not (expected or controls):
            continue
        preset = with_keys(check, keys)
        variant = variant_of(preset)
        if not variant.stage("selector").keeps_truncated:
            assert not batch.stopped.all()  # mask_truncated has something to mask
        want = toy.token_weights(variant, batch, theta)
        assert np.abs(want).max() > 0
        difference = toy.relative_difference(update.weights, want)
        label = f"{setting.name} | {batch_name} | {theta_name} | {layout.name}"
        conform(TRAINER, label, preset, difference, expected)
    return update


@pytest.mark.parametrize("micro", [1, 2, 4, 16])
def test_v1_sum_norm_divides_by_each_micro_batch_s_longest_response(engine: Verl, micro: int) -> None:
    """The finding itself, restated without toyrl: verl's V1 path with seq-mean-token-sum-norm and
    loss_scale_factor unset gives every token of response i the weight -A_i / (N T_i), T_i the
    token count of the longest response in i's micro-batch (consecutive responses, `micro` each), at
    ratio 1. On the corner batch those widths vary below the padded width T = cap + 1, so the
    constant form (toyrl's verl_dr_grpo before 0.5) is not verl's."""
    batch = corners()
    advantages = verl_advantages(engine, batch, "grpo", norm=False)
    layout = Layout(f"micro-batches of {micro}", micro_batch_size=micro)
    actor = actor_config(engine, batch, layout, loss_agg_mode="seq-mean-token-sum-norm")
    assert actor.loss_scale_factor is None
    (update,) = verl_updates(engine, batch, advantages, actor, layout)
    lengths = batch.mask.sum(axis=1)
    widths = np.repeat(lengths.reshape(-1, micro).max(axis=1), micro)
    want = np.where(batch.mask, -advantages / (batch.responses * widths[:, None]), 0.0)
    assert toy.relative_difference(update.weights, want) <= 1e-12
    varies = bool((widths < batch.width).any())
    assert varies == (micro < batch.responses)  # one micro-batch holds a truncated response: T itself
    constant = np.where(batch.mask, -advantages / (batch.responses * batch.width), 0.0)
    assert (toy.relative_difference(update.weights, constant) > 1e-3) == varies


@pytest.mark.parametrize("theta_name", THETAS)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_policy_loss(
    engine: Verl, conform: Conform, setting: Setting, batch_name: str, theta_name: str
) -> None:
    """ppo_loss on 4 micro-batches of 4 responses (gradient accumulation) against toyrl's
    full-batch update, on-policy and at a moved policy with the clip active."""
    check_update(engine, conform, batch_name, setting, FOUR, theta_name)


def modelled(settings: list[Setting], layouts: tuple[Layout, ...]) -> list[Any]:
    """(setting, layout) pairs whose micro-batches the toy cuts as verl does (`micro_keys`)."""
    return [
        pytest.param(setting, layout, id=f"{setting.name}-{layout.name}")
        for setting in settings
        for layout in layouts
        if micro_keys(setting, layout, 1) is not None
    ]


@pytest.mark.parametrize(
    ("setting", "layout"),
    modelled([s for s in SETTINGS if "loss_scale_factor" not in s.overrides and s.norm], LAYOUTS),
)
def test_micro_batch_layouts(engine: Verl, conform: Conform, setting: Setting, layout: Layout) -> None:
    """verl 0.9.1 normalises every micro-batch's loss by the mini-batch's global token count or
    response count, so any cut (fixed size, by token budget, over dp ranks) gives the full batch's
    gradient, and seq-mean-token-sum-norm without loss_scale_factor divides by each micro-batch's
    longest response: each layout is compared with toyrl's update with its micro-batches, at a moved
    policy (the width's by token budget are not the toy's: not compared)."""
    check_update(engine, conform, "sampled 1", setting, layout, "moved", controls=False)


# --- several optimiser steps per batch: mini-batches, epochs, shuffle, balance_batch ---------------


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The actor's mini-batch schedule on a batch of B prompts x rollout.n responses."""

    name: str
    mini_batch_prompts: int  # actor.ppo_mini_batch_size, in prompts (x rollout.n responses)
    epochs: int = 1  # actor.ppo_epochs
    shuffle: bool = False  # actor.shuffle (make_iterator's DataLoader, seed data_loader_seed + rank)
    balance: bool = False  # trainer.balance_batch (reorders the batch before the update)

    def mini_batches(self, batch: toy.ToyBatch) -> int:
        return batch.shape[0] // self.mini_batch_prompts

    def keys(self, batch: toy.ToyBatch) -> str:
        """The toyrl schedule keys of the setting (shuffle=True draws a new order each epoch)."""
        keys = [f"mini_batches={self.mini_batches(batch)}"]
        keys += [f"num_iterations={self.epochs}"] if self.epochs > 1 else []
        return ",".join(keys + (["shuffle=epoch"] if self.shuffle else []))


SCHEDULES = [
    Schedule("2 mini-batches", 2),
    Schedule("4 mini-batches", 1),
    Schedule("2 mini-batches, shuffle", 2, shuffle=True),
    Schedule("2 epochs x 2 mini-batches", 2, epochs=2),
    Schedule("2 epochs x 2 mini-batches, shuffle", 2, epochs=2, shuffle=True),
    Schedule("2 mini-batches, balance_batch", 2, balance=True),
]
SHUFFLED = SCHEDULES[4]
MINI = Layout("micro-batches of 2", micro_batch_size=2)
MINI_LAYOUTS = (
    Layout("1 micro-batch", micro_batch_size=8),
    MINI,
    Layout("micro-batches of 1", micro_batch_size=1),
    Layout("dynamic bsz", micro_batch_size=None, max_token_len=90),
    Layout("2 dp ranks x 2 micro-batches", micro_batch_size=2, dp=2),
    Layout("2 dp ranks, balance_batch", micro_batch_size=2, dp=2),
)
FIRST_ON_POLICY = "ratio 1, then moved"  # step 0 at theta_old, the later steps at toy.moved's policy


def with_keys(preset: str, keys: str) -> str:
    """A preset (or spec) with more spec keys, as the table shows it ('verl_default,mini_batches=2')."""
    return f"{preset},{keys}" if keys else preset


def check_updates(
    verl: Verl,
    conform: Conform,
    batch_name: str,
    setting: Setting,
    schedule: Schedule,
    layout: Layout = MINI,
    theta_name: str = FIRST_ON_POLICY,
) -> None:
    """Every optimiser step of verl's actor on the batch against toyrl's update of the same index
    (`toy.token_weights(..., update=step, order=...)`, the spec being the setting's with the
    schedule's keys), in the order verl took the responses (read back from their `row`s)."""
    batch = BATCHES[batch_name]()
    batch = dataclasses.replace(batch, config=batch.config.replace(length_norm=setting.length_norm))
    moved = toy.moved(batch, MOVES[batch_name], scale=1.0)

    def theta_at(step: int) -> np.ndarray | None:
        return None if step == 0 and theta_name == FIRST_ON_POLICY else moved

    advantages = verl_advantages(verl, batch, "grpo", setting.norm)
    overrides = {"ppo_epochs": schedule.epochs, "shuffle": schedule.shuffle, **setting.overrides}
    actor = actor_config(verl, batch, layout, schedule.mini_batch_prompts, **overrides)
    balance = schedule.balance or "balance_batch" in layout.name
    updates = verl_updates(verl, batch, advantages, actor, layout, theta_at, balance, setting.v1)
    k, n = schedule.mini_batches(batch), batch.responses
    keys = micro_keys(setting, layout, n // k)
    assert keys is not None, f"{layout.name}: micro-batches the toy does not cut"
    assert k > 1 and len(updates) == schedule.epochs * k
    per_rank = n // k // layout.dp
    for update in updates:
        assert len(update.rows) == n // k
        assert update.micro_batches == 1 if layout.micro_batch_size == per_rank else update.micro_batches >= 2

    # the order of each epoch, as verl took the responses: the concatenation of its mini-batches
    natural = np.arange(n)
    orders = [np.concatenate([u.rows for u in updates[e * k : (e + 1) * k]]) for e in range(schedule.epochs)]
    assert all(np.array_equal(np.sort(order), natural) for order in orders)  # each response once an epoch
    reordered = schedule.shuffle or balance or layout.dp > 1
    if schedule.shuffle:
        assert not any(np.array_equal(order, natural) for order in orders)
        if schedule.epochs > 1:
            assert not np.array_equal(orders[0], orders[1])  # a new order each epoch: shuffle=epoch
    else:
        assert all(np.array_equal(order, orders[0]) for order in orders)  # the same order every epoch
        assert np.array_equal(orders[0], natural) != reordered  # the batch's own order unless reordered

    def order_of(step: int) -> np.ndarray | None:
        order = orders[step // k]
        return None if np.array_equal(order, natural) else order

    rho = ratios(batch, moved)
    later = [u for step, u in enumerate(updates) if theta_at(step) is not None]
    assert max(u.clipfrac for u in later) > 0  # the PPO clip acts
    assert all(u.clipfrac_lower == 0 for u in updates) and not ((advantages < 0) & (rho > 3)).any()

    label = f"{setting.name} | {batch_name} | {theta_name} | {schedule.name} | {layout.name}"
    for preset, expected in setting.checks:
        if not expected:  # a known mismatch of the aggregation, recorded by the one-step tests
            continue
        spec = with_keys(preset, ",".join(filter(None, (schedule.keys(batch), keys))))
        variant = variant_of(spec)
        for step, update in enumerate(updates):
            want = toy.token_weights(variant, batch, theta_at(step), update=step, order=order_of(step))
            outside = ~np.isin(natural, update.rows)
            assert not want[outside].any() and not update.weights[outside].any()  # the step's mini-batch only
            # nonzero unless every advantage in the mini-batch is 0 (a group all rewarded or all not)
            assert bool(np.abs(want).max() > 0) == bool((advantages[update.rows] != 0).any())
            difference = toy.relative_difference(update.weights, want)
            conform(TRAINER, f"{label} | step {step}", spec, difference, expected)
        last = len(updates) - 1
        if reordered:  # the order matters: toyrl's mini-batches in the batch's own order are not verl's
            want = toy.token_weights(variant, batch, moved, update=last)
            difference = toy.relative_difference(updates[last].weights, want)
            conform(TRAINER, f"{label} | step {last} in the batch's order", spec, difference, False)
        if schedule.shuffle and schedule.epochs > 1:  # the order is redrawn: not shuffle=once
            once = with_keys(preset, schedule.keys(batch).replace("shuffle=epoch", "shuffle=once"))
            want = toy.token_weights(variant_of(once), batch, moved, update=last, order=orders[0])
            difference = toy.relative_difference(updates[last].weights, want)
            conform(TRAINER, f"{label} | step {last} in epoch 0's order", once, difference, False)
    # the scope of the normaliser is the mini-batch, not the micro-batch: a per-micro-batch token
    # mean (TRL's bnpo with gradient accumulation) is not verl 0.9.1's
    if setting.overrides.get("loss_agg_mode", "token-mean") == "token-mean" and layout.micro_batch_size:
        micro = per_rank // layout.micro_batch_size
        if micro > 1 and layout.dp == 1:
            preset = setting.checks[-1][0]
            spec = with_keys(preset, f"{schedule.keys(batch)},micro_batches={micro},per_micro_batch=true")
            last = len(updates) - 1
            want = toy.token_weights(variant_of(spec), batch, moved, update=last, order=order_of(last))
            difference = toy.relative_difference(updates[last].weights, want)
            conform(TRAINER, f"{label} | step {last}", spec, difference, False)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize(
    "setting", [s for s in SETTINGS if "loss_scale_factor" not in s.overrides], ids=lambda s: s.name
)
def test_mini_batches(
    engine: Verl, conform: Conform, setting: Setting, batch_name: str, schedule: Schedule
) -> None:
    """ppo_mini_batch_size < the batch: one optimiser step per mini-batch (and epoch), each step's
    loss normalised on its own mini-batch (token-mean by its tokens, the seq-mean modes by
    ppo_mini_batch_size * rollout.n), in the batch's order, verl's shuffled order (new each epoch) or
    balance_batch's; step 0 on-policy, the later ones at a moved policy with the clip active."""
    check_updates(engine, conform, batch_name, setting, schedule)


@pytest.mark.parametrize(
    ("setting", "layout"),
    modelled([s for s in SETTINGS if "loss_scale_factor" not in s.overrides and s.norm][:4], MINI_LAYOUTS),
)
def test_mini_batch_layouts(engine: Verl, conform: Conform, setting: Setting, layout: Layout) -> None:
    """Several micro-batches per mini-batch (fixed size, by token budget, over dp ranks, each rank
    shuffling its own shard with seed data_loader_seed + rank) leave each step's gradient the
    mini-batch's: 2 epochs x 2 mini-batches with shuffle, every step at a moved policy."""
    check_updates(engine, conform, "sampled 1", setting, SHUFFLED, layout, "moved")


# --- the V1 layout by lengths: ranks balanced by workload, micro-batches by a token budget ----------


def test_the_layout_s_partitions_are_verl_s(engine: Verl) -> None:
    """toyrl.layout's largest differencing method picks verl's parts, ties included (lengths drawn
    from a narrow range, so that many tie): get_seqlen_balanced_partitions, equal-size and not, and
    the micro-batches rearrange_micro_batches cuts for a token budget (as sets: verl then orders
    them by workload, which no normaliser sees)."""
    from toyrl import layout

    assert engine.balancing is not None and engine.tu is not None
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(2, 40))
        k = int(rng.integers(1, n + 1))
        seq = rng.integers(1, 4 if trial % 2 else 300, size=n).tolist()
        workloads = [layout.workload(s) for s in seq]
        assert layout.balanced_partitions(
            workloads, k, False
        ) == engine.balancing.get_seqlen_balanced_partitions(workloads, k, equal_size=False)
        k_equal = max(d for d in range(1, min(k, 8) + 1) if n % d == 0)
        assert layout.balanced_partitions(workloads, k_equal, True) == (
            engine.balancing.get_seqlen_balanced_partitions(workloads, k_equal, equal_size=True)
        )
        budget = max(seq) + int(rng.integers(0, sum(seq)))
        mask = torch.as_tensor(np.arange(max(seq))[None, :] < np.array(seq)[:, None], dtype=torch.int64)
        data = engine.tensordict.TensorDict({"attention_mask": mask, "input_ids": mask}, batch_size=[n])
        _, verl_parts = engine.balancing.rearrange_micro_batches(data, max_token_len=budget)
        (toy_parts,) = layout.token_budget_parts([seq], budget)
        assert {frozenset(p) for p in verl_parts} == {frozenset(p) for p in toy_parts}


def test_the_v1_trainer_balances_its_ranks_on_every_step(engine: Verl) -> None:
    """What `v1_rank_order` restates, read off the installed trainer_base.py: `_balance_batch`
    calls get_seqlen_balanced_partitions(..., k_partitions=dp_size, equal_size=True) and reorders
    by the concatenated parts; the step calls it without reading trainer.balance_batch."""
    spec = importlib.util.find_spec("verl.trainer.ppo")  # v1's package imports transfer_queue
    assert spec is not None and spec.origin is not None
    source = (pathlib.Path(spec.origin).parent / "v1" / "trainer_base.py").read_text()
    tree = ast.parse(source)
    (method,) = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_balance_batch"
    ]
    calls = [
        node
        for node in ast.walk(method)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "get_seqlen_balanced_partitions"
    ]
    assert len(calls) == 1
    keywords = {k.arg: ast.unparse(k.value) for k in calls[0].keywords}
    assert keywords == {"k_partitions": "dp_size", "equal_size": "True"}
    assert "batch.reorder([j for partition in global_partition_lst for j in partition])" in ast.unparse(
        method
    )
    assert "balance_batch" not in source.replace("_balance_batch", "")


LENGTH_LAYOUTS = (  # (layout, the toy's keys; each prompt PROMPT_WIDTH tokens)
    (Layout("dynamic bsz", micro_batch_size=None, max_token_len=90), "token_budget=90"),
    (Layout("2 dp ranks x 2 micro-batches", micro_batch_size=2, dp=2), "ranks=2"),
    (
        Layout("2 dp ranks, dynamic bsz", micro_batch_size=None, max_token_len=70, dp=2),
        "ranks=2,token_budget=70",
    ),
)
WIDTH_SETTINGS = [s for s in SETTINGS if s.width]


@pytest.mark.parametrize("mini_batch_prompts", [None, 2], ids=["1 mini-batch", "2 mini-batches"])
@pytest.mark.parametrize(("layout", "keys"), LENGTH_LAYOUTS, ids=lambda x: getattr(x, "name", x))
@pytest.mark.parametrize("setting", WIDTH_SETTINGS, ids=lambda s: s.name)
def test_v1_layout_by_lengths(
    engine: Verl,
    conform: Conform,
    setting: Setting,
    layout: Layout,
    keys: str,
    mini_batch_prompts: int | None,
) -> None:
    """seq-mean-token-sum-norm without loss_scale_factor, laid out as the V1 trainer lays it out by
    lengths: the batch dealt to dp ranks by `v1_rank_order`, micro-batches cut by
    rearrange_micro_batches for use_dynamic_bsz; against toyrl's own layout (spec keys ranks,
    token_budget, prompt_tokens), which is given no order: it finds verl's from the lengths. The
    toy's fixed consecutive micro-batches are the control (they are not verl's here)."""
    batch = BATCHES["sampled 1"]()
    advantages = verl_advantages(engine, batch, "grpo", setting.norm)
    actor = actor_config(engine, batch, layout, mini_batch_prompts, loss_agg_mode="seq-mean-token-sum-norm")
    balance = "v1" if layout.dp > 1 else False
    updates = verl_updates(
        engine, batch, advantages, actor, layout, balance=balance, prompt_tokens=PROMPT_WIDTH
    )
    mini = batch.shape[0] // (mini_batch_prompts or batch.shape[0])
    per_rank = batch.responses // mini // layout.dp
    micro = 1 if layout.micro_batch_size is None else per_rank // layout.micro_batch_size
    mini_keys = f",mini_batches={mini}" if mini > 1 else ""
    label = f"{setting.name} | sampled 1 | {layout.name} | {mini} mini-batch(es)"
    assert max(u.micro_batches for u in updates) >= 2
    for preset, expected in setting.checks:
        if not expected:
            continue
        spec = with_keys(preset, f"{keys},prompt_tokens={PROMPT_WIDTH},micro_batches={micro}{mini_keys}")
        control = with_keys(preset, f"micro_batches={layout.dp * max(micro, 2)}{mini_keys}")
        controls = []
        for step, update in enumerate(updates):
            want = toy.token_weights(variant_of(spec), batch, update=step)
            conform(
                TRAINER, f"{label} | step {step}", spec, toy.relative_difference(update.weights, want), True
            )
            other = toy.token_weights(variant_of(control), batch, update=step)
            controls.append(toy.relative_difference(update.weights, other))
        conform(TRAINER, f"{label} | every step", control, max(controls), False)  # a step may agree by chance


# --- dual-clip: clip_ratio_c ---------------------------------------------------------------------

# Policies where some token with A < 0 has a ratio above clip_ratio_c = 3 (verl's default): the
# corner batch's wrong-approach stop logit + 1.5 (its stop tokens ~4.5 times likelier), and
# toy.moved at scale 1.5 with seed 3 on either batch.
DUAL_THETAS = {
    ("corners", "wrong stop logit +1.5"): lambda batch: (
        batch.theta_old + np.eye(batch.theta_old.shape[1])[-1] * 1.5
    ),
    ("corners", "moved x1.5"): lambda batch: toy.moved(batch, 3, scale=1.5),
    ("sampled 0", "moved x1.5"): lambda batch: toy.moved(batch, 3, scale=1.5),
}


@pytest.mark.parametrize("schedule", [None, SCHEDULES[0]], ids=["1 mini-batch", "2 mini-batches"])
@pytest.mark.parametrize(
    ("batch_name", "theta_name"), list(DUAL_THETAS), ids=[" | ".join(k) for k in DUAL_THETAS]
)
def test_dual_clip(
    engine: Verl, conform: Conform, batch_name: str, theta_name: str, schedule: Schedule | None
) -> None:
    """verl's dual clip (clip_ratio_c = 3, on by default): where A < 0 and the ratio exceeds 3 the
    token's loss is the constant -3 A, so its weight is 0 (pg_clipfrac_lower > 0 reports it):
    toyrl's ppo_clip with dual_clip=3.0; without dual_clip the toy keeps the weight A rho."""
    batch = BATCHES[batch_name]()
    theta = DUAL_THETAS[batch_name, theta_name](batch)
    advantages = verl_advantages(engine, batch, "grpo", True)
    prompts = None if schedule is None else schedule.mini_batch_prompts
    actor = actor_config(engine, batch, MINI, prompts)
    assert actor.clip_ratio_c == 3.0
    updates = verl_updates(engine, batch, advantages, actor, MINI, theta)
    dual = (advantages < 0) & (ratios(batch, theta) > 3.0) & batch.mask
    assert dual.any() and max(u.clipfrac_lower for u in updates) > 0  # verl reports the dual clip acting
    if theta_name.startswith("moved"):
        assert max(u.clipfrac for u in updates) > 0  # and the PPO clip too
    keys = "" if schedule is None else schedule.keys(batch)
    steps = "1 mini-batch" if schedule is None else schedule.name
    label = f"dual-clip clip_ratio_c=3 | {batch_name} | {theta_name} | {steps} | {MINI.name}"
    for step, update in enumerate(updates):
        assert not update.weights[dual].any()
        spec = with_keys("verl_default", ",".join(filter(None, (keys, "dual_clip=3.0"))))
        want = toy.token_weights(variant_of(spec), batch, theta, update=step)
        assert bool(np.abs(want).max() > 0) == bool((advantages[update.rows] != 0).any())
        conform(TRAINER, f"{label} | step {step}", spec, toy.relative_difference(update.weights, want))
        if not dual[update.rows].any():
            continue
        # without the dual clip toyrl keeps A rho on those tokens; away from them the two agree
        plain = with_keys(NO_DUAL_CLIP, keys)
        without = toy.token_weights(variant_of(plain), batch, theta, update=step)
        assert np.all(without[dual & np.isin(np.arange(batch.responses), update.rows)[:, None]] != 0)
        conform(
            TRAINER, f"{label} | step {step}", plain, toy.relative_difference(update.weights, without), False
        )
        assert toy.relative_difference(update.weights[~dual], without[~dual]) <= 1e-10


# --- the newer families: cispo, sapo and gpg policy losses; opo and gpg advantages --------------


def gpg_alpha(batch: toy.ToyBatch) -> tuple[float, float]:
    """GPG's scale alpha = N / max(1, M), M the batch's nonzero rewards: exactly (toyrl's) and as
    compute_gpg_outcome_advantage computes it, `bsz / m.clamp(min=1)`, a Python int over an int64
    tensor, which torch's true division returns in the default dtype, float32."""
    n = batch.responses
    m = max(1, int(np.count_nonzero(batch.rewards(parse_variant("verl_default")))))
    return n / m, float(np.float32(n) / np.float32(m))


@pytest.mark.parametrize("batch_name", list(BATCHES))
def test_gpg_advantages(verl: Verl, conform: Conform, batch_name: str) -> None:
    """verl's gpg estimator (compute_gpg_outcome_advantage, f_norm 1) is alpha (r - group mean)
    with alpha = N / M rounded to float32 (`gpg_alpha`; the rewards and the centring stay float64):
    restated so, verl's advantages agree to 1e-14 on every batch. toyrl's `gpg` advantage computes
    N / M in float64, so the two agree to 1e-10 where N / M is a float32 number (the sampled batches:
    16 / 4) and differ by float32's rounding where it is not (the corner batch: 16 / 7, relative
    4.5e-8): a known difference, verl's, recorded as such (toyrl has no float32 variant of it, as it
    has for reinforce_plus_plus_baseline's Bessel factor)."""
    assert (torch.tensor(16) / torch.tensor(7)).dtype == torch.float32  # the promotion verl relies on
    assert inspect.signature(verl.core.compute_gpg_outcome_advantage).parameters["f_norm"].default == 1.0
    batch = BATCHES[batch_name]()
    got = verl_advantages(verl, batch, "gpg")
    want = broadcast(toy.advantages(parse_variant("gpg"), batch), batch)
    assert np.abs(want).max() > 0
    exact, rounded = gpg_alpha(batch)
    assert (exact != rounded) == (batch_name == "corners")  # both cases are covered
    assert toy.relative_difference(got, want * (rounded / exact)) <= 1e-14  # verl: toyrl's, alpha in float32
    difference = toy.relative_difference(got, want)
    assert difference < 1e-6
    setting = (
        f"adv gpg (alpha = {batch.responses} / M in float32: {'inexact' if exact != rounded else 'exact'})"
    )
    conform(TRAINER, f"{setting} | {batch_name}", "gpg", difference, exact == rounded)


# CISPO's clipped, detached weight; SAPO's soft gate; GPG's plain -A log pi (grpo's advantages)
CISPO = "advantage=group_std_sample,aggregation=token_mean,objective=cispo,std_eps=1e-06"
SAPO = "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=sapo,std_eps=1e-06"
SAPO_TOKEN_MEAN = "advantage=group_std_sample,aggregation=token_mean,objective=sapo,std_eps=1e-06"
GPG = "advantage=group_std_sample,aggregation=token_mean,objective=gpg,std_eps=1e-06"
GPG_SEQ = "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=gpg,std_eps=1e-06"

FAMILIES = [
    # compute_policy_loss_cispo: clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high), detached,
    # times -A log pi: toyrl's cispo with epsilon = clip_ratio_low, epsilon_high = clip_ratio_high;
    # the same cap without the lower bound (and PPO's clip) are the controls
    Setting(
        "cispo (clip_ratio_low = clip_ratio_high = 0.2, the defaults)",
        {"policy_loss": {"loss_mode": "cispo"}},
        checks=((f"{CISPO},epsilon=0.2,epsilon_high=0.2", True),),
        moved_checks=((f"{CISPO},epsilon_high=0.2", False), ("verl_default", False)),
    ),
    # clip_ratio_low = 1: the lower bound 0, no bound at all (ratios are positive): toyrl's
    # epsilon None (CISPO's paper, TRL's clamp(max=...))
    Setting(
        "cispo, clip_ratio_low=1.0 (no lower bound), clip_ratio_high=0.28",
        {"policy_loss": {"loss_mode": "cispo"}, "clip_ratio_low": 1.0, "clip_ratio_high": CLIP_HIGH},
        checks=((f"{CISPO},epsilon_high={CLIP_HIGH}", True),),
        moved_checks=((f"{CISPO},epsilon=0.2,epsilon_high={CLIP_HIGH}", False),),
    ),
    # clip_ratio_low None: compute_policy_loss_cispo falls back to clip_ratio for it
    Setting(
        "cispo, clip_ratio_low=None (clip_ratio=0.3's)",
        {"policy_loss": {"loss_mode": "cispo"}, "clip_ratio_low": None, "clip_ratio": 0.3},
        checks=((f"{CISPO},epsilon=0.3,epsilon_high=0.2", True),),
        moved_checks=((f"{CISPO},epsilon=0.2,epsilon_high=0.2", False),),
    ),
    # compute_policy_loss_sapo: -sigmoid(tau (ratio - 1)) 4 / tau A, tau = tau_pos where A > 0, else
    # tau_neg, aggregated seq-mean-token-mean whatever loss_agg_mode says (the default token-mean
    # here); the taus swapped and the token mean are the controls
    Setting(
        "sapo (tau_pos=1.0, tau_neg=1.05, the defaults; loss_agg_mode=token-mean, ignored)",
        {"policy_loss": {"loss_mode": "sapo"}},
        checks=((SAPO, True), (SAPO_TOKEN_MEAN, False)),
        clips=False,
        moved_checks=((f"{SAPO},tau_pos=1.05,tau_neg=1.0", False),),
    ),
    Setting(
        "sapo, tau_pos=2.0, tau_neg=5.0, loss_agg_mode=seq-mean-token-sum-norm (ignored)",
        {
            "policy_loss": {"loss_mode": "sapo"},
            "tau_pos": 2.0,
            "tau_neg": 5.0,
            "loss_agg_mode": "seq-mean-token-sum-norm",
        },
        checks=((f"{SAPO},tau_pos=2.0,tau_neg=5.0", True),),
        clips=False,
        moved_checks=((f"{SAPO},tau_pos=5.0,tau_neg=2.0", False), (SAPO, False)),
    ),
    # compute_policy_loss_gpg: -A log pi, no ratio, aggregated by loss_agg_mode; PPO's clipped
    # objective (verl's vanilla) is the control
    Setting(
        "gpg (token-mean)",
        {"policy_loss": {"loss_mode": "gpg"}},
        checks=((GPG, True),),
        clips=False,
        moved_checks=(("verl_default", False),),
    ),
    Setting(
        "gpg, loss_agg_mode=seq-mean-token-mean",
        {"policy_loss": {"loss_mode": "gpg"}, "loss_agg_mode": "seq-mean-token-mean"},
        checks=((GPG_SEQ, True), (GPG, False)),
        clips=False,
        moved_checks=(("verl_seq_mean_token_mean", False),),
    ),
]


@pytest.mark.parametrize("theta_name", THETAS)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize("setting", FAMILIES, ids=lambda s: s.name)
def test_family_policy_loss(
    engine: Verl, conform: Conform, setting: Setting, batch_name: str, theta_name: str
) -> None:
    """verl's cispo, sapo and gpg policy losses (ppo_loss on 4 micro-batches) against toyrl's
    objectives, at ratio 1 (all of them the on-policy gradient) and at a moved policy, where CISPO's
    bounds act on tokens with A != 0 (both of them, or the cap alone, as the setting has it; verl's
    pg_clipfrac > 0), SAPO's gate moves every weight off A rho (pg_clipfrac 0: verl reports none)
    and GPG's ignores the ratio."""
    check_update(engine, conform, batch_name, setting, FOUR, theta_name)
    if theta_name == "ratio 1" or setting.overrides["policy_loss"]["loss_mode"] != "cispo":
        return
    batch = BATCHES[batch_name]()
    rho = ratios(batch, theta_of(batch, batch_name, theta_name))
    acting = batch.mask & (verl_advantages(engine, batch, "grpo") != 0)
    objective = variant_of(setting.checks[0][0]).stage("objective")
    assert (acting & (rho > 1 + objective.epsilon_high)).any()  # the cap acts
    low = 1 - (0.2 if objective.epsilon is None else objective.epsilon)  # no bound: where the control's acts
    assert (acting & (rho < low)).any()


# compute_policy_loss_geo_mean (GMPO): each token's log-ratio clipped at -clip_ratio_low /
# clip_ratio_high on its advantage's side, the response's ratio exp(mean of them), -A times it,
# torch.mean over the micro-batch's responses whatever loss_agg_mode says: toyrl's gmpo with
# seq_mean_token_mean (verl divides by |o| + 1e-8: 1e-8 / |o| relative apart). The micro-batches'
# means add up (one backward each into the step's gradient), so four micro-batches give four
# times the mini-batch's mean: agreeing with one micro-batch a step, a known scale with four.
GMPO = "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=gmpo,std_eps=1e-06"
GMPO_SETTINGS = [
    (
        "geo_mean (clip_ratio_low = clip_ratio_high = 0.2, the defaults; loss_agg_mode=token-mean, ignored)",
        {"policy_loss": {"loss_mode": "geo_mean"}},
        f"{GMPO},epsilon=0.2,epsilon_high=0.2",
        (
            (
                "the token mean",
                f"{GMPO},epsilon=0.2,epsilon_high=0.2".replace("seq_mean_token_mean", "token_mean"),
            ),
        ),
    ),
    (
        "geo_mean, clip_ratio_low = clip_ratio_high = 0.4 (GMPO's)",
        {"policy_loss": {"loss_mode": "geo_mean"}, "clip_ratio_low": 0.4, "clip_ratio_high": 0.4},
        GMPO,
        (("GSPO's sequence clip", GMPO.replace("gmpo", "gspo") + ",epsilon=0.4,epsilon_high=0.4"),),
    ),
]


@pytest.mark.parametrize("theta_name", THETAS)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize(
    ("setting", "overrides", "spec", "controls"), GMPO_SETTINGS, ids=[s[0] for s in GMPO_SETTINGS]
)
def test_gmpo(
    engine: Verl,
    conform: Conform,
    setting: str,
    overrides: dict,
    spec: str,
    controls: tuple[tuple[str, str], ...],
    batch_name: str,
    theta_name: str,
) -> None:
    """verl's geo_mean policy loss (ppo_loss) against toyrl's gmpo at ratio 1 and at a moved
    policy where the log-space clip acts on tokens with A > 0 (verl's pg_clipfrac > 0): one
    micro-batch agrees; four micro-batches are four times toyrl's update (to 1e-12), recorded as a
    known difference; at the moved policy the controls differ."""
    batch = BATCHES[batch_name]()
    theta = theta_of(batch, batch_name, theta_name)
    advantages = verl_advantages(engine, batch, "grpo")
    variant = parse_variant(spec)
    want = toy.token_weights(variant, batch, theta)
    assert np.abs(want).max() > 0
    for layout in (ONE, FOUR):
        actor = actor_config(engine, batch, layout, **overrides)
        (update,) = verl_updates(engine, batch, advantages, actor, layout, theta)
        if theta is not None:
            assert update.clipfrac > 0
        label = f"{setting} | {batch_name} | {theta_name} | {layout.name}"
        if layout is ONE:
            conform(TRAINER, label, spec, toy.relative_difference(update.weights, want))
            for note, control in controls if theta is not None else ():
                difference = toy.relative_difference(
                    update.weights, toy.token_weights(parse_variant(control), batch, theta)
                )
                conform(TRAINER, f"{label} (control: {note})", control, difference, expected=False)
        else:
            assert update.micro_batches == 4
            assert toy.relative_difference(update.weights, 4 * want) <= 1e-12
            difference = toy.relative_difference(update.weights, want)
            conform(TRAINER, f"{label} (each micro-batch's mean, summed)", spec, difference, expected=False)


@dataclasses.dataclass(frozen=True)
class FamilyPreset:
    """A toyrl preset of the newer families and the verl settings it stands for."""

    preset: str
    estimator: str  # algorithm.adv_estimator
    overrides: dict[str, Any]  # FSDPActorConfig fields
    mini_batch_prompts: int | None = None  # actor.ppo_mini_batch_size (None: the batch, one step)
    micro_batch_size: int = 1  # ppo_micro_batch_size_per_gpu where there are mini-batches


FAMILY_PRESETS = [
    FamilyPreset("opo", "opo", {}),
    FamilyPreset("gpg", "gpg", {"policy_loss": {"loss_mode": "gpg"}}),
    FamilyPreset("reinforce_pp", "reinforce_plus_plus", {}),
    FamilyPreset("reinforce_pp_baseline", "reinforce_plus_plus_baseline", {}),
    # the objectives that differ from PPO's only off policy, in four mini-batches of one prompt
    FamilyPreset(
        "cispo",
        "grpo",
        {"policy_loss": {"loss_mode": "cispo"}, "clip_ratio_low": 1.0, "clip_ratio_high": 4.0},
        1,
    ),
    FamilyPreset("sapo", "grpo", {"policy_loss": {"loss_mode": "sapo"}}, 1),
    FamilyPreset(
        "gspo",
        "grpo",
        {
            "policy_loss": {"loss_mode": "gspo"},
            "loss_agg_mode": "seq-mean-token-mean",
            "clip_ratio_low": 3e-4,
            "clip_ratio_high": 4e-4,
        },
        1,
    ),
    # geo_mean takes torch.mean over each micro-batch: one micro-batch a mini-batch (test_gmpo)
    FamilyPreset(
        "gmpo",
        "grpo",
        {"policy_loss": {"loss_mode": "geo_mean"}, "clip_ratio_low": 0.4, "clip_ratio_high": 0.4},
        1,
        micro_batch_size=4,
    ),
    FamilyPreset("verl_grpo_passk", "grpo_passk", {}),
    FamilyPreset("verl_token_sum", "grpo", {"loss_agg_mode": "token-sum"}),
]


def preset_setting(preset: FamilyPreset) -> str:
    keys = [f"adv_estimator={preset.estimator}"]
    keys += [f"{k}={v['loss_mode'] if k == 'policy_loss' else v}" for k, v in preset.overrides.items()]
    keys += [] if preset.mini_batch_prompts is None else [f"ppo_mini_batch_size={preset.mini_batch_prompts}"]
    return ", ".join(keys)


@pytest.mark.parametrize("batch_name", list(BATCHES))
@pytest.mark.parametrize("preset", FAMILY_PRESETS, ids=lambda p: p.preset)
def test_family_presets(engine: Verl, conform: Conform, preset: FamilyPreset, batch_name: str) -> None:
    """Each preset of the newer families is verl with its settings: every optimiser step of verl's
    actor (4 micro-batches of 1 response per mini-batch of 4 where the preset has four, else one
    step of 4 micro-batches) against toyrl's update of the preset, the first at theta_old and the
    later ones at `toy.stop_pushed`'s policy (CISPO's cap 1 + 4 and GSPO's clip act there: verl's
    pg_clipfrac > 0). The gpg preset on the corner batch differs by verl's float32 scale
    (test_gpg_advantages), and agrees to 1e-6."""
    batch = BATCHES[batch_name]()
    variant = parse_variant(preset.preset)
    k = variant.stage("schedule").mini_batches
    micro = preset.micro_batch_size
    layout = (
        FOUR
        if preset.mini_batch_prompts is None
        else Layout(f"micro-batches of {micro}", micro_batch_size=micro)
    )
    assert k == (1 if preset.mini_batch_prompts is None else batch.shape[0] // preset.mini_batch_prompts)
    pushed = toy.stop_pushed(batch, MOVES[batch_name])
    advantages = verl_advantages(engine, batch, preset.estimator)
    actor = actor_config(engine, batch, layout, preset.mini_batch_prompts, **preset.overrides)
    updates = verl_updates(engine, batch, advantages, actor, layout, lambda step: pushed if step else None)
    assert len(updates) == k
    if k > 1:
        loss_mode = preset.overrides["policy_loss"]["loss_mode"]
        assert (max(u.clipfrac for u in updates[1:]) > 0) == (loss_mode != "sapo")
        assert all(u.micro_batches == batch.responses // k // preset.micro_batch_size for u in updates)
    exact = preset.preset != "gpg" or np.subtract(*gpg_alpha(batch)) == 0
    for step, update in enumerate(updates):
        assert np.array_equal(
            update.rows, np.arange(step * batch.responses // k, (step + 1) * batch.responses // k)
        )
        want = toy.token_weights(variant, batch, None if step == 0 else pushed, update=step)
        assert np.abs(want).max() > 0 or not advantages[update.rows].any()
        difference = toy.relative_difference(update.weights, want)
        if not exact:
            assert difference < 1e-6
        where = "ratio 1" if step == 0 else "stop-pushed policy"
        label = f"preset {preset.preset}: {preset_setting(preset)} | {batch_name} | step {step}, {where}"
        conform(TRAINER, label, preset.preset, difference, exact)


def test_family_defaults_are_the_presets(engine: Verl) -> None:
    """The presets' fields that verl's defaults set: sapo's taus are ActorConfig's tau_pos, tau_neg;
    the presets of the vanilla loss have its dual clip clip_ratio_c = 3;
    opo, gpg and the REINFORCE++ presets aggregate with the actor's default loss_agg_mode
    (token-mean); gpg's advantage is the estimator's at its default f_norm = 1; and the REINFORCE++
    presets are the specs test_advantages checks."""
    verl = engine
    actor = actor_config(verl, corners(), ONE)
    sapo = parse_variant("sapo").stage("objective")
    assert (sapo.tau_pos, sapo.tau_neg) == (actor.tau_pos, actor.tau_neg) == (1.0, 1.05)
    assert actor.loss_agg_mode == "token-mean"
    for preset in ("opo", "gpg", "reinforce_pp", "reinforce_pp_baseline", "cispo"):
        assert parse_variant(preset).spec()["aggregation"] == "token_mean"
    assert parse_variant("sapo").spec()["aggregation"] == "seq_mean_token_mean"  # verl's forced mode
    assert inspect.signature(verl.core.compute_gpg_outcome_advantage).parameters["f_norm"].default == 1.0
    specs = {e.name: e.preset for e in ESTIMATORS if e.expected}
    for preset, estimator in (
        ("reinforce_pp", "reinforce_plus_plus"),
        ("reinforce_pp_baseline", "reinforce_plus_plus_baseline"),
    ):  # the estimator's advantage, with the vanilla loss's dual clip (clip_ratio_c)
        assert parse_variant(preset).spec() == parse_variant(specs[estimator]).spec() | {"dual_clip": 3.0}
    for preset in ("verl_default", "opo", "reinforce_pp", "reinforce_pp_baseline", "verl_grpo_passk"):
        assert parse_variant(preset).stage("objective").dual_clip == actor.clip_ratio_c == 3.0
    gmpo = parse_variant("gmpo")
    assert parse_variant("gmpo").spec()["aggregation"] == "seq_mean_token_mean"  # geo_mean's torch.mean
    assert gmpo.stage("objective").epsilon == gmpo.stage("objective").clip_high == 0.4  # GMPO's e^+-0.4


# --- verl <= 0.7.0: dp_actor's update_policy ------------------------------------------------------


def legacy_updates(
    verl: Verl, batch: toy.ToyBatch, advantages: np.ndarray, actor: Any, theta: Theta
) -> list[np.ndarray]:
    """d loss / d logp of every optimiser step of verl <= 0.7.0's DataParallelPPOActor.update_policy
    on the batch, each step's log-probs at `theta` (a policy, None for theta_old, or a function of
    the step's index). Its loop is inline (and the actor needs a model), so it is restated:
    fsdp_workers makes ppo_mini_batch_size * rollout.n responses a mini-batch (one dp rank);
    `data.split` cuts the batch into consecutive mini-batches (dp_actor never reads actor.shuffle),
    ppo_epochs times; each mini-batch's gradient is zeroed, then it is split into micro-batches of
    ppo_micro_batch_size_per_gpu, each micro-batch's loss being the registered policy loss called
    with the actor config (whose global_batch_info the legacy worker never fills, so agg_loss
    normalises within the micro-batch) times loss_scale_factor = 1 / gradient_accumulation,
    backpropagated into the step's leaf. With one mini-batch and one epoch (`on_policy`) the old
    log-probs are the current ones, detached: the ratio is 1 whatever theta."""
    n = batch.responses
    mini_batch_size = actor.ppo_mini_batch_size * actor.rollout_n
    gradient_accumulation = mini_batch_size // actor.ppo_micro_batch_size_per_gpu
    on_policy = n == mini_batch_size and actor.ppo_epochs == 1
    data = rollout(batch)
    old, adv = torch.as_tensor(batch.logp()), torch.as_tensor(advantages)
    policy_loss = verl.core.get_policy_loss_fn(actor.policy_loss.get("loss_mode", "vanilla"))
    assert actor.global_batch_info == {}
    steps = []
    for _ in range(actor.ppo_epochs):
        for mini_batch in torch.arange(n).split(mini_batch_size):
            at = theta(len(steps)) if callable(theta) else theta
            leaf = torch.tensor(batch.logp(at), dtype=torch.float64, requires_grad=True)
            for rows in mini_batch.split(actor.ppo_micro_batch_size_per_gpu):
                pg_loss, _ = policy_loss(
                    old_log_prob=leaf[rows].detach() if on_policy else old[rows],
                    log_prob=leaf[rows],
                    advantages=adv[rows],
                    response_mask=data["response_mask"][rows],
                    loss_agg_mode=actor.loss_agg_mode,
                    config=actor,
                    rollout_is_weights=None,
                )
                (pg_loss * (1 / gradient_accumulation)).backward()
            assert leaf.grad is not None
            steps.append(leaf.grad.numpy())
    return steps


# toyrl's per-micro-batch normalisers: what dp_actor's micro-batch loop computes
MICRO_4 = "micro_batches=4,per_micro_batch=true"
LEGACY = [
    # (setting with the checks of verl <= 0.7.0, layout)
    (Setting("token-mean (defaults)", {}), ONE),
    # each micro-batch's token mean, averaged over micro-batches: not the batch's token mean, toyrl's
    # token_mean with per_micro_batch (TRL's bnpo with gradient accumulation)
    (
        Setting(
            "token-mean (defaults)", {}, checks=(("verl_default", False), (f"verl_default,{MICRO_4}", True))
        ),
        FOUR,
    ),
    (SETTINGS[1], ONE),
    (SETTINGS[1], FOUR),
    (SETTINGS[2], ONE),
    (SETTINGS[2], FOUR),
    # the micro-batch's token sums / T, times 1 / gradient_accumulation: D_i = L_norm and n = the
    # number of micro-batches, toyrl's token_sum_norm with per_micro_batch (with one micro-batch,
    # token_sum_norm)
    (dataclasses.replace(SETTINGS[3], checks=((LEGACY_SUM_NORM, True), ("verl_sum_norm_only", False))), ONE),
    (
        dataclasses.replace(
            SETTINGS[3],
            checks=(
                (LEGACY_SUM_NORM, False),
                ("verl_sum_norm_only", False),
                (f"{LEGACY_SUM_NORM},{MICRO_4}", True),
            ),
        ),
        FOUR,
    ),
    (dataclasses.replace(SETTINGS[4], checks=((LEGACY_DR_GRPO, True), ("verl_dr_grpo", False))), ONE),
    (
        dataclasses.replace(
            SETTINGS[4],
            checks=((LEGACY_DR_GRPO, False), ("verl_dr_grpo", False), (f"{LEGACY_DR_GRPO},{MICRO_4}", True)),
        ),
        FOUR,
    ),
    (SETTINGS[7], ONE),
]


@pytest.mark.parametrize("theta_name", THETAS)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize(("setting", "layout"), LEGACY, ids=lambda x: x.name)
def test_legacy_update_policy(
    legacy: Verl, conform: Conform, setting: Setting, layout: Layout, batch_name: str, theta_name: str
) -> None:
    """dp_actor's update (restated loop, verl's own policy loss and agg_loss) against toyrl's
    full-batch update, with one micro-batch and with four, on-policy and at a moved policy (where
    update_policy's on_policy shortcut keeps the ratio at 1: toyrl's first update)."""
    batch = BATCHES[batch_name]()
    theta = theta_of(batch, batch_name, theta_name)
    advantages = verl_advantages(legacy, batch, "grpo", setting.norm)
    actor = actor_config(legacy, batch, layout, **setting.overrides)
    (weights,) = legacy_updates(legacy, batch, advantages, actor, theta)
    for preset, expected in setting.checks:
        want = toy.token_weights(variant_of(preset), batch)  # ratio 1 (on_policy)
        label = f"dp_actor {setting.name} | {batch_name} | {theta_name} | {layout.name}"
        conform(TRAINER, label, preset, toy.relative_difference(weights, want), expected)


# dp_actor with several mini-batches: (setting, [(spec keys' check, expected)])
LEGACY_MINI = [
    ("token-mean (defaults)", [("verl_default", False), ("verl_default,per_micro_batch=true", True)]),
    ("seq-mean-token-mean", [("verl_seq_mean_token_mean", True)]),
    (
        "seq-mean-token-sum-norm",
        [("verl_sum_norm_only", False), (f"{LEGACY_SUM_NORM},per_micro_batch=true", True)],
    ),
    ("clip_ratio_high=0.28", [(CLIP_HIGHER_SPEC, False), (f"{CLIP_HIGHER_SPEC},per_micro_batch=true", True)]),
]


@pytest.mark.parametrize("schedule", SCHEDULES[:5], ids=lambda s: s.name)
@pytest.mark.parametrize("batch_name", LOSS_BATCHES)
@pytest.mark.parametrize(("name", "checks"), LEGACY_MINI, ids=[name for name, _ in LEGACY_MINI])
def test_legacy_mini_batches(
    legacy: Verl,
    conform: Conform,
    name: str,
    checks: list[tuple[str, bool]],
    batch_name: str,
    schedule: Schedule,
) -> None:
    """dp_actor with ppo_mini_batch_size < the batch: consecutive mini-batches in the batch's order,
    whatever actor.shuffle says (dp_actor.py never reads it), each mini-batch's loss the mean of its
    micro-batches' (micro-batches of 2: per_micro_batch=true, micro_batches = the mini-batch's
    responses / 2); step 0 on-policy, the later ones at a moved policy."""
    assert "shuffle" not in inspect.getsource(importlib.import_module("verl.workers.actor.dp_actor"))
    (setting,) = [s for s in SETTINGS if s.name == name]
    batch = BATCHES[batch_name]()
    moved = toy.moved(batch, MOVES[batch_name], scale=1.0)
    advantages = verl_advantages(legacy, batch, "grpo", setting.norm)
    overrides = {"ppo_epochs": schedule.epochs, "shuffle": schedule.shuffle, **setting.overrides}
    actor = actor_config(legacy, batch, MINI, schedule.mini_batch_prompts, **overrides)
    steps = legacy_updates(legacy, batch, advantages, actor, lambda step: None if step == 0 else moved)
    k = schedule.mini_batches(batch)
    assert len(steps) == k * schedule.epochs
    micro = batch.responses // k // MINI.micro_batch_size
    keys = schedule.keys(batch).replace(",shuffle=epoch", "")  # the batch's order, every epoch
    label = f"dp_actor {setting.name} | {batch_name} | {FIRST_ON_POLICY} | {schedule.name} | {MINI.name}"
    for preset, expected in checks:
        spec = with_keys(preset, keys + (f",micro_batches={micro}" if "per_micro_batch" in preset else ""))
        for step, weights in enumerate(steps):
            want = toy.token_weights(variant_of(spec), batch, None if step == 0 else moved, update=step)
            if expected is False and not np.abs(want).any():  # a mini-batch of zero advantages agrees
                continue
            conform(TRAINER, f"{label} | step {step}", spec, toy.relative_difference(weights, want), expected)


# --- DAPO's soft overlong punishment ----------------------------------------------------------


class ToyTokenizer:
    """decode() of toy token ids as their numbers, space-separated; an EOS text that never occurs."""

    eos_token = "<eos>"

    @staticmethod
    def decode(ids: Any, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)


def dapo_math_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """The data source's score, as DAPO's math score gives it: 1 for a correct response, -1 else
    (correct here: the right approach token, stopped, at least min_length ramble tokens)."""
    ids = solution_str.split()
    right, stopped = ids[0] == str(APPROACH_RIGHT), ids[-1] == str(STOP)
    return 1.0 if right and stopped and len(ids) - 1 >= CONFIG.min_length else -1.0


@pytest.mark.parametrize(("buffer", "factor"), [(8, 1.0), (20, 0.5)])
@pytest.mark.parametrize("batch_name", list(BATCHES))
def test_dapo_reward_manager_is_soft_overlong(
    verl: Verl, conform: Conform, batch_name: str, buffer: int, factor: float
) -> None:
    """verl's DAPORewardManager (verl/workers/reward_manager/dapo.py) with overlong_buffer: the
    score plus min(0, -(|o| - (max_resp_len - len)) / len x penalty_factor), placed on each
    response's last token, is toyrl's `reward=soft_overlong` with buffer = len / max_resp_len (the
    response width, T = cap + 1) and the same factor; verl writes it into a float32 tensor, so it is
    compared with toyrl's reward rounded to float32; the plain 1 / -1 score is the control."""
    manager_module = trainer_module("verl.workers.reward_manager.dapo", TRAINER)
    protocol = trainer_module("verl.protocol", TRAINER)
    batch = BATCHES[batch_name]()
    data = rollout(batch)
    n = batch.responses
    proto = protocol.DataProto.from_dict(
        tensors={key: data[key] for key in ("prompts", "responses", "attention_mask")},
        non_tensors={
            "data_source": np.array(["toy"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": ""} for _ in range(n)], dtype=object),
        },
    )
    config = types.SimpleNamespace(enable=True, len=buffer, penalty_factor=factor, log=False)
    manager = manager_module.DAPORewardManager(
        tokenizer=ToyTokenizer(),
        num_examine=0,
        compute_score=dapo_math_score,
        max_resp_len=batch.width,
        overlong_buffer_cfg=config,
    )
    got = manager(proto).numpy()
    assert got.dtype == np.float32
    last = np.zeros((n, batch.width), dtype=bool)
    last[np.arange(n), batch.ramble] = True  # the response's last token, where verl puts the reward
    assert (got[~last] == 0).all()
    spec = f"advantage=none,reward=soft_overlong,buffer={buffer / batch.width!r},penalty_factor={factor}"
    want = batch.rewards(parse_variant(spec))
    assert (want < want.max()).any() and (np.round(want) != want).any()  # the punishment acts
    # verl computes each reward in Python floats and stores it in float32: toyrl's, rounded likewise
    difference = toy.relative_difference(got[last], want.astype(np.float32))
    setting = f"DAPO reward (float32), overlong buffer {buffer} of {batch.width} x {factor} | {batch_name}"
    conform(TRAINER, setting, spec, difference)
    plain = batch.rewards(parse_variant("advantage=none,reward=soft_overlong,penalty_factor=0.0"))
    assert toy.relative_difference(got[last], plain) > 1e-3


# --- every key of the installed release's configuration -------------------------------------------


def flattened(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration's leaves by their dotted keys (an empty section is a leaf)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out |= flattened(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_every_key_of_the_generated_config_is_known(verl: Verl) -> None:
    """Each key of the installed release's full configuration (_generated_ppo_trainer.yaml, nested
    keys joined by dots) is a name toyrl's verl knows (`Trainer.knows`), and resolve() of the whole
    file calls none of them misspelt; the keys it says the release ignores are the release's
    `ignores` (0.9.1: the legacy reward_model.reward_manager, null in the file). The settings toyrl
    reads take their defaults (the file's interpolations are `test_the_settings_defaults_are_verl_s`'s),
    and the estimator grpo and a micro-batch size (gae is not modelled; 0.7.0 requires the size)."""
    from toyrl.trainers import registry, resolve

    spec = importlib.util.find_spec("verl.trainer")
    assert spec is not None and spec.origin is not None
    text = (pathlib.Path(spec.origin).parent / "config" / "_generated_ppo_trainer.yaml").read_text()
    keys = flattened(yaml.safe_load(text))
    trainer = registry()["verl"]
    version = version_of(TRAINER)
    release = trainer.releases[version]
    assert len(keys) > 500 and not [key for key in keys if not trainer.knows(key)]

    def value(key: str) -> Any:
        name = release.aliases[key][0] if key in release.aliases else key
        return release.settings[name].default if name in release.settings else keys[key]

    given = {key: value(key) for key in keys}
    given |= {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4}
    resolved = resolve("verl", version, given, frozenset(keys))
    assert resolved.misspelt == {}
    assert all(release.ignoring(key) for key in resolved.unused) and set(resolved.unused) <= set(keys)


def config_readers(package: pathlib.Path, section: str) -> set[str]:
    """The modules of an installed package (paths under it) whose code reads `config.<section>`
    (an attribute of a name or attribute ending in `config`), by their syntax trees."""
    readers = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == section:
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "config":
                    readers.add(str(path.relative_to(package)))
                    break
    return readers


def test_the_legacy_reward_section_is_read_as_toyrl_says(verl: Verl) -> None:
    """Who reads the legacy reward_model section (DAPO's reward_model.reward_kwargs.overlong_buffer_cfg
    and max_resp_len, reward_model.reward_manager): in 0.7.0, verl/trainer/main_ppo.py, which hands
    reward_model.reward_kwargs to load_reward_manager (toyrl models those keys); in 0.9.1, only
    migrate_legacy_reward_impl (verl/experimental/reward_loop/reward_loop.py), which main_ppo never
    calls (only the fully async trainer does): toyrl says 0.9.1 ignores them, with what that means."""
    from toyrl.trainers import registry

    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.origin is not None
    package = pathlib.Path(spec.origin).parent
    readers = config_readers(package, "reward_model")
    release = registry()["verl"].releases[version_of(TRAINER)]
    keys = ["reward_model.reward_manager"] + [
        f"reward_model.reward_kwargs.{key}"
        for key in ("max_resp_len", "overlong_buffer_cfg.enable", "overlong_buffer_cfg.len")
    ]
    if "trainer/main_ppo.py" in readers:
        assert all(key in release.settings and release.ignoring(key) is None for key in keys)
        return
    assert readers == {"experimental/reward_loop/reward_loop.py"}, readers
    callers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "migrate_legacy_reward_impl":
                callers.add(str(path.relative_to(package)))
    assert callers and "trainer/main_ppo.py" not in callers and all("fully_async" in c for c in callers)
    assert all(key not in release.settings and release.ignoring(key) for key in keys)
    assert "overlong penalty is off" in (release.ignoring(keys[2]) or "")


# --- the older releases toyrl models, each from its own wheel --------------------------------------

# scripts/conformance/verl.sh downloads them (never installed); the installed release is read in place
RELEASE_WHEELS = pathlib.Path(sys.prefix) / "verl-releases"
RELEASE_PATHS = (
    "verl/trainer/config/_generated_ppo_trainer.yaml",  # the full configuration, from 0.5.0
    "verl/trainer/config/ppo_trainer.yaml",  # the full configuration before 0.5.0 (later: a defaults list)
    "verl/trainer/ppo/core_algos.py",
    "verl/trainer/ppo/ray_trainer.py",
    "verl/trainer/main_ppo.py",
    "verl/utils/torch_functional.py",
    "verl/workers/actor/dp_actor.py",  # before 0.8.0
    "verl/workers/reward_manager/dapo.py",
)


def _modelled_releases() -> list[str]:
    from toyrl.trainers import registry

    return list(registry()[TRAINER].releases)


@functools.cache
def release_files(version: str) -> dict[str, str]:
    """The files of RELEASE_PATHS a release has (a path it lacks is absent): the installed release's,
    or its wheel's (with the default build only: scripts/conformance/verl.sh downloads them there)."""
    from toyrl.trainers.verl import VERSION

    if version != version_of(TRAINER) and version_of(TRAINER) != VERSION:
        pytest.skip(f"the older releases' wheels come with verl {VERSION}'s environment")
    if version == version_of(TRAINER):
        spec = importlib.util.find_spec("verl")
        assert spec is not None and spec.origin is not None
        root = pathlib.Path(spec.origin).parent.parent
        return {path: (root / path).read_text() for path in RELEASE_PATHS if (root / path).exists()}
    wheels = list(RELEASE_WHEELS.glob(f"verl-{version}-*.whl"))
    assert len(wheels) == 1, (
        f"verl {version}'s wheel is missing from {RELEASE_WHEELS}: scripts/conformance/verl.sh"
    )
    with zipfile.ZipFile(wheels[0]) as archive:
        names = set(archive.namelist())
        return {path: archive.read(path).decode() for path in RELEASE_PATHS if path in names}


def release_config(files: dict[str, str]) -> Any:
    from omegaconf import OmegaConf

    full = RELEASE_PATHS[0] if RELEASE_PATHS[0] in files else RELEASE_PATHS[1]
    return OmegaConf.create(files[full])


def functions(source: str) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}


def compiled(source: str, names: tuple[str, ...], namespace: dict[str, Any]) -> dict[str, Any]:
    """The functions `names` of a module's source, compiled alone (decorators dropped) into
    `namespace`: a release's own code without importing its package."""
    found = functions(source)
    module = ast.Module(body=[found[name] for name in names], type_ignores=[])
    for node in module.body:
        assert isinstance(node, ast.FunctionDef)
        node.decorator_list = []
    exec(compile(ast.fix_missing_locations(module), "<verl release>", "exec"), namespace)
    return namespace


def registered(source: str, decorator: str) -> set[str]:
    """The names a module registers by `@decorator("name")` on its functions and classes."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            for call in node.decorator_list:
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == decorator:
                    names.add(ast.unparse(call.args[0]).strip("'\""))
    return names


def enum_values(source: str, name: str) -> dict[str, str]:
    """An Enum class's members (NAME -> value) in a module's source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                item.targets[0].id: item.value.value
                for item in node.body
                if isinstance(item, ast.Assign)
                and isinstance(item.targets[0], ast.Name)
                and isinstance(item.value, ast.Constant)
            }
    return {}


@pytest.mark.parametrize("version", _modelled_releases())
def test_each_release_s_settings_are_its_configuration_s(verl: Verl, version: str) -> None:
    """Per release modelled, from its own full configuration (_generated_ppo_trainer.yaml, from
    0.5.0; ppo_trainer.yaml before): every setting toyrl reads in some release is a key of this one
    exactly where `SINCE` says; every one toyrl reads in this release defaults as there; and a key of
    the file toyrl reads in another release is, in this one, another name of a setting (`aliases`),
    a key the release ignores (`ignores`), or the V1 trainer's layout (read from 0.9.0). The DAPO
    manager's reward_kwargs are no keys of the file: their section's manager key stands for them."""
    from omegaconf import OmegaConf

    from toyrl.trainers import registry
    from toyrl.trainers.verl import SINCE, V1_LAYOUT, _has

    table = registry()[TRAINER]
    release = table.releases[version]
    config = release_config(release_files(version))
    read = set().union(*(r.settings for r in table.releases.values()))
    absent = object()
    for key in sorted(read):
        section, _, leaf = key.partition(".reward_kwargs.")
        if leaf:
            manager = "reward.reward_manager.name" if section == "reward" else "reward_model.reward_manager"
            assert (key in release.settings) == (manager in release.settings), (version, key)
            continue
        value = OmegaConf.select(config, key, default=absent)
        assert (value is not absent) == _has(version, key, SINCE, {}), (version, key)
        if key in release.settings:
            assert value == release.settings[key].default, (version, key, value)
        elif value is not absent:
            known = key in release.aliases or release.ignoring(key) is not None
            assert known or (key in V1_LAYOUT and "trainer.use_v1" not in release.settings), (version, key)


@pytest.mark.parametrize("version", _modelled_releases())
def test_each_release_s_choices_are_its_code_s(verl: Verl, version: str) -> None:
    """Per release, from its own code: the estimators algorithm.adv_estimator takes are its
    AdvantageEstimator's values (core_algos.py from 0.4.1, ray_trainer.py before); the policy losses
    are those it registers (register_policy_loss), with "vanilla", which dp_actor computes itself
    before 0.6.0 (0.4.0 has no policy_loss section: always vanilla); the loss_agg_modes are those
    agg_loss compares with; the reward managers toyrl takes are among those it registers."""
    from toyrl.trainers import registry
    from toyrl.trainers.verl import ACTOR

    release = registry()[TRAINER].releases[version]
    files = release_files(version)
    core = files["verl/trainer/ppo/core_algos.py"]
    estimators = enum_values(core, "AdvantageEstimator") or enum_values(
        files["verl/trainer/ppo/ray_trainer.py"], "AdvantageEstimator"
    )
    assert set(release.settings["algorithm.adv_estimator"].choices) == set(estimators.values()), version
    losses = registered(core, "register_policy_loss")
    mode = ACTOR + "policy_loss.loss_mode"
    if "vanilla" not in losses:
        assert (
            'loss_mode == "vanilla"' in files["verl/workers/actor/dp_actor.py"]
            or mode not in release.settings
        )
        losses = losses | {"vanilla"} if mode in release.settings else set()
    assert set(release.settings[mode].choices if mode in release.settings else ()) == losses, version
    compared = [
        item
        for node in ast.walk(functions(core)["agg_loss"])
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == "loss_agg_mode"
        for right in node.comparators
        for item in (right.elts if isinstance(right, ast.List | ast.Tuple) else [right])
    ]
    aggregations = {ast.literal_eval(item) for item in compared}
    assert set(release.settings[ACTOR + "loss_agg_mode"].choices) == aggregations, version
    manager = "reward.reward_manager.name" if "reward.reward_manager.name" in release.settings else None
    manager = manager or "reward_model.reward_manager"
    assert "dapo" in release.settings[manager].choices
    assert (
        "dapo" in registered(files["verl/workers/reward_manager/dapo.py"], "register") or version == "0.4.0"
    )


@pytest.mark.parametrize("version", _modelled_releases())
def test_each_release_s_agg_loss_is_toyrl_s_normaliser(verl: Verl, version: str) -> None:
    """Each release's own agg_loss (compiled from its core_algos.py with its own masked_sum /
    masked_mean, run here) on one micro-batch of five responses padded to the longest (7 tokens,
    data.max_response_length, the width the legacy trainer pads to), against the loss toyrl's
    normaliser for that release gives (sum_i S_i / (D_i n), S_i a response's token sum), for every
    loss_agg_mode the release has: seq-mean-token-sum-norm is the responses' sum over the width up to
    0.7.0 (token_sum_norm), their mean over it from 0.7.1. And GSPO aggregates seq-mean-token-mean
    whatever loss_agg_mode says before 0.9.1, as toyrl's mapping does."""
    from typing import Optional

    from toyrl.trainers import resolve
    from toyrl.trainers.verl import ACTOR

    files = release_files(version)
    masked = compiled(
        files["verl/utils/torch_functional.py"], ("masked_sum", "masked_mean"), {"torch": torch}
    )
    namespace = {"torch": torch, "Optional": Optional, "verl_F": types.SimpleNamespace(**masked)}
    agg_loss = compiled(files["verl/trainer/ppo/core_algos.py"], ("agg_loss",), namespace)["agg_loss"]
    lengths = np.array([7, 3, 5, 1, 6])
    mask = (np.arange(7) < lengths[:, None]).astype(np.float64)
    losses = np.random.default_rng(0).normal(size=mask.shape)
    sums = (losses * mask).sum(axis=1)
    settings = {
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.rollout.n": 5,
        "data.train_batch_size": 1,
        "data.max_response_length": 7,
        ACTOR + "ppo_mini_batch_size": 1,
        ACTOR + "ppo_micro_batch_size_per_gpu": 5,
    }
    modes = resolve("verl", version, settings).release.settings[ACTOR + "loss_agg_mode"].choices
    for mode in modes:
        verl_loss = float(agg_loss(torch.tensor(losses), torch.tensor(mask), mode))
        variant = parse_variant(
            resolve("verl", version, settings | {ACTOR + "loss_agg_mode": mode}).mapping.spec
        )
        included = np.ones((1, 5), dtype=bool)
        denominators, n = variant.normaliser.denominators(
            lengths.reshape(1, 5).astype(np.float64), included, 7.0
        )
        toy_loss = float((sums.reshape(1, 5) / (denominators * n)).sum())
        assert abs(verl_loss - toy_loss) <= 1e-7 * abs(toy_loss), (version, mode, verl_loss, toy_loss)
    gspo = functions(files["verl/trainer/ppo/core_algos.py"]).get("compute_policy_loss_gspo")
    if gspo is not None:
        (call,) = [
            n for n in ast.walk(gspo) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "agg_loss"
        ]
        (mode_given,) = [k.value for k in call.keywords if k.arg == "loss_agg_mode"]
        forced = isinstance(mode_given, ast.Constant) and mode_given.value == "seq-mean-token-mean"
        gspo_settings = settings | {ACTOR + "policy_loss.loss_mode": "gspo"}
        aggregation = parse_variant(resolve("verl", version, gspo_settings).mapping.spec).names()[
            "normaliser"
        ]
        assert (aggregation == "seq_mean_token_mean") == forced, (version, aggregation)


@pytest.mark.parametrize("version", _modelled_releases())
def test_each_release_s_worker_is_toyrl_s(verl: Verl, version: str) -> None:
    """Which worker updates the actor: dp_actor.py's update_policy where the release has it (before
    0.8.0, its default, use_legacy_worker_impl=auto), read with `ast`: its mini-batches are
    `split` in the batch's order (no shuffle), its micro-batches' losses each scaled by 1 /
    gradient_accumulation, agg_loss given no global batch info (dp_actor never sets it), the
    gradient's norm clipped at actor.grad_clip; toyrl's mapping takes each micro-batch's normaliser
    on its own there (per_micro_batch), and the engine worker's (from 0.8.0) over the mini-batch."""
    from toyrl.trainers import resolve
    from toyrl.trainers.verl import ACTOR

    files = release_files(version)
    settings = {
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.rollout.n": 4,
        ACTOR + "ppo_micro_batch_size_per_gpu": 64,  # 256 x 4 responses a mini-batch: 16 micro-batches of 64
    }
    resolved = resolve("verl", version, settings)
    variant = parse_variant(resolved.mapping.spec)
    source = files.get("verl/workers/actor/dp_actor.py")
    if source is None:
        assert not variant.normaliser.per_micro_batch and "losses.py" in resolved.release.source
        assert ACTOR + "optim.clip_grad" in resolved.release.settings
        return
    update = functions(source)["update_policy"]
    text = ast.unparse(update)
    attributes = {node.attr for node in ast.walk(update) if isinstance(node, ast.Attribute)}
    assert "shuffle" not in attributes and "global_batch_info" not in attributes
    assert "self.gradient_accumulation" in text and ".split(self.config.ppo_mini_batch_size)" in text
    assert "max_norm=self.config.grad_clip" in source
    assert variant.normaliser.per_micro_batch and resolved.mapping.micro_batch_responses == 64
    assert ACTOR + "grad_clip" in resolved.release.settings and "dp_actor.py" in resolved.release.source
    assert resolved.release.ignoring(ACTOR + "shuffle") is not None


@pytest.mark.parametrize("version", _modelled_releases())
def test_each_release_reads_its_reward_section_as_toyrl_says(verl: Verl, version: str) -> None:
    """Where a release's main_ppo takes the DAPO manager's settings: the legacy reward_model section
    (reward_model.reward_kwargs handed to load_reward_manager) up to 0.7.0, settings of toyrl's
    table; moved onto reward. by migrate_legacy_reward_impl in 0.7.1 and 0.8.0, other names of
    reward.'s settings (`aliases`); neither from 0.9.0, keys the release ignores. The overlong
    penalty is the same expression in every release's DAPO manager."""
    from toyrl.trainers import registry
    from toyrl.trainers.verl import LEGACY_REWARD

    release = registry()[TRAINER].releases[version]
    files = release_files(version)
    main = ast.parse(files["verl/trainer/main_ppo.py"])
    hands = any(
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "get"
        and ast.unparse(node.func.value).endswith("reward_model")
        and [ast.literal_eval(arg) for arg in node.args[:1]] == ["reward_kwargs"]
        for node in ast.walk(main)
    )
    migrates = any(
        isinstance(node, ast.Call) and getattr(node.func, "id", "") == "migrate_legacy_reward_impl"
        for node in ast.walk(main)
    )
    key = LEGACY_REWARD + "overlong_buffer_cfg.enable"
    assert hands == (key in release.settings), version
    assert migrates == (key in release.aliases), version
    assert (not hands and not migrates) == (release.ignoring(key) is not None), version
    penalty = "min(-exceed_len / overlong_buffer_len * overlong_penalty_factor, 0)"
    assert penalty in ast.unparse(ast.parse(files["verl/workers/reward_manager/dapo.py"]))


@functools.cache
def release_package(version: str) -> dict[str, ast.Module]:
    """Every Python file of a release's verl package (path from `verl/` -> its syntax tree): the
    installed release's, or its wheel's."""
    release_files(version)  # skips as it does where the older releases' wheels are absent
    if version == version_of(TRAINER):
        spec = importlib.util.find_spec("verl")
        assert spec is not None and spec.origin is not None
        root = pathlib.Path(spec.origin).parent.parent
        return {
            str(path.relative_to(root)): ast.parse(path.read_text()) for path in (root / "verl").rglob("*.py")
        }
    (wheel,) = RELEASE_WHEELS.glob(f"verl-{version}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if name.startswith("verl/") and name.endswith(".py")]
        return {name: ast.parse(archive.read(name).decode()) for name in names}


def readers_of(package: dict[str, ast.Module], name: str) -> set[str]:
    """The files whose code names `name`: an attribute `.name` or the string "name" (the way a
    config is read: `config.algorithm.filter_groups`, `filter_groups.get("max_num_gen_batches")`)."""
    return {
        path
        for path, tree in package.items()
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr == name)
        or (isinstance(node, ast.Constant) and node.value == name)
    }


def _filter_releases() -> list[str]:
    from toyrl.trainers import registry

    releases = registry()[TRAINER].releases
    return [
        version
        for version, release in releases.items()
        if "algorithm.filter_groups.enable" in release.settings
    ]


@pytest.mark.parametrize("version", _filter_releases())
def test_each_release_s_filter_groups_is_read_as_toyrl_says(verl: Verl, version: str) -> None:
    """Who reads algorithm.filter_groups in a release that has it (0.9.0 on), by the syntax trees of
    its whole package: only the V1 trainer (verl/trainer/ppo/v1/), never the legacy trainer
    (ray_trainer.py, main_ppo_v0.py), so toyrl applies no dynamic sampling with trainer.use_v1=False;
    max_num_gen_batches only in trainer_base.py's _resolve_filter_groups_metric, where its value
    goes only to a comparison and a logger.warning (no cap), so toyrl says the release ignores it;
    the sync ReplayBuffer's sample (trainer.v1.trainer_mode's default) loops until the batch is
    full: its only break is where it selects the batch, it raises nothing inside the loop, and it
    refills two prompts for each group evicted; toyrl's filter_groups stage runs with its most
    rounds there. The metric "reward" is the reward itself only where the buffer says so (0.9.1)."""
    from omegaconf import OmegaConf

    from toyrl.stages.registry import declarations
    from toyrl.stages.sampler import FilterGroups
    from toyrl.trainers import registry, resolve

    package = release_package(version)
    v1 = "verl/trainer/ppo/v1/"
    readers = readers_of(package, "filter_groups")
    assert readers and all(path.startswith(v1) for path in readers), readers
    assert "verl/trainer/ppo/ray_trainer.py" in package and "verl/trainer/main_ppo_v0.py" in package
    assert readers_of(package, "max_num_gen_batches") == {v1 + "trainer_base.py"}
    (resolver,) = [
        node
        for node in ast.walk(package[v1 + "trainer_base.py"])
        if isinstance(node, ast.FunctionDef) and node.name == "_resolve_filter_groups_metric"
    ]
    parents = {child: node for node in ast.walk(resolver) for child in ast.iter_child_nodes(node)}
    (bound,) = [
        target.id
        for node in ast.walk(resolver)
        if isinstance(node, ast.Assign)
        and any(
            isinstance(c, ast.Constant) and c.value == "max_num_gen_batches" for c in ast.walk(node.value)
        )
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    uses = [
        n
        for n in ast.walk(resolver)
        if isinstance(n, ast.Name) and n.id == bound and isinstance(n.ctx, ast.Load)
    ]
    assert uses and all(
        isinstance(parents[use], ast.Compare)
        or (isinstance(parents[use], ast.Call) and getattr(parents[use].func, "attr", "") == "warning")
        for use in uses
    )
    assert OmegaConf.select(release_config(release_files(version)), "trainer.v1.trainer_mode") == "sync"
    (buffer,) = [
        node
        for node in ast.walk(package[v1 + "replay_buffer.py"])
        if isinstance(node, ast.ClassDef) and node.name == "ReplayBuffer"
    ]
    (sample,) = [node for node in buffer.body if isinstance(node, ast.FunctionDef) and node.name == "sample"]
    (loop,) = [node for node in ast.walk(sample) if isinstance(node, ast.While)]
    assert ast.unparse(loop.test) == "True"
    selects = [
        node for node in ast.walk(loop) if isinstance(node, ast.If) and ast.unparse(node.test) == "can_select"
    ]
    breaks = [node for node in ast.walk(loop) if isinstance(node, ast.Break)]
    assert len(selects) == 1 and breaks and all(any(b is n for n in ast.walk(selects[0])) for b in breaks)
    assert not any(isinstance(node, ast.Raise) for node in ast.walk(loop))
    assert "2 * dapo_count" in ast.unparse(loop)
    release = registry()[TRAINER].releases[version]
    key = "algorithm.filter_groups.max_num_gen_batches"
    assert key not in release.settings and "never reads it" in (release.ignoring(key) or "")
    on = {
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
    }
    variant = parse_variant(resolve(TRAINER, version, on | {key: 3}).mapping.spec)
    assert variant.sampler.max_rounds == declarations(FilterGroups)["max_rounds"]["high"]
    legacy = parse_variant(resolve(TRAINER, version, on | {"trainer.use_v1": False}).mapping.spec)
    assert legacy.names()["sampler"] == "once"
    # the metric "reward": the reward itself where the buffer names FILTER_GROUPS_REWARD_METRIC (0.9.1),
    # else a reward_extra_info key that no reward manager of the release writes
    canonical = any(
        isinstance(n, ast.Name) and n.id == "FILTER_GROUPS_REWARD_METRIC" for n in ast.walk(buffer)
    )
    written = {
        ast.literal_eval(node.slice)
        for tree in package.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Store)
        and ast.unparse(node.value) == "reward_extra_info"
        and isinstance(node.slice, ast.Constant)
    }
    assert "acc" in written and (canonical or "reward" not in written), written
    by_reward = resolve(TRAINER, version, on | {"algorithm.filter_groups.metric": "reward"}).mapping
    told = any(
        "reads every metric from the reward manager's reward_extra_info" in x for x in by_reward.unmodelled
    )
    assert told != canonical
