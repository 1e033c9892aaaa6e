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
from toyrl.stages import PPOClip, weights
from toyrl.train import Epoch, Plan
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
    torch = pytest.importorskip(
        "torch", reason="toyrl.losses needs the optional extra: pip install 'toyrl[torch]'"
    )

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
    ],
    ids=lambda v: v.name,
)
def test_clipped_update_equals_a_token_level_computation(variant: Variant) -> None:
    """PPO epochs: the closed-form clipped gradient (with KL to a reference) equals autograd of the
    token-level objective on the same batch, with the policy moved away from the sampling one."""
    config = Config(prompts=6, batch_prompts=4, group_size=5, cap=40, min_length=4, length_norm=41.0)
    rng = np.random.default_rng(5)
    theta_old = np.concatenate([rng.normal(size=6), [np.log(1 / 12), np.log(1 / 30)]])[None]
    theta = theta_old + rng.normal(0, 0.4, size=theta_old.shape)
    theta_ref = theta_old + rng.normal(0, 0.3, size=theta_old.shape)
    prompt_index = np.array([[4, 0, 3, 1]])
    shape = (1, 4, 5)
    batch = sample_batch(
        theta_old, prompt_index, rng.random(shape), rng.standard_exponential(shape), config.cap
    )
    plan = Plan.of([variant])
    included = plan.included(batch)
    advantage_values = plan.advantages(plan.rewards(batch, config), config)
    denominator, n = plan.denominators(batch, included, config)
    own = OwnLogits.of(batch, theta.shape[-1])
    old, ref = own.table(theta_old), own.table(theta_ref)
    epoch = Epoch.of(own, advantage_values, included, denominator, n, old, ref)
    closed_form, clip_fraction = epoch.gradient(PPOClip, slice(None), theta, plan)

    def tensors(point):
        psi = torch.tensor(point[0, :6], requires_grad=True)
        phi = [torch.tensor(point[0, 6], requires_grad=True), torch.tensor(point[0, 7], requires_grad=True)]
        logp, mask = toy_token_tensors(psi, phi[0], phi[1], prompt_index, batch, config.cap)
        return logp, mask, [psi, *phi]

    logp, mask, leaves = tensors(theta)
    old_logp, ref_logp = tensors(theta_old)[0].detach(), tensors(theta_ref)[0].detach()
    advantage = torch.tensor(advantage_values.reshape(-1))[:, None]
    ratio = torch.exp(logp - old_logp)
    low, high = variant.objective.epsilon, variant.objective.clip_high
    clipped = torch.clamp(ratio, 1 - low, 1 + high)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
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
    epoch = Epoch.of(own, advantage, included, denominator, n, own.table(theta), own.table(theta))
    ppo, clip_fraction = epoch.gradient(PPOClip, slice(None), theta, plan)
    np.testing.assert_allclose(ppo, on_policy, rtol=1e-12, atol=1e-18)
    assert clip_fraction[0] == 0
