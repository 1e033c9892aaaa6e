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

Rows are matched to toy responses by their tokens (prompt and completion), so TRL's shuffle of
the generation batch needs no bookkeeping: identical responses of a group are interchangeable
(same reward, advantage, tokens and log-probs). TRL builds its rewards tensor with torch's default
dtype, so the trainer runs under `torch.set_default_dtype(torch.float64)`; the tolerance is then
the suite's 1e-10 relative.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections import defaultdict
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
    """What TRL gave for a batch: its advantages [N] and, per optimiser step, d loss / d logp
    [N, T] and the toy rows the step's micro-batches held; TRL's logged metrics (one entry per
    micro-batch)."""

    advantages: np.ndarray
    weights: list[np.ndarray]
    seen: list[list[int]]
    metrics: dict[str, list[float]]

    def clipped(self, step: int, micro_batches: int) -> float:
        """TRL's clip_ratio/region_mean at optimiser step `step` (the largest of its micro-batches)."""
        values = self.metrics["clip_ratio/region_mean"]
        return max(values[step * micro_batches : (step + 1) * micro_batches])


def run_trl(
    env: Environment,
    batch: toy.ToyBatch,
    rewards: np.ndarray,
    thetas: list[np.ndarray | None],
    theta_ref: np.ndarray | None = None,
    **grpo: Any,
) -> Run:
    """TRL's GRPOTrainer.training_step on the toy batch: one optimiser step (its
    gradient_accumulation_steps micro-batches) per entry of `thetas`, the policy at that step
    (None: theta_old). `grpo`: GRPOConfig arguments; per_device_train_batch_size defaults to
    N / steps_per_generation, so that TRL's generation batch is the toy batch."""
    torch, trl = env.torch, env.trl
    group = batch.shape[1]
    responses = batch.responses
    accumulation = grpo.setdefault("gradient_accumulation_steps", 1)
    per_generation = grpo.get("steps_per_generation") or accumulation
    grpo.setdefault("per_device_train_batch_size", responses // per_generation)
    prompt_of = [PROMPTS[int(j)] for j in np.repeat(batch.batch.prompt_index[0], group)]
    tokens = completion_tokens(batch)
    rows_of: dict[tuple, list[int]] = defaultdict(list)  # (prompt ids, completion ids) -> toy rows
    for i in range(responses):
        rows_of[((VOCABULARY[prompt_of[i]],), tuple(tokens[i]))].append(i)

    def key(prompt_ids: list[int], completion_ids: list[int]) -> tuple:
        completion = list(completion_ids)
        while completion and completion[-1] == PAD:  # completions are right-padded
            completion.pop()
        return tuple(t for t in prompt_ids if t != PAD), tuple(completion)  # prompts are left-padded

    def matcher() -> Any:
        """Matches TRL rows to toy rows with the same tokens, each toy row once."""
        pools = {k: list(v) for k, v in rows_of.items()}
        return lambda prompt_ids, completion_ids: pools[key(prompt_ids, completion_ids)].pop(0)

    def rollout(texts: list[str], trainer: Any) -> dict[str, Any]:
        assert texts == prompt_of  # TRL's generation batch is the toy batch, prompt-major
        ids = trainer.processing_class(text=texts)["input_ids"]
        return {"prompt_ids": ids, "completion_ids": [list(t) for t in tokens], "logprobs": None}

    def reward(prompts: list[str], completions: list[str], completion_ids: list, **_: Any) -> list[float]:
        rows = [rows_of[key([VOCABULARY[p]], c)][0] for p, c in zip(prompts, completion_ids, strict=True)]
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
            source, match = step["leaf"], step["match"]
        else:  # _generate_and_score_completions: old_per_token_logps or the reference model's
            source, match = (ref if model is trainer.ref_model else old), matcher()
        rows = [match(r[:width], r[width:]) for r in input_ids.tolist()]
        if source is step["leaf"]:
            step["seen"].extend(rows)
        logps = source[rows, :logits_to_keep]
        entropies = torch.zeros_like(logps) if kw.get("compute_entropy") else None
        return (logps, entropies, None) if with_aux_loss else (logps, entropies)  # TRL 0.22: no aux loss

    def generate(input_ids: Any, attention_mask: Any, **_: Any) -> Any:
        """TRL 0.22 (no rollout_func): stands in for the model's generate, the toy's completions."""
        assert [VOCABULARY[p] for p in prompt_of] == input_ids[:, -1].tolist()
        width = max(len(t) for t in tokens)
        completions = torch.tensor([t + [PAD] * (width - len(t)) for t in tokens], dtype=input_ids.dtype)
        return torch.cat([input_ids, completions], dim=1)

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
    score = trainer._generate_and_score_completions

    def recorded(inputs: Any) -> dict[str, Any]:
        generated.append(score(inputs))
        return generated[-1]

    trainer._generate_and_score_completions = recorded
    trainer.current_gradient_accumulation_steps = accumulation  # as Trainer's training loop sets it
    inputs = [{"prompt": p} for p in prompt_of]  # the generation batch, as TRL's RepeatSampler yields it

    weights, seen = [], []
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)  # TRL shuffles the generation batch before splitting it into micro-batches
    try:
        for theta in thetas:
            leaf = torch.tensor(batch.logp(theta), dtype=torch.float64, requires_grad=True)
            step.update(leaf=leaf, match=matcher(), seen=[])
            for _ in range(accumulation):
                trainer.training_step(trainer.model, inputs, None)
            assert leaf.grad is not None
            weights.append(leaf.grad.numpy().copy())
            seen.append(sorted(step["seen"]))
    finally:
        torch.set_default_dtype(default)
    assert len(generated) == 1  # one generation batch for all the steps
    output, match = generated[0], matcher()
    order = [
        match(p, c)
        for p, c in zip(output["prompt_ids"].tolist(), output["completion_ids"].tolist(), strict=True)
    ]
    advantages = np.zeros(responses)
    advantages[order] = output["advantages"].double().numpy()
    return Run(advantages, weights, seen, {k: list(v) for k, v in trainer._metrics["train"].items()})


def first_updates(env: Environment, preset: str, **grpo: Any) -> tuple[float, float]:
    """Max relative differences, over the batches, of TRL's advantages and first-update weights
    (num_iterations=1, ratio 1) from the preset's."""
    variant = parse_variant(preset)
    advantage, weight = 0.0, 0.0
    for make in BATCHES.values():
        batch = make()
        run = run_trl(env, batch, batch.rewards(variant), [None], **grpo)
        assert run.seen[0] == list(range(batch.responses))  # the step saw every response once
        expected = toy.token_weights(variant, batch)
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
    (differentiable) ratio rho: its gradient gains beta rho k3 per token, even at ratio 1, which no
    toyrl KL stage has (expected=False, at both iterations)."""
    variant = spec(preset, num_iterations=2, beta=0.04)
    advantage, first, second, clipped = later_updates(
        trl_env, variant, with_ref=True, beta=0.04, use_bias_correction_kl=corrected, **grpo
    )
    assert clipped > 0
    setting = f"{setting}, beta=0.04, num_iterations=2, use_bias_correction_kl={corrected}"
    conform("trl", f"{setting}: advantages", variant, advantage)
    conform("trl", f"{setting}: weights, 1st iteration", variant, first, expected=not corrected)
    conform(
        "trl",
        f"{setting}: weights, 2nd iteration (clip >= {clipped:.1%})",
        variant,
        second,
        expected=not corrected,
    )


# gradient_accumulation_steps=k: TRL splits the generation batch (shuffled) into k micro-batches of
# N / k responses and sums their gradients into one optimiser step.
MICRO = [
    # dapo divides every micro-batch by num_items_in_batch, the generation batch's token count
    ("loss_type=dapo", {}, "trl_default", True),
    # grpo and dr_grpo: a mean over the micro-batch's responses, / k; micro-batches have equal sizes
    ("loss_type=grpo", {"loss_type": "grpo"}, "trl_grpo", True),
    ("loss_type=dr_grpo", {"loss_type": "dr_grpo"}, "trl_dr_grpo_loss_only", True),
    # bnpo divides each micro-batch by its own token count (and by k): not the batch's token mean,
    # and not a per-response normaliser either; toyrl has no micro-batches (yet) to express it
    ("loss_type=bnpo", {"loss_type": "bnpo"}, "trl_default", False),
]


@pytest.mark.parametrize("micro_batches", [2, 4])
@pytest.mark.parametrize(("setting", "grpo", "preset", "agrees"), MICRO, ids=[s for s, *_ in MICRO])
def test_micro_batches(
    trl_env: Environment,
    conform: Any,
    setting: str,
    grpo: dict,
    preset: str,
    agrees: bool,
    micro_batches: int,
) -> None:
    advantage, weight = first_updates(trl_env, preset, gradient_accumulation_steps=micro_batches, **grpo)
    setting = f"{setting}, gradient_accumulation_steps={micro_batches}"
    conform("trl", f"{setting}: advantages", preset, advantage)
    conform("trl", f"{setting}: weights", preset, weight, expected=agrees)


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


def test_mini_batches(trl_env: Environment, conform: Any) -> None:
    """steps_per_generation=2 with gradient_accumulation_steps=1: TRL takes two optimiser steps per
    generation batch, each on half of it (a mini-batch; dapo's normaliser is then half the
    generation batch's token count). toyrl's update is the full batch: the first step differs
    (expected=False) until toyrl has mini-batches. The two halves partition the batch."""
    variant = parse_variant("trl_default")
    advantage, weight = 0.0, 0.0
    for make in BATCHES.values():
        batch = make()
        run = run_trl(trl_env, batch, batch.rewards(variant), [None, None], steps_per_generation=2)
        halves = run.seen
        assert len(halves[0]) == len(halves[1]) == batch.responses // 2
        assert sorted(halves[0] + halves[1]) == list(range(batch.responses))
        advantage = max(advantage, toy.relative_difference(run.advantages, toy.advantages(variant, batch)))
        weight = max(weight, toy.relative_difference(run.weights[0], toy.token_weights(variant, batch)))
    setting = "loss_type=dapo, steps_per_generation=2 (2 optimiser steps per batch): 1st step"
    conform("trl", f"{setting}: advantages", "trl_default", advantage)
    conform("trl", f"{setting}: weights", "trl_default", weight, expected=False)


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
