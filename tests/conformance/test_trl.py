"""TRL's installed GRPOTrainer (trl==1.16.0) against toyrl's TRL presets.

Everything TRL-side runs through a real `trl.GRPOTrainer` and its own `training_step` (TRL's
`_prepare_inputs`: generation, scoring and advantages in `_generate_and_score_completions`, the
shuffle and split into micro-batches, the buffer reused for `num_iterations`; then TRL's
`_compute_loss` with its ratios, clipping, KL term, masking and aggregation; the backward through
accelerate), on a tiny randomly initialised `LlamaForCausalLM` saved to a temporary directory
(nothing is downloaded) and an in-process word-level tokenizer. Three things are toy-side:

- generation: TRL's own `rollout_func` hook returns the toy batch's tokens (the approach token,
  the ramble tokens, the stop token = the tokenizer's EOS; a truncated response has
  max_completion_length = T tokens and no EOS, which is how TRL itself detects truncation);
- the reward function returns toyrl's reward of each response (TRL computes the advantages);
- `_get_per_token_logps_and_entropies`, the one method that runs the model, is replaced on the
  trainer instance: it returns the rows of a float64 leaf tensor holding toy log-probs at the
  policy under test (at theta_old for TRL's `old_per_token_logps`, at theta_ref for the reference
  model's), so autograd on the leaf gives TRL's d loss / d logp per token.

(TRL 0.22, checked by `test_trl_0_22_scale_rewards` in its own environment, has no rollout_func:
there the tiny model's `generate` is replaced on its instance and returns the same tokens.)

Rows are followed by index, not guessed from tokens: TRL's `shuffle_sequence_dict` (looked up in
trl.trainer.grpo_trainer's namespace, where `_prepare_inputs` calls it) is wrapped for the run so
that the generation batch it shuffles carries one more column, "row" (the toy row of each
response); TRL's own function still draws the permutation (torch.randperm, under a per-batch
torch seed) and permutes that column with the rest, `split_tensor_dict` cuts it into the
micro-batches, and a wrapper of `_compute_loss` on the instance reads each micro-batch's rows
before calling TRL's. Every row's tokens are checked against the toy response's. The recorded
permutation is the `order` toyrl's `token_weights` takes. TRL builds its rewards tensor with
torch's default dtype, so the trainer runs under `torch.set_default_dtype(torch.float64)`; the
tolerance is then the suite's 1e-10 relative.

Several optimiser steps per generation batch (TRL 1.16, trl/trainer/grpo_trainer.py): the
generation batch is per_device_train_batch_size x steps_per_generation responses (GRPOConfig:
steps_per_generation defaults to gradient_accumulation_steps; generation_batch_size is the other
way to set it). `_prepare_inputs` generates when `_step % (steps_per_generation x num_iterations)
== 0`, shuffles the generation batch once, splits it into steps_per_generation equal chunks and
returns chunk `_step % steps_per_generation` at each training_step; the Trainer takes an optimiser
step every gradient_accumulation_steps = c training steps. So an optimiser step is c consecutive
chunks of the one shuffled order, steps_per_generation / c of them per pass, and the same chunks
again at each of num_iterations: toyrl's mini_batches = steps_per_generation / c, micro_batches = c,
shuffle=once. Update u of the toy schedule is TRL's optimiser step u (epoch u // k, mini-batch
u % k). TRL's loss per micro-batch (`_compute_loss`), already divided for gradient accumulation
(GRPOTrainer.loss_is_scaled_for_ga = True: transformers' Trainer.training_step divides no
further, and accelerate's backward only under DeepSpeed):
- grpo: the mean over the micro-batch's responses of their token means, / c; dr_grpo: the token
  sum / (micro-batch responses x max_completion_length), / c. With equal micro-batches both are
  the mini-batch's per-response normaliser (seq_mean_token_mean, seq_mean_token_sum_norm);
- bnpo: the micro-batch's token sum / its own token count, / c: token_mean,per_micro_batch=true;
- dapo: the token sum / (num_items_in_batch x c / steps_per_generation), num_items_in_batch being
  the generation batch's token count: the whole batch's tokens / k, the *mean* mini-batch's token
  count. toyrl's token_mean for k = 1; for k > 1 no toyrl normaliser (`test_schedule_dapo`).
TRL's `delta` (two-sided clipping: the ratio clamped at delta before PPO's min) is dual-clip
PPO with c = delta when delta >= 1 + epsilon_high (`test_dual_clip`).

loss_type cispo and sapo (the newer families, at the end): cispo's detached weight
clamp(coef_1, max=epsilon_high) is toyrl's cispo with epsilon_high = TRL's - 1 and no lower bound,
aggregated as dapo; sapo's gate is toyrl's sapo (tau_pos / tau_neg = sapo_temperature_pos / _neg),
aggregated as grpo; their later updates are compared at `toy.stop_pushed`'s policy, where a cap
of 5 acts (TRL logs cispo_clip_ratio for cispo, no clip metric for sapo).

Later optimiser steps are compared at a moved policy (`toy.moved`), not at the one TRL's optimiser
would reach: the leaf holds the log-probs of whatever policy is under test, against TRL's
old_per_token_logps at theta_old (which TRL computes whenever gradient_accumulation_steps is not a
multiple of steps_per_generation x num_iterations).
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.conformance import toy
from tests.conformance.conftest import trainer_module, version_of
from tests.conformance.toy import CONFIG as toy_config
from toyrl.variants import parse_variant

CONFIG = toy_config  # TRL's dr_grpo divides by max_completion_length = T = cap + 1
PROMPTS = [f"p{j}" for j in range(CONFIG.prompts)]
VOCABULARY = {"<pad>": 0, "<eos>": 1, "right": 2, "wrong": 3, "ramble": 4} | {
    p: 5 + j for j, p in enumerate(PROMPTS)
}
PAD, EOS, RIGHT, WRONG, RAMBLE = 0, 1, 2, 3, 4
# transformers 5 warns on every training_step that TRL asks for is_gradient_checkpointing
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def corner_cases() -> toy.ToyBatch:
    """Hand-made: unequal lengths, padding, an all-0 and an all-1 group, truncated responses."""
    cap = CONFIG.cap
    right = [[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1]]
    ramble = [[3, 12, 7, cap], [5, cap, 9, 2], [5, 6, 20, 29], [cap, cap, 8, 15]]
    stopped = [[1, 1, 1, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1]]
    return toy.made(np.array(right), np.array(ramble), np.array(stopped), CONFIG)


BATCHES = {"made": corner_cases, **{f"sampled {s}": (lambda s=s: toy.sampled(s, CONFIG)) for s in (0, 1, 2)}}


def spec(preset: str, **extra: Any) -> str:
    """The canonical spec text of a preset with extra keys (epsilon_high, num_iterations, ...)."""
    text = parse_variant(preset).spec_text()
    if extra:
        text += "," + ",".join(f"{key}={value}" for key, value in extra.items())
    return parse_variant(text).spec_text()


@dataclass
class Environment:
    trl: Any
    torch: Any
    model_dir: str
    tokenizer: Any
    dataset: Any


PINNED = "1.16.0"  # the release these tests pin, but test_trl_0_22_scale_rewards


@pytest.fixture(scope="module")
def any_trl(tmp_path_factory: pytest.TempPathFactory) -> Environment:
    trl = trainer_module("trl", "trl")
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's "experimental" warning
    words = Tokenizer(models.WordLevel(VOCABULARY, unk_token="<pad>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="<eos>")
    llama = LlamaConfig(
        vocab_size=len(VOCABULARY),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model_dir = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(llama).save_pretrained(model_dir)  # TRL loads it (and its reference copy) from here
    return Environment(trl, torch, str(model_dir), tokenizer, Dataset.from_dict({"prompt": PROMPTS}))


@pytest.fixture
def trl_env(any_trl: Environment) -> Environment:
    """TRL 1.16.0 (scripts/conformance/trl.sh's default); other releases skip these tests."""
    if version_of("trl") != PINNED:
        pytest.skip(f"these tests pin trl=={PINNED}'s behaviour (installed: trl {version_of('trl')})")
    return any_trl


def completion_tokens(batch: toy.ToyBatch) -> list[list[int]]:
    """Each response's token ids: approach, ramble tokens, EOS as the stop token (if it stopped)."""
    right, ramble, stopped = batch.batch.right.reshape(-1), batch.ramble, batch.stopped
    return [
        [RIGHT if r else WRONG] + [RAMBLE] * (int(n) - int(s)) + [EOS] * int(s)
        for r, n, s in zip(right, ramble, stopped, strict=True)
    ]


@dataclass
class Run:
    """What TRL gave for a batch: its advantages [N]; per optimiser step, d loss / d logp [N, T]
    and the toy rows of each of its micro-batches, in TRL's order; the order of the toy rows that
    TRL's shuffle of the generation batch drew; TRL's logged metrics (one entry per micro-batch)."""

    advantages: np.ndarray
    weights: list[np.ndarray]
    micro: list[list[list[int]]]
    order: list[int]
    metrics: dict[str, list[float]]

    @property
    def seen(self) -> list[list[int]]:
        """The toy rows each optimiser step saw, sorted."""
        return [sorted(row for part in step for row in part) for step in self.micro]

    def clipped(self, step: int, micro_batches: int, metric: str = "clip_ratio/region_mean") -> float:
        """TRL's clip_ratio/region_mean (or another clip `metric`: loss_type='cispo' logs
        cispo_clip_ratio) at optimiser step `step` (the largest of its micro-batches)."""
        values = self.metrics[metric]
        return max(values[step * micro_batches : (step + 1) * micro_batches])


def run_trl(
    env: Environment,
    batch: toy.ToyBatch,
    rewards: np.ndarray,
    thetas: list[np.ndarray | None],
    theta_ref: np.ndarray | None = None,
    seed: int = 0,
    **grpo: Any,
) -> Run:
    """TRL's GRPOTrainer.training_step on the toy batch: one optimiser step (its
    gradient_accumulation_steps micro-batches) per entry of `thetas`, the policy at that step
    (None: theta_old). `grpo`: GRPOConfig arguments; per_device_train_batch_size defaults to
    N / steps_per_generation, so that TRL's generation batch is the toy batch. `seed`: torch's
    seed, from which TRL's shuffle of the generation batch draws its permutation."""
    torch, trl = env.torch, env.trl
    group = batch.shape[1]
    responses = batch.responses
    accumulation = grpo.setdefault("gradient_accumulation_steps", 1)
    per_generation = grpo.get("steps_per_generation") or accumulation
    grpo.setdefault("per_device_train_batch_size", responses // per_generation)
    prompt_of = [PROMPTS[int(j)] for j in np.repeat(batch.batch.prompt_index[0], group)]
    tokens = completion_tokens(batch)
    keys = [((VOCABULARY[prompt_of[i]],), tuple(tokens[i])) for i in range(responses)]  # toy row -> tokens
    first_row = {k: keys.index(k) for k in keys}

    def key(prompt_ids: list[int], completion_ids: list[int]) -> tuple:
        completion = list(completion_ids)
        while completion and completion[-1] == PAD:  # completions are right-padded
            completion.pop()
        return tuple(t for t in prompt_ids if t != PAD), tuple(completion)  # prompts are left-padded

    def rollout(texts: list[str], trainer: Any) -> dict[str, Any]:
        assert texts == prompt_of  # TRL's generation batch is the toy batch, prompt-major
        ids = trainer.processing_class(text=texts)["input_ids"]
        return {"prompt_ids": ids, "completion_ids": [list(t) for t in tokens], "logprobs": None}

    def reward(prompts: list[str], completions: list[str], completion_ids: list, **_: Any) -> list[float]:
        rows = [first_row[key([VOCABULARY[p]], c)] for p, c in zip(prompts, completion_ids, strict=True)]
        return [float(rewards[i]) for i in rows]

    step: dict[str, Any] = {}
    old = torch.tensor(batch.logp(), dtype=torch.float64)
    ref = torch.tensor(batch.logp(theta_ref), dtype=torch.float64)

    def per_token_logps(
        model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *_: Any, **kw: Any
    ) -> Any:
        """Stands in for the model's forward: toy log-probs of the rows (the leaf's rows under grad)."""
        width = input_ids.size(1) - logits_to_keep
        if torch.is_grad_enabled():  # _compute_loss: the policy under test, one micro-batch
            source, rows = step["leaf"], step["rows"]
            step["micro"].append(rows)
        else:  # _generate_and_score_completions (the toy's order): old_per_token_logps or the reference's
            source, rows = (ref if model is trainer.ref_model else old), list(range(responses))
        assert [key(r[:width], r[width:]) for r in input_ids.tolist()] == [keys[i] for i in rows]
        logps = source[rows, :logits_to_keep]
        entropies = torch.zeros_like(logps) if kw.get("compute_entropy") else None
        return (logps, entropies, None) if with_aux_loss else (logps, entropies)  # TRL 0.22: no aux loss

    def generate(input_ids: Any, attention_mask: Any, **_: Any) -> Any:
        """TRL 0.22 (no rollout_func): stands in for the model's generate, the toy's completions."""
        assert [VOCABULARY[p] for p in prompt_of] == input_ids[:, -1].tolist()
        width = max(len(t) for t in tokens)
        completions = torch.tensor([t + [PAD] * (width - len(t)) for t in tokens], dtype=input_ids.dtype)
        return torch.cat([input_ids, completions], dim=1)

    module = sys.modules[trl.GRPOTrainer.__module__]  # trl.trainer.grpo_trainer
    shuffle = module.shuffle_sequence_dict
    orders: list[list[int]] = []

    def shuffled(generation: dict[str, Any]) -> dict[str, Any]:
        """TRL's own shuffle of the generation batch, with a "row" column (the toy row) carried
        through it, into the micro-batches it splits into and to _compute_loss's inputs."""
        out = shuffle({**generation, "row": torch.arange(responses)})
        orders.append(out["row"].tolist())
        return out

    signature = inspect.signature(trl.GRPOTrainer._get_per_token_logps_and_entropies).parameters
    with_aux_loss = "compute_aux_loss" in signature
    with_rollout = "rollout_func" in inspect.signature(trl.GRPOTrainer.__init__).parameters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecations, rollout_func's "experimental"
        args = trl.GRPOConfig(
            output_dir=os.path.join(env.model_dir, "out"),
            use_cpu=True,
            report_to=[],
            bf16=False,
            save_strategy="no",
            disable_tqdm=True,
            num_generations=group,
            max_completion_length=batch.width,
            **grpo,
        )
        trainer = trl.GRPOTrainer(
            model=env.model_dir,
            reward_funcs=reward,
            args=args,
            train_dataset=env.dataset,
            processing_class=env.tokenizer,
            **({"rollout_func": rollout} if with_rollout else {}),
        )
    trainer._get_per_token_logps_and_entropies = per_token_logps
    if not with_rollout:
        trainer.model.generate = generate
    generated: list[dict[str, Any]] = []
    score, compute_loss = trainer._generate_and_score_completions, trainer._compute_loss

    def recorded(inputs: Any) -> dict[str, Any]:
        generated.append(score(inputs))
        return generated[-1]

    def loss_of(model: Any, inputs: dict[str, Any]) -> Any:
        step["rows"] = inputs["row"].tolist()  # the micro-batch's toy rows
        return compute_loss(model, inputs)

    trainer._generate_and_score_completions = recorded
    trainer._compute_loss = loss_of
    trainer.current_gradient_accumulation_steps = accumulation  # as Trainer's training loop sets it
    inputs = [{"prompt": p} for p in prompt_of]  # the generation batch, as TRL's RepeatSampler yields it

    weights, micro = [], []
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(seed)  # TRL shuffles the generation batch before splitting it into micro-batches
    module.shuffle_sequence_dict = shuffled
    try:
        for theta in thetas:
            leaf = torch.tensor(batch.logp(theta), dtype=torch.float64, requires_grad=True)
            step.update(leaf=leaf, micro=[])
            for _ in range(accumulation):
                trainer.training_step(trainer.model, inputs, None)
            assert leaf.grad is not None
            weights.append(leaf.grad.numpy().copy())
            micro.append(step["micro"])
    finally:
        module.shuffle_sequence_dict = shuffle
        torch.set_default_dtype(default)
    assert len(generated) == len(orders) == 1  # one generation batch (shuffled once) for all the steps
    output = generated[0]
    rows = zip(output["prompt_ids"].tolist(), output["completion_ids"].tolist(), strict=True)
    assert [key(p, c) for p, c in rows] == keys  # TRL's generation batch is in the toy's order
    advantages = output["advantages"].double().numpy()
    metrics = {k: list(v) for k, v in trainer._metrics["train"].items()}
    return Run(advantages, weights, micro, orders[0], metrics)


def first_updates(env: Environment, preset: str, **grpo: Any) -> tuple[float, float]:
    """Max relative differences, over the batches, of TRL's advantages and first-update weights
    (num_iterations=1, ratio 1) from the preset's (micro-batches: in the order TRL's shuffle drew)."""
    variant = parse_variant(preset)
    advantage, weight = 0.0, 0.0
    for seed, make in enumerate(BATCHES.values()):
        batch = make()
        run = run_trl(env, batch, batch.rewards(variant), [None], seed=seed, **grpo)
        assert run.seen[0] == list(range(batch.responses))  # the step saw every response once
        expected = toy.token_weights(variant, batch, order=run.order)
        assert np.abs(expected).max() > 0
        advantage = max(advantage, toy.relative_difference(run.advantages, toy.advantages(variant, batch)))
        weight = max(weight, toy.relative_difference(run.weights[0], expected))
    return advantage, weight


# setting, GRPOConfig arguments, the toyrl preset (or spec) it maps to
ON_POLICY = [
    ("defaults (loss_type=dapo, scale_rewards=group)", {}, "trl_default"),
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo"),
    ("loss_type=dr_grpo", {"loss_type": "dr_grpo"}, "trl_dr_grpo_loss_only"),
    (
        "loss_type=dr_grpo, scale_rewards=none",
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "trl_dr_grpo",
    ),
    ("scale_rewards=none", {"scale_rewards": "none"}, "trl_scale_none_only"),
    ("scale_rewards=batch", {"scale_rewards": "batch"}, "trl_batch_scale"),
    # one micro-batch: bnpo's local token count is the batch's (micro-batches: test_micro_batches)
    ("loss_type=bnpo", {"loss_type": "bnpo"}, "trl_default"),
    (
        "mask_truncated_completions",
        {"mask_truncated_completions": True},
        spec("trl_default", mask_truncated=True),
    ),
    (
        "loss_type=grpo, mask_truncated_completions",
        {"loss_type": "grpo", "mask_truncated_completions": True},
        spec("trl_grpo", mask_truncated=True),
    ),
    (
        "loss_type=dr_grpo, scale_rewards=none, mask_truncated_completions",
        {"loss_type": "dr_grpo", "scale_rewards": "none", "mask_truncated_completions": True},
        spec("trl_dr_grpo", mask_truncated=True),
    ),
]


@pytest.mark.parametrize(("setting", "grpo", "preset"), ON_POLICY, ids=[s for s, _, _ in ON_POLICY])
def test_first_update(trl_env: Environment, conform: Any, setting: str, grpo: dict, preset: str) -> None:
    advantage, weight = first_updates(trl_env, preset, **grpo)
    conform("trl", f"{setting}: advantages", preset, advantage)
    conform("trl", f"{setting}: weights", preset, weight)


# num_iterations=2: TRL's first pass over the batch (ratio 1 against its old_per_token_logps) and
# its second at a moved policy (ratios != 1, clipping active: TRL's own clip_ratio metric > 0).
LATER = [
    ("loss_type=dapo", {}, "trl_default"),
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo"),
    ("loss_type=dr_grpo", {"loss_type": "dr_grpo"}, "trl_dr_grpo_loss_only"),
    (
        "loss_type=dr_grpo, scale_rewards=none",
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "trl_dr_grpo",
    ),
    ("loss_type=bnpo", {"loss_type": "bnpo"}, "trl_default"),
]
CLIPS = {"epsilon_high=0.28": {"epsilon_high": 0.28}, "epsilon=0.05": {"epsilon": 0.05}}


def later_updates(
    env: Environment, variant_text: str, scale: float = 1.0, with_ref: bool = False, **grpo: Any
) -> tuple[float, float, float, float]:
    """Max relative differences over the batches (advantages, 1st iteration's weights, 2nd
    iteration's) of TRL with num_iterations=2 from the variant; and the smallest clip fraction."""
    variant = parse_variant(variant_text)
    micro_batches = grpo.get("gradient_accumulation_steps", 1)
    differences, least_clipped = np.zeros(3), 1.0
    for seed, make in enumerate(BATCHES.values()):
        batch = make()
        theta = toy.moved(batch, seed, scale=scale)
        theta_ref = toy.moved(batch, 100 + seed, scale=0.5) if with_ref else None
        run = run_trl(
            env, batch, batch.rewards(variant), [None, theta], theta_ref=theta_ref, num_iterations=2, **grpo
        )
        assert run.seen == [list(range(batch.responses))] * 2  # each iteration saw every response once
        least_clipped = min(least_clipped, run.clipped(1, micro_batches))
        assert run.clipped(0, micro_batches) == 0  # the first iteration is at ratio 1
        got = (run.advantages, run.weights[0], run.weights[1])
        expected = (
            toy.advantages(variant, batch),
            toy.token_weights(variant, batch, theta_ref=theta_ref),
            toy.token_weights(variant, batch, theta, theta_ref=theta_ref),
        )
        differences = np.maximum(
            differences, [toy.relative_difference(g, e) for g, e in zip(got, expected, strict=True)]
        )
    return (*differences, least_clipped)


@pytest.mark.parametrize("clip", list(CLIPS))
@pytest.mark.parametrize(("setting", "grpo", "preset"), LATER, ids=[s for s, _, _ in LATER])
def test_later_update(
    trl_env: Environment, conform: Any, setting: str, grpo: dict, preset: str, clip: str
) -> None:
    variant = spec(preset, num_iterations=2, **CLIPS[clip])
    advantage, first, second, clipped = later_updates(trl_env, variant, **grpo, **CLIPS[clip])
    assert clipped > 0  # TRL clipped some tokens at the second iteration, in every batch
    setting = f"{setting}, num_iterations=2, {clip}"
    conform("trl", f"{setting}: advantages", variant, advantage)
    conform("trl", f"{setting}: weights, 1st iteration", variant, first)
    conform("trl", f"{setting}: weights, 2nd iteration (clip >= {clipped:.1%})", variant, second)


KL_LOSSES = [("loss_type=dapo", {}, "trl_default"), ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo")]


@pytest.mark.parametrize("corrected", [False, True], ids=["use_bias_correction_kl=False", "default"])
@pytest.mark.parametrize(("setting", "grpo", "preset"), KL_LOSSES, ids=[s for s, _, _ in KL_LOSSES])
def test_kl_term(
    trl_env: Environment, conform: Any, setting: str, grpo: dict, preset: str, corrected: bool
) -> None:
    """beta > 0: TRL's k3 term against its reference model's log-probs (a policy other than
    theta_old, so that the term acts at ratio 1 too). With use_bias_correction_kl=False it is
    toyrl's k3. TRL 1.16's default, use_bias_correction_kl=True, multiplies the per-token k3 by the
    (differentiable) ratio rho: toyrl's `ratio_weighted=True`, whose gradient is beta rho
    log(pi_ref / pi) per token; the plain k3 is recorded as the control that differs."""
    weighting = {"ratio_weighted": True} if corrected else {}
    variant = spec(preset, num_iterations=2, beta=0.04, **weighting)
    advantage, first, second, clipped = later_updates(
        trl_env, variant, with_ref=True, beta=0.04, use_bias_correction_kl=corrected, **grpo
    )
    assert clipped > 0
    setting = f"{setting}, beta=0.04, num_iterations=2, use_bias_correction_kl={corrected}"
    conform("trl", f"{setting}: advantages", variant, advantage)
    conform("trl", f"{setting}: weights, 1st iteration", variant, first)
    conform("trl", f"{setting}: weights, 2nd iteration (clip >= {clipped:.1%})", variant, second)
    if corrected:
        plain = spec(preset, num_iterations=2, beta=0.04)
        _, plain_first, plain_second, _ = later_updates(
            trl_env, plain, with_ref=True, beta=0.04, use_bias_correction_kl=corrected, **grpo
        )
        conform(
            "trl",
            f"{setting}: weights, 1st iteration (control: plain k3)",
            plain,
            plain_first,
            expected=False,
        )
        conform(
            "trl",
            f"{setting}: weights, 2nd iteration (control: plain k3)",
            plain,
            plain_second,
            expected=False,
        )


# gradient_accumulation_steps=c: TRL splits the generation batch (shuffled) into c micro-batches of
# N / c responses and sums their gradients into one optimiser step: toyrl's micro_batches=c of a
# single mini-batch, in the order TRL's shuffle drew (shuffle=once).
MICRO = [
    # dapo divides every micro-batch by num_items_in_batch, the generation batch's token count
    ("loss_type=dapo", {}, "trl_default", {}, True),
    # grpo and dr_grpo: a mean over the micro-batch's responses, / c; micro-batches have equal sizes
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo", {}, True),
    ("loss_type=dr_grpo", {"loss_type": "dr_grpo"}, "trl_dr_grpo_loss_only", {}, True),
    # bnpo divides each micro-batch by its own token count (and by c): token_mean,per_micro_batch=true
    ("loss_type=bnpo", {"loss_type": "bnpo"}, "trl_default", {"per_micro_batch": True}, True),
    # ... and not the optimiser step's token mean (the normaliser's scope matters)
    ("loss_type=bnpo (control: the step's token mean)", {"loss_type": "bnpo"}, "trl_default", {}, False),
]


@pytest.mark.parametrize("micro_batches", [2, 4])
@pytest.mark.parametrize(("setting", "grpo", "preset", "extra", "agrees"), MICRO, ids=[s for s, *_ in MICRO])
def test_micro_batches(
    trl_env: Environment,
    conform: Any,
    setting: str,
    grpo: dict,
    preset: str,
    extra: dict,
    agrees: bool,
    micro_batches: int,
) -> None:
    variant = spec(preset, micro_batches=micro_batches, shuffle="once", **extra)
    advantage, weight = first_updates(trl_env, variant, gradient_accumulation_steps=micro_batches, **grpo)
    setting = f"{setting}, gradient_accumulation_steps={micro_batches}"
    conform("trl", f"{setting}: advantages", variant, advantage)
    conform("trl", f"{setting}: weights", variant, weight, expected=agrees)


def test_micro_batches_at_a_later_update(trl_env: Environment, conform: Any) -> None:
    variant = spec("trl_default", num_iterations=2, epsilon_high=0.28)
    advantage, first, second, clipped = later_updates(
        trl_env, variant, gradient_accumulation_steps=2, epsilon_high=0.28
    )
    assert clipped > 0
    setting = "loss_type=dapo, gradient_accumulation_steps=2, num_iterations=2, epsilon_high=0.28"
    conform("trl", f"{setting}: advantages", variant, advantage)
    conform("trl", f"{setting}: weights, 1st iteration", variant, first)
    conform("trl", f"{setting}: weights, 2nd iteration (clip >= {clipped:.1%})", variant, second)


@dataclass(frozen=True)
class Schedule:
    """TRL's knobs for several optimiser steps per generation batch, and the toy schedule they
    make: an optimiser step is gradient_accumulation_steps = c chunks of TRL's split of its shuffled
    generation batch (one toy mini-batch of c micro-batches), steps_per_generation / c of them per
    pass (mini_batches), num_iterations passes over the same chunks (TRL shuffles once)."""

    grpo: dict[str, Any]
    mini_batches: int
    micro_batches: int
    num_iterations: int

    @property
    def updates(self) -> int:
        return self.mini_batches * self.num_iterations

    def spec(self, preset: str, **extra: Any) -> str:
        return spec(
            preset,
            num_iterations=self.num_iterations,
            mini_batches=self.mini_batches,
            micro_batches=self.micro_batches,
            shuffle="once",
            **extra,
        )

    def describe(self, update: int) -> str:
        epoch, mini_batch = divmod(update, self.mini_batches)
        return f"update {update} (epoch {epoch}, mini-batch {mini_batch})"


SCHEDULES = {
    "steps_per_generation=4, gradient_accumulation_steps=2, num_iterations=2": Schedule(
        {"steps_per_generation": 4, "gradient_accumulation_steps": 2, "num_iterations": 2}, 2, 2, 2
    ),
    # through generation_batch_size: TRL derives steps_per_generation = 16 / 2 = 8, so 4 optimiser
    # steps of 2 micro-batches of 2 responses
    "generation_batch_size=16, per_device_train_batch_size=2, gradient_accumulation_steps=2": Schedule(
        {"generation_batch_size": 16, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2},
        4,
        2,
        1,
    ),
    # one optimiser step per pass (steps_per_generation left at its default, = c)
    "gradient_accumulation_steps=4, num_iterations=2": Schedule(
        {"gradient_accumulation_steps": 4, "num_iterations": 2}, 1, 4, 2
    ),
}


# The seeds of the moved policies: MOVED + 10 x the batch's index + the update's. Chosen so that
# TRL's clip acts at every later update of every batch (asserted by the tests that use them): with 4
# mini-batches, a mini-batch of the hand-made batch can hold a single response with A != 0.
MOVED = 4000


@dataclass
class Trial:
    """TRL on one batch under a schedule: update u at thetas[u] (None: theta_old, ratio 1)."""

    batch: toy.ToyBatch
    thetas: list[np.ndarray | None]
    run: Run


def trials(
    env: Environment,
    schedule: Schedule,
    variant: Any,
    scale: float = 1.0,
    metric: str | None = "clip_ratio/region_mean",
    move: Any = toy.moved,
    **grpo: Any,
) -> list[Trial]:
    """TRL's optimiser steps on every batch: the first at ratio 1, later ones each at its own moved
    policy (`move`: toy.moved, or toy.stop_pushed). Checks TRL's split: step u holds mini-batch u % k
    of the order its one shuffle drew (the same order at every epoch), cut into c consecutive
    micro-batches; the first step is at ratio 1 (TRL's clip `metric` 0 there; None: the loss type
    logs none)."""
    out = []
    k, c = schedule.mini_batches, schedule.micro_batches
    for seed, make in enumerate(BATCHES.values()):
        batch = make()
        thetas = [None] + [
            move(batch, MOVED + 10 * seed + u, scale=scale) for u in range(1, schedule.updates)
        ]
        run = run_trl(env, batch, batch.rewards(variant), thetas, seed=seed, **schedule.grpo, **grpo)
        order, size = run.order, batch.responses // k
        assert sorted(order) == list(range(batch.responses)) and order != sorted(order)
        for u in range(schedule.updates):
            start = u % k * size
            assert run.micro[u] == [
                order[start + j * size // c : start + (j + 1) * size // c] for j in range(c)
            ]
        assert metric is None or run.clipped(0, c, metric) == 0
        out.append(Trial(batch, thetas, run))
    return out


def differences(found: list[Trial], expected: Any, rows: bool = True) -> list[float]:
    """Per update, the max relative difference over the trials of TRL's weights from
    expected(trial, update); each expected weight is nonzero and TRL's are zero off the update's
    rows (with `rows`, the expected ones too)."""
    worst = []
    for u in range(len(found[0].thetas)):
        worst.append(0.0)
        for trial in found:
            want, got = expected(trial, u), trial.run.weights[u]
            outside = np.setdiff1d(np.arange(trial.batch.responses), trial.run.seen[u])
            assert np.abs(want).max() > 0 and not got[outside].any()
            assert not (rows and want[outside].any())
            worst[u] = max(worst[u], toy.relative_difference(got, want))
    return worst


def toyrl(variant: Any, order: bool = True) -> Any:
    """toy.token_weights of the variant for a trial's update, in TRL's order (or the batch's own)."""
    return lambda trial, u: toy.token_weights(
        variant, trial.batch, trial.thetas[u], update=u, order=trial.run.order if order else None
    )


def least_clipped(
    found: list[Trial], schedule: Schedule, metric: str = "clip_ratio/region_mean"
) -> list[float]:
    """Per later update, the smallest fraction of its tokens TRL clipped over the batches."""
    micro = schedule.micro_batches
    return [min(t.run.clipped(u, micro, metric) for t in found) for u in range(1, schedule.updates)]


def record(
    conform: Any,
    setting: str,
    variant_text: str,
    found: list[Trial],
    schedule: Schedule,
    worst: list[float],
    expected: bool = True,
    metric: str | None = "clip_ratio/region_mean",
) -> None:
    """One row per update: its max relative difference over the batches and, past the first, the
    smallest fraction of its tokens TRL clipped (clip_ratio/region_mean, or `metric`; None: the loss
    type clips nothing, SAPO's gate)."""
    if metric is None:
        clipped = [0.0] * len(worst)
    else:
        clipped = [0.0, *least_clipped(found, schedule, metric)]
    for u, difference in enumerate(worst):
        where = (
            ("moved theta" + ("" if metric is None else f", clip >= {clipped[u]:.1%}")) if u else "ratio 1"
        )
        conform(
            "trl", f"{setting}: {schedule.describe(u)}, {where}", variant_text, difference, expected=expected
        )


# loss types whose normaliser toyrl has at any mini-batch size, with the toy spec's extra keys
SCHEDULED = [
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo", {}),
    ("loss_type=dr_grpo", {"loss_type": "dr_grpo"}, "trl_dr_grpo_loss_only", {}),
    ("loss_type=bnpo", {"loss_type": "bnpo"}, "trl_default", {"per_micro_batch": True}),
]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize(("setting", "grpo", "preset", "extra"), SCHEDULED, ids=[s for s, *_ in SCHEDULED])
def test_schedule(
    trl_env: Environment, conform: Any, setting: str, grpo: dict, preset: str, extra: dict, schedule: str
) -> None:
    """Several optimiser steps per generation batch, several micro-batches each, in TRL's shuffled
    order: each step's weights against toyrl's update u of the schedule."""
    plan = SCHEDULES[schedule]
    variant_text = plan.spec(preset, **extra)
    variant = parse_variant(variant_text)
    found = trials(trl_env, plan, variant, **grpo)
    assert all(least_clipped(found, plan))  # TRL's clip acts at every later update, in every batch
    advantage = max(
        toy.relative_difference(t.run.advantages, toy.advantages(variant, t.batch)) for t in found
    )
    setting = f"{setting}, {schedule}"
    conform("trl", f"{setting}: advantages", variant_text, advantage)
    record(conform, setting, variant_text, found, plan, differences(found, toyrl(variant)))


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_schedule_dapo(trl_env: Environment, conform: Any, schedule: str) -> None:
    """loss_type=dapo divides each micro-batch's token-loss sum by num_items_in_batch (the
    generation batch's token count) x gradient_accumulation_steps / steps_per_generation, i.e. by
    the generation batch's tokens / k: with one optimiser step per pass (k = 1) that is toyrl's
    token_mean; with k > 1 it is the *mean* mini-batch's token count, toyrl's
    `token_mean,batch_tokens=True`, not the step's own (token_mean on a mini-batch, recorded as the
    control that differs)."""
    plan = SCHEDULES[schedule]
    k = plan.mini_batches
    variant_text = plan.spec("trl_default", batch_tokens=True) if k > 1 else plan.spec("trl_default")
    variant = parse_variant(variant_text)
    found = trials(trl_env, plan, variant)
    assert all(least_clipped(found, plan))
    setting = f"loss_type=dapo, {schedule}"
    advantage = max(
        toy.relative_difference(t.run.advantages, toy.advantages(variant, t.batch)) for t in found
    )
    conform("trl", f"{setting}: advantages", variant_text, advantage)
    record(conform, setting, variant_text, found, plan, differences(found, toyrl(variant)))
    if k == 1:
        return
    own_text = plan.spec("trl_default")  # control: each step's own tokens
    own = parse_variant(own_text)
    record(
        conform,
        f"{setting} (control: the step's tokens)",
        own_text,
        found,
        plan,
        differences(found, toyrl(own)),
        expected=False,
    )


FIRST = next(iter(SCHEDULES))


def test_schedule_controls(trl_env: Environment, conform: Any) -> None:
    """The comparisons tell the scope and the order apart: bnpo against the mini-batch's token mean
    (no per_micro_batch), and grpo against its spec in the batch's own order (not TRL's shuffle)."""
    plan = SCHEDULES[FIRST]
    for setting, grpo, variant_text, order in (
        (
            "loss_type=bnpo (control: the step's token mean)",
            {"loss_type": "bnpo"},
            plan.spec("trl_default"),
            True,
        ),
        ("loss_type=grpo (control: the batch's order)", {"loss_type": "grpo"}, plan.spec("trl_grpo"), False),
    ):
        variant = parse_variant(variant_text)
        found = trials(trl_env, plan, variant, **grpo)
        worst = differences(found, toyrl(variant, order=order), rows=order)
        record(conform, f"{setting}, {FIRST}", variant_text, found, plan, worst, expected=False)


# TRL's delta (INTELLECT-2's two-sided clip: coef_1 clamped at delta before the min) with delta >=
# 1 + epsilon_high is dual-clip PPO with c = delta: a token with A < 0 and ratio > delta weighs 0.
DELTA = 1.5
DUAL = [
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo", FIRST),
    ("loss_type=dapo", {}, "trl_default", "gradient_accumulation_steps=4, num_iterations=2"),
]


@pytest.mark.parametrize(("setting", "grpo", "preset", "schedule"), DUAL, ids=[s for s, *_ in DUAL])
def test_dual_clip(
    trl_env: Environment, conform: Any, setting: str, grpo: dict, preset: str, schedule: str
) -> None:
    """TRL logs no metric for delta (its clip_ratio metrics count the epsilon region only), so its
    acting is asserted from TRL's own weights: against a run without delta (same batches, orders
    and policies) they differ exactly on the tokens with A < 0 and ratio > delta of the step's
    rows, there are such tokens at every later update, and TRL weighs them 0."""
    plan = SCHEDULES[schedule]
    variant_text = plan.spec(preset, dual_clip=DELTA)
    variant = parse_variant(variant_text)
    found = trials(trl_env, plan, variant, delta=DELTA, **grpo)
    plain = trials(trl_env, plan, variant, **grpo)
    assert all(least_clipped(found, plan))  # PPO's clip acts too
    dual_tokens = []
    for u in range(1, plan.updates):
        count = 0
        for trial, control in zip(found, plain, strict=True):
            assert trial.run.order == control.run.order
            batch = trial.batch
            ratio = np.exp(batch.logp(trial.thetas[u]) - batch.logp())
            rows = np.isin(np.arange(batch.responses), trial.run.seen[u])
            dual = (rows & (trial.run.advantages < 0))[:, None] & batch.mask & (ratio > DELTA)
            got, without = trial.run.weights[u], control.run.weights[u]
            assert not got[dual].any() and without[dual].all()
            np.testing.assert_allclose(got[~dual], without[~dual], rtol=1e-14, atol=0)
            count += int(dual.sum())
        assert count > 0
        dual_tokens.append(count)
    setting = f"{setting}, delta={DELTA}, {schedule} (dual clip on {sum(dual_tokens)} tokens)"
    record(conform, setting, variant_text, found, plan, differences(found, toyrl(variant)))
    control = parse_variant(plan.spec(preset))
    worst = max(differences(found, toyrl(control))[1:])
    conform(
        "trl", f"{setting}: later updates (control: no dual_clip)", plan.spec(preset), worst, expected=False
    )


# Controls: each setting against a preset it is not (the comparison tells them apart).
CONTROLS = [
    ("defaults (loss_type=dapo)", {}, "trl_grpo"),
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_default"),
    (
        "loss_type=dr_grpo, scale_rewards=none",
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "trl_scale_none_only",
    ),
    ("scale_rewards=batch", {"scale_rewards": "batch"}, "trl_default"),
    ("mask_truncated_completions", {"mask_truncated_completions": True}, "trl_default"),
]


@pytest.mark.parametrize(("setting", "grpo", "preset"), CONTROLS, ids=[s for s, _, _ in CONTROLS])
def test_controls(trl_env: Environment, conform: Any, setting: str, grpo: dict, preset: str) -> None:
    _, weight = first_updates(trl_env, preset, **grpo)
    conform("trl", f"{setting}: weights (control)", preset, weight, expected=False)


# TRL 0.22.0 and 0.22.1 (fixed in 0.22.2): scale_rewards swapped in _generate_and_score_completions:
# 'batch' and 'none' divide by the group's std, 'group' computes the batch's std but divides by
# nothing (it only logs it); loss_type left at 'dapo'. Runs only in the environment that
# `bash scripts/conformance/trl.sh .trainers/trl-0.22.1 0.22.1` builds.
SWAPPED_RELEASES = ("0.22.0", "0.22.1")
SWAPPED = [
    # setting, GRPOConfig arguments, the preset that names the setting, the preset that matches 0.22
    ("scale_rewards=group (default)", {}, "trl_default", "trl_scale_none_only"),
    ("scale_rewards=batch", {"scale_rewards": "batch"}, "trl_batch_scale", "trl_default"),
    ("scale_rewards=none", {"scale_rewards": "none"}, "trl_scale_none_only", "trl_default"),
]


@pytest.mark.parametrize(("setting", "grpo", "named", "matching"), SWAPPED, ids=[s for s, *_ in SWAPPED])
def test_trl_0_22_scale_rewards(
    any_trl: Environment, conform: Any, setting: str, grpo: dict, named: str, matching: str
) -> None:
    if version_of("trl") not in SWAPPED_RELEASES:
        pytest.skip(f"checks trl {' and '.join(SWAPPED_RELEASES)} (installed: trl {version_of('trl')})")
    for preset, agrees in ((named, False), (matching, True)):
        advantage, weight = first_updates(any_trl, preset, **grpo)
        conform("trl", f"{setting}: advantages", preset, advantage, expected=agrees)
        conform("trl", f"{setting}: weights", preset, weight, expected=agrees)


def test_sequence_level_is_gspo(trl_env: Environment, conform: Any) -> None:
    """importance_sampling_level="sequence" (GSPO): one ratio a completion, exp of the mean of its
    tokens' log-ratios, clipped as PPO's ratio and put on each of its tokens: toyrl's
    objective=gspo with TRL's clip range, at ratio 1 and at the second iteration (ratios moved,
    the sequence clip acting); the token-level objective is the control that differs."""
    grpo = {"importance_sampling_level": "sequence", "epsilon": 0.003, "epsilon_high": 0.004}
    variant = spec("trl_default", num_iterations=2, objective="gspo", epsilon=0.003, epsilon_high=0.004)
    advantage, first, second, clipped = later_updates(trl_env, variant, **grpo)
    assert clipped > 0
    setting = "importance_sampling_level=sequence, epsilon 0.003 / 0.004, num_iterations=2"
    conform("trl", f"{setting}: advantages", variant, advantage)
    conform("trl", f"{setting}: weights, 1st iteration", variant, first)
    conform("trl", f"{setting}: weights, 2nd iteration (clip >= {clipped:.1%})", variant, second)
    token_level = spec("trl_default", num_iterations=2, epsilon=0.003, epsilon_high=0.004)
    _, _, control, _ = later_updates(trl_env, token_level, **grpo)
    conform(
        "trl",
        f"{setting}: weights, 2nd iteration (control: token ratios)",
        token_level,
        control,
        expected=False,
    )


# --- the newer families: loss_type cispo and sapo ------------------------------------------------
#
# cispo: per token -clamp(coef_1, max=epsilon_high).detach() A log pi, aggregated as dapo (the
# token sum over num_items_in_batch): toyrl's objective=cispo with no lower bound (epsilon None)
# and epsilon_high = TRL's epsilon_high - 1 (TRL's is the cap itself). sapo: per token
# -sigmoid(tau (coef_1 - 1)) 4 / tau A, tau = sapo_temperature_pos where A > 0, else _neg,
# aggregated as grpo (per sequence): toyrl's objective=sapo, tau_pos / tau_neg. TRL also runs cispo
# with importance_sampling_level="sequence" (a warning only: one detached sequence ratio per
# completion as every token's weight); toyrl's cispo is token-level (its sequence-level objective,
# gspo, is PPO's clip), so that setting is not compared.

CISPO_CLIPPED = "cispo_clip_ratio"  # TRL's cispo metric: tokens with A > 0 and coef_1 > epsilon_high


def grpo_defaults(env: Environment) -> Any:
    """GRPOConfig() as the runs build it, its other fields left at their defaults."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecations
        return env.trl.GRPOConfig(output_dir=os.path.join(env.model_dir, "out"), use_cpu=True, report_to=[])


def respec(preset: str, **keys: Any) -> str:
    """The canonical spec text of a preset with some of its keys replaced or added."""
    merged = parse_variant(preset).spec() | keys
    return parse_variant(",".join(f"{key}={value}" for key, value in merged.items())).spec_text()


@dataclass
class Iterated:
    """TRL with num_iterations=2 on a batch: its first pass at ratio 1, its second at `theta`."""

    batch: toy.ToyBatch
    theta: np.ndarray
    run: Run


def iterated(env: Environment, variant: Any, **grpo: Any) -> list[Iterated]:
    """TRL with num_iterations=2 on every batch, the second pass at `toy.stop_pushed`'s policy
    (right responses' stop tokens at ratio 9, their other ramble tokens at 0.27, the rest moved at
    scale 1): CISPO's cap 5 acts on tokens with A > 0, a lower bound 0.8 would act below."""
    out = []
    for seed, make in enumerate(BATCHES.values()):
        batch = make()
        theta = toy.stop_pushed(batch, seed)
        run = run_trl(env, batch, batch.rewards(variant), [None, theta], seed=seed, num_iterations=2, **grpo)
        assert run.seen == [list(range(batch.responses))] * 2  # each iteration saw every response once
        out.append(Iterated(batch, theta, run))
    return out


def iterated_differences(found: list[Iterated], variant: Any) -> tuple[float, float, float]:
    """Max relative differences over the batches of TRL's advantages and its 1st and 2nd
    iteration's weights from the variant's (its micro-batches in TRL's shuffled order)."""
    worst = np.zeros(3)
    for it in found:
        got = (it.run.advantages, it.run.weights[0], it.run.weights[1])
        want = (
            toy.advantages(variant, it.batch),
            toy.token_weights(variant, it.batch, order=it.run.order),
            toy.token_weights(variant, it.batch, it.theta, order=it.run.order),
        )
        assert all(np.abs(w).max() > 0 for w in want)
        worst = np.maximum(worst, [toy.relative_difference(g, w) for g, w in zip(got, want, strict=True)])
    return worst[0], worst[1], worst[2]


# setting, GRPOConfig arguments, toyrl's spec, TRL's clip metric (None: sapo logs none), and
# controls: (note, spec, agrees at the 1st iteration, agrees at the 2nd)
FAMILY_LATER = [
    (
        "loss_type=cispo, epsilon_high=5.0",
        {"loss_type": "cispo", "epsilon_high": 5.0},
        spec("trl_default", objective="cispo", epsilon_high=4.0, num_iterations=2),
        CISPO_CLIPPED,
        [
            (
                "TRL's 5.0 as toyrl's epsilon_high",
                spec("trl_default", objective="cispo", epsilon_high=5.0, num_iterations=2),
                True,
                False,
            ),
            ("PPO's clip", spec("trl_default", num_iterations=2), True, False),
        ],
    ),
    (
        "loss_type=cispo, epsilon_high=1.28",
        {"loss_type": "cispo", "epsilon_high": 1.28},
        spec("trl_default", objective="cispo", epsilon_high=0.28, num_iterations=2),
        CISPO_CLIPPED,
        [
            (
                "a lower bound 1 - 0.2",
                spec("trl_default", objective="cispo", epsilon=0.2, epsilon_high=0.28, num_iterations=2),
                True,
                False,
            ),
        ],
    ),
    # two micro-batches: every one divided by num_items_in_batch (the generation batch's tokens)
    (
        "loss_type=cispo, epsilon_high=5.0, gradient_accumulation_steps=2",
        {"loss_type": "cispo", "epsilon_high": 5.0, "gradient_accumulation_steps": 2},
        spec(
            "trl_default",
            objective="cispo",
            epsilon_high=4.0,
            num_iterations=2,
            micro_batches=2,
            shuffle="once",
        ),
        CISPO_CLIPPED,
        [
            (
                "each micro-batch's token mean",
                spec(
                    "trl_default",
                    objective="cispo",
                    epsilon_high=4.0,
                    num_iterations=2,
                    micro_batches=2,
                    shuffle="once",
                    per_micro_batch=True,
                ),
                False,
                False,
            ),
        ],
    ),
    (
        "loss_type=sapo (sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, the defaults)",
        {"loss_type": "sapo"},
        spec("trl_grpo", objective="sapo", num_iterations=2),
        None,
        [
            (
                "temperatures swapped",
                spec("trl_grpo", objective="sapo", tau_pos=1.05, tau_neg=1.0, num_iterations=2),
                True,
                False,
            ),
            ("the token mean", spec("trl_default", objective="sapo", num_iterations=2), False, False),
        ],
    ),
    (
        "loss_type=sapo, sapo_temperature_pos=2.0, sapo_temperature_neg=5.0",
        {"loss_type": "sapo", "sapo_temperature_pos": 2.0, "sapo_temperature_neg": 5.0},
        spec("trl_grpo", objective="sapo", tau_pos=2.0, tau_neg=5.0, num_iterations=2),
        None,
        [
            (
                "temperatures swapped",
                spec("trl_grpo", objective="sapo", tau_pos=5.0, tau_neg=2.0, num_iterations=2),
                True,
                False,
            ),
            ("PPO's clip", spec("trl_grpo", num_iterations=2), True, False),
        ],
    ),
    (
        "loss_type=sapo, gradient_accumulation_steps=2",
        {"loss_type": "sapo", "gradient_accumulation_steps": 2},
        spec("trl_grpo", objective="sapo", num_iterations=2, micro_batches=2, shuffle="once"),
        None,
        [],
    ),
    # luspo: PPO's clip (GSPO's with the sequence level), each completion's token sum averaged
    # over the micro-batch, / c: seq_mean_token_sum; GSPO's per-completion mean is the control
    (
        "loss_type=luspo, importance_sampling_level=sequence, epsilon 0.003 / 0.004",
        {
            "loss_type": "luspo",
            "importance_sampling_level": "sequence",
            "epsilon": 0.003,
            "epsilon_high": 0.004,
        },
        respec(
            "trl_default",
            aggregation="seq_mean_token_sum",
            objective="gspo",
            epsilon=0.003,
            epsilon_high=0.004,
            num_iterations=2,
        ),
        "clip_ratio/region_mean",
        [
            (
                "GSPO's per-completion mean",
                respec(
                    "trl_default",
                    aggregation="seq_mean_token_mean",
                    objective="gspo",
                    epsilon=0.003,
                    epsilon_high=0.004,
                    num_iterations=2,
                ),
                False,
                False,
            ),
        ],
    ),
    (
        "loss_type=luspo (importance_sampling_level=token)",
        {"loss_type": "luspo"},
        respec("trl_default", aggregation="seq_mean_token_sum", num_iterations=2),
        "clip_ratio/region_mean",
        [("the token mean (dapo)", spec("trl_default", num_iterations=2), False, False)],
    ),
    # vespo: per token -phi(w) A log pi, phi(w) = exp(lambda + k log w - lambda w) of the sequence
    # ratio w (detached), normalised as dapo: toyrl's vespo; the parameters of the two signs swapped
    # and PPO's clip are the controls
    (
        "loss_type=vespo (k_pos 2, lambda_pos 3, k_neg 3, lambda_neg 2: the defaults)",
        {"loss_type": "vespo"},
        spec("trl_default", objective="vespo", num_iterations=2),
        None,
        [
            (
                "the signs' parameters swapped",
                spec(
                    "trl_default",
                    objective="vespo",
                    k_pos=3.0,
                    lambda_pos=2.0,
                    k_neg=2.0,
                    lambda_neg=3.0,
                    num_iterations=2,
                ),
                True,
                False,
            ),
            ("PPO's clip", spec("trl_default", num_iterations=2), True, False),
        ],
    ),
    (
        "loss_type=vespo, vespo_k_pos=1.0, vespo_lambda_neg=0.5",
        {"loss_type": "vespo", "vespo_k_pos": 1.0, "vespo_lambda_neg": 0.5},
        spec("trl_default", objective="vespo", k_pos=1.0, lambda_neg=0.5, num_iterations=2),
        None,
        [("the defaults", spec("trl_default", objective="vespo", num_iterations=2), True, False)],
    ),
]


@pytest.mark.parametrize(
    ("setting", "grpo", "variant_text", "metric", "controls"), FAMILY_LATER, ids=[s for s, *_ in FAMILY_LATER]
)
def test_family_later_update(
    trl_env: Environment,
    conform: Any,
    setting: str,
    grpo: dict,
    variant_text: str,
    metric: str | None,
    controls: list[tuple[str, str, bool, bool]],
) -> None:
    """loss_type cispo and sapo with num_iterations=2: the first pass at ratio 1 (every objective
    the on-policy gradient), the second at a policy where CISPO's cap acts (TRL's cispo_clip_ratio
    > 0 in every batch) and SAPO's gate moves every weight off A rho; each against toyrl's objective,
    and controls that tell the parameters apart (the taus swapped, the cap misread, PPO's clip)."""
    variant = parse_variant(variant_text)
    found = iterated(trl_env, variant, **grpo)
    micro = grpo.get("gradient_accumulation_steps", 1)
    if metric is None:  # sapo logs no clip metric: it clips nothing
        assert not any(key.startswith("clip_ratio") for key in found[0].run.metrics)
        where = "2nd iteration (stop-pushed policy)"
    else:
        assert all(it.run.clipped(0, micro, metric) == 0 for it in found)
        clipped = min(it.run.clipped(1, micro, metric) for it in found)
        assert clipped > 0
        where = f"2nd iteration (stop-pushed policy, {metric} >= {clipped:.1%})"
    advantage, first, second = iterated_differences(found, variant)
    conform("trl", f"{setting}: advantages", variant_text, advantage)
    conform("trl", f"{setting}: weights, 1st iteration", variant_text, first)
    conform("trl", f"{setting}: weights, {where}", variant_text, second)
    for note, control_text, first_agrees, second_agrees in controls:
        _, control_first, control_second = iterated_differences(found, parse_variant(control_text))
        label = f"{setting}: weights, %s (control: {note})"
        conform("trl", label % "1st iteration", control_text, control_first, first_agrees)
        conform("trl", label % where, control_text, control_second, second_agrees)


def test_cispo_default_cap(trl_env: Environment, conform: Any) -> None:
    """GRPOConfig(loss_type='cispo') with epsilon_high unset: TRL's epsilon_high falls back to
    epsilon = 0.2, and cispo's clamp(coef_1, max=epsilon_high) takes it as the cap itself, so every
    weight is capped at 0.2 on policy too: TRL's first update is 0.2 times toyrl's on-policy cispo
    (to 1e-14). toyrl's cap is 1 + epsilon_high > 1, so no toyrl spec is this setting: recorded as a
    known difference from toyrl's cispo (the weight 1 at ratio 1)."""
    assert grpo_defaults(trl_env).epsilon_high is None
    variant_text = spec("trl_default", objective="cispo")
    variant = parse_variant(variant_text)
    worst = 0.0
    for seed, make in enumerate(BATCHES.values()):
        batch = make()
        run = run_trl(trl_env, batch, batch.rewards(variant), [None], seed=seed, loss_type="cispo")
        want = toy.token_weights(variant, batch, order=run.order)
        assert np.abs(want).max() > 0
        assert toy.relative_difference(run.weights[0], 0.2 * want) <= 1e-14
        worst = max(worst, toy.relative_difference(run.weights[0], want))
    setting = "loss_type=cispo, epsilon_high unset (the cap = epsilon = 0.2): weights, ratio 1"
    conform("trl", setting, variant_text, worst, expected=False)


# loss types of the newer families over several optimiser steps per generation batch: setting,
# GRPOConfig arguments, preset, spec keys, TRL's clip metric
FAMILY_SCHEDULED = [
    ("loss_type=sapo", {"loss_type": "sapo"}, "trl_grpo", {"objective": "sapo"}, None),
    (
        "loss_type=cispo, epsilon_high=5.0",
        {"loss_type": "cispo", "epsilon_high": 5.0},
        "trl_default",
        {"objective": "cispo", "epsilon_high": 4.0},
        CISPO_CLIPPED,
    ),
]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize(
    ("setting", "grpo", "preset", "extra", "metric"), FAMILY_SCHEDULED, ids=[s for s, *_ in FAMILY_SCHEDULED]
)
def test_family_schedule(
    trl_env: Environment,
    conform: Any,
    setting: str,
    grpo: dict,
    preset: str,
    extra: dict,
    metric: str | None,
    schedule: str,
) -> None:
    """Several optimiser steps per generation batch in TRL's shuffled order, the later ones at
    stop-pushed policies. sapo is aggregated as grpo (per sequence, / c): toyrl's
    seq_mean_token_mean at any mini-batch size (as test_schedule's grpo). cispo is aggregated as
    dapo (num_items_in_batch x c / steps_per_generation): toyrl's token_mean with one step per pass,
    token_mean,batch_tokens=True with k > 1 (as test_schedule_dapo), the step's own tokens being the
    control that differs; the taus swapped are sapo's control at the later updates."""
    plan = SCHEDULES[schedule]
    k = plan.mini_batches
    batch_tokens = {"batch_tokens": True} if grpo["loss_type"] == "cispo" and k > 1 else {}
    variant_text = plan.spec(preset, **extra, **batch_tokens)
    variant = parse_variant(variant_text)
    found = trials(trl_env, plan, variant, metric=metric, move=toy.stop_pushed, **grpo)
    if metric is not None:  # the cap acts at some later update of every batch
        micro = plan.micro_batches
        assert all(max(t.run.clipped(u, micro, metric) for u in range(1, plan.updates)) > 0 for t in found)
    advantage = max(
        toy.relative_difference(t.run.advantages, toy.advantages(variant, t.batch)) for t in found
    )
    setting = f"{setting}, {schedule}"
    conform("trl", f"{setting}: advantages", variant_text, advantage)
    worst = differences(found, toyrl(variant))
    record(conform, setting, variant_text, found, plan, worst, metric=metric)
    if batch_tokens:  # control: each step's own tokens
        own_text = plan.spec(preset, **extra)
        own = differences(found, toyrl(parse_variant(own_text)))
        record(conform, f"{setting} (control: the step's tokens)", own_text, found, plan, own, False, None)
    if grpo["loss_type"] == "sapo":  # control: the taus swapped, at the later updates
        swapped_text = plan.spec(preset, **extra, tau_pos=1.05, tau_neg=1.0)
        swapped = max(differences(found, toyrl(parse_variant(swapped_text)))[1:])
        label = f"{setting}: later updates (control: temperatures swapped)"
        conform("trl", label, swapped_text, swapped, expected=False)


# The presets cispo and sapo name TRL's loss types at TRL's recommended epsilon_high 5.0 (toyrl's
# 4) and default temperatures, in four mini-batches: TRL's steps_per_generation=4.
PRESET_SCHEDULE = Schedule({"steps_per_generation": 4}, 4, 1, 1)
FAMILY_PRESETS = [
    ("cispo", {"loss_type": "cispo", "epsilon_high": 5.0}, {"batch_tokens": True}, CISPO_CLIPPED),
    ("sapo", {"loss_type": "sapo"}, {}, None),
]


@pytest.mark.parametrize(
    ("preset", "grpo", "extra", "metric"), FAMILY_PRESETS, ids=[p for p, *_ in FAMILY_PRESETS]
)
def test_family_presets(
    trl_env: Environment, conform: Any, preset: str, grpo: dict, extra: dict, metric: str | None
) -> None:
    """The presets cispo and sapo against the TRL settings they name (steps_per_generation=4: four
    optimiser steps of one micro-batch, the later ones at stop-pushed policies). TRL's schedule
    shuffles the generation batch once (shuffle=once) and cispo's normaliser is dapo's
    (batch_tokens=True, test_family_schedule); with those keys the presets differ from TRL by their
    std_eps only: theirs is verl's 1e-6, TRL's scale_rewards='group' divides by std + 1e-4. The
    preset with TRL's schedule keys is recorded as a known difference, and with std_eps=1e-4 too as
    agreeing; the preset's fields that are TRL's defaults (the temperatures) are checked."""
    plan = PRESET_SCHEDULE
    named = parse_variant(preset)
    assert named.stage("schedule").mini_batches == plan.mini_batches
    config = grpo_defaults(trl_env)
    if preset == "sapo":
        objective = named.stage("objective")
        assert (objective.tau_pos, objective.tau_neg) == (
            config.sapo_temperature_pos,
            config.sapo_temperature_neg,
        )
    else:
        assert named.stage("objective").epsilon is None and named.stage("objective").epsilon_high == 5.0 - 1
    matching_text = respec(preset, std_eps=0.0001, shuffle="once", **extra)
    found = trials(trl_env, plan, parse_variant(matching_text), metric=metric, move=toy.stop_pushed, **grpo)
    setting = f"preset {preset}: loss_type={preset}, steps_per_generation=4"
    record(
        conform,
        setting,
        matching_text,
        found,
        plan,
        differences(found, toyrl(parse_variant(matching_text))),
        metric=metric,
    )
    schedule_text = respec(preset, shuffle="once", **extra)  # std_eps 1e-6, verl's
    worst = differences(found, toyrl(parse_variant(schedule_text)))
    record(conform, f"{setting} (preset's std_eps 1e-6)", schedule_text, found, plan, worst, False, None)


# The presets luspo and vespo are TRL's settings (steps_per_generation=4: four optimiser steps of
# one micro-batch, shuffled once; vespo normalised as dapo, batch_tokens).
NEW_PRESETS = [
    (
        "luspo",
        {
            "loss_type": "luspo",
            "importance_sampling_level": "sequence",
            "epsilon": 3e-4,
            "epsilon_high": 4e-4,
        },
        "clip_ratio/region_mean",
        0.01,  # moved a little: GSPO's clip at 3e-4 acts on some sequences, not on all
    ),
    ("vespo", {"loss_type": "vespo"}, None, None),
]


@pytest.mark.parametrize(("preset", "grpo", "metric", "scale"), NEW_PRESETS, ids=[p for p, *_ in NEW_PRESETS])
def test_luspo_vespo_presets(
    trl_env: Environment, conform: Any, preset: str, grpo: dict, metric: str | None, scale: float | None
) -> None:
    """The presets luspo and vespo against the TRL settings they name, every optimiser step, the
    later ones at stop-pushed policies (vespo) or policies moved a little (luspo: GSPO's clip acts on
    some sequences, TRL's clip_ratio > 0); vespo's Gamma parameters are GRPOConfig's defaults."""
    plan = PRESET_SCHEDULE
    named = parse_variant(preset)
    assert named.stage("schedule").mini_batches == plan.mini_batches
    if preset == "vespo":
        config, objective = grpo_defaults(trl_env), named.stage("objective")
        for key in ("k_pos", "lambda_pos", "k_neg", "lambda_neg"):
            assert getattr(objective, key) == getattr(config, f"vespo_{key}")
    if scale is None:
        found = trials(trl_env, plan, named, metric=metric, move=toy.stop_pushed, **grpo)
    else:
        found = trials(trl_env, plan, named, scale=scale, metric=metric, **grpo)
    if metric is not None:
        assert max(least_clipped(found, plan, metric)) > 0
    setting = (
        f"preset {preset}: " + ", ".join(f"{k}={v}" for k, v in grpo.items()) + ", steps_per_generation=4"
    )
    # a mini-batch whose every sequence GSPO's clip holds (or whose advantages are 0) has no
    # gradient in either: compared as it is, not required to be nonzero as `differences` does
    weights = toyrl(named)
    worst = [
        max(toy.relative_difference(t.run.weights[u], weights(t, u)) for t in found)
        for u in range(plan.updates)
    ]
    assert all(np.abs(weights(t, 0)).max() > 0 for t in found)
    record(conform, setting, preset, found, plan, worst, metric=metric)


# Every name `trl grpo` takes, each release's defaults from its own grpo_config.py, and the soft
# overlong punishment of trl/rewards against the toy's overlong reward.

RELEASE_WHEELS = os.path.join(sys.prefix, "trl-releases")  # scripts/conformance/trl.sh downloads them
# settings toyrl reads that are not GRPOConfig's own fields: transformers' TrainingArguments (which
# GRPOConfig 0.14.0 overrides) and `trl grpo`'s script arguments (trl/scripts/grpo.py)
NOT_GRPO_CONFIG = {
    "gradient_accumulation_steps",
    "max_grad_norm",
    "per_device_train_batch_size",
    "reward_funcs",
    "reward_model_name_or_path",
}


def test_every_trl_key_is_known(trl_env: Environment) -> None:
    """Every field of the installed GRPOConfig (with TrainingArguments'), of `trl grpo`'s
    GRPOScriptArguments and of ModelConfig, given at its default, is in every release modelled a
    setting, a note or a name toyrl does not read: never taken for a misspelling."""
    import dataclasses

    from trl.scripts.grpo import GRPOScriptArguments

    from toyrl.trainers import resolve
    from toyrl.trainers.trl import TRAINER

    fields = {
        f.name: f.default
        for cls in (trl_env.trl.GRPOConfig, GRPOScriptArguments, trl_env.trl.ModelConfig)
        for f in dataclasses.fields(cls)
    }
    assert {"loss_type", "learning_rate", "reward_funcs", "model_name_or_path"} <= set(fields)
    for version, release in TRAINER.releases.items():
        given = {
            name: release.settings[name].default if name in release.settings else default
            for name, default in fields.items()
        }
        resolved = resolve("trl", version, given, from_file=frozenset(given))
        assert resolved.misspelt == {}, version


def _grpo_config_defaults(source: str) -> dict[str, Any]:
    """GRPOConfig's own fields and their literal defaults (a non-literal default: `...`), read with
    `ast` from a grpo_config.py, never imported."""
    import ast

    (config,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig"]
    defaults: dict[str, Any] = {}
    for item in config.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        value = item.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
            value = next((k.value for k in value.keywords if k.arg == "default"), None)
        try:
            defaults[item.target.id] = ast.literal_eval(value) if value is not None else ...
        except ValueError:
            defaults[item.target.id] = ...
    return defaults


def _loss_types(source: str) -> set[str]:
    """The loss types a grpo_trainer.py compares `self.loss_type` with."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and getattr(node.left, "attr", "") == "loss_type":
            for right in node.comparators:
                items = right.elts if isinstance(right, ast.List | ast.Tuple) else [right]
                found |= {item.value for item in items if isinstance(item, ast.Constant)}
    return found


def _release_files(version: str) -> dict[str, str]:
    """A release's grpo_config.py, grpo_trainer.py and scripts/grpo.py: the installed release's
    files, or those in its wheel (scripts/conformance/trl.sh puts them in RELEASE_WHEELS)."""
    import importlib.util
    import zipfile

    paths = ("trl/trainer/grpo_config.py", "trl/trainer/grpo_trainer.py", "trl/scripts/grpo.py")
    if version == version_of("trl"):
        spec = importlib.util.find_spec("trl")
        assert spec is not None and spec.origin is not None
        root = os.path.dirname(os.path.dirname(spec.origin))
        return {path: open(os.path.join(root, path)).read() for path in paths}
    wheel = os.path.join(RELEASE_WHEELS, f"trl-{version}-py3-none-any.whl")
    assert os.path.exists(wheel), f"{wheel} is missing: scripts/conformance/trl.sh downloads it"
    with zipfile.ZipFile(wheel) as archive:
        return {path: archive.read(path).decode() for path in paths}


def test_each_release_s_defaults_are_its_grpo_config_s(trl_env: Environment) -> None:
    """Per release modelled, from its own files: every setting toyrl reads that its GRPOConfig has
    defaults as there, every GRPOConfig field toyrl reads in some release is a setting of it (no
    more, no fewer), its loss types are those its `_compute_loss` takes, and `trl grpo` builds the
    soft overlong punishment as toyrl takes it (from 0.23.0; 0.22 registers it unbuilt)."""
    import ast

    from toyrl.trainers.trl import OVERLONG, OVERLONG_CACHE, OVERLONG_LONGEST, SETTINGS_1_16_0, TRAINER

    for version, release in TRAINER.releases.items():
        files = _release_files(version)
        defaults = _grpo_config_defaults(files["trl/trainer/grpo_config.py"])
        for name in SETTINGS_1_16_0:
            if name in NOT_GRPO_CONFIG and name not in defaults:
                continue
            assert (name in release.settings) == (name in defaults), (version, name)
            if name in defaults:
                assert release.settings[name].default == defaults[name], (version, name, defaults[name])
        if "loss_type" in release.settings:
            losses = set(release.settings["loss_type"].choices)
            assert losses == _loss_types(files["trl/trainer/grpo_trainer.py"]), version
        built = [
            {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            for node in ast.walk(ast.parse(files["trl/scripts/grpo.py"]))
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == OVERLONG
        ]
        registered = f'"{OVERLONG}"' in files["trl/scripts/grpo.py"]
        if tuple(int(p) for p in version.split(".")) >= (0, 23):
            assert built == [{"max_completion_len": OVERLONG_LONGEST, "soft_punish_cache": OVERLONG_CACHE}]
        else:
            assert built == [] and registered == version.startswith("0.22."), version


@pytest.mark.parametrize(("longest", "weight"), [(1280, 1.0), (1152, 0.5), (1100, 2.0)])
def test_soft_overlong_punishment_is_the_toy_s_reward(
    trl_env: Environment, longest: int, weight: float
) -> None:
    """trl.rewards.get_soft_overlong_punishment as `trl grpo` builds it (1280, 256), weighted beside
    accuracy_reward, against the toy's soft_overlong reward of the mapped spec at every length up to
    max_completion_length (the toy's longest response: its cap and approach token)."""
    import dataclasses

    from trl.rewards import get_soft_overlong_punishment

    from toyrl.policy import Batch
    from toyrl.trainers import resolve
    from toyrl.trainers.trl import OVERLONG_CACHE, OVERLONG_LONGEST

    punishment = get_soft_overlong_punishment(OVERLONG_LONGEST, OVERLONG_CACHE)
    settings = {
        "reward_funcs": ["accuracy_reward", "get_soft_overlong_punishment"],
        "reward_weights": [1.0, weight],
        "max_completion_length": longest,
    }
    stage = parse_variant(resolve("trl", None, settings).mapping.spec).reward
    config = dataclasses.replace(toy_config, cap=longest - 1)  # the approach token and ramble: `longest`
    ramble = np.arange(0, longest)
    tokens = ramble + config.approach_tokens
    wrong = np.zeros(len(ramble), dtype=bool)
    batch = Batch(np.zeros(len(ramble), dtype=np.int64), wrong, ramble.astype(np.int64), ~wrong)
    trl_rewards = weight * np.array(punishment([[RAMBLE] * int(n) for n in tokens]))
    assert trl_rewards.min() < 0
    difference = np.abs(stage.rewards(batch, config) - trl_rewards).max()
    assert difference < 1e-12, difference
