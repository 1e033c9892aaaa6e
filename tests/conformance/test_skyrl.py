"""SkyRL (skyrl 0.3.0) against the toy variants toyrl's mapping (toyrl/trainers/skyrl.py) gives.

What runs is SkyRL's own code, from skyrl/backends/skyrl_train/utils/ppo_utils.py: the advantage
estimators through `compute_advantages_and_returns` (the registry's "grpo", "rloo", "maxrl",
"reinforce++", called with the arguments RayPPOTrainer.compute_advantages_and_returns passes:
token-level rewards with each response's reward on its last token, the response mask, the
prompts' uids, grpo_norm_by_std), the loss reduction `apply_loss_reduction_to_advantages_minibatch`
on each mini-batch, and the registered policy loss (`PolicyLossRegistry.get(policy_loss_type)`:
regular, dual_clip, gspo, cispo, sapo, each ending in `reduce_loss`, the sum over the loss mask),
with an `AlgorithmConfig` built from SkyRL's own dataclass.

The plumbing around them is restated, as RayPPOTrainer and the worker run it (skyrl/train/trainer.py,
skyrl/backends/skyrl_train/workers/worker.py), because importing those modules needs Ray, vLLM and
transformers: the batch is cut into mini-batches of policy_mini_batch_size x n_samples_per_prompt
consecutive responses (compute_prompt_mini_batch_boundaries, non-step-wise: whole groups in order),
each mini-batch's advantages scaled by the reduction (`_normalize_advantages`, with each prompt's
mini-batch-relative slice for prompt_mean), then, per optimiser step, the loss of each micro-batch
of micro_train_batch_size_per_gpu responses backpropagated (`policy_loss * dp_size`, one rank:
dp_size 1; the gradients of the micro-batches add up) before the step. The KL term, which the
worker adds (masked_mean per response, then the mean) and the mapping leaves out unless
loss_reduction is sequence_mean, is not in the compared loss (use_kl_loss=False where it would be).

SkyRL computes the PPO and CISPO ratio in float32 (torch_utils.safe_exp_delta: the log-ratio cast
to float32, clamped at +-20, exponentiated, cast back), so its gradient carries float32 rounding
(about 1e-8 relative): the comparisons at 1e-10 run that helper's same clamp and exp in float64
(`float64_ratio`, patched into ppo_utils' namespace), and `test_float32_as_skyrl_computes` runs it
unpatched and bounds the difference by float32's rounding.

The model is a float64 leaf of per-token log-probs [N, T] (toy layout) at the policy of each
optimiser step: the first at theta_old (ratio 1), the later ones at moved thetas, where the clip
acts. Autograd on the leaf gives d loss / d logp of every token, compared with toyrl's
(tests/conformance/toy.py, `token_weights` of the mapping's spec at that update).
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.conformance.conftest import trainer_module
from tests.conformance.toy import (
    CONFIG,
    ToyBatch,
    advantages,
    moved,
    relative_difference,
    sampled,
    stop_pushed,
    token_weights,
)
from toyrl.trainers import resolve
from toyrl.variants import parse_variant

DISTRIBUTION = "skyrl"
MINI = 2  # prompts an optimiser step: the toy's 4 prompts in 2 mini-batches
BASE = {
    "trainer.train_batch_size": CONFIG.batch_prompts,
    "trainer.policy_mini_batch_size": MINI,
    "generator.n_samples_per_prompt": CONFIG.group_size,
    "trainer.algorithm.max_seq_len": CONFIG.cap + 1,  # T: the toy's length_norm
    "trainer.algorithm.use_kl_loss": False,  # the worker's KL term is not in the compared loss
}


@pytest.fixture(scope="module")
def skyrl() -> types.SimpleNamespace:
    if "skyrl.backends.backend" not in sys.modules:
        try:  # the Tinker backend's stand-in (its docstring says why), in SkyRL's environment only
            sys.modules["skyrl.backends.backend"] = importlib.import_module("_skyrl_backend_standin")
        except ImportError:
            pass
    ppo = trainer_module("skyrl.backends.skyrl_train.utils.ppo_utils", DISTRIBUTION)
    import torch
    from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean
    from skyrl.train.config import AlgorithmConfig, CISPOConfig, SAPOConfig

    return types.SimpleNamespace(
        ppo=ppo,
        masked_mean=masked_mean,
        torch=torch,
        AlgorithmConfig=AlgorithmConfig,
        CISPOConfig=CISPOConfig,
        SAPOConfig=SAPOConfig,
    )


def spec_of(settings: dict[str, Any]) -> str:
    """toyrl's mapping of the settings (over BASE): the spec `toyrl check` runs, with its
    micro-batches where the normaliser's scope is the micro-batch (as the check cuts the toy's
    optimiser steps: `ToyMapping.micro_batch_responses`)."""
    mapping = resolve("skyrl", "0.3.0", BASE | settings).mapping
    if mapping.micro_batch_responses is None:
        return mapping.spec
    assert mapping.step_responses is not None
    return f"{mapping.spec},micro_batches={mapping.step_responses // mapping.micro_batch_responses}"


def float64_ratio(torch):
    """torch_utils.safe_exp_delta's clamp and exp, in the log-ratio's own dtype (float64 here)."""

    def safe_exp_delta(delta, clip: float = 20.0, out_dtype=None):
        return torch.clamp(delta, -clip, clip).exp().to(out_dtype or delta.dtype)

    return safe_exp_delta


def run(
    skyrl,
    toy: ToyBatch,
    thetas: list[np.ndarray],
    settings: dict[str, Any],
    loss_mask=None,
    exact: bool = True,
) -> list:
    """SkyRL's advantages and one optimiser step per mini-batch (the policy at thetas[m] for step
    m): (advantages [N], [d loss / d logp [N, T] of each step]); `exact`: the ratio in float64."""
    if exact:
        with mock.patch.object(skyrl.ppo, "safe_exp_delta", float64_ratio(skyrl.torch)):
            return run(skyrl, toy, thetas, settings, loss_mask, exact=False)
    torch = skyrl.torch
    s = resolve("skyrl", "0.3.0", BASE | settings).values
    a = "trainer.algorithm."
    config = skyrl.AlgorithmConfig(
        advantage_estimator=s[a + "advantage_estimator"],
        grpo_norm_by_std=s[a + "grpo_norm_by_std"],
        loss_reduction=s[a + "loss_reduction"],
        max_seq_len=s[a + "max_seq_len"],
        policy_loss_type=s[a + "policy_loss_type"],
        eps_clip_low=s[a + "eps_clip_low"],
        eps_clip_high=s[a + "eps_clip_high"],
        clip_ratio_c=s[a + "clip_ratio_c"],
        cispo=skyrl.CISPOConfig(
            cispo_eps_clip_low=s[a + "cispo.cispo_eps_clip_low"],
            cispo_eps_clip_high=s[a + "cispo.cispo_eps_clip_high"],
        ),
        sapo=skyrl.SAPOConfig(tau_pos=s[a + "sapo.tau_pos"], tau_neg=s[a + "sapo.tau_neg"]),
        use_kl_loss=s[a + "use_kl_loss"],
        kl_loss_coef=s[a + "kl_loss_coef"],
        kl_estimator_type=s[a + "kl_estimator_type"],
    )
    n, width = toy.responses, toy.width
    group = toy.shape[1]
    response_mask = torch.tensor(toy.mask, dtype=torch.float64)
    masks = torch.tensor(toy.mask if loss_mask is None else loss_mask, dtype=torch.float64)
    last = torch.tensor(toy.ramble, dtype=torch.long)  # the last token of response i: L_i
    rewards = torch.zeros(n, width, dtype=torch.float64)
    rewards[torch.arange(n), last] = torch.tensor(toy.rewards(parse_variant("dr_grpo")), dtype=torch.float64)
    uids = np.array([f"prompt {i // group}" for i in range(n)])
    skyrl.ppo.AdvantageEstimatorRegistry.repopulate_registry()
    skyrl.ppo.PolicyLossRegistry.repopulate_registry()
    advantage, _ = skyrl.ppo.compute_advantages_and_returns(
        token_level_rewards=rewards,
        response_mask=response_mask,
        index=uids,
        adv_estimator=config.advantage_estimator,
        config=config,
        values=None,
        gamma=1.0,
        lambd=1.0,
        grpo_norm_by_std=config.grpo_norm_by_std,
    )
    size = s["trainer.policy_mini_batch_size"] * group
    micro = s["trainer.micro_train_batch_size_per_gpu"]
    scaled = torch.zeros_like(advantage)
    for start in range(0, n, size):  # _normalize_advantages, one mini-batch at a time
        prompts = [(p - start, p - start + group) for p in range(start, start + size, group)]
        scaled[start : start + size] = skyrl.ppo.apply_loss_reduction_to_advantages_minibatch(
            advantages=advantage[start : start + size],
            loss_mask=masks[start : start + size],
            loss_reduction=config.loss_reduction,
            micro_batch_size=micro,
            max_seq_len=config.max_seq_len,
            prompt_boundaries=prompts,
        )
    old = torch.tensor(toy.logp(), dtype=torch.float64)
    loss_fn = skyrl.ppo.PolicyLossRegistry.get(config.policy_loss_type)
    grads = []
    for step, start in enumerate(range(0, n, size)):
        leaf = torch.tensor(
            toy.logp(thetas[min(step, len(thetas) - 1)]), dtype=torch.float64, requires_grad=True
        )
        for first in range(start, start + size, micro):  # the worker's micro-batches
            rows = slice(first, min(first + micro, start + size))
            loss, _ = loss_fn(
                log_probs=leaf[rows],
                old_log_probs=old[rows],
                advantages=scaled[rows],
                config=config,
                loss_mask=masks[rows],
                rollout_logprobs=None,
            )
            if config.use_kl_loss:  # the worker's KL term: per response over its tokens, then the mean
                kl = skyrl.ppo.compute_approx_kl(
                    leaf[rows], old[rows], loss_mask=masks[rows], kl_estimator_type=config.kl_estimator_type
                )
                weight = (rows.stop - rows.start) / size  # microbatch_weight
                kl_loss = skyrl.masked_mean(kl, masks[rows], dim=-1).mean() * config.kl_loss_coef
                loss = loss + kl_loss * weight
            (loss * 1).backward()  # policy_loss x dp_size (one rank)
        grads.append(leaf.grad.detach().numpy().copy())
    return [advantage[:, 0].detach().numpy().copy(), grads]


def check(
    conform, setting: str, spec: str, got: np.ndarray, expected: np.ndarray, agrees: bool = True
) -> None:
    conform(DISTRIBUTION, setting, spec, relative_difference(got, expected), expected=agrees)


def thetas_of(toy: ToyBatch, seed: int) -> list[np.ndarray]:
    """theta_old, then a policy whose right answers stop several times likelier (`stop_pushed`):
    ratios beyond the clip on the second optimiser step."""
    return [toy.theta_old, stop_pushed(toy, seed)]


REDUCTIONS = {
    "token_mean": {},
    "token_mean_legacy": {
        "trainer.algorithm.loss_reduction": "token_mean_legacy",
        "trainer.micro_train_batch_size_per_gpu": 2,
    },
    "sequence_mean": {"trainer.algorithm.loss_reduction": "sequence_mean"},
    "seq_mean_token_sum_norm": {"trainer.algorithm.loss_reduction": "seq_mean_token_sum_norm"},
    "prompt_mean": {"trainer.algorithm.loss_reduction": "prompt_mean"},
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("std", [True, False])
@pytest.mark.parametrize("reduction", list(REDUCTIONS))
def test_reductions(skyrl, conform, reduction: str, std: bool, seed: int) -> None:
    """GRPO's advantage (with and without grpo_norm_by_std) and each loss_reduction, in two
    mini-batches: the first optimiser step at ratio 1, the second at a moved theta (the clip acts),
    against toyrl's mapping. token_mean_legacy takes micro-batches of 2 responses (4 a mini-batch),
    each normalised by its own tokens: the mapping's per_micro_batch; the whole mini-batch's token
    mean must differ."""
    toy = sampled(seed, CONFIG)
    settings = REDUCTIONS[reduction] | {"trainer.algorithm.grpo_norm_by_std": std}
    spec = spec_of(settings)
    got_advantages, grads = run(skyrl, toy, thetas_of(toy, 30 + seed), settings)
    variant = parse_variant(spec)
    setting = f"grpo, grpo_norm_by_std={std}, {reduction}, sampled seed {seed}"
    check(conform, f"{setting}: advantages", spec, got_advantages, advantages(variant, toy))
    clipped = []
    for update, grad in enumerate(grads):
        theta = None if update == 0 else thetas_of(toy, 30 + seed)[1]
        expected = token_weights(variant, toy, theta, update=update)
        rows = slice(update * MINI * toy.shape[1], (update + 1) * MINI * toy.shape[1])
        assert np.abs(grad[rows]).max() > 0
        where = "ratio 1" if update == 0 else "moved theta"
        check(conform, f"{setting}, step {update + 1}/2, {where}", spec, grad, expected)
        clipped.append(bool(((expected == 0) & toy.mask)[rows].any()))
        if reduction == "token_mean_legacy":
            whole_spec = spec.replace(",per_micro_batch=True", "").replace(",micro_batches=4", "")
            whole = token_weights(parse_variant(whole_spec), toy, theta, update=update)
            check(
                conform,
                f"{setting}, step {update + 1}/2, vs the mini-batch's token mean",
                spec,
                grad,
                whole,
                False,
            )
    assert clipped[1]  # the clip acts on the moved step


def test_dr_grpo_setting_is_the_preset(skyrl, conform) -> None:
    """SkyRL's documented Dr. GRPO (examples/train/algorithms/drgrpo/run_drgrpo_gsm8k.sh:
    grpo_norm_by_std false, seq_mean_token_sum_norm, use_kl_loss false) is the preset dr_grpo
    in the trainer's schedule, and its default (token_mean, std) is not."""
    toy = sampled(2, CONFIG)
    dr = {
        "trainer.algorithm.grpo_norm_by_std": False,
        "trainer.algorithm.loss_reduction": "seq_mean_token_sum_norm",
        "trainer.algorithm.use_kl_loss": False,
    }
    spec = spec_of(dr)
    assert (
        parse_variant(spec).spec_text()
        == parse_variant(parse_variant("dr_grpo").spec_text() + ",mini_batches=2").spec_text()
    )
    _, grads = run(skyrl, toy, [toy.theta_old], dr)
    check(
        conform,
        "Dr. GRPO setting, step 1",
        "dr_grpo,mini_batches=2",
        grads[0],
        token_weights(parse_variant(spec), toy),
    )
    default = parse_variant(spec_of({}))
    check(
        conform, "Dr. GRPO setting vs the default", spec_of({}), grads[0], token_weights(default, toy), False
    )


@pytest.mark.parametrize("estimator", ["rloo", "maxrl", "reinforce++"])
def test_estimators(skyrl, conform, estimator: str) -> None:
    """rloo: (r - mean) G / (G - 1), toyrl's rloo exactly. maxrl divides by mean + 1e-6 and
    reinforce++ takes masked_whiten's Bessel factor in float64: the mapping's nearest stages (max_rl,
    reinforce_pp) differ by their epsilon and rounding only, below 1e-5 relative, as its notes say.
    Both optimiser steps on-policy (every group of the batch has a right and a wrong answer)."""
    toy = sampled(0, CONFIG)
    settings = {"trainer.algorithm.advantage_estimator": estimator}
    spec = spec_of(settings)
    got_advantages, grads = run(skyrl, toy, [toy.theta_old], settings)
    variant = parse_variant(spec)
    exact = estimator == "rloo"
    expected = advantages(variant, toy)
    check(conform, f"{estimator}: advantages", spec, got_advantages, expected, exact)
    assert relative_difference(got_advantages, expected) < 1e-5
    for update, grad in enumerate(grads):
        weights = token_weights(variant, toy, update=update)
        assert np.abs(weights).max() > 0
        check(conform, f"{estimator}: step {update + 1}/2, ratio 1", spec, grad, weights, exact)
        assert relative_difference(grad, weights) < 1e-5


LOSSES = {
    "dual_clip": {"trainer.algorithm.policy_loss_type": "dual_clip"},
    "gspo": {
        "trainer.algorithm.policy_loss_type": "gspo",
        "trainer.algorithm.loss_reduction": "sequence_mean",
    },
    "cispo": {
        "trainer.algorithm.policy_loss_type": "cispo",
        "trainer.algorithm.cispo.cispo_eps_clip_low": 0.2,
        "trainer.algorithm.cispo.cispo_eps_clip_high": 4.0,
    },
    "sapo": {
        "trainer.algorithm.policy_loss_type": "sapo",
        "trainer.algorithm.loss_reduction": "sequence_mean",
    },
    "regular, clip-higher": {"trainer.algorithm.eps_clip_high": 0.28},
}


@pytest.mark.parametrize("loss", list(LOSSES))
def test_policy_losses(skyrl, conform, loss: str) -> None:
    """Each policy loss the mapping claims, at a policy far from theta_old (right answers' stop
    tokens several times likelier: ratios beyond every clip, 1 + 4 included) on the second
    mini-batch: SkyRL's loss against the mapping's objective."""
    toy = sampled(4, CONFIG)
    far = stop_pushed(toy, 41)
    settings = LOSSES[loss]
    spec = spec_of(settings)
    _, grads = run(skyrl, toy, [toy.theta_old, far], settings)
    variant = parse_variant(spec)
    check(conform, f"{loss}: step 1, ratio 1", spec, grads[0], token_weights(variant, toy, update=0))
    expected = token_weights(variant, toy, far, update=1)
    check(conform, f"{loss}: step 2, far theta", spec, grads[1], expected)
    if loss == "dual_clip":  # the regular loss has no dual clip: it must differ here
        plain = parse_variant(spec_of({}))
        check(
            conform,
            "dual_clip vs regular",
            spec_of({}),
            grads[1],
            token_weights(plain, toy, far, update=1),
            False,
        )


def test_overlong_filtering(skyrl, conform) -> None:
    """generator.apply_overlong_filtering: the generator zeroes a truncated response's loss mask;
    SkyRL's token mean then counts only the kept tokens: toyrl's mask_truncated."""
    toy = sampled(5, CONFIG)
    assert not toy.stopped.all()
    settings = {"generator.apply_overlong_filtering": True}
    spec = spec_of(settings)
    loss_mask = toy.mask & toy.stopped[:, None]
    _, grads = run(skyrl, toy, thetas_of(toy, 50), settings, loss_mask=loss_mask)
    variant = parse_variant(spec)
    for update, grad in enumerate(grads):
        theta = None if update == 0 else thetas_of(toy, 50)[1]
        assert not grad[~toy.stopped].any()
        check(
            conform,
            f"overlong filtering, step {update + 1}/2",
            spec,
            grad,
            token_weights(variant, toy, theta, update=update),
        )


@pytest.mark.parametrize("loss", ["regular", "cispo"])
def test_float32_as_skyrl_computes(skyrl, conform, loss: str) -> None:
    """SkyRL's own float32 ratio (safe_exp_delta unpatched): what differs from the float64 run is
    float32 rounding (below 1e-6 relative), no other rule."""
    toy = sampled(6, CONFIG)
    settings = LOSSES["cispo"] if loss == "cispo" else {}
    spec = spec_of(settings)
    thetas = thetas_of(toy, 60)
    _, grads = run(skyrl, toy, thetas, settings, exact=False)
    variant = parse_variant(spec)
    for update, grad in enumerate(grads):
        expected = token_weights(variant, toy, None if update == 0 else thetas[1], update=update)
        assert relative_difference(grad, expected) < 1e-6
        exact = loss == "cispo" and update == 0  # CISPO's weight is the detached ratio, exp(0) = 1 in float32
        setting = f"{loss}, float32 ratio as SkyRL computes, step {update + 1}/2"
        check(conform, setting, spec, grad, expected, exact)


@pytest.mark.parametrize("reduction", ["sequence_mean", "token_mean"])
def test_kl_term(skyrl, conform, reduction: str) -> None:
    """use_kl_loss with kl_loss_coef 0.05 (k3 to the initial policy), at a moved theta (ratio 1
    gives no KL gradient) in 2 micro-batches a step: with sequence_mean the worker's per-response
    mean is the loss's own aggregation and the mapping's beta term agrees; with token_mean the
    mapping leaves the term out (told), so it differs from SkyRL's by that term."""
    toy = sampled(7, CONFIG)
    settings = {
        "trainer.algorithm.use_kl_loss": True,
        "trainer.algorithm.kl_loss_coef": 0.05,
        "trainer.algorithm.loss_reduction": reduction,
        "trainer.micro_train_batch_size_per_gpu": 4,
    }
    spec = spec_of(settings)
    assert ("beta=0.05" in spec) == (reduction == "sequence_mean")
    thetas = [toy.theta_old, moved(toy, 80, scale=0.5)]
    _, grads = run(skyrl, toy, thetas, settings)
    variant = parse_variant(spec)
    expected = token_weights(variant, toy, thetas[1], update=1)
    check(
        conform,
        f"k3 0.05, {reduction}: step 2, moved theta",
        spec,
        grads[1],
        expected,
        reduction == "sequence_mean",
    )


@pytest.mark.parametrize("seed", [5, 8])
def test_zero_variance_filter(skyrl, conform, seed: int) -> None:
    """trainer.algorithm.zero_variance_filter: SkyRL's own `zero_variance_filter` (trainer_utils.py)
    picks the trajectories to keep, and the trainer zeroes the others' loss masks (trainer.py,
    before the advantages), so a group whose rewards are all equal leaves token_mean's count:
    toyrl's selector=informative."""
    zero_variance_filter = installed_function("train/utils/trainer_utils.py", "zero_variance_filter")
    toy = sampled(seed, CONFIG)
    group = toy.shape[1]
    rewards = toy.rewards(parse_variant("dr_grpo"))
    uids = [f"prompt {i // group}" for i in range(toy.responses)]
    settings = {"trainer.algorithm.zero_variance_filter": True}
    tol = resolve("skyrl", "0.3.0", BASE | settings).values["trainer.algorithm.zero_variance_filter_tol"]
    kept = zero_variance_filter(
        list(map(float, rewards)), uids, loss_masks=toy.mask.astype(int).tolist(), tol=tol
    )
    dropped = np.setdiff1d(np.arange(toy.responses), kept)
    assert len(dropped) and len(kept), "the batch should hold groups of both kinds"
    loss_mask = toy.mask.copy()
    loss_mask[dropped] = False
    spec = spec_of(settings)
    assert "selector=informative" in spec
    _, grads = run(skyrl, toy, thetas_of(toy, 60 + seed), settings, loss_mask=loss_mask)
    variant = parse_variant(spec)
    for update, grad in enumerate(grads):
        theta = None if update == 0 else thetas_of(toy, 60 + seed)[1]
        check(
            conform,
            f"zero_variance_filter seed {seed}, step {update + 1}",
            spec,
            grad,
            token_weights(variant, toy, theta, update=update),
        )


def installed_function(path: str, name: str) -> Any:
    """The installed SkyRL's own function `name` of its file `path` (under the package), compiled
    from that file alone: trainer_utils imports SkyRL's Ray workers, dataloaders and tokenizers at
    its top (its package's __init__ too), none of which the function calls, so the function's own
    source is taken from the installed file, with the typing and collections names it uses."""
    import ast
    import collections
    import importlib.util
    import typing

    spec = importlib.util.find_spec("skyrl")
    assert spec is not None and spec.origin is not None
    origin = str(Path(spec.origin).parent / path)
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"defaultdict": collections.defaultdict, **vars(typing)}
    exec(compile(ast.Module(body=[node], type_ignores=[]), origin, "exec"), namespace)
    return namespace[name]
