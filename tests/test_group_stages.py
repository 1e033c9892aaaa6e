"""Issue 43's stages against the trainers' code as read, restated here independently of toyrl's:
NeMo-RL's leave-one-out std advantage (`advantage=rloo_std`), ROLL's difficulty_mask
(`selector=difficulty`), SkyRL's zero_variance_filter and prime-rl's zero-advantage filter
(`selector=informative`); their exact hooks against enumeration and Monte Carlo; a group out of the
loss leaves token_mean's token count."""

import itertools

import numpy as np
import pytest

from tests.configs import ONE_GROUP, SAMPLED, SMALL
from tests.test_expected import ascent, enumerate_expectation
from toyrl.config import Config, InvalidInput
from toyrl.expected import expected_update
from toyrl.objective import from_spec
from toyrl.policy import Batch
from toyrl.stages import REGISTRY
from toyrl.train import Plan
from toyrl.variants import parse_variant


def nemo_rl_advantages(rewards: np.ndarray, leave_one_out: bool = True) -> np.ndarray:
    """NVIDIA-NeMo/RL v0.7.0, nemo_rl/algorithms/utils.py `calculate_baseline_and_std_per_prompt` (one
    prompt's G rewards, valid_mask all ones as GRPOAdvantageEstimator passes it), then
    advantage_estimator.py `GRPOAdvantageEstimator.compute_advantage` with normalize_rewards, line by
    line in numpy: the mask matrix 1 - I (or ones), its products with the rewards and their squares
    over num_valid = G - 1, std = sqrt((sq - b^2) num_valid / (num_valid - 1)).nan_to_num(0), then
    (r - b) / (std + 1e-6) where std > 0."""
    group = len(rewards)
    mask = 1 - np.eye(group) if leave_one_out else np.ones((group, group))
    num_valid = np.float64(group - int(leave_one_out))  # a tensor in NeMo-RL: 1 / 0 is inf there
    baseline = mask @ rewards / num_valid
    square = mask @ rewards**2 / num_valid
    with np.errstate(divide="ignore", invalid="ignore"):
        std = np.nan_to_num(np.sqrt((square - baseline**2) * (num_valid / (num_valid - 1))), nan=0.0)
    advantages = rewards - baseline
    nonzero = std > 0
    advantages[nonzero] = advantages[nonzero] / (std[nonzero] + 1e-6)
    return advantages


def roll_difficulty_mask(scores: np.ndarray, n_sample: int, low: float, high: float) -> np.ndarray:
    """alibaba/ROLL 8eb27cc2, roll/utils/functionals.py `difficulty_mask` on a flat batch of scores:
    reshape to (-1, n_sample), the mean expanded back, (mean > low) * (mean < high)."""
    mean = scores.reshape(-1, n_sample).mean(axis=-1, keepdims=True)
    return np.broadcast_to((mean > low) & (mean < high), (len(mean), n_sample)).reshape(-1)


def skyrl_zero_variance_filter(rewards: list[float], uids: list[str], tol: float) -> list[int]:
    """skyrl 0.3.0, skyrl/train/utils/trainer_utils.py `zero_variance_filter` (no loss masks: every
    trajectory live): the indices kept, every group but those with > 1 live rewards within tol."""
    by_uid: dict[str, list[float]] = {}
    for uid, reward in zip(uids, rewards, strict=True):
        by_uid.setdefault(uid, []).append(reward)
    dropped = {uid for uid, values in by_uid.items() if len(values) > 1 and max(values) - min(values) <= tol}
    return [i for i, uid in enumerate(uids) if uid not in dropped]


def every_binary_batch(prompts: int, group: int) -> np.ndarray:
    """Every batch of 0/1 rewards [count, prompts, group]."""
    rows = np.array(list(itertools.product((0.0, 1.0), repeat=prompts * group)))
    return rows.reshape(-1, prompts, group)


def shaped_batches(count: int, prompts: int, group: int, seed: int) -> np.ndarray:
    """Shaped rewards (a correct flag less a length penalty, as prime-rl's), with ties: some groups'
    rewards equal."""
    rng = np.random.default_rng(seed)
    correct = rng.random((count, prompts, group)) < 0.5
    rewards = correct - 0.25 * rng.integers(1, 5, size=(count, prompts, group)) / 4
    equal = rng.random((count, prompts)) < 0.3
    return np.where(equal[..., None], rewards[..., :1], rewards)


def batch_of(rewards: np.ndarray, stopped: np.ndarray | None = None) -> Batch:
    """A batch whose responses are right where the reward is positive, every one stopped unless
    `stopped` says (the selectors read only the rewards they are given, which stopped, and the
    batch's shape)."""
    runs, prompts, group = rewards.shape
    lengths = np.arange(1, runs * prompts * group + 1).reshape(rewards.shape) % 7 + 1
    ended = np.ones(rewards.shape, dtype=bool) if stopped is None else stopped
    return Batch(np.tile(np.arange(prompts), (runs, 1)), rewards > 0, lengths, ended)


@pytest.mark.parametrize("group", [2, 3, 4, 6])
def test_rloo_std_is_nemo_rl_s_advantage_on_every_binary_batch(group: int) -> None:
    stage = REGISTRY["advantage"]["rloo_std"]
    batches = every_binary_batch(2, group)
    ours = stage.advantages(batches, 1e-6)
    theirs = np.array([[nemo_rl_advantages(g.copy()) for g in batch] for batch in batches])
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


def test_rloo_std_is_nemo_rl_s_advantage_on_shaped_rewards() -> None:
    stage = REGISTRY["advantage"]["rloo_std"]
    for group in (3, 5, 8):
        batches = shaped_batches(200, 2, group, seed=group)
        theirs = np.array([[nemo_rl_advantages(g.copy()) for g in batch] for batch in batches])
        np.testing.assert_allclose(stage.advantages(batches, 1e-6), theirs, rtol=1e-12, atol=1e-12)


def test_rloo_std_s_worked_values() -> None:
    """One success among 4: its others agree (std 0), so it keeps 1 - 0 = 1 undivided; each failure's
    others are {1, 0, 0}: b = 1/3, sample std sqrt(1/3), A = -(1/3) / (sqrt(1/3) + 1e-6). Two of
    each: a success's others {1, 0, 0} give (1 - 1/3) / (sqrt(1/3) + eps). At G = 2 the one other
    reward has no std (NeMo-RL's num_valid / (num_valid - 1) = 1 / 0, NaN, then 0): r_1 - r_2."""
    stage = REGISTRY["advantage"]["rloo_std"]
    root = np.sqrt(1 / 3) + 1e-6
    got = stage.advantages(np.array([[1.0, 0, 0, 0], [1, 1, 0, 0]]), 1e-6)
    want = [
        [1, -(1 / 3) / root, -(1 / 3) / root, -(1 / 3) / root],
        [(2 / 3) / root] * 2 + [-(2 / 3) / root] * 2,
    ]
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_array_equal(
        stage.advantages(np.array([[1.0, 0.0], [0.25, 0.75]]), 1e-6), [[1, -1], [-0.5, 0.5]]
    )


def test_the_selectors_are_roll_s_and_skyrl_s_masks_on_every_batch() -> None:
    """selector=difficulty against ROLL's difficulty_mask, selector=informative against SkyRL's
    zero_variance_filter, on every 0/1 batch of 2 groups of 3 and on shaped rewards with ties."""
    batches = np.concatenate([every_binary_batch(2, 3), shaped_batches(300, 2, 3, seed=7)])
    uids = ["a"] * 3 + ["b"] * 3
    for low, high in ((0.0, 1.0), (0.1, 0.95), (1 / 3, 2 / 3), (-0.5, 0.5)):
        stage = parse_variant(f"selector=difficulty,low={low},high={high}").selector
        ours = stage.included(batch_of(batches), batches)
        for batch, mask in zip(batches, ours, strict=True):
            assert (mask.reshape(-1) == roll_difficulty_mask(batch.reshape(-1), 3, low, high)).all(), batch
    for tol in (0.0, 1e-6, 0.1, 0.3):
        stage = parse_variant(f"selector=informative,tol={tol}").selector
        ours = stage.included(batch_of(batches), batches)
        for batch, mask in zip(batches, ours, strict=True):
            kept = skyrl_zero_variance_filter(batch.reshape(-1).tolist(), uids, tol)
            assert np.flatnonzero(mask.reshape(-1)).tolist() == kept, (batch, tol)


def test_drop_truncated_is_roll_s_max_len_mask_times_its_difficulty_mask() -> None:
    """get_sample_level_mask: final_sample_mask = max_len_mask (the response does not fill the
    width: stopped) * difficulty_mask (of every score of the group, truncated ones included)."""
    rng = np.random.default_rng(3)
    batches = np.concatenate([every_binary_batch(2, 3), shaped_batches(100, 2, 3, seed=9)])
    stopped = rng.random(batches.shape) < 0.7
    stage = parse_variant("selector=difficulty,low=0.1,high=0.95,drop_truncated=true").selector
    ours = stage.included(batch_of(batches, stopped), batches)
    for batch, ended, mask in zip(batches, stopped, ours, strict=True):
        theirs = roll_difficulty_mask(batch.reshape(-1), 3, 0.1, 0.95) * ended.reshape(-1)
        assert (mask.reshape(-1) == theirs).all()
    assert not stage.keeps_truncated and parse_variant("selector=difficulty").selector.keeps_truncated


def test_informative_is_prime_rl_s_zero_advantage_filter_on_0_1_rewards() -> None:
    """prime-rl v0.8.0 filters.py ZeroAdvantageFilter: a rollout whose advantages are all 0.0 is not
    sent to the trainer; GRPO's advantage (algo/grpo.py) is r - the group's mean. With 0/1 rewards
    those are the groups of equal rewards."""
    batches = every_binary_batch(2, 4)
    advantages = batches - batches.mean(axis=-1, keepdims=True)
    ours = REGISTRY["selector"]["informative"].included(batch_of(batches), batches)
    assert (ours == (advantages != 0.0)).all()


@pytest.mark.parametrize(
    "spec", ["selector=difficulty,low=0.3,high=0.8", "selector=difficulty", "selector=informative,tol=0.5"]
)
def test_each_group_hook_is_its_sampled_form(spec: str) -> None:
    """keeps_group(k, G) is what `included` keeps of a group of 0/1 rewards with k successes."""
    stage = parse_variant(spec).selector
    for group in (2, 3, 5):
        for successes in range(group + 1):
            rewards = np.array([[[1.0] * successes + [0.0] * (group - successes)]])
            sampled = stage.included(batch_of(rewards), rewards)
            assert (sampled == stage.keeps_group(np.array(float(successes)), group)).all(), (spec, successes)


def test_the_selectors_need_the_rewards_and_refuse_bad_values() -> None:
    rewards = np.zeros((1, 1, 3))
    plan = Plan.of([parse_variant("selector=difficulty")])
    with pytest.raises(ValueError, match="selector stage GroupMeanWithin needs the responses' rewards"):
        plan.included(batch_of(rewards))
    with pytest.raises(InvalidInput, match=r"low must be a number in \[-10, 10\] \(got 11.0\)"):
        parse_variant("selector=difficulty,low=11")
    with pytest.raises(InvalidInput, match="tol must be a number in"):
        parse_variant("selector=informative,tol=-1")


def test_a_group_out_of_the_loss_leaves_token_mean_s_count() -> None:
    """ROLL's token-mean divides by batch_num_tokens of final_response_mask and SkyRL's token_mean by
    the loss mask's tokens: the masked groups' tokens are not counted."""
    rewards = np.array([[[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    batch = batch_of(rewards)
    config = Config(prompts=3, batch_prompts=3, group_size=3, count_approach_token=False)
    for spec in ("selector=difficulty", "selector=informative"):
        plan = Plan.of([parse_variant(f"advantage=none,aggregation=token_mean,{spec}")])
        selected = plan.included(batch, rewards)
        denominator, n = plan.denominators(batch, selected, config)
        assert (selected[0].all(axis=-1) == [True, False, False]).all()
        assert (denominator == batch.length[0, 0].sum()).all() and (n == 1).all()


EXACT_CONFIG = ONE_GROUP
EXACT_SPECS = {
    "rloo_std": {"advantage": "rloo_std", "aggregation": "seq_mean_token_mean", "std_eps": 1e-6},
    "rloo_std_masked": {
        "advantage": "rloo_std",
        "aggregation": "seq_mean_token_sum_norm",
        "mask_truncated": True,
    },
    "difficulty": {
        "advantage": "group_std",
        "aggregation": "seq_mean_token_mean",
        "selector": "difficulty",
        "low": 0.5,
    },
    "difficulty_rloo_std": {
        "advantage": "rloo_std",
        "aggregation": "token_sum",
        "selector": "difficulty",
        "high": 0.5,
    },
    "informative": {"advantage": "rloo", "aggregation": "seq_mean_token_sum", "selector": "informative"},
    "difficulty_drop_truncated": {
        "advantage": "group_std_sample",
        "aggregation": "seq_mean_token_mean",
        "selector": "difficulty",
        "high": 0.5,
        "drop_truncated": True,
    },
}


@pytest.mark.parametrize("name", list(EXACT_SPECS))
def test_the_exact_update_is_the_enumerated_expectation(name: str) -> None:
    """The exact hooks (conditional, keeps_group) against the simulator's own sampled update summed
    over every batch of a tiny configuration, weighed by its probability."""
    variant = from_spec(name, EXACT_SPECS[name])
    theta = np.array([0.4, -1.1, np.log(0.3 / 0.7), np.log(0.2 / 0.8)])
    exact = expected_update(theta[None], EXACT_CONFIG, [variant])[0]
    enumerated = enumerate_expectation(theta, EXACT_CONFIG, variant)
    np.testing.assert_allclose(exact, enumerated, rtol=1e-11, atol=1e-15)
    assert np.abs(exact).max() > 1e-3


def test_the_difficulty_mask_changes_the_exact_update() -> None:
    """A mask that takes out groups with a signal moves the expected update (the hook is used)."""
    theta = np.array([[0.4, -1.1, np.log(0.3 / 0.7), np.log(0.2 / 0.8)]])
    plain = expected_update(theta, EXACT_CONFIG, [from_spec("a", {"advantage": "group_std"})])
    masked = expected_update(theta, EXACT_CONFIG, [from_spec("b", EXACT_SPECS["difficulty"])])
    assert np.abs(plain - masked).max() > 1e-3


@pytest.mark.parametrize("name", ["difficulty_rloo_std", "informative"])
def test_the_exact_update_is_the_mean_of_sampled_updates(name: str) -> None:
    config = SAMPLED
    variant = from_spec(name, EXACT_SPECS[name])
    theta = np.array([0.5, -0.3, 1.2, -1.0, 0.1, 0.8, np.log(1 / 30), np.log(1 / 300)])
    exact = expected_update(theta[None], config, [variant])[0]
    rng = np.random.default_rng(43)
    runs = 100_000
    thetas = np.repeat(theta[None], runs, axis=0)
    index = rng.random((runs, config.prompts)).argsort(axis=1)[:, : config.batch_prompts]
    shape = (runs, config.batch_prompts, config.group_size)
    sampled = ascent(thetas, (index, rng.random(shape), rng.standard_exponential(shape)), variant, config)
    error = sampled.mean(axis=0) - exact
    assert np.all(np.abs(error) <= 5 * sampled.std(axis=0) / np.sqrt(runs) + 1e-18), error


PLUGIN = '''
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from toyrl.stages import register


@register("selector", "solved_half")
@dataclass(frozen=True)
class SolvedHalf:
    """Groups with at least half their rewards 1 in the loss."""

    keeps_truncated: ClassVar[bool] = True
    uses_rewards: ClassVar[bool] = True

    def included(self, batch, rewards):
        return np.broadcast_to(rewards.mean(axis=-1, keepdims=True) >= 0.5, rewards.shape).copy()
'''


def test_a_plugin_selector_may_take_the_rewards(tmp_path) -> None:
    """`uses_rewards` is open to plugins: loading probes `included(batch, rewards)` (and holds the
    method to taking them), and a run trains with it."""
    from toyrl.plugins import load_plugin, unload
    from toyrl.train import simulate

    path = tmp_path / "solved.py"
    path.write_text(PLUGIN)
    plugin = load_plugin(path)
    try:
        variant = parse_variant("selector=custom:solved_half,aggregation=token_mean")
        trajectory = simulate(SMALL, [(variant, 0)])
        assert np.isfinite(trajectory.columns["grad_norm"]).all()
    finally:
        unload(plugin)
    path.write_text(PLUGIN.replace("def included(self, batch, rewards):", "def included(self, batch):"))
    with pytest.raises(InvalidInput, match=r"it must take \(batch, rewards\)"):
        load_plugin(path)
