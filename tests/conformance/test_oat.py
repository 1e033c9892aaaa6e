"""oat (oat-llm 0.2.4) against toyrl's presets `oat_grpo` and `oat_drgrpo`.

What runs is oat's own PPO learner step, `PPOLearner.learning_step` (oat/algorithms/ppo.py), on a
toy batch that oat's own `TransitionDataset` collates (prompt ids, then response ids, right-padded;
its sampler log-probs, dense rewards with the reward on the last token, loss masks). So oat's own
code places the rewards, computes the group advantages (`compute_monte_carlo_advantages`, with
`critic_type` grpo or drgrpo), trims the padding of each micro-batch, forms the PPO ratio and clip,
the k3 KL term, and aggregates with the aggregator `PPOLearner._init` itself picks
(`masked_mean`, or `masked_sum` over `generate_max_length` for drgrpo); it also walks the
PPO epochs, mini-batches and micro-batches, in one call, as in training.

oat's schedule (learning_step): the rollout on a learner (rollout_batch_size_per_device prompts x
num_samples responses, one DataLoader batch of the whole buffer, unshuffled for grpo/drgrpo) is,
for each of num_ppo_epochs epochs, put in a new order by `np.random.permutation(N)` (numpy's
global state, redrawn every epoch: toyrl's shuffle=epoch) and cut into consecutive micro-batches
of train_batch_size_per_device; each micro-batch's loss is the per-response aggregate (masked_mean
over its tokens, or masked_sum / generate_max_length) times the loss mask, `.mean()` over the
micro-batch's responses, and DeepSpeed divides it by grad_acc_step = train_batch_size //
train_batch_size_per_device (one process) and steps every grad_acc_step micro-batches: an
optimiser step per train_batch_size consecutive rows of the permutation (toyrl's mini_batches =
N / train_batch_size, micro_batches = grad_acc_step). With equal micro-batches the mean of the
micro-batch means is the mini-batch's mean: the micro-batch scope and the mini-batch scope of
oat's normaliser agree (both recorded). The permutation is not reimplemented: the fixture seeds
numpy's global state (np.random.seed(1234)), the run records what learning_step's own
np.random.permutation calls returned, and the stand-in model records the rows its training
forwards received, in order; the tests assert these are the same and pass them to toyrl as
`order`. The later optimiser steps are at moved thetas (the stand-in's "optimizer step" loads the
next theta of the test's schedule), where oat's clip acts. oat 0.2.4 has no dual clip.

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
  the leaf's gradient and the rows that entered it, and moves the policy to the next theta of
  the test's schedule (in place of Adam), so every optimiser step after the first sees ratios != 1.
  This is the one restated piece of plumbing: DeepSpeed's engine (in oat's environment only an
  import stand-in, tests/conformance/standins/oat) needs a GPU and a distributed setup, so its
  backward / step arithmetic (two lines) stands in for it; the schedule itself (epochs,
  permutation, micro-batch slices, accumulation boundaries) is oat's own loop.
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
ratio 1 or at a moved theta against theta_old, of update m of a schedule (mini_batches,
micro_batches, shuffle) with the responses in a given order.
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
    # learning_step shuffles the batch each epoch with numpy's global np.random.permutation (the
    # run records what it drew)
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
    orders: list[np.ndarray]  # [N] per PPO epoch: the rows in the order its micro-batches took them
    permutations: list[np.ndarray]  # what learning_step's np.random.permutation calls returned
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
            self.order: list[int] = []  # every row of every training forward, in the order it came
            self._load()

        def _load(self) -> None:
            theta = self.thetas[min(self.step_count, len(self.thetas) - 1)]
            self.leaf = torch.tensor(toy.logp(theta), dtype=torch.float64, requires_grad=True)
            self.seen: set[int] = set()

        def log_probs(self, input_ids):
            if torch.is_grad_enabled():
                self.seen.update((input_ids[:, 0] - ROW).tolist())
                self.order.extend((input_ids[:, 0] - ROW).tolist())
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
    permutations: list[np.ndarray] = []
    permutation = np.random.permutation  # learning_step's own draw, from numpy's global state

    def recorded(*arguments: Any) -> np.ndarray:
        drawn = permutation(*arguments)
        permutations.append(np.array(drawn))
        return drawn

    with mock.patch.object(np.random, "permutation", recorded):
        infos = learner.learning_step(trajectory)
    order = np.array(learner.model.order)
    return Result(
        advantages=learner.advantages,
        grads=learner.model.grads,
        rows=learner.model.rows,
        orders=[order[e * n : (e + 1) * n] for e in range(len(order) // n)],
        permutations=permutations,
        infos=infos,
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


def schedule(name: str, mini: int, micro: int, epochs: int, extra: str = "") -> str:
    """The toy spec of oat's schedule on a preset: `epochs` PPO epochs (num_ppo_epochs), each a new
    random order of the batch (np.random.permutation) cut into `mini` optimiser steps
    (train_batch_size = N / mini), each accumulated over `micro` micro-batches
    (train_batch_size_per_device = N / (mini micro)); `extra` more keys."""
    text = f"{parse_variant(name).spec_text()},num_iterations={epochs},mini_batches={mini}"
    return parse_variant(f"{text},micro_batches={micro},shuffle=epoch{extra}").spec_text()


def schedule_run(run, toy: ToyBatch, thetas, mini: int, micro: int, epochs: int, **fields: Any) -> Result:
    """oat's learning_step with `mini` optimiser steps per epoch of `micro` micro-batches each, and
    the checks of its order: one np.random.permutation per epoch, which the training forwards take
    in consecutive slices (the observed rows are the drawn permutation), each step's rows one
    slice of train_batch_size."""
    n = toy.responses
    fields = {"beta": 0.0, "tis_c": None, "num_ppo_epochs": epochs} | fields
    result = run(
        toy, thetas, train_batch_size=n // mini, train_batch_size_per_device=n // (mini * micro), **fields
    )
    assert len(result.permutations) == epochs and len(result.orders) == epochs
    for drawn, seen in zip(result.permutations, result.orders, strict=True):
        np.testing.assert_array_equal(drawn, seen)
    assert len(result.grads) == mini * epochs
    for update, rows in enumerate(result.rows):
        np.testing.assert_array_equal(rows, np.sort(members(result, update, mini)))
    return result


def members(result: Result, update: int, mini: int) -> np.ndarray:
    """The rows of optimiser step `update` in oat's order: its slice of its epoch's permutation."""
    order = result.orders[update // mini]
    size = len(order) // mini
    return order[update % mini * size : (update % mini + 1) * size]


MINI = 2  # optimiser steps per PPO epoch (but in test_mini_and_micro_batches)
EPOCHS = 2


@pytest.mark.parametrize("batch", ["hand-made", "sampled seed 0"])
@pytest.mark.parametrize(("mini", "micro"), [(2, 2), (2, 4), (4, 2)])
@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_mini_and_micro_batches(run, conform, critic: str, mini: int, micro: int, batch: str) -> None:
    """Two PPO epochs of `mini` optimiser steps (train_batch_size = N / mini), each accumulated
    over `micro` micro-batches (train_batch_size_per_device = N / (mini micro)): every step's
    gradient against toyrl's update m of the schedule, in oat's own order (the permutation each
    epoch drew, observed in the rows its forwards received). Update 1 is at ratio 1, the later
    ones at moved thetas (oat's clip zeroes some tokens with A != 0, and so does toyrl's).
    oat's normaliser is per response (masked_mean, or masked_sum / generate_max_length), its loss
    the mean over the micro-batch's responses, divided by the accumulation steps (DeepSpeed's
    backward): with equal micro-batches that is the mean over the mini-batch, so the micro-batch
    scope (per_micro_batch=true) and the mini-batch scope agree, and both are recorded. What
    must differ: the batch's own order (oat shuffles), epoch 1's order kept in epoch 2 (oat
    redraws it), and the whole-batch preset (the mean is over the mini-batch)."""
    toy, name = BATCHES[batch](), PRESET[critic]
    updates = mini * EPOCHS
    thetas = [toy.theta_old] + [moved(toy, 20 + m, scale=1.0) for m in range(1, updates)]
    result = schedule_run(run, toy, thetas, mini, micro, EPOCHS, critic_type=critic)
    spec = schedule(name, mini, micro, EPOCHS)
    per_micro = schedule(name, mini, micro, EPOCHS, ",per_micro_batch=true")
    variant, per_micro_variant = parse_variant(spec), parse_variant(per_micro)
    live = toy.mask & (result.advantages != 0)[:, None]  # tokens whose weight is nonzero unless clipped
    clips: list[bool] = []
    for update, grad in enumerate(result.grads):
        rows = members(result, update, mini)
        order = result.orders[update // mini]
        outside = np.setdiff1d(np.arange(toy.responses), rows)
        assert np.abs(grad[rows]).max() > 0 and not grad[outside].any()
        theta = None if update == 0 else thetas[update]
        expected = token_weights(variant, toy, theta, update=update, order=order)
        clipped = bool((grad[rows][live[rows]] == 0).any())  # oat's clip: A != 0, zero gradient
        assert clipped == bool(((expected == 0) & live)[rows].any())  # where toyrl's clips
        assert update > 0 or not clipped
        clips.append(clipped)
        where = "ratio 1" if update == 0 else "moved theta, " + ("clipped" if clipped else "unclipped")
        setting = (
            f"{critic}, {batch}, {mini} mini- x {micro} micro-batches, update {update + 1}/{updates}, {where}"
        )
        check(conform, setting, spec, grad, expected)
        at = token_weights(per_micro_variant, toy, theta, update=update, order=order)
        check(conform, f"{setting}, micro-batch scope", per_micro, grad, at)
        unshuffled = token_weights(variant, toy, theta, update=update)
        check(conform, f"{setting}, vs the batch's own order", spec, grad, unshuffled, agrees=False)
        if update >= mini:  # as shuffle=once would: epoch 1's order again
            assert set(rows) != set(members(result, update - mini, mini))
            kept = token_weights(variant, toy, theta, update=update, order=result.orders[0])
            check(conform, f"{setting}, vs epoch 1's order kept", spec, grad, kept, agrees=False)
        if update == 0:
            whole = token_weights(parse_variant(name), toy)
            check(conform, f"{setting}, vs the whole-batch update", name, grad, whole, agrees=False)
    assert sum(clips) >= (updates - 1) * 2 / 3, clips  # the clip acts in most later updates


@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_mini_batches_ignore_no_eos(run, conform, critic: str) -> None:
    """ignore_no_eos under mini- and micro-batches: a truncated response's loss is zeroed by its
    loss mask, yet it still counts in its micro-batch's mean (`(pg_loss * mb_loss_masks).mean()`):
    toyrl's mask_truncated, whose mean is over the mini-batch's responses, included or not."""
    toy = sampled(5, SAMPLED)
    assert not toy.stopped.all()
    thetas = [toy.theta_old] + [moved(toy, 30 + m, scale=1.0) for m in range(1, MINI * EPOCHS)]
    result = schedule_run(run, toy, thetas, MINI, 2, EPOCHS, critic_type=critic, loss_masks=toy.stopped)
    spec = schedule(PRESET[critic], MINI, 2, EPOCHS, ",mask_truncated=True")
    variant = parse_variant(spec)
    for update, grad in enumerate(result.grads):
        rows = members(result, update, MINI)
        assert np.abs(grad[rows]).max() > 0 and not grad[~toy.stopped].any()
        theta = None if update == 0 else thetas[update]
        expected = token_weights(variant, toy, theta, update=update, order=result.orders[update // MINI])
        where = "ratio 1" if update == 0 else "moved theta"
        schedule_text = f"{MINI} mini- x 2 micro-batches, update {update + 1}/{MINI * EPOCHS}"
        setting = f"{critic}, truncated masked, {schedule_text}, {where}"
        check(conform, setting, spec, grad, expected)


@pytest.mark.parametrize("critic", ["grpo", "drgrpo"])
def test_no_dual_clip(run, conform, critic: str) -> None:
    """oat 0.2.4 has no dual clip (learning_step's pg_loss_max is max(-A ratio, -A clip(ratio)),
    nothing bounds it for A < 0): at a theta far enough that tokens with A < 0 in the second
    mini-batch have ratio > 3, oat's gradient on them is not zero, and toyrl's dual_clip=3
    (which zeroes them) differs, while the schedule without it agrees."""
    toy, name = sampled(8, SAMPLED), PRESET[critic]
    far = moved(toy, 40, scale=0.3)
    far[0, :-2] -= 1.5  # the wrong approach more likely (ratio up to e^1.5)
    far[0, -2:] += 2.0  # and stopping (the stop token's ratio up to e^2)
    result = schedule_run(run, toy, [toy.theta_old, far], MINI, 2, 1, critic_type=critic)
    rows = members(result, 1, MINI)
    ratio = np.exp(toy.logp(far) - toy.logp())
    negative = np.zeros(toy.mask.shape, bool)
    negative[rows] = (toy.mask & (result.advantages < 0)[:, None] & (ratio > 3.0))[rows]
    assert negative.any()
    grad = result.grads[1]
    assert (grad[negative] != 0).all()  # oat does not clip them
    order = result.orders[0]
    spec = schedule(name, MINI, 2, 1)
    setting = (
        f"{critic}, sampled seed 8, {MINI} mini- x 2 micro-batches, update 2, far theta (A < 0, ratio > 3)"
    )
    check(conform, setting, spec, grad, token_weights(parse_variant(spec), toy, far, update=1, order=order))
    dual = schedule(name, MINI, 2, 1, ",dual_clip=3")
    expected = token_weights(parse_variant(dual), toy, far, update=1, order=order)
    assert (expected[negative] == 0).all()
    check(conform, setting, dual, grad, expected, agrees=False)


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
