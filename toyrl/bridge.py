"""The bridge: TRL's own `GRPOTrainer` training a real tiny network on the toy task.

The toy's ramble policy (`toyrl.policy`) as a language-modelling task. The vocabulary is
`<pad> <eos> right wrong ramble p0 .. p{P-1}`; the prompt of prompt j is the one token p_j; a
completion is [approach token, ramble x (K - 1), <eos>] for a ramble of K tokens (stop token
included) that stopped within the cap, and [approach token, ramble x cap] (cap + 1 tokens, no
<eos>) for a truncated one, so that TRL's max_completion_length is cap + 1 and its completion mask
(every token up to and including the first <eos>) counts |o| = L + 1 tokens, toyrl's default
(`Config.count_approach_token`). A completion's ramble length is L = (its tokens) - 1 either way.

The network is a tiny `transformers.LlamaForCausalLM` built from a config (nothing downloaded),
fitted before training to the toy's starting policy of the same seed on the toy's exact
next-token probabilities (`target_probabilities`, `fit`), then trained by TRL's `GRPOTrainer`
with TRL's own generation, rewards' advantages, loss and optimiser (`train`). Its curves are set
beside the toy's exact ones at the same configuration (`toy_curves`).

Scaled configuration (`BRIDGE_CONFIG`): the article's cap of 1,500 ramble tokens is too long for
a CPU, so the cap is 64, min_length 4 and the starting stop probabilities the article's 1/300 and
1/700 scaled to the cap: 5/64 and 2.14/64 (mean geometric lengths 1/s of 12.8 and 29.9 tokens, the
article's 300 and 700 in proportion to the cap).

torch, transformers, datasets and TRL are imported inside the functions that need them; without
them those functions raise `InvalidInput` naming the install command (`INSTALL`). The rest (the
vocabulary, encodings, rewards and targets) is numpy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from toyrl import install, kernels
from toyrl.config import Config, InvalidInput
from toyrl.objective import Variant
from toyrl.policy import FloatArray, exact_metrics
from toyrl.train import initial_theta, run_streams
from toyrl.variants import VARIANTS

INSTALL = install.hint("bridge")
TRL_VERSION = "1.16.0"  # the release whose settings `toyrl.trainers.trl` models

BRIDGE_CONFIG = Config(
    cap=64,
    min_length=4,
    stop_prob_right=5 / 64,
    stop_prob_wrong=2.14 / 64,
    batch_prompts=16,
    group_size=8,
    steps=150,
)

PAD, EOS, RIGHT, WRONG, RAMBLE = 0, 1, 2, 3, 4
SPECIAL = ("<pad>", "<eos>", "right", "wrong", "ramble")
FIRST_PROMPT = len(SPECIAL)  # token id of p0

# The network: 2 layers of width 64, 4 heads, MLP width 128, untied embeddings (about 90k parameters
# at 64 prompts).
MODEL_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}
LEARNING_RATE = 3e-5  # the network's (Adam's, constant); the toy's is Config.lr: the two are not matched
FIT_TOLERANCE = 0.005  # max abs error of P(right | p_j), of P(<eos> | context), and max leak, that end a fit
FIT_MAX_STEPS = 600
FIT_LEARNING_RATE = 3e-3  # Adam's, decayed linearly to half of it over FIT_MAX_STEPS
FIT_ROWS = 32  # sequences of each fit step, cycled through the 2P in order
FIT_CHECK_EVERY = 25  # fit steps between checks of the errors
FIT_LEAK_WEIGHT = 3.0  # weight of -log(1 - leak) in the fit's loss (`model_probabilities`' leak)
FIT_RECIPE = 3  # the fit's loss and schedule: a change of them must change this (the cache's key)

# GRPOConfig settings the bridge sets from the toy's Config: refused in `settings`
SCHEDULE_SETTINGS = (
    "max_completion_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "num_iterations",
)
METRICS = ("accuracy", "length_mean", "length_correct", "length_incorrect")
COMPLETION_COLUMNS = ("prompt", "right", "length", "stopped", "reward", "tokens", "off_ramble")
# GRPOConfig fields reported as in effect (`BridgeRun.trl_args`), besides the settings given
SETTINGS_SHOWN = (
    "loss_type",
    "scale_rewards",
    "beta",
    "epsilon",
    "mask_truncated_completions",
    "max_grad_norm",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "generation_batch_size",
    "num_iterations",
    "max_completion_length",
    "learning_rate",
    "lr_scheduler_type",
    "optim",
    "weight_decay",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "bf16",
    "gradient_checkpointing",
    "seed",
)
STEP_COLUMNS = [
    "step",
    "accuracy",
    "length_mean",
    "length_correct",
    "length_incorrect",
    "truncated",
    "off_ramble",
    "loss",
    "grad_norm",
    "clipped",
]


# ---------------------------------------------------------------- vocabulary, encoding, reward


def vocabulary(prompts: int) -> tuple[str, ...]:
    """The tokens, by id: `<pad> <eos> right wrong ramble p0 .. p{prompts-1}` (5 + prompts)."""
    return (*SPECIAL, *(f"p{j}" for j in range(prompts)))


def prompt_texts(prompts: int) -> list[str]:
    """The dataset's prompts as text, one word each: `p0 .. p{prompts-1}`."""
    return [f"p{j}" for j in range(prompts)]


def encode_completions(
    right: NDArray[np.bool_], length: NDArray[np.int64], stopped: NDArray[np.bool_], cap: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Token ids of toy responses, [N] each (approach, ramble length L, stopped): (ids [N, cap + 1],
    right-padded with <pad>; tokens per completion [N], L + 1). A stopped response is the approach
    token, L - 1 ramble tokens and <eos> (its stop token, the K-th ramble token); a truncated one is
    the approach token and L = cap ramble tokens, no <eos>."""
    length = np.asarray(length, dtype=np.int64)
    stopped = np.asarray(stopped, dtype=bool)
    tokens = length + 1
    position = np.arange(cap + 1)
    ids = np.where(position < tokens[:, None], RAMBLE, PAD)
    ids[:, 0] = np.where(right, RIGHT, WRONG)
    last = np.where(stopped, length, 0)  # the <eos> at position L of a stopped response
    rows = np.flatnonzero(stopped)
    ids[rows, last[rows]] = EOS
    return ids.astype(np.int64), tokens


def pad_completions(
    completions: Sequence[Sequence[int]], width: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Lists of token ids (TRL's completion_ids: each up to and including its first <eos>) as
    (ids [N, width] right-padded with <pad>, tokens per completion [N])."""
    tokens = np.array([len(c) for c in completions], dtype=np.int64)
    ids = np.full((len(completions), width), PAD, dtype=np.int64)
    flat = np.fromiter((t for c in completions for t in c), dtype=np.int64, count=int(tokens.sum()))
    ids[np.arange(width) < tokens[:, None]] = flat
    return ids, tokens


def read_completions(ids: NDArray[np.int64], tokens: NDArray[np.int64], config: Config) -> dict[str, Any]:
    """What toy responses the completions are, [N] each, from ids [N, W] and their token counts [N]
    (`pad_completions`): `right` (the first token is `right`), `stopped` (the last is <eos>),
    `length` L = tokens - 1 (ramble tokens, the stop token included, at most the cap), `reward`
    (the toy's: right, stopped and L >= min_length), and `off_ramble`, the tokens at ramble
    positions (after the approach token, before a final <eos>) that are not `ramble`. The reward
    does not read the ramble positions: the toy's ramble has no content."""
    tokens = np.asarray(tokens, dtype=np.int64)
    rows = np.arange(len(tokens))
    present = tokens > 0
    last = ids[rows, np.maximum(tokens - 1, 0)]
    stopped = present & (last == EOS)
    right = present & (ids[:, 0] == RIGHT) & (tokens > 1)  # a lone <eos> took no approach
    length = np.minimum(np.maximum(tokens - 1, 0), config.cap)
    position = np.arange(ids.shape[1])
    ramble_positions = (position >= 1) & (position < (tokens - stopped)[:, None])
    off_ramble = (ramble_positions & (ids != RAMBLE)).sum(axis=1)
    reward = right & stopped & (length >= config.min_length)
    return {
        "right": right,
        "stopped": stopped,
        "length": length,
        "reward": reward.astype(np.float64),
        "off_ramble": off_ramble,
    }


# ---------------------------------------------------------------- the toy's exact targets


def start_theta(seed: int, config: Config) -> FloatArray:
    """theta_0 [P + 2] of toyrl's run with this seed (`toyrl.train.initial_theta` on its init stream)."""
    return initial_theta(config, run_streams(seed)[0])


def target_probabilities(theta: FloatArray, config: Config) -> tuple[FloatArray, FloatArray]:
    """The toy's exact next-token distributions at theta [P + 2]: (after_prompt [P, V], in_ramble
    [2, cap, V]), V = 5 + P tokens.

    after_prompt[j]: after the prompt p_j, `right` with probability sigma(psi_j), `wrong` with
    1 - sigma(psi_j). in_ramble[a, k]: after approach a (0 right, 1 wrong) and k < cap ramble
    tokens, <eos> with sigma(phi_a), `ramble` with 1 - sigma(phi_a) (toyrl's `kernels.expit_pair`,
    the bits `toyrl.policy.exact_metrics` takes). Every other token has probability 0.
    """
    positive, negative = kernels.expit_pair(np.asarray(theta, dtype=np.float64))
    prompts, size = config.prompts, FIRST_PROMPT + config.prompts
    after_prompt = np.zeros((prompts, size))
    after_prompt[:, RIGHT], after_prompt[:, WRONG] = positive[:prompts], negative[:prompts]
    in_ramble = np.zeros((2, config.cap, size))
    in_ramble[:, :, EOS] = positive[-2:, None]
    in_ramble[:, :, RAMBLE] = negative[-2:, None]
    return after_prompt, in_ramble


def teacher_forced(theta: FloatArray, config: Config) -> tuple[NDArray[np.int64], FloatArray]:
    """Every context of the toy in one batch, for a teacher-forced fit: (inputs [2P, cap + 1],
    targets [2P, cap + 1, V]). Row 2j + a is [p_j, approach a, ramble x (cap - 1)]; its position 0
    predicts the approach (after_prompt[j]), position 1 + k the token after k ramble tokens
    (in_ramble[a, k]), k = 0 .. cap - 1."""
    after_prompt, in_ramble = target_probabilities(theta, config)
    prompts, cap = config.prompts, config.cap
    inputs = np.full((2 * prompts, cap + 1), RAMBLE, dtype=np.int64)
    inputs[:, 0] = FIRST_PROMPT + np.repeat(np.arange(prompts), 2)
    inputs[:, 1] = np.tile([RIGHT, WRONG], prompts)
    targets = np.empty((2 * prompts, cap + 1, after_prompt.shape[1]))
    targets[:, 0] = np.repeat(after_prompt, 2, axis=0)
    targets[:, 1:] = np.tile(in_ramble, (prompts, 1, 1))
    return inputs, targets


def hazard_metrics(p_right: FloatArray, hazard: FloatArray, min_length: int) -> dict[str, float]:
    """Exact metrics of a ramble policy whose stop probability may depend on the prompt and the
    position, prompts weighted uniformly: p_right [P] the probability of the right approach,
    hazard [P, 2, cap] P(<eos> | prompt j, approach a, k ramble tokens so far). Any token but <eos>
    continues the ramble and any approach but `right` is wrong (as `read_completions` reads them).
    With hazards sigma(phi_a) at every prompt and position these are `toyrl.policy.exact_metrics`'s
    accuracy and lengths; for a fitted network, its exact step-0 metrics on the toy's contexts.

    P(K = k) = h_{k-1} prod_{i < k-1} (1 - h_i), k = 1 .. cap; truncated with prod_i (1 - h_i),
    L = cap. Correct: right approach and min_length <= K <= cap.
    """
    cap = hazard.shape[-1]
    survive = np.concatenate([np.ones((*hazard.shape[:-1], 1)), np.cumprod(1 - hazard, axis=-1)], axis=-1)
    stop = hazard * survive[..., :-1]  # P(K = k), k = 1 .. cap: [P, 2, cap]
    truncated = survive[..., -1]  # [P, 2]
    k = np.arange(1, cap + 1)
    window = k >= min_length
    expected = (stop * k).sum(axis=-1) + cap * truncated  # E[L | prompt, approach] [P, 2]
    correct = stop[:, 0, window].sum(axis=-1)  # P(correct | right approach) [P]
    incorrect_right = stop[:, 0, ~window].sum(axis=-1) + truncated[:, 0]
    incorrect_length_right = (stop[:, 0, ~window] * k[~window]).sum(axis=-1) + cap * truncated[:, 0]
    p_wrong = 1 - p_right
    return {
        "accuracy": float(np.mean(p_right * correct)),
        "length_mean": float(np.mean(p_right * expected[:, 0] + p_wrong * expected[:, 1])),
        "length_correct": float(
            (p_right * (stop[:, 0, window] * k[window]).sum(axis=-1)).sum() / (p_right * correct).sum()
        ),
        "length_incorrect": float(
            (p_wrong * expected[:, 1] + p_right * incorrect_length_right).sum()
            / (p_wrong + p_right * incorrect_right).sum()
        ),
    }


def toy_start_metrics(theta: FloatArray, config: Config) -> dict[str, float]:
    """toyrl's exact accuracy and lengths at theta [P + 2] (`toyrl.policy.exact_metrics`)."""
    metrics = exact_metrics(np.asarray(theta, dtype=np.float64)[None], config.cap, config.min_length)
    return {name: float(metrics[name][0]) for name in METRICS}


# ---------------------------------------------------------------- torch side


# Pinned kernels: torch's ATen and MKL's BLAS take their AVX2 code paths on any x86-64 CPU with
# AVX2 (with AVX-512 too), so that a seed's run is the same bits on every such CPU; oneDNN is
# capped alike. Set before torch is first imported, unless already set (`pin_kernels`).
PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _has_avx2() -> bool:
    """Whether this is an x86-64 CPU with AVX2 (read from /proc/cpuinfo; False where it cannot be read)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return any(line.startswith("flags") and " avx2" in line for line in info)
    except OSError:
        return False


def pin_kernels() -> dict[str, str]:
    """Set `PINNED_KERNELS` in the environment before torch is imported, on a CPU with AVX2, each
    unless already set; returns those in effect. After torch is imported nothing changes (a
    kernel's choice is read once): the run's sidecar records the kernels used (`kernels`)."""
    if "torch" not in sys.modules and _has_avx2():
        for name, value in PINNED_KERNELS.items():
            os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in PINNED_KERNELS if name in os.environ}


def kernels_in_use() -> dict[str, str]:
    """torch's CPU capability and the kernel settings in the environment."""
    torch = require()[0]
    return {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), **pin_kernels()}


def require() -> tuple[Any, Any, Any, Any]:
    """(torch, transformers, datasets, trl), the kernels pinned first (`pin_kernels`), or
    InvalidInput with the install command."""
    pin_kernels()
    try:
        import datasets
        import torch
        import transformers
        import trl
    except ImportError as error:
        raise InvalidInput(
            f"the bridge needs torch, transformers and TRL {TRL_VERSION} ({error.name or error} is missing): "
            + INSTALL
        ) from None
    if trl.__version__ != TRL_VERSION:
        raise InvalidInput(f"the bridge needs TRL {TRL_VERSION} (installed: {trl.__version__}): " + INSTALL)
    return torch, transformers, datasets, trl


def default_cache_dir() -> Path:
    """A `toyrl-bridge` folder in the user's cache directory (XDG_CACHE_HOME, ~/Library/Caches on
    macOS, LOCALAPPDATA on Windows, else ~/.cache)."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        root = Path(os.environ["LOCALAPPDATA"])
    elif sys.platform == "darwin":
        root = Path.home() / "Library" / "Caches"
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "toyrl-bridge"


def build_model(seed: int, config: Config = BRIDGE_CONFIG) -> Any:
    """A tiny `LlamaForCausalLM` (`MODEL_SHAPE`, vocabulary of 5 + P tokens, positions for a
    prompt and cap + 1 completion tokens), initialised from torch seed `seed` without touching the
    global random state: the same seed, the same weights."""
    torch, transformers, _, _ = require()
    llama = transformers.LlamaConfig(
        vocab_size=FIRST_PROMPT + config.prompts,
        max_position_embeddings=config.cap + 2,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=None,
        tie_word_embeddings=False,
        **MODEL_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(llama)
    model.generation_config.bos_token_id = None
    return model.float()


def tokenizer(config: Config = BRIDGE_CONFIG) -> Any:
    """A word-level tokenizer of `vocabulary` built in process (pad <pad>, eos <eos>, no BOS)."""
    require()
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocabulary(config.prompts))}, "<pad>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="<eos>")


@dataclass(frozen=True)
class Fit:
    """A fit's outcome: max abs errors of P(right | p_j) (over the P prompts) and of
    P(<eos> | context) (over the 2P x cap ramble contexts: every prompt, approach and position)
    against the toy's, the largest leak (the mass of the tokens no context of the toy chooses
    from, `model_probabilities`), the fit steps taken, its CPU seconds (of the fit itself, 0 when loaded),
    whether it came from the cache, and the network's exact metrics on the toy's contexts
    (`hazard_metrics`) beside the toy's (`exact_metrics`) at theta_0."""

    approach_error: float
    stop_error: float
    leak: float
    steps: int
    cpu_seconds: float
    cached: bool
    model_metrics: dict[str, float]
    toy_metrics: dict[str, float]


def model_probabilities(model: Any, config: Config) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The network on the toy's contexts, teacher-forced (`teacher_forced`), in float64:
    P(right | p_j) [P], P(<eos> | p_j, approach a, k ramble tokens) [P, 2, cap], and the leak
    [2P, cap + 1], the probability of the tokens that are neither of the two a context chooses
    between (neither `right` nor `wrong` after the prompt, neither <eos> nor `ramble` in the ramble)."""
    torch, _, _, _ = require()
    inputs, _ = teacher_forced(np.zeros(config.prompts + 2), config)
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(inputs)).logits
    probability = torch.softmax(logits.double(), dim=-1).numpy()
    hazard = probability[:, 1:, EOS].reshape(config.prompts, 2, config.cap)
    leak = 1 - np.concatenate(
        [
            probability[:, :1, RIGHT] + probability[:, :1, WRONG],
            probability[:, 1:, EOS] + probability[:, 1:, RAMBLE],
        ],
        axis=1,
    )
    return probability[0::2, 0, RIGHT], hazard, leak


def fit_errors(model: Any, theta: FloatArray, config: Config) -> tuple[float, float, float]:
    """Max abs errors of the network's P(right | p_j) and P(<eos> | context) against the toy's at
    theta, and its largest leak (`model_probabilities`)."""
    p_right, hazard, leak = model_probabilities(model, config)
    positive, _ = kernels.expit_pair(np.asarray(theta, dtype=np.float64))
    return (
        float(np.abs(p_right - positive[: config.prompts]).max()),
        float(np.abs(hazard - positive[-2:, None]).max()),
        float(leak.max()),
    )


def model_start_metrics(model: Any, config: Config) -> dict[str, float]:
    """The network's exact accuracy and lengths on the toy's contexts (`hazard_metrics`)."""
    p_right, hazard, _ = model_probabilities(model, config)
    return hazard_metrics(p_right, hazard, config.min_length)


def _cache_key(model: Any, theta: FloatArray, config: Config, tolerance: float, max_steps: int) -> str:
    """The fit's inputs, hashed: the network's shape and starting weights, theta, the toy's contexts
    (prompts, cap), the fit's settings and the torch version."""
    torch, _, _, _ = require()
    digest = hashlib.sha256()
    meta = {
        "model": model.config.to_dict(),
        "prompts": config.prompts,
        "cap": config.cap,
        "tolerance": tolerance,
        "max_steps": max_steps,
        "lr": FIT_LEARNING_RATE,
        "rows": FIT_ROWS,
        "check_every": FIT_CHECK_EVERY,
        "leak_weight": FIT_LEAK_WEIGHT,
        "recipe": FIT_RECIPE,
        "torch": torch.__version__,
    }
    digest.update(json.dumps(meta, sort_keys=True, default=str).encode())
    digest.update(np.asarray(theta, dtype=np.float64).tobytes())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:32]


def fit(
    model: Any,
    theta: FloatArray,
    config: Config = BRIDGE_CONFIG,
    cache_dir: str | Path | None = None,
    tolerance: float = FIT_TOLERANCE,
    max_steps: int = FIT_MAX_STEPS,
) -> Fit:
    """Fit the network in place to the toy's policy at theta [P + 2], teacher-forced on its exact
    next-token distributions (`teacher_forced`): full-batch cross-entropy to the target
    distributions, plus the squared error of the log-odds of the two tokens each context chooses
    between, plus a weight on the other tokens' mass (the leak); each step FIT_ROWS of the 2P
    sequences x (cap + 1) positions (cycled in order) and every prompt's approach position; Adam,
    until the max abs errors and the largest leak (`fit_errors`) are below `tolerance` or after
    `max_steps` steps.
    Deterministic (no sampling). The fitted weights are cached under `cache_dir` (default
    `default_cache_dir()`), keyed by the network's starting weights, theta and the fit's settings:
    a second call loads them."""
    torch, _, _, _ = require()
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = _cache_key(model, theta, config, tolerance, max_steps)
    stored = folder / f"fit-{key}.pt"
    toy = toy_start_metrics(theta, config)
    if stored.exists():
        saved = torch.load(stored, weights_only=True)
        model.load_state_dict(saved["state"])
        errors = fit_errors(model, theta, config)
        metrics = model_start_metrics(model, config)
        return Fit(*errors, int(saved["steps"]), 0.0, True, metrics, toy)
    inputs_array, targets_array = teacher_forced(theta, config)
    inputs, targets = torch.from_numpy(inputs_array), torch.from_numpy(targets_array).float()
    entropy = torch.special.entr(targets).sum(dim=-1)  # [2P, cap + 1]: the cross-entropy's floor
    # The log-odds of the two tokens each context chooses between: psi_j after the prompt, phi_a in
    # the ramble. Cross-entropy alone learns them slowly once it is near its floor (their errors
    # are second order in it); the squared log-odds error is first order.
    odds = np.empty(inputs_array.shape)
    odds[:, 0] = np.repeat(theta[: config.prompts], 2)
    odds[:, 1:] = np.tile(theta[-2:], config.prompts)[:, None]
    target_odds = torch.from_numpy(odds).float()
    positive = torch.full(inputs.shape, EOS)
    negative = torch.full(inputs.shape, RAMBLE)
    positive[:, 0], negative[:, 0] = RIGHT, WRONG
    # Each step: FIT_ROWS of the sequences (every position) and every prompt's approach position
    # (the one-token sequences [p_j]), which weighs as much as the rows' cap + 1 positions.
    prompt_rows = torch.arange(0, len(inputs), 2)
    optimiser = torch.optim.Adam(model.parameters(), lr=FIT_LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: 1 - 0.5 * min(step, max_steps) / max_steps
    )

    def divergence(logits: Any, rows: Any, width: int) -> Any:
        """Per position [rows, width]: cross-entropy to the targets less its floor, plus the
        squared error of the log-odds, plus FIT_LEAK_WEIGHT x -log(1 - leak) (cross-entropy
        alone moves the other tokens' mass off slowly, in proportion to it)."""
        cross_entropy = -(targets[rows, :width] * torch.log_softmax(logits, dim=-1)).sum(dim=-1)
        log_odds = logits.gather(-1, positive[rows, :width, None]) - logits.gather(
            -1, negative[rows, :width, None]
        )
        odds_error = (log_odds[..., 0] - target_odds[rows, :width]).square()
        two = torch.cat(
            [
                logits.gather(-1, positive[rows, :width, None]),
                logits.gather(-1, negative[rows, :width, None]),
            ],
            -1,
        )
        leak = torch.logsumexp(logits, dim=-1) - torch.logsumexp(two, dim=-1)  # -log(1 - leak)
        return cross_entropy - entropy[rows, :width] + odds_error + FIT_LEAK_WEIGHT * leak

    model.train()
    start = time.process_time()
    steps = 0
    errors = fit_errors(model, theta, config)
    while steps < max_steps and max(errors) >= tolerance:
        for _ in range(FIT_CHECK_EVERY):
            rows = torch.arange(steps * FIT_ROWS, (steps + 1) * FIT_ROWS) % len(inputs)  # cycled in order
            whole = divergence(model(input_ids=inputs[rows]).logits, rows, config.cap + 1).mean()
            first = divergence(model(input_ids=inputs[prompt_rows, :1]).logits, prompt_rows, 1).mean()
            loss = whole + first
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            steps += 1
        errors = fit_errors(model, theta, config)
    model.eval()
    seconds = time.process_time() - start
    folder.mkdir(parents=True, exist_ok=True)
    partial = stored.with_suffix(f".{os.getpid()}.tmp")
    torch.save({"state": model.state_dict(), "steps": steps}, partial)
    os.replace(partial, stored)
    return Fit(*errors, steps, seconds, False, model_start_metrics(model, config), toy)


# ---------------------------------------------------------------- training with TRL


def resolve_settings(settings: Mapping[str, Any]) -> Any:
    """TRL settings (GRPOConfig names -> values, text or typed, as `toyrl check --set` takes them)
    validated and filled in by toyrl's model of TRL 1.16.0 (`toyrl.trainers.resolve`): a
    `toyrl.trainers.Resolved`. The schedule's settings (`SCHEDULE_SETTINGS`) come from the toy's
    Config and are refused here, but for num_iterations = 1 (one optimiser step per batch)."""
    from toyrl.trainers import resolve

    fixed = [key for key in settings if key in (*CONFIG_SETTINGS, *SCHEDULE_SETTINGS)]
    if fixed and not (fixed == ["num_iterations"] and str(settings["num_iterations"]) == "1"):
        raise InvalidInput(
            f"{', '.join(fixed)}: the bridge sets "
            f"{', '.join((*CONFIG_SETTINGS, *SCHEDULE_SETTINGS))} from the toy's "
            "configuration (one optimiser step per batch of batch_prompts x group_size completions)"
        )
    return resolve("trl", TRL_VERSION, dict(settings))


def toy_variant_for(settings: Mapping[str, Any], config: Config = BRIDGE_CONFIG) -> Variant:
    """The toyrl variant of TRL settings, as `toyrl check` maps them (`toyrl.trainers.check.toy_variant`)."""
    from toyrl.trainers.check import toy_variant

    return toy_variant(resolve_settings(settings), config)[0]


def toy_curves(
    config: Config, variant: Variant | str, seeds: Sequence[int], steps: int | None = None
) -> pd.DataFrame:
    """The toy's exact curves at `config` (steps: `steps`, else config.steps) for `variant` (a
    Variant, a name or spec; `toy_variant_for` gives TRL settings' one): the table of
    `toyrl.experiment.run_experiment`, one row per (seed, step), exact expectations and the
    sampled batch's statistics."""
    from toyrl.experiment import run_experiment

    if steps is not None:
        config = config.replace(steps=steps)
    return run_experiment(config, [variant], list(seeds))


@dataclass
class BridgeRun:
    """A TRL run: `steps`, one row per step (`STEP_COLUMNS`: step t describes the network after t
    optimiser steps: its sampled batch's accuracy, mean L overall, of correct and of incorrect
    completions (NaN when none), truncated share, the share of non-`ramble` tokens at ramble
    positions, and the loss and gradient norm (before clipping) TRL logged for that batch's update,
    `clipped` when it is above max_grad_norm); `completions`, one row per completion (step, prompt,
    right, length, stopped, reward, tokens, off_ramble); the `fit` at step 0; the GRPOConfig fields
    in effect (`trl_args`); the toy variant the settings map to; CPU seconds of the training
    (generation and updates, the fit excluded)."""

    steps: pd.DataFrame
    completions: pd.DataFrame
    fit: Fit
    trl_args: dict[str, Any]
    variant: str
    cpu_seconds: float


def trl_arguments(resolved: Any, config: Config, seed: int, learning_rate: float) -> dict[str, Any]:
    """The GRPOConfig arguments of a bridge run: the settings the user gave, and the bridge's own.

    One optimiser step per generated batch of batch_prompts prompts x group_size completions
    (per_device_train_batch_size = B G, gradient_accumulation_steps = steps_per_generation = 1);
    completions of at most cap + 1 tokens; plain sampling (temperature 1, top_p 1, top_k 0, no
    min_p, no repetition penalty); a constant learning rate; and on a CPU, float32 without gradient
    checkpointing (GRPOConfig defaults to bf16 and gradient checkpointing). Logged every step."""
    return {
        **resolved.given,
        "num_generations": config.group_size,
        "per_device_train_batch_size": config.batch_prompts * config.group_size,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "num_iterations": 1,
        "max_completion_length": config.cap + 1,
        "max_steps": config.steps + 1,  # the last batch (row `steps`) is sampled and logged too
        "learning_rate": learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": False,  # TRL's name; transformers 5 reads activation_checkpointing
        "activation_checkpointing": False,
        "use_cpu": True,
        "report_to": "none",
        "seed": seed,
        "data_seed": seed,
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "shuffle_dataset": True,
    }


def train(
    settings: Mapping[str, Any],
    config: Config = BRIDGE_CONFIG,
    seed: int = 0,
    steps: int | None = None,
    cache_dir: str | Path | None = None,
    learning_rate: float = LEARNING_RATE,
    fit_max_steps: int = FIT_MAX_STEPS,
    progress: Callable[[int], None] | None = None,
) -> BridgeRun:
    """Train the tiny network with TRL's own GRPOTrainer on the toy task, from its fit to toyrl's
    starting policy of `seed`, for `steps` optimiser steps (default config.steps).

    `settings`: TRL's GRPOConfig settings as names and values (`resolve_settings`), e.g.
    {"loss_type": "dr_grpo", "scale_rewards": "none"}; the rest is the bridge's (`trl_arguments`).
    Prompts: TRL's own sampler (its RepeatSampler: B distinct prompts a step, in a fresh random order
    of the P prompts each epoch of P / B steps, seeded by `seed`), not the toy's draws; so the
    network's batches are not the toy's. Rewards: the toy's (`read_completions`), by TRL's reward
    function hook, which also records the completions. Determinism: the same seed gives the same
    numbers on one machine; torch runs on one thread with deterministic algorithms, without filling
    uninitialised memory, for the run (the previous settings are restored after).
    `progress(optimiser steps done)` after each step.
    """
    torch, transformers, datasets, trl = require()
    from toyrl.trainers.check import toy_variant

    resolved = resolve_settings(settings)
    variant = toy_variant(resolved, config)[0]
    if steps is not None:
        config = config.replace(steps=steps)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    # Deterministic mode fills every torch.empty with NaN by default: half a training step's time in
    # TRL's chunked log-probabilities, which write every element they allocate.
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        model = build_model(seed, config)
        fitted = fit(model, start_theta(seed, config), config, cache_dir, max_steps=fit_max_steps)
        records: list[dict[str, Any]] = []
        logged: dict[int, dict[str, float]] = {}

        def toy_reward(prompts: list[str], completion_ids: list[list[int]], **_: Any) -> list[float]:
            """The toy's reward of each completion; records the batch."""
            ids, tokens = pad_completions(completion_ids, config.cap + 1)
            read = read_completions(ids, tokens, config)
            records.append(
                {
                    "prompt": np.array([vocabulary(config.prompts).index(p) - FIRST_PROMPT for p in prompts]),
                    "tokens": tokens,
                    **read,
                }
            )
            return [float(r) for r in read["reward"]]

        callback_base: Any = transformers.TrainerCallback

        class Logs(callback_base):
            """Keeps what TRL logs at each optimiser step (logging_steps = 1), by the step's batch."""

            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
                if logs and "loss" in logs:
                    logged[state.global_step - 1] = dict(logs)

            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                if progress is not None:
                    progress(min(state.global_step, config.steps))

        arguments = trl_arguments(resolved, config, seed, learning_rate)
        with tempfile.TemporaryDirectory() as output, warnings.catch_warnings():
            # transformers 5 deprecates the name TRL's trainer still reads at every step
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            args = trl.GRPOConfig(output_dir=output, **arguments)
            trainer = trl.GRPOTrainer(
                model=model,
                reward_funcs=toy_reward,
                args=args,
                train_dataset=datasets.Dataset.from_dict({"prompt": prompt_texts(config.prompts)}),
                processing_class=tokenizer(config),
                callbacks=[Logs()],
            )
            trainer.remove_callback(transformers.PrinterCallback)  # disable_tqdm's printing of the logs
            start = time.process_time()
            trainer.train()
            seconds = time.process_time() - start
        in_effect = {name: getattr(args, name) for name in (*SETTINGS_SHOWN, *resolved.given)}
        in_effect = {name: getattr(value, "value", value) for name, value in in_effect.items()}  # enums
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    completions = pd.DataFrame(
        {
            "step": np.repeat(np.arange(len(records)), [len(r["reward"]) for r in records]),
            **{name: np.concatenate([r[name] for r in records]) for name in COMPLETION_COLUMNS},
        }
    )
    max_grad_norm = float(args.max_grad_norm)
    rows = []
    for step in range(len(records)):
        frame = completions[completions["step"] == step]
        log = logged.get(step, {})
        correct = frame["reward"] > 0
        ramble_positions = (frame["tokens"] - 1 - frame["stopped"]).sum()
        grad_norm = float(log.get("grad_norm", np.nan))
        rows.append(
            {
                "step": step,
                "accuracy": float(correct.mean()),
                "length_mean": float(frame["length"].mean()),
                "length_correct": float(frame["length"][correct].mean()) if correct.any() else np.nan,
                "length_incorrect": float(frame["length"][~correct].mean()) if (~correct).any() else np.nan,
                "truncated": float((~frame["stopped"]).mean()),
                "off_ramble": float(frame["off_ramble"].sum() / max(ramble_positions, 1)),
                "loss": float(log.get("loss", np.nan)),
                "grad_norm": grad_norm,
                "clipped": bool(max_grad_norm > 0 and grad_norm > max_grad_norm),
            }
        )
    steps_frame = pd.DataFrame(rows, columns=STEP_COLUMNS)
    return BridgeRun(steps_frame, completions, fitted, in_effect, preset_of(variant) or variant.name, seconds)


def preset_of(variant: Variant) -> str | None:
    """The first named variant (`toyrl.variants.VARIANTS`) with this variant's spec, or None."""
    return next((name for name, v in VARIANTS.items() if v.spec() == variant.spec()), None)


# ---------------------------------------------------------------- the network beside the toy

QUICK_SEEDS = 1  # --quick: one seed of QUICK_STEPS steps, at most QUICK_CAP and QUICK_RESPONSES
# 32 steps: the whole command within a minute of CPU with the fit (scripts/bench_bridge.py); at step
# 32 GRPO's gap showed beyond 3 SE on each of the study's seeds
QUICK_STEPS = 32
QUICK_CAP = 64
QUICK_RESPONSES = 128  # B x G
FULL_SEEDS = 3
MAX_CAP = 256  # the network's positions; a step's time grows with the cap (0.43 CPU-s at 64)
MAX_STEPS = 2_000
MAX_SEEDS = 20
WINDOW = 10  # steps each gap and level is averaged over (the last WINDOW up to the step read)
MARGIN_SE = 3.0  # a gap "shows" beyond this many standard errors
REFERENCE = "dr_grpo"
DEFAULTS_NAME = "TRL's defaults"
REFERENCE_SETTINGS = {"loss_type": "dr_grpo", "scale_rewards": "none"}
# settings that set the toy's Config (and the bridge's arguments from it)
CONFIG_SETTINGS = {"num_generations": "group_size"}
SOURCES = ("network", "toy")
FRAME_COLUMNS = ["label", "source", "seed", *STEP_COLUMNS]


@dataclass(frozen=True)
class Input:
    """What `toyrl bridge` trains: TRL settings (names and values as given; the schedule's left out),
    the configuration they run at, notes on a file's settings the bridge replaced, and where the
    settings came from."""

    settings: dict[str, Any]
    config: Config
    notes: list[str]
    origin: str


def check_trainer(trainer: str | None, version: str | None) -> None:
    """InvalidInput (one line) unless `trainer` is TRL (or None) and `version` TRL_VERSION (or None)."""
    if trainer is not None and trainer.lower() != "trl":
        raise InvalidInput(
            f"--trainer {trainer}: the bridge trains with TRL {TRL_VERSION}'s GRPOTrainer only "
            f"(--trainer trl); toyrl check --trainer {trainer} checks {trainer}'s settings on the toy"
        )
    if version is not None and version != TRL_VERSION:
        raise InvalidInput(
            f"--version {version}: the bridge runs TRL {TRL_VERSION} only (the bridge extra's)"
        )


def read_input(
    arguments: list[str],
    sets: Mapping[str, Any],
    config: Config = BRIDGE_CONFIG,
    trainer: str | None = None,
    version: str | None = None,
) -> Input:
    """The bridge's settings, read as `toyrl check` reads them (a configuration file in `arguments`,
    `sets` over it; a file's trainer told from its keys unless `trainer` is given) but only as TRL
    1.16.0's, the release its trainer runs. num_generations sets the configuration's group_size.
    The settings the bridge sets itself (`SCHEDULE_SETTINGS`: one optimiser step per batch of
    completions of at most cap + 1 tokens) are refused when given by `sets` and replaced, with a
    note, when read from the file. InvalidInput (one line) for another trainer or release, or a
    setting TRL 1.16.0 does not have."""
    from toyrl.trainers import resolve
    from toyrl.trainers import trainer as named_trainer
    from toyrl.trainers.reading import detect
    from toyrl.trainers.reading import read_input as read_settings

    check_trainer(trainer, version)
    given = read_settings(arguments)
    owner = given.trainer
    if owner is None and trainer is None and given.settings:  # a file's trainer told from its keys
        owner = detect([*given.settings, *sets], given.origin)[0]
    if owner is not None and owner != "trl":
        raise InvalidInput(
            f"{given.origin} holds {named_trainer(owner).name}'s settings: the bridge trains with TRL "
            f"{TRL_VERSION} only (toyrl check reads them on the toy)"
        )
    refused = [key for key in sets if key in SCHEDULE_SETTINGS]
    if refused:
        raise InvalidInput(
            f"--set {refused[0]}: the bridge sets {', '.join(SCHEDULE_SETTINGS)} itself (one optimiser "
            "step per generated batch, completions of at most cap + 1 tokens); use --cap, --batch-prompts "
            "and --group-size"
        )
    notes = [
        f"{key}={given.settings[key]} ({given.origin}) replaced by the bridge's: one optimiser step per "
        "generated batch, completions of at most cap + 1 tokens"
        for key in given.settings
        if key in SCHEDULE_SETTINGS
    ]
    settings = {key: value for key, value in given.settings.items() if key not in SCHEDULE_SETTINGS}
    settings |= dict(sets)
    origin = given.origin or ("the --set settings" if sets else DEFAULTS_NAME)
    from_file = frozenset(settings) - set(sets)
    resolved = resolve("trl", TRL_VERSION, settings, from_file, f"read as TRL's ({origin})")
    for key, field_name in CONFIG_SETTINGS.items():
        if key in resolved.given:
            config = config.replace(**{field_name: int(resolved.values[key])})
            del settings[key]
    for key in resolved.ignored:
        settings.pop(key, None)
    notes += [f"{key} ({origin}): not a setting toyrl reads; left out" for key in resolved.ignored]
    return Input(settings, config, notes, origin)


def check_budget(config: Config, seeds: Sequence[int], quick: bool) -> None:
    """InvalidInput (one line) for a configuration the bridge cannot run: a cap above MAX_CAP (or
    QUICK_CAP with `quick`), more than QUICK_RESPONSES completions a step with `quick`, steps or
    seeds out of range."""
    cap_limit = QUICK_CAP if quick else MAX_CAP
    if not config.min_length < config.cap <= cap_limit:
        why = f"at most {QUICK_CAP} for --quick (a minute of CPU); drop --quick to go up to {MAX_CAP}"
        raise InvalidInput(
            f"cap {config.cap} is out of the bridge's range: above min_length ({config.min_length}) and "
            + (why if quick else f"at most {MAX_CAP} (the network's positions)")
        )
    responses = config.batch_prompts * config.group_size
    if quick and responses > QUICK_RESPONSES:
        raise InvalidInput(
            f"batch_prompts x group_size = {responses} completions a step is too many for --quick (at most "
            f"{QUICK_RESPONSES}); drop --quick for a full run"
        )
    if not 1 <= config.steps <= MAX_STEPS:
        raise InvalidInput(f"steps {config.steps} is out of the bridge's range 1..{MAX_STEPS:,}")
    if not 1 <= len(seeds) <= MAX_SEEDS or min(seeds) < 0:
        raise InvalidInput(f"seeds: 1..{MAX_SEEDS} seeds of at least 0 (got {len(seeds)})")


@dataclass
class Bridge:
    """Networks trained by TRL beside the toy: `frame` (FRAME_COLUMNS: one row per label, source
    (network or toy), seed and step; the toy's rows are its exact expectations at each step's policy,
    its loss and clipping NaN), the TRL settings of each label and the toyrl preset or spec they map
    to, the GRPOConfig fields in effect by label, each seed's fit, CPU seconds by (label, seed) of
    the training (the fits' apart), the configuration, the network's learning rate, and the label
    the others are compared with (`reference`, or None)."""

    frame: pd.DataFrame
    settings: dict[str, dict[str, Any]]
    variants: dict[str, str]
    trl_args: dict[str, dict[str, Any]]
    fits: dict[int, Fit]
    cpu_seconds: dict[tuple[str, int], float]
    config: Config
    seeds: list[int]
    learning_rate: float
    reference: str | None = REFERENCE

    @classmethod
    def combine(cls, parts: Sequence[Bridge]) -> Bridge:
        """Bridges of the same labels, settings and configuration on other seeds, as one."""
        first = parts[0]
        for part in parts[1:]:
            if (part.settings, part.config, part.reference) != (
                first.settings,
                first.config,
                first.reference,
            ):
                raise ValueError("bridges of other settings, configurations or references cannot be combined")
        frame = _ordered(pd.concat([part.frame for part in parts], ignore_index=True), list(first.settings))
        return dataclasses.replace(
            first,
            frame=frame,
            fits={seed: fit for part in parts for seed, fit in part.fits.items()},
            cpu_seconds={key: value for part in parts for key, value in part.cpu_seconds.items()},
            seeds=[seed for part in parts for seed in part.seeds],
        )

    def gap(self, label: str, metric: str = "length_incorrect", step: int | None = None) -> Gap:
        """`metric` of `label` less the reference's at `step` (default the last), network and toy."""
        if self.reference is None:
            raise ValueError("this bridge has no reference to compare with")
        return gap(self.frame, label, self.reference, metric, step)

    def summary(self, label: str | None = None) -> list[str]:
        """The comparison in words (`summary`), of `label` (default: the first that is not the
        reference) with the reference."""
        return summary(self, label)

    def meta(self) -> dict[str, Any]:
        """The sidecar: how the table was made."""
        from toyrl.version import __version__

        torch, transformers, _, trl = require()
        made = sidecar_settings(self.settings, self.config, self.seeds)
        return {
            "toyrl_version": __version__,
            "kind": "bridge",
            "config": made["config"],
            "seeds": made["seeds"],
            "mean_field": None,
            "variants": made["variants"],
            "settings": self.settings,
            "reference": self.reference,
            "learning_rate": self.learning_rate,
            "window": WINDOW,
            "trl_args": self.trl_args,
            "fits": {str(seed): dataclasses.asdict(fit) for seed, fit in self.fits.items()},
            "cpu_seconds": {f"{label}/{seed}": round(s, 3) for (label, seed), s in self.cpu_seconds.items()},
            "versions": {
                "trl": trl.__version__,
                "transformers": transformers.__version__,
                "torch": torch.__version__,
            },
            "model": MODEL_SHAPE,
            "kernels": kernels_in_use(),
        }


@dataclass(frozen=True)
class Contrast:
    """One series less another, (label, source) each, of `metric` at `step`, each averaged over the
    WINDOW steps up to it: per seed, and their mean and standard error, over seeds with two or more,
    else over the window's steps (a single seed's batch-to-batch spread, not the spread of
    trajectories across seeds: `over` says which)."""

    metric: str
    step: int
    per_seed: FloatArray
    mean: float
    se: float
    over: str  # "seeds" or "steps"

    @property
    def shown(self) -> str:
        """'+8.5 ± 1.6' (a standard error below 0.1 with two decimals, both: '+0.43 ± 0.04')."""
        digits = 2 if np.isfinite(self.se) and self.se < 0.1 else 1
        return f"{self.mean:+.{digits}f} ± {self.se:.{digits}f}"

    @property
    def se_words(self) -> str:
        """What its ± is: '± SE over 3 seeds', or '± SE over the last 10 steps' (one seed)."""
        return (
            f"± SE over {len(self.per_seed)} seeds"
            if self.over == "seeds"
            else f"± SE over the last {WINDOW} steps"
        )

    @property
    def sign(self) -> int:
        """+1 or -1 when the mean is beyond MARGIN_SE standard errors of 0, else 0."""
        if not np.isfinite(self.mean) or not abs(self.mean) > MARGIN_SE * (
            self.se if np.isfinite(self.se) else 0
        ):
            return 0
        return int(np.sign(self.mean))


def _window(frame: pd.DataFrame, step: int) -> pd.DataFrame:
    return frame[(frame["step"] > step - WINDOW) & (frame["step"] <= step)]


def contrast(
    frame: pd.DataFrame, metric: str, step: int, first: tuple[str, str], second: tuple[str, str]
) -> Contrast:
    """`metric` of `first` less `second` ((label, source) each) at `step` in a bridge's frame."""
    window = _window(frame, step)
    series = [
        window[(window["label"] == label) & (window["source"] == source)].set_index(["seed", "step"])[metric]
        for label, source in (first, second)
    ]
    difference = (series[0] - series[1]).dropna()  # NaN: a step with no incorrect (correct) completion
    by_seed = difference.groupby(level="seed").mean()
    if len(by_seed) > 1:
        spread, over = by_seed.std(ddof=1) / np.sqrt(len(by_seed)), "seeds"
    else:
        spread, over = (
            (difference.std(ddof=1) / np.sqrt(len(difference)) if len(difference) > 1 else np.nan),
            "steps",
        )
    mean = float(by_seed.mean()) if len(by_seed) else np.nan
    return Contrast(metric, step, by_seed.to_numpy(), mean, float(spread), over)


@dataclass(frozen=True)
class Gap:
    """A metric of one label less the reference's (`contrast`), the network's and the toy's."""

    network: Contrast
    toy: Contrast

    @property
    def verdict(self) -> str:
        """ "transfers" (the same sign, both beyond MARGIN_SE standard errors), "reversed" (opposite
        signs, both beyond), "not shown" (the toy's beyond, the network's within), "network only"
        (the reverse) or "absent" (both within)."""
        real, toy = self.network.sign, self.toy.sign
        if real and toy:
            return "transfers" if real == toy else "reversed"
        if toy:
            return "not shown"
        return "network only" if real else "absent"


def gap(
    frame: pd.DataFrame, label: str, reference: str, metric: str = "length_incorrect", step: int | None = None
) -> Gap:
    """`metric` of `label` less `reference`'s at `step` (default the last) in a bridge's frame."""
    step = int(frame["step"].max()) if step is None else step
    return Gap(*(contrast(frame, metric, step, (label, source), (reference, source)) for source in SOURCES))


def level(frame: pd.DataFrame, label: str, source: str, metric: str, step: int) -> float:
    """`metric` of `label` by `source` at `step`: the mean over the WINDOW steps up to it and the seeds."""
    rows = _window(frame, step)
    rows = rows[(rows["label"] == label) & (rows["source"] == source)]
    return float(rows[metric].mean())


VERDICT_WORDS = {
    "transfers": "transfers (the same sign, both beyond 3 SE)",
    "reversed": "is reversed (opposite signs, both beyond 3 SE)",
    "not shown": "is not shown by the network (within 3 SE; more steps or seeds may show it)",
    "network only": "appears in the network only (the toy's is within 3 SE)",
    "absent": "is absent from both (within 3 SE)",
}


def summary(bridge: Bridge, label: str | None = None) -> list[str]:
    """The bridge's comparison in words: the gap in incorrect length against the reference, network
    and toy, and whether it transfers; accuracy and correct length, network against toy, and
    whether they match; what the network does that the toy cannot (tokens off the ramble, clipped
    gradient steps)."""
    frame = bridge.frame
    labels = list(bridge.settings)
    step = int(frame["step"].max())
    lines: list[str] = []
    others = [name for name in labels if name != bridge.reference]
    label = label or (others[0] if others else labels[0])
    if bridge.reference is not None and label != bridge.reference:
        found = bridge.gap(label, step=step)
        lines.append(
            f"incorrect length, {label} - {bridge.reference}, at step {step} (mean of the last {WINDOW} "
            f"steps, {found.network.se_words}): network {found.network.shown} tokens, "
            f"toy {found.toy.shown}: the drift {VERDICT_WORDS[found.verdict]}"
        )
    for metric, words, digits in (("accuracy", "accuracy", 2), ("length_correct", "correct length", 1)):
        first = {source: level(frame, label, source, metric, min(WINDOW - 1, step)) for source in SOURCES}
        last = {source: level(frame, label, source, metric, step) for source in SOURCES}
        apart = contrast(frame, metric, step, (label, "network"), (label, "toy"))
        lines.append(
            f"{words} of {label}: network {first['network']:.{digits}f} -> {last['network']:.{digits}f}, toy "
            f"{first['toy']:.{digits}f} -> {last['toy']:.{digits}f} (first and last {WINDOW} steps): "
            + (
                "matches the toy (within 3 SE)"
                if apart.sign == 0
                else f"does not transfer (network - toy {apart.mean:+.{digits}f} ± {apart.se:.{digits}f}, "
                f"{apart.se_words})"
            )
        )
    rows = frame[(frame["label"] == label) & (frame["source"] == "network")]
    lines.append(
        f"network only ({label}): {_window(rows, step)['off_ramble'].mean():.1%} of ramble positions held "
        f"another token over the last {WINDOW} steps; max_grad_norm clipped {rows['clipped'].mean():.0%} of "
        "the steps"
    )
    return lines


def _ordered(frame: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """Rows by label (in `labels`' order), source (network, toy), seed and step."""
    order = {label: i for i, label in enumerate(labels)}
    frame = frame.sort_values(
        ["label", "source", "seed", "step"],
        key=lambda c: c.map(order) if c.name == "label" else c,
        kind="stable",
    )
    return frame.reset_index(drop=True)


def network_frame(run: BridgeRun, label: str, seed: int) -> pd.DataFrame:
    """A run's steps as a bridge frame's network rows."""
    rows = run.steps.assign(label=label, source="network", seed=seed)
    return rows[FRAME_COLUMNS]


def toy_frame(toy: pd.DataFrame, label: str, cap: int) -> pd.DataFrame:
    """The toy's exact curves (`toy_curves`) as a bridge frame's toy rows: accuracy and lengths are
    the exact expectations at each step's policy, and so is the truncated share (the stop
    probabilities are shared by the prompts: P(right) (1 - s_right)^cap + P(wrong) (1 - s_wrong)^cap,
    P(right) the mean over prompts); the toy has no other tokens, and its loss and clipping are not
    recorded (NaN, False)."""
    p_right = toy["p_right_approach"].to_numpy()

    def survive(column: str) -> FloatArray:  # (1 - s)^cap, by toyrl's own log1p and exp
        return np.asarray(kernels.exp(cap * kernels.log1p(-toy[column].to_numpy())))

    return pd.DataFrame(
        {
            "label": label,
            "source": "toy",
            "seed": toy["seed"].to_numpy(),
            "step": toy["step"].to_numpy(),
            **{metric: toy[metric].to_numpy() for metric in METRICS},
            "truncated": p_right * survive("stop_prob_right") + (1 - p_right) * survive("stop_prob_wrong"),
            "off_ramble": 0.0,
            "loss": np.nan,
            "grad_norm": toy["grad_norm"].to_numpy(),
            "clipped": False,
        }
    )[FRAME_COLUMNS]


def run_bridge(
    labelled: Mapping[str, Mapping[str, Any]],
    config: Config = BRIDGE_CONFIG,
    seeds: Sequence[int] = (0,),
    reference: str | None = REFERENCE,
    cache_dir: str | Path | None = None,
    learning_rate: float = LEARNING_RATE,
    progress: Callable[[int, int], None] | None = None,
) -> Bridge:
    """Train each label's TRL settings (`train`) on each seed, network and toy at `config`
    (config.steps steps), the labels of a seed from the same fitted start, TRL's prompts and
    generation seeded alike (so the labels' first batches are the same), and gather them in a
    `Bridge`. `progress(steps done, steps in all)` over every run's steps."""
    seeds = list(seeds)
    check_budget(config, seeds, quick=False)
    if reference is not None and reference not in labelled:
        raise InvalidInput(f"the reference {reference!r} is not one of the labels ({', '.join(labelled)})")
    total = len(labelled) * len(seeds) * config.steps
    frames: list[pd.DataFrame] = []
    fits: dict[int, Fit] = {}
    seconds: dict[tuple[str, int], float] = {}
    trl_args: dict[str, dict[str, Any]] = {}
    variants: dict[str, str] = {}
    done = 0
    for seed in seeds:
        for label, settings in labelled.items():
            base = done

            def report(steps: int, base: int = base) -> None:
                if progress is not None:
                    progress(base + steps, total)

            run = train(
                settings, config, seed, cache_dir=cache_dir, learning_rate=learning_rate, progress=report
            )
            done += config.steps
            fits.setdefault(seed, run.fit)
            seconds[label, seed] = run.cpu_seconds
            trl_args.setdefault(label, run.trl_args)
            variants.setdefault(label, run.variant)
            frames.append(network_frame(run, label, seed))
    for label, settings in labelled.items():
        variant = toy_variant_for(settings, config)
        frames.append(toy_frame(toy_curves(config, variant, seeds), label, config.cap))
    frame = _ordered(pd.concat(frames, ignore_index=True), list(labelled))
    return Bridge(
        frame,
        {label: dict(settings) for label, settings in labelled.items()},
        variants,
        trl_args,
        fits,
        seconds,
        config,
        seeds,
        learning_rate,
        reference,
    )


def reference_settings(settings: Mapping[str, Any], config: Config = BRIDGE_CONFIG) -> dict[str, Any]:
    """TRL's Dr. GRPO beside `settings`: the fewest of TRL's Dr. GRPO settings over them that make
    the toy's variant Dr. GRPO's loss in the same schedule, clip and KL term (`toyrl check`'s
    reference, `toyrl.trainers.check.dr_grpo_settings`), else REFERENCE_SETTINGS over them."""
    from toyrl.trainers.check import dr_grpo_settings

    fix = dr_grpo_settings(resolve_settings(settings), config)
    return dict(settings) | (REFERENCE_SETTINGS if fix is None else fix)


def labelled(settings: Mapping[str, Any], config: Config = BRIDGE_CONFIG) -> dict[str, dict[str, Any]]:
    """`compare`'s labels and their TRL settings: the settings, labelled by the toyrl preset they map
    to (else "settings"), and REFERENCE with `reference_settings`; REFERENCE alone when the settings
    are Dr. GRPO's loss already."""
    reference = reference_settings(settings, config)
    variant = toy_variant_for(settings, config)
    if variant.spec() == toy_variant_for(reference, config).spec():
        return {REFERENCE: dict(settings)}
    name = preset_of(variant) or "settings"
    return {"settings" if name == REFERENCE else name: dict(settings), REFERENCE: reference}


def sidecar_settings(
    labels: Mapping[str, Mapping[str, Any]], config: Config, seeds: Sequence[int]
) -> dict[str, Any]:
    """What a bridge's sidecar records of how it was made that decides whether results on disk are
    these (`toyrl.results.check_overwrite`): the configuration, each label's toy variant spec and
    the seeds. Known before training."""
    return {
        "config": config.to_dict(),
        "seeds": list(seeds),
        "mean_field": None,
        "variants": {
            label: {"spec": toy_variant_for(given, config).spec()} for label, given in labels.items()
        },
    }


def compare(
    settings: Mapping[str, Any],
    config: Config = BRIDGE_CONFIG,
    seeds: Sequence[int] = (0,),
    cache_dir: str | Path | None = None,
    learning_rate: float = LEARNING_RATE,
    progress: Callable[[int, int], None] | None = None,
) -> Bridge:
    """TRL's settings (GRPOConfig names and values, e.g. {"loss_type": "grpo"}; the schedule's are
    the configuration's) and TRL's Dr. GRPO beside them (`reference_settings`), each trained as the
    network by TRL's GRPOTrainer (`train`) and run on the toy at `config` (config.steps steps), on
    `seeds`. The labels are the toyrl preset the settings map to (else "settings") and REFERENCE;
    the settings alone when they are Dr. GRPO's loss already. Returns a `Bridge`: its `frame` (one
    row per label, source, seed and step), `gap(label)`, `summary()` in words and `meta()`.
    Needs the bridge extra; the fitted starting networks are cached in `cache_dir`."""
    labels = labelled(settings, config)
    return run_bridge(labels, config, seeds, REFERENCE, cache_dir, learning_rate, progress)


def legend_names(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each label with its TRL settings, for a figure's legend: `grpo (loss_type=grpo,
    scale_rewards=group)`, `dapo (TRL's defaults)`."""
    return {label: f"{label} ({settings_text(given)})" for label, given in settings.items()}


def settings_text(given: Mapping[str, Any]) -> str:
    """TRL settings as `loss_type=grpo, scale_rewards=group`; DEFAULTS_NAME when there are none."""
    return ", ".join(f"{key}={value}" for key, value in given.items()) or DEFAULTS_NAME


def summary_json(bridge: Bridge) -> dict[str, Any]:
    """`toyrl bridge --json`: the settings, each label's gap against the reference (network and toy,
    per seed, mean, SE and what it is over; the verdict), and the summary's lines."""
    step = int(bridge.frame["step"].max())
    gaps = {}
    for label in bridge.settings:
        if bridge.reference is None or label == bridge.reference:
            continue
        found = bridge.gap(label, step=step)
        gaps[label] = {
            "metric": "length_incorrect",
            "step": step,
            "window": WINDOW,
            "verdict": found.verdict,
            **{
                source: {
                    "per_seed": [float(x) for x in part.per_seed],
                    "mean": part.mean,
                    "se": part.se,
                    "se_over": part.over,
                }
                for source, part in (("network", found.network), ("toy", found.toy))
            },
        }
    return {
        "settings": bridge.settings,
        "variants": bridge.variants,
        "reference": bridge.reference,
        "seeds": bridge.seeds,
        "steps": bridge.config.steps,
        "gaps": gaps,
        "summary": bridge.summary(),
    }
