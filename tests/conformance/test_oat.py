"""oat (oat-llm 0.2.4) against toyrl's presets `oat_grpo` and `oat_drgrpo`.

What runs is oat's own PPO learner step, `PPOLearner.learning_step` (oat/algorithms/ppo.py), on a
toy batch that oat's own `TransitionDataset` collates (prompt ids, then response ids, right-padded;
its sampler log-probs, dense rewards with the reward on the last token, loss masks). So oat's own
code places the rewards, computes the group advantages (`compute_monte_carlo_advantages`, with
`critic_type` grpo or drgrpo), trims the padding of each micro-batch, forms the PPO ratio and clip,
the k3 KL term, and aggregates with the aggregator `PPOLearner._init` itself picks
(`masked_mean`, or `masked_sum` over `generate_max_length` for drgrpo); it also walks the
micro-batches and PPO epochs.

The stand-in `self` (`Learner`, a subclass of `PPOLearner`) supplies what needs a GPU:
- `get_batch_logps`, the model's forward (a causal LM, its log-softmax and a gather, in float32):
  here the per-token log-probs of the toy policy at its current theta, gathered from a float64
  leaf tensor [N, T] (toy layout: row i, response token j) into oat's layout (row of the
  micro-batch, shifted position prompt length - 1 + j), so that autograd on the leaf gives
  d loss / d logp of every token. Rows are found by their first prompt token (ROW + i). The
  entropy it also returns is only logged by oat (under no_grad): zeros.
- `strategy`, oat's DeepspeedStrategy as learning_step calls it, over a DeepSpeed engine's
  semantics (deepspeed/runtime/engine.py): `backward` divides the loss by the gradient
  accumulation steps (train_batch_size // train_batch_size_per_device, one process) before
  backpropagating; `optimizer_step` steps only at an accumulation boundary. A step here records
  the leaf's gradient and moves the policy to the next theta of the test's schedule (in place of
  Adam), so a second PPO epoch sees ratios != 1: the first update after the batch was sampled.
- `ref_model` (when beta > 0): the initial policy, theta_old.
- `__init__` runs oat's own `PPOLearner._init` (which sets args, dataset_builder and
  masked_aggregator) with `RLLearner._init`, the loading of models and optimisers, skipped.
- `compute_monte_carlo_advantages`: oat's own, handed a float64 copy of the reward tensor that
  learning_step builds in float32 (`.float()`); the rewards are 0/1, so the copy is exact, and
  oat's arithmetic then runs in float64 (the float32 original is measured in
  `test_float32_as_oat_computes`).
torch.cuda.current_device() (learning_step's device) is "cpu", and torch's default dtype float64
(learning_step makes its old log-probs with torch.zeros); the sampler's log-probs are handed over
in float32, as oat's float32 `actor_logps` holds them. `tis_c` (oat's truncated importance
weight between the sampler's and the learner's log-probs) is None where the tests need 1e-10: the
toy's sampler is the learner, and oat keeps the sampler's log-probs in float32, so the weight is 1
up to float32 rounding (measured in `test_float32_as_oat_computes`).

toyrl's side (tests/conformance/toy.py) is its core: advantages, and d loss / d logp per token at
ratio 1 or at a moved theta against theta_old.
"""

from __future__ import annotations

import types
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.conformance.conftest import trainer_module
from tests.conformance.toy import CONFIG as toy_config
from tests.conformance.toy import (
    ToyBatch,
    advantages,
    made,
    moved,
    relative_difference,
    sampled,
    token_weights,
)
from toyrl.config import Config
from toyrl.variants import parse_variant

DISTRIBUTION = "oat-llm"
ROW = 1000  # the first prompt token of row i is ROW + i: the stand-in model finds its rows by it
PAD, FILLER, RIGHT, WRONG, CONTINUE, STOP = 0, 7, 11, 12, 21, 22  # token ids (only ROW + i is read)
PRESET = {"grpo": "oat_grpo", "drgrpo": "oat_drgrpo"}

SAMPLED = toy_config  # oat's generate_max_length: T = cap + 1 tokens at most
CORNER = Config(
    prompts=4,
    batch_prompts=4,
    group_size=4,
    cap=12,
    min_length=3,
    stop_prob_right=1 / 6,
    stop_prob_wrong=1 / 9,
    length_norm=13.0,
)


def corner_batch() -> ToyBatch:
    """Hand-made: a group of all-0 rewards (wrong approach, one truncated), a group of all-1
    rewards, and two mixed groups with unequal lengths, truncated responses (L = cap, no stop),
    a right but too short response and one that stops exactly at the cap."""
    right = [[0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 0, 1, 0]]
    ramble = [[2, 5, 12, 7], [3, 8, 4, 11], [6, 2, 12, 9], [12, 12, 5, 1]]
    stopped = [[1, 1, 0, 1], [1, 1, 1, 1], [1, 1, 0, 1], [1, 0, 1, 1]]
    return made(right, ramble, stopped, CORNER)


BATCHES = {
    "hand-made": corner_batch,
    "sampled seed 0": lambda: sampled(0, SAMPLED),
    "sampled seed 1": lambda: sampled(1, SAMPLED),
}


@pytest.fixture(scope="module")
def oat() -> types.SimpleNamespace:
    ppo = trainer_module("oat.algorithms.ppo", DISTRIBUTION)
    import torch
    from oat.learners.rl import RLLearner
    from oat.types import TransitionData

    return types.SimpleNamespace(ppo=ppo, torch=torch, RLLearner=RLLearner, TransitionData=TransitionData)


@pytest.fixture
def run(oat, monkeypatch):
    """run(toy, thetas, critic_type=..., **PPOArgs fields) -> Result: one learning_step of oat on the
    toy batch; thetas [theta_0, theta_1, ...] are the policy at optimiser steps 1, 2, ... (theta_0
    must be toy.theta_old: the old log-probs are the model's at the start)."""
    torch = oat.torch
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    # learning_step shuffles the micro-batches with numpy's global np.random.permutation
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(1234)  # noqa: NPY002
    try:
        yield lambda toy, thetas, exact=True, loss_masks=None, **fields: _run(
            oat, toy, thetas, exact, loss_masks, fields
        )
    finally:
        torch.set_default_dtype(dtype)
        np.random.set_state(state)  # noqa: NPY002


class Result(types.SimpleNamespace):
    advantages: np.ndarray  # [N], as learning_step computed them
    grads: list[np.ndarray]  # d loss / d logp [N, T] of each optimiser step
    rows: list[np.ndarray]  # the rows whose log-probs entered each step's loss
    infos: dict[str, Any]


def _run(oat, toy: ToyBatch, thetas, exact: bool, loss_masks, fields: dict[str, Any]) -> Result:
    torch, ppo = oat.torch, oat.ppo
    n, width = toy.responses, toy.width
    fields = {"num_samples": toy.shape[1], "generate_max_length": width, "train_batch_size": n} | fields
    args = ppo.PPOArgs(algo="PPO", **fields)
    prompt_lengths = 1 + np.arange(n) % 3  # prompts of unequal lengths: oat's shifted layout differs per row

    def in_oat_layout(leaf, input_ids):
        """The log-probs [N, T] of `leaf` at the rows and shifted positions of a (trimmed) batch of
        oat's input ids: position c holds token c + 1, response token j of row i is at c =
        prompt length - 1 + j; 0 elsewhere (prompt and padding, masked out by oat)."""
        rows = (input_ids[:, 0] - ROW).long()
        shift = torch.as_tensor(prompt_lengths - 1)[rows]
        column = torch.arange(input_ids.shape[1] - 1)[None, :] - shift[:, None]
        inside = (column >= 0) & (column < width)
        padded = torch.cat([leaf, leaf.new_zeros(n, 1)], dim=1)  # column `width`: 0
        return padded[rows].gather(1, torch.where(inside, column, width))

    class Policy:
        """The model: per-token log-probs of the toy policy at the current theta of `thetas`,
        a float64 leaf [N, T] (toy layout) per optimiser step."""

        def __init__(self, thetas: list[np.ndarray]) -> None:
            self.thetas, self.step_count = thetas, 0
            self.grads: list[np.ndarray] = []
            self.rows: list[np.ndarray] = []
            self._load()

        def _load(self) -> None:
            theta = self.thetas[min(self.step_count, len(self.thetas) - 1)]
            self.leaf = torch.tensor(toy.logp(theta), dtype=torch.float64, requires_grad=True)
            self.seen: set[int] = set()

        def log_probs(self, input_ids):
            if torch.is_grad_enabled():
                self.seen.update((input_ids[:, 0] - ROW).tolist())
            return in_oat_layout(self.leaf, input_ids)

        def step(self) -> None:
            grad = self.leaf.grad
            self.grads.append(np.zeros((n, width)) if grad is None else grad.detach().numpy().copy())
            self.rows.append(np.array(sorted(self.seen)))
            self.step_count += 1
            self._load()

    class Reference:
        """The reference model (RLLearner._init loads it when beta > 0): the initial policy."""

        def __init__(self) -> None:
            self.leaf = torch.tensor(toy.logp(), dtype=torch.float64)

        def log_probs(self, input_ids):
            return in_oat_layout(self.leaf, input_ids)

    class Strategy:
        """What learning_step calls of oat's DeepspeedStrategy, with a DeepSpeed engine's semantics
        (engine.backward: loss / gradient_accumulation_steps; engine.step: at the boundary only)."""

        def __init__(self) -> None:
            self.args = args
            # DeepspeedStrategy.setup_distributed, one process
            self.grad_acc_step = args.train_batch_size // args.train_batch_size_per_device
            self.micro_steps = 0

        def is_rank_0(self) -> bool:
            return True

        def print(self, *message: Any) -> None:
            pass

        def backward(self, loss, model, optimizer) -> None:
            (loss / self.grad_acc_step).backward()

        def get_gradient_norm(self, model):
            return model.leaf.grad.norm()

        def optimizer_step(self, optimizer, model, scheduler) -> None:
            self.micro_steps += 1
            if self.micro_steps % self.grad_acc_step == 0:
                model.step()

    class Learner(ppo.PPOLearner):
        """The stand-in `self` of PPOLearner (see the module docstring)."""

        def __init__(self) -> None:
            self.model, self.critic, self.optimizer, self.scheduler = Policy(thetas), None, None, None
            self.ref_model = Reference() if args.beta > 0 else None
            self.strategy = Strategy()
            self.advantages = None
            with mock.patch.object(oat.RLLearner, "_init", lambda self, args, actors: None):
                ppo.PPOLearner._init(self, args, [])  # oat's own: args, dataset_builder, masked_aggregator

        def get_batch_logps(self, model, input_ids, att_mask, temperature=1.0, compute_entropy=False):
            assert temperature == 1.0
            logps = model.log_probs(input_ids)
            return logps, torch.zeros_like(logps.detach()) if compute_entropy else None

        def compute_monte_carlo_advantages(self, rewards, response_masks):
            advantage = super().compute_monte_carlo_advantages(
                rewards.double() if exact else rewards, response_masks
            )
            self.advantages = advantage.detach().numpy().astype(np.float64)
            return advantage

    learner = Learner()
    reward = toy.rewards(parse_variant("oat_drgrpo"))
    sampler = toy.logp()
    buffer = []
    for i in range(n):
        length = int(toy.ramble[i]) + 1
        approach = RIGHT if toy.batch.right.reshape(-1)[i] else WRONG
        tail = [STOP] if toy.stopped[i] else []
        response = [approach] + [CONTINUE] * (length - 1 - len(tail)) + tail
        buffer.append(
            oat.TransitionData(
                prompt=f"prompt {i}",
                prompt_ids=[ROW + i] + [FILLER] * int(prompt_lengths[i] - 1),
                response=f"response {i}",
                response_ids=response,
                response_logprobs=sampler[i, :length].astype(np.float32),  # what oat keeps: float32
                rewards=[0.0] * (length - 1) + [float(reward[i])],
                loss_mask=True if loss_masks is None else bool(loss_masks[i]),
                info={},
            )
        )
    dataset = learner.dataset_builder(buffer, types.SimpleNamespace(pad_token_id=PAD), learner.strategy)
    trajectory = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    infos = learner.learning_step(trajectory)
    return Result(
        advantages=learner.advantages, grads=learner.model.grads, rows=learner.model.rows, infos=infos
    )


def check(conform, setting: str, preset: str, got: np.ndarray, expected: np.ndarray, agrees=True) -> None:
    conform(DISTRIBUTION, setting, preset, relative_difference(got, expected), expected=agrees)


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("micro", [16, 4])
@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_first_update(run, conform, critic: str, micro: int, batch: str) -> None:
    """Ratio 1 (the first update on a batch): oat's advantages and per-token gradient weights
    against the preset, with the batch in one micro-batch or in 4 of 4 responses (gradient
    accumulation over one optimiser step: the same full-batch mean)."""
    toy, name = BATCHES[batch](), PRESET[critic]
    preset = parse_variant(name)
    result = run(
        toy, [toy.theta_old], critic_type=critic, beta=0.0, tis_c=None, train_batch_size_per_device=micro
    )
    assert len(result.grads) == 1 and len(result.rows[0]) == toy.responses
    setting = f"{critic}, {batch}, micro-batch {micro}"
    if micro == 16:
        check(conform, f"{setting}: advantages", name, result.advantages, advantages(preset, toy))
    check(conform, f"{setting}: ratio 1", name, result.grads[0], token_weights(preset, toy))


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("micro", [16, 4])
@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_later_update(run, conform, critic: str, micro: int, batch: str) -> None:
    """Two PPO epochs: the second at a moved theta against theta_old (ratios != 1, oat's clip
    active: its pg_clipfrac > 0), against toyrl's update at that theta."""
    toy, name = BATCHES[batch](), PRESET[critic]
    preset = parse_variant(name)
    theta = moved(toy, 7, scale=1.0)
    fields = {"critic_type": critic, "beta": 0.0, "tis_c": None, "num_ppo_epochs": 2}
    result = run(toy, [toy.theta_old, theta], train_batch_size_per_device=micro, **fields)
    assert len(result.grads) == 2
    clipped = float(result.infos["pg_clipfrac"])  # mean over both epochs' micro-batches
    assert clipped > 0.02, clipped
    expected = token_weights(preset, toy, theta=theta)
    assert (expected == 0).sum() > (toy.mask == 0).sum()  # toyrl's clip zeroes some tokens too
    check(
        conform,
        f"{critic}, {batch}, micro-batch {micro}: moved theta, clipped",
        name,
        result.grads[1],
        expected,
    )


@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_minibatches(run, conform, critic: str) -> None:
    """train_batch_size = N / 2: two optimiser steps per epoch, each on a random half of the batch
    (mini-batches of 8 in 2 micro-batches of 4). toyrl has full-batch updates only: the first step
    is not the preset's full-batch update (recorded as a known difference); it is the preset's
    weights on the mini-batch's rows, times N / 8 (oat averages over the mini-batch, with the
    advantages of the whole batch's groups), and zero elsewhere."""
    toy, name = sampled(2, SAMPLED), PRESET[critic]
    fields = {"critic_type": critic, "beta": 0.0, "tis_c": None}
    result = run(toy, [toy.theta_old], train_batch_size=8, train_batch_size_per_device=4, **fields)
    assert len(result.grads) == 2  # two optimiser steps in the epoch
    rows = result.rows[0]
    assert len(rows) == 8
    expected = token_weights(parse_variant(name), toy)
    setting = f"{critic}, mini-batch 1 of 2 (8 of 16 responses)"
    check(conform, f"{setting} vs full batch", name, result.grads[0], expected, agrees=False)
    scaled = np.zeros_like(expected)
    scaled[rows] = expected[rows] * toy.responses / len(rows)
    check(conform, f"{setting}, its rows x N/8", name, result.grads[0], scaled)


def test_default_beta(run, conform, oat) -> None:
    """PPOArgs() defaults: critic_type 'drgrpo' and beta 0.1 (OATArgs.beta), a k3 KL term to the
    reference policy in the loss, aggregated like the policy loss. At ratio 1 (theta = theta_ref)
    its gradient is zero; at a moved theta it is not, so `oat_drgrpo` (beta 0) is oat's Dr. GRPO
    only with beta=0 set explicitly; the defaults are the preset plus beta=0.1."""
    defaults = oat.ppo.PPOArgs()
    assert defaults.critic_type == "drgrpo" and defaults.beta == 0.1 and defaults.cliprange == 0.2
    toy = sampled(3, SAMPLED)
    theta = moved(toy, 8, scale=1.0)
    result = run(toy, [toy.theta_old, theta], tis_c=None, num_ppo_epochs=2, train_batch_size_per_device=4)
    preset, spec = parse_variant("oat_drgrpo"), "advantage=none,aggregation=seq_mean_token_sum_norm,beta=0.1"
    at_theta = token_weights(preset, toy, theta)
    check(
        conform,
        "defaults (drgrpo, beta 0.1): ratio 1",
        "oat_drgrpo",
        result.grads[0],
        token_weights(preset, toy),
    )
    check(conform, "defaults: moved theta", "oat_drgrpo", result.grads[1], at_theta, agrees=False)
    check(
        conform,
        "defaults: moved theta",
        spec,
        result.grads[1],
        token_weights(parse_variant(spec), toy, theta),
    )


def test_kl_grpo(run, conform) -> None:
    """The k3 term with critic_type grpo: averaged per response over its tokens (masked_mean),
    like the policy loss."""
    toy = sampled(4, SAMPLED)
    theta = moved(toy, 9, scale=1.0)
    spec = "advantage=group_std_sample,aggregation=seq_mean_token_mean,beta=0.05,std_eps=1e-08"
    fields = {"critic_type": "grpo", "beta": 0.05, "tis_c": None, "num_ppo_epochs": 2}
    result = run(toy, [toy.theta_old, theta], train_batch_size_per_device=8, **fields)
    expected = token_weights(parse_variant(spec), toy, theta)
    check(conform, "grpo, beta 0.05: moved theta", spec, result.grads[1], expected)


@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_ignore_no_eos(run, conform, critic: str) -> None:
    """ignore_no_eos: the actor gives a truncated response loss_mask False (PPOActor.step); the
    learner zeroes its loss but still averages over all N responses, and its reward still counts
    in its group's advantage: toyrl's mask_truncated (selector `stopped`)."""
    toy = sampled(5, SAMPLED)
    assert not toy.stopped.all()
    theta = moved(toy, 10, scale=1.0)
    spec = parse_variant(PRESET[critic]).spec_text() + ",mask_truncated=True"
    variant = parse_variant(spec)
    fields = {"critic_type": critic, "beta": 0.0, "tis_c": None, "num_ppo_epochs": 2}
    result = run(toy, [toy.theta_old, theta], loss_masks=toy.stopped, train_batch_size_per_device=4, **fields)
    check(conform, f"{critic}, truncated masked: ratio 1", spec, result.grads[0], token_weights(variant, toy))
    expected = token_weights(variant, toy, theta)
    check(conform, f"{critic}, truncated masked: moved theta", spec, result.grads[1], expected)


@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_float32_as_oat_computes(run, conform, critic: str) -> None:
    """learning_step's two float32 steps, each as oat runs it: (1) its reward tensor is float32, so
    is the advantage arithmetic (exact for drgrpo here: r - mean of 4 rewards of 0/1; for grpo the
    std rounds, and std + 1e-8 is the std in float32); (2) the default truncated importance weight
    tis_c=2.0, on sampler log-probs that oat keeps in float32: with the toy's sampler = learner it
    is 1 but for that rounding. What differs is float32 rounding (< 1e-6 relative), no other rule."""
    toy, name = sampled(0, SAMPLED), PRESET[critic]
    expected = token_weights(parse_variant(name), toy)
    fields = {"critic_type": critic, "beta": 0.0, "train_batch_size_per_device": 4}
    rewards32 = run(toy, [toy.theta_old], exact=False, tis_c=None, **fields)
    assert relative_difference(rewards32.grads[0], expected) < 1e-6
    exact = critic == "drgrpo"
    check(conform, f"{critic}, float32 rewards as oat: ratio 1", name, rewards32.grads[0], expected, exact)
    weighted = run(toy, [toy.theta_old], **fields)  # tis_c: PPOArgs' default, 2.0
    assert relative_difference(weighted.grads[0], expected) < 1e-6
    check(
        conform,
        f"{critic}, tis_c 2.0, float32 sampler logps: ratio 1",
        name,
        weighted.grads[0],
        expected,
        False,
    )
