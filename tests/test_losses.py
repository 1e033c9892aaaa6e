"""toyrl.losses, the exercise's token-level API: autograd coefficients, padding, properties, toy bridge."""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl.config import Config
from toyrl.objective import Variant, advantages, parse_spec
from toyrl.policy import Coefficients, OwnLogits, TokenTable, policy_gradient, sample_batch
from toyrl.stages import weights
from toyrl.train import Epoch, Part, Plan
from toyrl.variants import ARTICLE, VARIANTS


def test_toyrl_imports_and_runs_without_torch(tmp_path) -> None:
    """With torch made unimportable, the package and `toyrl run` still work."""
    code = (
        "import sys, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('torch is not installed')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import toyrl, toyrl.cli, toyrl.train, toyrl.examples, toyrl.plots\n"
        "from toyrl.cli import main\n"
        "sys.argv = ['toyrl', 'run', '--seeds', '1', '--steps', '3', '-q', '--out', 'r.csv']\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    assert 'torch' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.csv").exists()


if os.environ.get("CI"):
    import torch  # CI installs the CPU build; a missing torch there is a failure, not a skip
else:
    torch = pytest.importorskip("torch", reason="toyrl.losses needs the optional extra: the torch extra")

from toyrl.losses import (  # noqa: E402
    drgrpo_advantages,
    drgrpo_loss,
    grpo_reference_advantages,
    grpo_reference_loss,
    masked_logprobs,
    token_objective,
    token_statistics,
)

F64 = torch.float64


def random_batch(seed: int, responses: int = 6, positions: int = 9, spread: float = 0.4):
    generator = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(responses, positions, generator=generator, dtype=F64) * 3).requires_grad_()
    old_logp = logp.detach() + spread * torch.randn(responses, positions, generator=generator, dtype=F64)
    ref_logp = logp.detach() + 0.1 * torch.randn(responses, positions, generator=generator, dtype=F64)
    adv = torch.randn(responses, generator=generator, dtype=F64)
    lengths = torch.randint(1, positions + 1, (responses,), generator=generator)
    mask = torch.arange(positions)[None, :] < lengths[:, None]
    return logp, old_logp, ref_logp, adv, mask


def expected_coefficient(logp, old_logp, adv, mask, denominator, clip_eps=0.2):
    """-A_i rho / denominator_i where unclipped, 0 where clipped or masked."""
    ratio = torch.exp(logp.detach() - old_logp)
    clipped = ((adv[:, None] > 0) & (ratio > 1 + clip_eps)) | ((adv[:, None] < 0) & (ratio < 1 - clip_eps))
    return torch.where(mask & ~clipped, -adv[:, None] * ratio / denominator, torch.zeros_like(ratio))


@pytest.mark.parametrize("seed", range(5))
def test_drgrpo_loss_gradient_coefficients(seed: int) -> None:
    logp, old_logp, ref_logp, adv, mask = random_batch(seed)
    loss, _ = drgrpo_loss(logp, old_logp, ref_logp, adv, mask, max_len=12, beta=0.0)
    loss.backward()
    expected = expected_coefficient(logp, old_logp, adv, mask, logp.shape[0] * 12)
    torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)
    ratio = torch.exp(logp.detach() - old_logp)
    assert ((ratio - 1).abs() > 0.2)[mask].any()  # some tokens are clipped, some not


@pytest.mark.parametrize("seed", range(5))
def test_grpo_reference_loss_gradient_coefficients(seed: int) -> None:
    logp, old_logp, ref_logp, adv, mask = random_batch(seed)
    loss, _ = grpo_reference_loss(logp, old_logp, ref_logp, adv, mask, beta=0.0)
    loss.backward()
    lengths = mask.sum(dim=1, keepdim=True).to(F64)
    expected = expected_coefficient(logp, old_logp, adv, mask, logp.shape[0] * lengths)
    torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)


def coefficients(loss_fn, adv, lengths, **kwargs):
    """Per-token gradient coefficient at ratio 1 (the tutorial's r_{i,t} = 1), beta = 0."""
    positions = max(lengths)
    logp = torch.zeros(len(lengths), positions, dtype=F64, requires_grad=True)
    mask = torch.arange(positions)[None, :] < torch.tensor(lengths)[:, None]
    loss, _ = loss_fn(
        logp, logp.detach(), logp.detach(), torch.tensor(adv, dtype=F64), mask, beta=0.0, **kwargs
    )
    loss.backward()
    return [-logp.grad[i, 0].item() for i in range(len(lengths))]


def test_tutorial_two_versus_four_tokens() -> None:
    """Tutorial 2.2: rewards [1, 1, 0, 0], lengths [2, 4, 2, 4], K = 4, L = 4, population std."""
    rewards = np.array([1.0, 1.0, 0.0, 0.0])
    grpo = coefficients(
        grpo_reference_loss, advantages(rewards, "group_std", std_eps=0.0).tolist(), [2, 4, 2, 4]
    )
    assert grpo == [1 / 8, 1 / 16, -1 / 8, -1 / 16]
    centred = drgrpo_advantages(torch.tensor(rewards), 4).tolist()
    assert coefficients(grpo_reference_loss, centred, [2, 4, 2, 4]) == [1 / 16, 1 / 32, -1 / 16, -1 / 32]
    assert coefficients(drgrpo_loss, centred, [2, 4, 2, 4], max_len=4) == [1 / 32, 1 / 32, -1 / 32, -1 / 32]


def test_exercise_five_versus_twenty_tokens() -> None:
    """Two equally negative responses of 5 and 20 tokens: GRPO's per-token penalties differ by 4x."""
    grpo = coefficients(grpo_reference_loss, [-1.0, -1.0], [5, 20])
    assert grpo[0] / grpo[1] == pytest.approx(4.0, rel=1e-15)
    dr = coefficients(drgrpo_loss, [-1.0, -1.0], [5, 20], max_len=20)
    assert dr[0] == dr[1] == -1 / (2 * 20)


@pytest.mark.parametrize("loss_fn", ["drgrpo", "grpo"])
def test_padding_isolation(loss_fn: str) -> None:
    def run(logp_data, old_logp, ref_logp, adv, mask):
        logp = logp_data.clone().requires_grad_()
        if loss_fn == "drgrpo":
            loss, stats = drgrpo_loss(logp, old_logp, ref_logp, adv, mask, max_len=10)
        else:
            loss, stats = grpo_reference_loss(logp, old_logp, ref_logp, adv, mask)
        loss.backward()
        return loss.detach(), logp.grad, stats

    logp, old_logp, ref_logp, adv, mask = random_batch(7)
    loss, grad, stats = run(logp.detach(), old_logp, ref_logp, adv, mask)
    assert torch.all(grad[~mask] == 0)
    garbage = [torch.full_like(old_logp, value) for value in (float("nan"), float("inf"), -1e30)]
    for junk in garbage:
        polluted = [torch.where(mask, t, junk) for t in (logp.detach(), old_logp, ref_logp)]
        other_loss, other_grad, other_stats = run(*polluted, adv, mask)
        assert torch.equal(other_loss, loss) and torch.equal(other_grad, grad)
        assert all(torch.equal(other_stats[k], stats[k]) for k in stats)
    # Another response's length changes nothing of response 0's gradient.
    shorter = mask.clone()
    shorter[1:, 1:] = False
    _, shorter_grad, _ = run(logp.detach(), old_logp, ref_logp, adv, shorter)
    assert torch.equal(shorter_grad[0], grad[0])


def toy_token_tensors(psi, phi_right, phi_wrong, prompt_index, batch, cap):
    """The ramble policy's per-token log-probabilities [N, 1 + cap] and mask, from its parameters.

    Position 0 is the approach token; positions 1..L the ramble, the last one the stop token when
    the response stopped (toyrl.policy's model, token by token).
    """
    right = torch.tensor(batch.right.reshape(-1))
    length = torch.tensor(batch.length.reshape(-1))
    stopped = torch.tensor(batch.stopped.reshape(-1))
    prompt = torch.tensor(np.repeat(prompt_index.reshape(-1), batch.right.shape[-1]))
    approach = torch.where(
        right, torch.nn.functional.logsigmoid(psi[prompt]), torch.nn.functional.logsigmoid(-psi[prompt])
    )
    phi = torch.where(right, phi_right, phi_wrong)[:, None]
    position = torch.arange(cap + 1)[None, :]
    is_stop = stopped[:, None] & (position == length[:, None])
    ramble = torch.where(is_stop, torch.nn.functional.logsigmoid(phi), torch.nn.functional.logsigmoid(-phi))
    logp = torch.where(position == 0, approach[:, None], ramble)
    return logp, position <= length[:, None]


def moved_toy_batch(seed: int, move: float):
    """(config, prompt_index, batch, theta_old, theta, theta_ref): a batch of 4 prompts x 5 sampled
    at theta_old, and policies moved from it by Normal(0, move) (theta) and Normal(0, 0.3) (the
    KL's reference), all from `seed`."""
    config = Config(prompts=6, batch_prompts=4, group_size=5, cap=40, min_length=4, length_norm=41.0)
    rng = np.random.default_rng(seed)
    theta_old = np.concatenate([rng.normal(size=6), [np.log(1 / 12), np.log(1 / 30)]])[None]
    theta = theta_old + rng.normal(0, move, size=theta_old.shape)
    theta_ref = theta_old + rng.normal(0, 0.3, size=theta_old.shape)
    prompt_index = np.array([[4, 0, 3, 1]])
    shape = (1, 4, 5)
    batch = sample_batch(
        theta_old, prompt_index, rng.random(shape), rng.standard_exponential(shape), config.cap
    )
    return config, prompt_index, batch, theta_old, theta, theta_ref


def later_update(variant, config, batch, theta_old, theta, theta_ref):
    """(included [1, B, G], advantages [1, B, G], the closed-form gradient [1, P + 2], clip
    fraction [1]) of one whole-batch update of `variant` at theta on a batch drawn at theta_old,
    through toyrl's Plan and Epoch, as training takes a later update."""
    plan = Plan.of([variant])
    included = plan.included(batch)
    advantages = plan.advantages(plan.rewards(batch, config), config)
    denominator, n = plan.denominators(batch, included, config)
    own = OwnLogits.of(batch, theta.shape[-1])
    ref = own.table(theta_ref) if variant.kl.beta > 0 else None
    epoch = Epoch.of(own, advantages, own.table(theta_old), ref)
    part = Part.of(own.batch, included, denominator, n)
    closed_form, clip_fraction = epoch.gradient(theta, plan, part)
    return included, advantages, closed_form, clip_fraction


def policy_tensors(theta, theta_old, theta_ref, prompt_index, batch, config):
    """(log-probabilities at theta, mask, leaves, and the detached ones at theta_old and theta_ref)."""
    logp, mask, leaves = leaf_tensors(theta, prompt_index, batch, config.cap)
    old_logp = leaf_tensors(theta_old, prompt_index, batch, config.cap)[0].detach()
    ref_logp = leaf_tensors(theta_ref, prompt_index, batch, config.cap)[0].detach()
    return logp, mask, leaves, old_logp, ref_logp


def leaf_tensors(point, prompt_index, batch, cap):
    """(per-token log-probabilities, mask, [psi, phi_right, phi_wrong] leaves) of the six-prompt
    policy `point` [1, 8] on the batch."""
    psi = torch.tensor(point[0, :6], requires_grad=True)
    phi = [torch.tensor(point[0, 6], requires_grad=True), torch.tensor(point[0, 7], requires_grad=True)]
    logp, mask = toy_token_tensors(psi, phi[0], phi[1], prompt_index, batch, cap)
    return logp, mask, [psi, *phi]


@pytest.mark.parametrize("name", list(ARTICLE))
def test_autograd_through_the_token_loss_equals_the_simulators_update(name: str) -> None:
    """A sampled toy batch as token-level tensors; autograd of the exercise's losses down to
    (psi, phi_right, phi_wrong) equals toyrl's closed-form gradient for the same batch."""
    config = Config(prompts=6, batch_prompts=4, group_size=5, cap=40, min_length=4, length_norm=41.0)
    rng = np.random.default_rng(11)
    theta = np.concatenate([rng.normal(size=6), [np.log(1 / 12), np.log(1 / 30)]])[None]
    prompt_index = np.array([[4, 0, 3, 1]])
    shape = (1, 4, 5)
    batch = sample_batch(theta, prompt_index, rng.random(shape), rng.standard_exponential(shape), config.cap)
    variant = VARIANTS[name]
    plan = Plan.of([variant])
    rewards = plan.rewards(batch, config)
    included = plan.included(batch)
    denominator, n = plan.denominators(batch, included, config)
    weight = weights(plan.advantages(rewards, config), denominator, included)
    closed_form = policy_gradient(Coefficients(weight, n=n), batch, TokenTable.of(theta))[0]

    psi = torch.tensor(theta[0, :6], requires_grad=True)
    phi_right = torch.tensor(theta[0, 6], requires_grad=True)
    phi_wrong = torch.tensor(theta[0, 7], requires_grad=True)
    logp, mask = toy_token_tensors(psi, phi_right, phi_wrong, prompt_index, batch, config.cap)
    adv = torch.tensor(advantages(rewards, variant.names()["advantage"], config.std_eps).reshape(-1))
    frozen = logp.detach()
    if variant.names()["normaliser"] == "seq_mean_token_mean":
        loss, _ = grpo_reference_loss(logp, frozen, frozen, adv, mask, beta=0.0)
    else:
        loss, _ = drgrpo_loss(logp, frozen, frozen, adv, mask, max_len=int(config.length_norm), beta=0.0)
    loss.backward()
    autograd = np.concatenate([psi.grad.numpy(), [phi_right.grad.item(), phi_wrong.grad.item()]])
    assert 0 < rewards.mean() < 1
    np.testing.assert_allclose(autograd, closed_form, rtol=1e-12, atol=1e-16)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(1, 3),
    group_size=st.integers(2, 5),
    positions=st.integers(1, 7),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**16),
    empty=st.booleans(),
)
def test_shapes_dtypes_and_statistics(groups, group_size, positions, dtype, seed, empty) -> None:
    dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(seed)
    n = groups * group_size
    logp = (-torch.rand(n, positions, generator=generator, dtype=dtype)).requires_grad_()
    old_logp = logp.detach() + 0.3 * torch.randn(n, positions, generator=generator, dtype=dtype)
    ref_logp = logp.detach() - 0.1
    mask = (
        torch.zeros(n, positions, dtype=torch.bool)
        if empty
        else torch.rand(n, positions, generator=generator) < 0.7
    )
    rewards = torch.randint(0, 2, (n,), generator=generator).to(dtype)
    adv = drgrpo_advantages(rewards, group_size)
    assert adv.shape == (n,) and adv.dtype == dtype
    torch.testing.assert_close(adv.view(-1, group_size).sum(dim=1), torch.zeros(groups, dtype=dtype))
    torch.testing.assert_close(drgrpo_advantages(3.5 * rewards, group_size), 3.5 * adv)
    assert grpo_reference_advantages(rewards, group_size).shape == (n,)
    objective, ratio, kl = token_objective(logp, old_logp, ref_logp, adv, 0.2, 0.04)
    assert objective.shape == ratio.shape == kl.shape == (n, positions) and objective.dtype == dtype
    masked = masked_logprobs(logp, old_logp, ref_logp, mask)
    assert all(m.shape == logp.shape and m.dtype == dtype for m in masked) and masked[0].requires_grad
    for loss_fn, extra in ((drgrpo_loss, {"max_len": 8}), (grpo_reference_loss, {})):
        loss, stats = loss_fn(logp, old_logp, ref_logp, adv, mask, **extra)
        assert loss.shape == () and loss.dtype == dtype and torch.isfinite(loss)
        assert set(stats) == {"kl_mean", "clipfrac", "ratio_mean"}
        assert all(v.shape == () and not v.requires_grad and v.is_floating_point() for v in stats.values())
        if not mask.any():  # asked for, or drawn
            assert loss.item() == 0 and all(v.item() == 0 for v in stats.values())
        else:
            assert 0 <= stats["clipfrac"].item() <= 1 and stats["ratio_mean"].item() > 0
    direct = token_statistics(ratio, kl, mask, 0.2)
    if mask.any():
        torch.testing.assert_close(direct["ratio_mean"], ratio.detach()[mask].mean())


def test_grpo_reference_advantages_use_the_sample_std() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=F64)
    sample_std = rewards.std()  # Bessel-corrected: 0.577
    torch.testing.assert_close(
        grpo_reference_advantages(rewards, 4, std_eps=0.0), (rewards - 0.5) / sample_std
    )
    assert grpo_reference_advantages(rewards * 10, 4, std_eps=0.0).tolist() == pytest.approx(
        grpo_reference_advantages(rewards, 4, std_eps=0.0).tolist()
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: drgrpo_advantages(torch.ones(8), 1), "group_size must be an integer >= 2, got 1"),
        (
            lambda: drgrpo_advantages(torch.ones(8), 3),
            "group_size must divide the number of rewards (8), got 3",
        ),
        (lambda: grpo_reference_advantages(torch.ones(2, 4), 4), "rewards must be a 1-D tensor"),
        (
            lambda: drgrpo_loss(
                torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4), torch.ones(4, 2), 5
            ),
            "mask must have shape (4, 3) like logp, got (4, 2)",
        ),
        (
            lambda: drgrpo_loss(
                torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(3), torch.ones(4, 3), 5
            ),
            "advantages must have shape [N] = (4,), got (3,)",
        ),
        (
            lambda: drgrpo_loss(
                torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4), torch.ones(4, 3), 0
            ),
            "max_len must be a positive integer",
        ),
        (
            lambda: token_objective(
                torch.zeros(4, 3), torch.zeros(4, 2), torch.zeros(4, 3), torch.zeros(4), 0.2, 0.0
            ),
            "old_logp must have shape (4, 3) like logp",
        ),
    ],
)
def test_wrong_calls_raise_value_error_naming_the_argument(call, message: str) -> None:
    with pytest.raises(ValueError) as error:
        call()
    assert message in str(error.value)


@pytest.mark.parametrize(
    "variant",
    [
        parse_spec("advantage=group_std,aggregation=seq_mean_token_mean,num_iterations=3,beta=0.04"),
        parse_spec("advantage=none,aggregation=seq_mean_token_sum_norm,num_iterations=2,beta=0.1"),
        parse_spec(
            "advantage=group_std_sample,aggregation=token_mean,num_iterations=2,epsilon_high=0.28,"
            "mask_truncated=true"
        ),
        parse_spec(
            "advantage=group_std_sample,aggregation=token_mean,num_iterations=2,beta=0.1,ratio_weighted=true"
        ),
    ],
    ids=lambda v: v.name,
)
def test_clipped_update_equals_a_token_level_computation(variant: Variant) -> None:
    """PPO epochs: the closed-form clipped gradient (with KL to a reference) equals autograd of the
    token-level objective on the same batch, with the policy moved away from the sampling one."""
    config, prompt_index, batch, theta_old, theta, theta_ref = moved_toy_batch(5, 0.4)
    plan = Plan.of([variant])
    included = plan.included(batch)
    advantage_values = plan.advantages(plan.rewards(batch, config), config)
    denominator, n = plan.denominators(batch, included, config)
    own = OwnLogits.of(batch, theta.shape[-1])
    old, ref = own.table(theta_old), own.table(theta_ref)
    part = Part.of(own.batch, included, denominator, n)
    epoch = Epoch.of(own, advantage_values, old, ref)
    closed_form, clip_fraction = epoch.gradient(theta, plan, part)

    logp, mask, leaves, old_logp, ref_logp = policy_tensors(
        theta, theta_old, theta_ref, prompt_index, batch, config
    )
    advantage = torch.tensor(advantage_values.reshape(-1))[:, None]
    ratio = torch.exp(logp - old_logp)
    low, high = variant.objective.epsilon, variant.objective.clip_high
    clipped = torch.clamp(ratio, 1 - low, 1 + high)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    if variant.kl.ratio_weighted:  # TRL's use_bias_correction_kl: k3 times the differentiable ratio
        kl = kl * ratio
    objective = torch.minimum(ratio * advantage, clipped * advantage) - variant.kl.beta * kl
    valid = mask & torch.tensor(included.reshape(-1))[:, None]
    masked = torch.where(valid, objective, torch.zeros_like(objective))
    aggregation = variant.names()["normaliser"]
    if aggregation == "seq_mean_token_mean":
        loss = -(masked.sum(dim=1) / mask.sum(dim=1)).mean()
    elif aggregation == "token_mean":
        loss = -masked.sum() / valid.sum()
    else:
        loss = -masked.sum() / (masked.shape[0] * config.length_norm_value)
    loss.backward()
    autograd = np.concatenate([leaves[0].grad.numpy(), [leaves[1].grad.item(), leaves[2].grad.item()]])
    np.testing.assert_allclose(closed_form[0], autograd, rtol=1e-10, atol=1e-15)
    active = ((advantage > 0) & (ratio > 1 + high)) | ((advantage < 0) & (ratio < 1 - low))
    expected_fraction = (active & valid).sum().item() / valid.sum().item()
    assert clip_fraction[0] == pytest.approx(expected_fraction) and 0 < expected_fraction < 1


def test_one_iteration_is_the_plain_on_policy_update() -> None:
    """num_iterations = 1 (any clip range): the run equals the plain variant's exactly; and the
    clipped gradient at theta = theta_old without KL reduces to the on-policy gradient."""
    from toyrl.experiment import simulate_runs as simulate
    from toyrl.variants import VARIANTS

    config = Config(steps=30)
    plain = simulate(config, [(VARIANTS["grpo"], 3)])
    spelled = parse_spec("advantage=group_std,aggregation=seq_mean_token_mean,epsilon_high=0.5")
    again = simulate(config, [(spelled, 3)]).assign(variant="grpo")
    pd.testing.assert_frame_equal(plain, again, check_exact=True)
    rng = np.random.default_rng(2)
    theta = np.concatenate([rng.normal(size=64), [np.log(1 / 300), np.log(1 / 700)]])[None]
    index = np.arange(16)[None]
    shape = (1, 16, 8)
    batch = sample_batch(theta, index, rng.random(shape), rng.standard_exponential(shape), config.cap)
    plan = Plan.of([VARIANTS["grpo"]])
    included = plan.included(batch)
    advantage = plan.advantages(plan.rewards(batch, config), config)
    denominator, n = plan.denominators(batch, included, config)
    table = TokenTable.of(theta)
    on_policy = policy_gradient(Coefficients(weights(advantage, denominator, included), n=n), batch, table)
    own = OwnLogits.of(batch, theta.shape[-1])
    part = Part.of(own.batch, included, denominator, n)
    epoch = Epoch.of(own, advantage, own.table(theta), own.table(theta))
    ppo, clip_fraction = epoch.gradient(theta, plan, part)
    np.testing.assert_allclose(ppo, on_policy, rtol=1e-12, atol=1e-18)
    assert clip_fraction[0] == 0


MINI_BATCH_VARIANTS = [
    "advantage=group_std_sample,aggregation=token_mean,num_iterations=2,mini_batches=2",
    "advantage=group_std_sample,aggregation=token_mean,mini_batches=2,micro_batches=2,per_micro_batch=true",
    "advantage=none,aggregation=seq_mean_token_mean,mini_batches=2,micro_batches=2,shuffle=epoch",
    "advantage=none,aggregation=token_sum_norm,mini_batches=2,micro_batches=2,per_micro_batch=true,"
    "shuffle=once",
    "advantage=rloo,aggregation=seq_mean_token_sum_norm,mini_batches=4,dual_clip=1.05,mask_truncated=true",
    "advantage=group_std_sample,aggregation=token_mean,mini_batches=2,micro_batches=2,batch_tokens=true,"
    "shuffle=once,mask_truncated=true",
]


@pytest.mark.parametrize("update", [1, 3])
@pytest.mark.parametrize("spec", MINI_BATCH_VARIANTS)
def test_a_mini_batch_update_equals_a_token_level_computation(spec: str, update: int) -> None:
    """Mini- and micro-batches: update `update`'s closed-form gradient (on its mini-batch, at a moved
    policy) equals autograd of the token-level loss of that mini-batch, the responses taken in a
    given order and cut into equal consecutive parts here, each micro-batch's loss averaged where
    the aggregation is per micro-batch; verl's dual clip written out as its loss does."""
    variant = parse_spec(spec)
    schedule = variant.schedule
    config = Config(prompts=6, batch_prompts=4, group_size=5, cap=40, min_length=4, length_norm=41.0)
    rng = np.random.default_rng(9)
    theta_old = np.concatenate([rng.normal(size=6), [np.log(1 / 12), np.log(1 / 30)]])[None]
    theta = theta_old + rng.normal(0, 0.4, size=theta_old.shape)
    prompt_index = np.array([[4, 0, 3, 1]])
    shape, responses = (1, 4, 5), 20
    batch = sample_batch(
        theta_old, prompt_index, rng.random(shape), rng.standard_exponential(shape), config.cap
    )
    orders = np.stack([rng.permutation(responses) for _ in range(2)])  # epochs' orders: response indices
    if schedule.shuffle == "none":
        orders[:] = np.arange(responses)
    elif schedule.shuffle == "once":
        orders[1] = orders[0]
    positions = np.argsort(orders, axis=-1).reshape(1, 2, 4, 5)  # position of each response
    plan = Plan.of([variant])
    selected = plan.included(batch)
    advantage_values = plan.advantages(plan.rewards(batch, config), config)
    parts = plan.parts(update, positions, batch.token_count(config.approach_tokens))
    denominator, n = plan.denominators(batch, selected, config, parts)
    included = selected & parts[0]
    own = OwnLogits.of(batch, theta.shape[-1])
    epoch = Epoch.of(own, advantage_values, own.table(theta_old), None)
    part = Part.of(own.batch, included, denominator, n)
    closed_form, clip_fraction = epoch.gradient(theta, plan, part)

    psi = torch.tensor(theta[0, :6], requires_grad=True)
    phi = [torch.tensor(theta[0, 6], requires_grad=True), torch.tensor(theta[0, 7], requires_grad=True)]
    logp, mask = toy_token_tensors(psi, phi[0], phi[1], prompt_index, batch, config.cap)
    old_logp = toy_token_tensors(
        *map(torch.tensor, (theta_old[0, :6], theta_old[0, 6], theta_old[0, 7])),
        prompt_index,
        batch,
        config.cap,
    )[0]
    advantage = torch.tensor(advantage_values.reshape(-1))[:, None]
    ratio = torch.exp(logp - old_logp)
    low, high = variant.objective.epsilon, variant.objective.clip_high
    first, second = -advantage * ratio, -advantage * torch.clamp(ratio, 1 - low, 1 + high)
    token_loss = torch.maximum(first, second)
    if variant.objective.dual_clip is not None:  # verl's compute_policy_loss_vanilla
        lower = torch.minimum(-advantage * variant.objective.dual_clip, token_loss)
        token_loss = torch.where(advantage < 0, lower, token_loss)
    valid = mask & torch.tensor(selected.reshape(-1))[:, None]
    token_loss = torch.where(valid, token_loss, torch.zeros_like(token_loss))

    epoch_index, mini = divmod(update, schedule.mini_batches)
    size = responses // schedule.mini_batches
    members = orders[epoch_index][mini * size : (mini + 1) * size]
    aggregation = variant.names()["normaliser"]

    def loss_of(rows: np.ndarray) -> torch.Tensor:
        rows_t = torch.tensor(rows)
        chosen, chosen_mask, chosen_valid = token_loss[rows_t], mask[rows_t], valid[rows_t]
        if aggregation == "seq_mean_token_mean":
            return (chosen.sum(dim=1) / chosen_mask.sum(dim=1)).mean()
        if aggregation == "token_mean" and variant.normaliser.batch_tokens:  # TRL's dapo: the batch's
            return chosen.sum() / (valid.sum() / schedule.mini_batches)
        if aggregation == "token_mean":
            return chosen.sum() / chosen_valid.sum()
        if aggregation == "seq_mean_token_sum_norm":
            return chosen.sum() / (len(rows) * config.length_norm_value)
        assert aggregation == "token_sum_norm"
        return chosen.sum() / config.length_norm_value

    per_micro = variant.normaliser.per_micro_batch
    micro = np.split(members, schedule.micro_batches) if per_micro else [members]
    loss = sum(loss_of(rows) for rows in micro) / len(micro)
    loss.backward()
    autograd = np.concatenate([psi.grad.numpy(), [phi[0].grad.item(), phi[1].grad.item()]])
    np.testing.assert_allclose(closed_form[0], autograd, rtol=1e-10, atol=1e-15)
    assert np.abs(autograd).max() > 0
    inside = torch.zeros(responses, dtype=torch.bool)
    inside[torch.tensor(members)] = True
    counted = valid & inside[:, None]
    plain = torch.maximum(first, second)
    clipped_tokens = (plain != first) | (token_loss != plain)  # PPO's clip, or the dual clip, holds
    expected_fraction = (clipped_tokens & counted).sum().item() / counted.sum().item()
    assert clip_fraction[0] == pytest.approx(expected_fraction)
    if variant.objective.dual_clip is not None:  # the dual clip acts on this mini-batch
        assert ((token_loss != plain) & counted).any()


@pytest.mark.parametrize(
    "spec",
    [
        "advantage=group_std_sample,aggregation=token_mean,kl=k1_reward,beta=0.6,num_iterations=2",
        "advantage=none,aggregation=seq_mean_token_mean,kl=k1_reward,beta=0.5,num_iterations=2,dual_clip=1.1",
        "advantage=rloo,aggregation=token_mean,kl=k1_reward,beta=0.8,mini_batches=2,epsilon=0.05,mask_truncated=true",
    ],
)
@pytest.mark.parametrize("at_old", [True, False], ids=["ratio 1", "moved"])
def test_a_kl_reward_equals_a_token_level_computation(spec: str, at_old: bool) -> None:
    """k1 in the reward (OpenRLHF's default KL): each token's advantage is its return, the
    response's advantage minus beta times the k1 = log pi_old - log pi_ref summed from that token to
    the end; the closed-form update equals autograd of PPO's token loss with those advantages, at
    ratio 1 and at a moved policy (the clip acting on tokens whose advantage changed sign)."""
    variant = parse_spec(spec)
    config = Config(prompts=6, batch_prompts=4, group_size=5, cap=40, min_length=4, length_norm=41.0)
    rng = np.random.default_rng(21)
    theta_old = np.concatenate([rng.normal(size=6), [np.log(1 / 12), np.log(1 / 30)]])[None]
    theta_ref = theta_old + rng.normal(0, 0.6, size=theta_old.shape)
    theta = theta_old if at_old else theta_old + rng.normal(0, 0.4, size=theta_old.shape)
    prompt_index = np.array([[4, 0, 3, 1]])
    shape = (1, 4, 5)
    batch = sample_batch(
        theta_old, prompt_index, rng.random(shape), rng.standard_exponential(shape), config.cap
    )
    plan = Plan.of([variant])
    selected = plan.included(batch)
    advantage_values = plan.advantages(plan.rewards(batch, config), config)
    update = 1 if variant.schedule.mini_batches > 1 else 0
    parts = plan.parts(update, None, batch.token_count(config.approach_tokens))
    denominator, n = plan.denominators(batch, selected, config, parts)
    own = OwnLogits.of(batch, theta.shape[-1])
    epoch = Epoch.of(own, advantage_values, own.table(theta_old), own.table(theta_ref), plan.kl)
    part = Part.of(own.batch, selected & parts[0], denominator, n)
    closed_form, clip_fraction = epoch.gradient(theta, plan, part)

    logp, mask, leaves = leaf_tensors(theta, prompt_index, batch, config.cap)
    old_logp = leaf_tensors(theta_old, prompt_index, batch, config.cap)[0].detach()
    ref_logp = leaf_tensors(theta_ref, prompt_index, batch, config.cap)[0].detach()
    k1 = torch.where(mask, old_logp - ref_logp, torch.zeros_like(old_logp))
    returns = torch.flip(torch.cumsum(torch.flip(k1, [1]), 1), [1])  # sum from each token to the end
    advantage = torch.tensor(advantage_values.reshape(-1))[:, None] - variant.kl.beta * returns
    ratio = torch.exp(logp - old_logp)
    low, high = variant.objective.epsilon, variant.objective.clip_high
    token_loss = torch.maximum(-advantage * ratio, -advantage * torch.clamp(ratio, 1 - low, 1 + high))
    if variant.objective.dual_clip is not None:
        token_loss = torch.where(
            advantage < 0, torch.minimum(-advantage * variant.objective.dual_clip, token_loss), token_loss
        )
    members = torch.tensor(parts[0].reshape(-1))
    valid = mask & torch.tensor(selected.reshape(-1))[:, None] & members[:, None]
    token_loss = torch.where(valid, token_loss, torch.zeros_like(token_loss))
    if variant.names()["normaliser"] == "token_mean":
        loss = token_loss.sum() / valid.sum()
    else:
        loss = (token_loss.sum(dim=1) / mask.sum(dim=1))[members].mean()
    loss.backward()
    autograd = np.concatenate([leaves[0].grad.numpy(), [leaves[1].grad.item(), leaves[2].grad.item()]])
    np.testing.assert_allclose(closed_form[0], autograd, rtol=1e-10, atol=1e-14)
    positive, negative = ((advantage > 0) & valid).any(dim=1), ((advantage < 0) & valid).any(dim=1)
    assert (positive & negative).any()  # some response's advantages change sign along it
    assert np.abs(autograd).max() > 0
    if not at_old:
        assert clip_fraction[0] > 0


@pytest.mark.parametrize(
    "spec",
    [
        "advantage=group_std_sample,aggregation=token_mean,objective=gspo,num_iterations=2,epsilon=0.003,"
        "epsilon_high=0.004",
        "advantage=none,aggregation=seq_mean_token_mean,objective=gspo,num_iterations=2,epsilon=0.003,"
        "epsilon_high=0.004,beta=0.1,mask_truncated=true",
    ],
)
def test_gspo_equals_a_token_level_computation(spec: str) -> None:
    """objective=gspo: the closed-form update equals autograd of GSPO's loss written token by token
    (the sequence ratio exp(mean of the response's log-ratios), clipped, on every token; the k3
    term per token), at a moved policy where some sequences' clip acts and some does not."""
    variant = parse_spec(spec)
    config, prompt_index, batch, theta_old, theta, theta_ref = moved_toy_batch(31, 0.3)
    included, advantage_values, closed_form, clip_fraction = later_update(
        variant, config, batch, theta_old, theta, theta_ref
    )

    logp, mask, leaves, old_logp, ref_logp = policy_tensors(
        theta, theta_old, theta_ref, prompt_index, batch, config
    )
    advantage = torch.tensor(advantage_values.reshape(-1))[:, None]
    log_ratio = torch.where(mask, logp - old_logp, torch.zeros_like(logp))
    sequence = torch.exp(log_ratio.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True))
    low, high = variant.objective.epsilon, variant.objective.clip_high
    objective = torch.minimum(sequence * advantage, torch.clamp(sequence, 1 - low, 1 + high) * advantage)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    token_objective = objective - variant.kl.beta * kl
    valid = mask & torch.tensor(included.reshape(-1))[:, None]
    masked = torch.where(valid, token_objective, torch.zeros_like(token_objective))
    if variant.names()["normaliser"] == "token_mean":
        loss = -masked.sum() / valid.sum()
    else:
        loss = -(masked.sum(dim=1) / mask.sum(dim=1)).mean()
    loss.backward()
    autograd = np.concatenate([leaves[0].grad.numpy(), [leaves[1].grad.item(), leaves[2].grad.item()]])
    np.testing.assert_allclose(closed_form[0], autograd, rtol=1e-10, atol=1e-15)
    clipped = ((advantage > 0) & (sequence > 1 + high)) | ((advantage < 0) & (sequence < 1 - low))
    acting = clipped[:, 0] & torch.tensor(included.reshape(-1))
    assert 0 < acting.sum() < acting.numel()  # the sequence clip acts on some responses, not all
    expected_fraction = (valid.sum(dim=1) * acting).sum().item() / valid.sum().item()
    assert clip_fraction[0] == pytest.approx(expected_fraction)


@pytest.mark.parametrize(
    "spec",
    [
        "advantage=group_std_sample,aggregation=token_mean,objective=cispo,num_iterations=2,epsilon=0.1,"
        "epsilon_high=0.1,beta=0.1",
        "advantage=none,aggregation=seq_mean_token_mean,objective=cispo,num_iterations=2,epsilon_high=0.05",
        "advantage=group_std,aggregation=seq_mean_token_mean,objective=sapo,num_iterations=2,tau_pos=3,"
        "tau_neg=4,beta=0.1",
        "advantage=gpg,aggregation=token_mean,objective=gpg,num_iterations=2,beta=0.1",
    ],
)
def test_cispo_sapo_and_gpg_equal_a_token_level_computation(spec: str) -> None:
    """objective=cispo (the weight clip(rho, 1 - epsilon, 1 + epsilon_high), detached, times A log
    pi), sapo (sigmoid(tau (rho - 1)) 4 / tau times A, tau by the sign of A) and gpg (A log pi):
    the closed-form update equals autograd of each loss written token by token, with the k3 term,
    at a moved policy where CISPO's clip acts on some tokens and not on others."""
    variant = parse_spec(spec)
    config, prompt_index, batch, theta_old, theta, theta_ref = moved_toy_batch(17, 0.3)
    included, advantage_values, closed_form, clip_fraction = later_update(
        variant, config, batch, theta_old, theta, theta_ref
    )

    logp, mask, leaves, old_logp, ref_logp = policy_tensors(
        theta, theta_old, theta_ref, prompt_index, batch, config
    )
    advantage = torch.tensor(advantage_values.reshape(-1))[:, None]
    ratio = torch.exp(logp - old_logp)
    name, stage = variant.names()["objective"], variant.objective
    if name == "cispo":
        low = 0.0 if stage.epsilon is None else 1 - stage.epsilon
        weight = torch.clamp(ratio, low, 1 + stage.epsilon_high).detach()
        objective = weight * advantage * logp
        clipped = (ratio < low) | (ratio > 1 + stage.epsilon_high)
    elif name == "sapo":
        tau = torch.where(advantage > 0, stage.tau_pos, stage.tau_neg)
        objective = torch.sigmoid(tau * (ratio - 1)) * 4 / tau * advantage
        clipped = torch.zeros_like(mask)
    else:
        objective = advantage * logp
        clipped = torch.zeros_like(mask)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    valid = mask & torch.tensor(included.reshape(-1))[:, None]
    token_objective = torch.where(valid, objective - variant.kl.beta * kl, torch.zeros_like(objective))
    if variant.names()["normaliser"] == "token_mean":
        loss = -token_objective.sum() / valid.sum()
    else:
        loss = -(token_objective.sum(dim=1) / mask.sum(dim=1)).mean()
    loss.backward()
    autograd = np.concatenate([leaves[0].grad.numpy(), [leaves[1].grad.item(), leaves[2].grad.item()]])
    np.testing.assert_allclose(closed_form[0], autograd, rtol=1e-10, atol=1e-15)
    acting = (clipped & valid).sum().item()
    assert clip_fraction[0] == pytest.approx(acting / valid.sum().item())
    if name == "cispo":
        assert 0 < acting < valid.sum().item()  # the clip acts on some tokens, not all
