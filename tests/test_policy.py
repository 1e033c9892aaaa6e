"""The ramble policy against brute-force sums, finite differences and Monte Carlo."""

import numpy as np
import pytest
from scipy.special import expit, log_expit, logit

from toyrl.config import Config
from toyrl.policy import (
    Batch,
    Coefficients,
    OwnLogits,
    TokenTable,
    exact_metrics,
    expected_length,
    policy_gradient,
    sample_batch,
    split,
    stop_within,
    survival,
    truncated_mean,
)
from toyrl.stages import WindowReward

CONFIG = Config()  # the article's window: MIN_LENGTH..CAP ramble tokens are correct
CAP, MIN_LENGTH = CONFIG.cap, CONFIG.min_length


def token_log_likelihoods(theta: np.ndarray, batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The oracle, from log sigma terms (scipy's): per response [R, B, G], the approach token's
    log-probability, its L - 1[stopped] non-stop tokens' (summed) and its stop token's (0 if none)."""
    runs = np.arange(theta.shape[0])[:, None]
    psi = theta[runs, batch.prompt_index][..., None]
    phi = np.where(batch.right, theta[:, -2, None, None], theta[:, -1, None, None])
    approach = np.where(batch.right, log_expit(psi), log_expit(-psi))
    non_stop = (batch.length - batch.stopped) * log_expit(-phi)
    stop = np.where(batch.stopped, log_expit(phi), 0.0)
    return approach, non_stop, stop


def log_likelihood(theta: np.ndarray, batch: Batch) -> np.ndarray:
    """log pi(response) [R, B, G]: approach token, L - 1[stopped] non-stop tokens, the stop token."""
    return sum(token_log_likelihoods(theta, batch))


def geometric_pmf(stop_prob: float, k: np.ndarray) -> np.ndarray:
    return stop_prob * (1 - stop_prob) ** (k - 1)


def test_initial_expected_lengths_are_the_articles() -> None:
    lengths = expected_length(logit(np.array([1 / 300, 1 / 700])), CAP)
    assert np.round(lengths, 1).tolist() == [298.0, 618.0]


@pytest.mark.parametrize("stop_prob", [0.5, 1 / 300, 1 / 700, 1e-5])
def test_closed_forms_equal_brute_force_sums(stop_prob: float) -> None:
    k = np.arange(1, 5_000_001, dtype=np.float64)  # P(K > 5e6) < e^-50 for these
    pmf = geometric_pmf(stop_prob, k)
    phi = logit(stop_prob)
    np.testing.assert_allclose(expected_length(phi, CAP), (np.minimum(k, CAP) * pmf).sum(), rtol=1e-9)
    np.testing.assert_allclose(stop_within(CAP, phi), pmf[:CAP].sum(), rtol=1e-9)
    np.testing.assert_allclose(survival(CAP, phi), 1 - pmf[:CAP].sum(), rtol=1e-7, atol=1e-15)
    for n in (1, 2, 99, CAP):
        brute = (k[:n] * pmf[:n]).sum() / pmf[:n].sum()
        np.testing.assert_allclose(truncated_mean(n, phi), brute, rtol=1e-10)


def test_truncated_mean_is_continuous_across_its_series_switch() -> None:
    # x = n softplus(phi) = 1e-2 is where the series takes over from the direct formula.
    n = 1000
    y = 1e-5 * np.array([1 - 1e-9, 1 + 1e-9])
    phi = np.log(np.expm1(y))
    k = np.arange(1, n + 1, dtype=np.float64)
    for value, yi in zip(truncated_mean(n, phi), y, strict=True):
        weights = np.exp(-(k - 1) * yi)
        np.testing.assert_allclose(value, (k * weights).sum() / weights.sum(), rtol=1e-12)


def random_theta(rng: np.random.Generator, runs: int, prompts: int) -> np.ndarray:
    psi = rng.normal(-0.5, 1.5, size=(runs, prompts))
    phi = logit(rng.uniform([1 / 900, 1 / 3000], [1 / 50, 1 / 200], size=(runs, 2)))
    return np.concatenate([psi, phi], axis=1)


def test_score_functions_equal_finite_differences_of_the_log_likelihood() -> None:
    rng = np.random.default_rng(1)
    theta = random_theta(rng, runs=3, prompts=5)
    prompt_index = np.tile(np.arange(5), (3, 1))
    shape = (3, 5, 4)
    length = rng.integers(1, CAP + 1, size=shape)
    batch = Batch(
        prompt_index=prompt_index,
        right=rng.random(shape) < 0.5,
        length=length,
        stopped=(rng.random(shape) < 0.7) | (length < CAP),
    )
    table = TokenTable.of(theta)
    score_approach, score_stop = table.approach_score(batch), table.ramble_score(batch)
    # Coefficients of the one gradient path: one per response (on-policy), then one per token kind.
    shared = rng.normal(size=shape)
    per_token = rng.normal(size=(2, *shape))
    kinds = Coefficients(
        shared, per_token[0] * (batch.length - batch.stopped), per_token[1] * batch.stopped, n=np.full(3, 7.0)
    )
    grad_shared = policy_gradient(Coefficients(shared), batch, table)
    grad_kinds = policy_gradient(kinds, batch, table)
    step = 1e-6
    for parameter in range(theta.shape[1]):
        shift = np.zeros_like(theta)
        shift[:, parameter] = step
        numeric = (log_likelihood(theta + shift, batch) - log_likelihood(theta - shift, batch)) / (2 * step)
        if parameter < 5:
            analytic = np.where(prompt_index[..., None] == parameter, score_approach, 0.0)
        elif parameter == 5:
            analytic = np.where(batch.right, score_stop, 0.0)
        else:
            analytic = np.where(batch.right, 0.0, score_stop)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6 * np.abs(analytic).max())
        # The loss gradient is minus the sum of coefficient times score.
        loss_shared = -(shared * numeric).sum(axis=(1, 2))
        np.testing.assert_allclose(
            grad_shared[:, parameter], loss_shared, rtol=1e-6, atol=1e-6 * np.abs(loss_shared).max()
        )
        up, down = token_log_likelihoods(theta + shift, batch), token_log_likelihoods(theta - shift, batch)
        by_kind = [(a - b) / (2 * step) for a, b in zip(up, down, strict=True)]
        loss_kinds = (
            -(shared * by_kind[0] + per_token[0] * by_kind[1] + per_token[1] * by_kind[2]).sum(axis=(1, 2))
            / 7.0
        )
        np.testing.assert_allclose(
            grad_kinds[:, parameter], loss_kinds, rtol=1e-6, atol=1e-6 * np.abs(loss_kinds).max()
        )


def test_log_likelihood_of_one_response_by_hand() -> None:
    theta = np.array([[0.3, logit(0.01), logit(0.02)]])
    batch = Batch(
        prompt_index=np.array([[0]]),
        right=np.array([[[True, False]]]),
        length=np.array([[[3, CAP]]]),
        stopped=np.array([[[True, False]]]),
    )
    expected = [
        np.log(expit(0.3)) + 2 * np.log(0.99) + np.log(0.01),
        np.log(1 - expit(0.3)) + CAP * np.log(0.98),
    ]
    np.testing.assert_allclose(log_likelihood(theta, batch)[0, 0], expected, rtol=1e-12)
    # The token table's per-logit log-probabilities, by hand.
    table = TokenTable.of(theta)
    np.testing.assert_allclose(table.log_positive[0], np.log([expit(0.3), 0.01, 0.02]), rtol=1e-12)
    np.testing.assert_allclose(table.log_negative[0], np.log([1 - expit(0.3), 0.99, 0.98]), rtol=1e-12)
    np.testing.assert_allclose(table.probability[0], [expit(0.3), 0.01, 0.02], rtol=1e-12)


def test_sampled_lengths_follow_the_geometric_law() -> None:
    rng = np.random.default_rng(2)
    theta = np.array([[3.0, logit(1 / 300), logit(1 / 700)]])
    n = 400_000
    batch = sample_batch(
        theta, np.array([[0]]), rng.random((1, 1, n)), rng.standard_exponential((1, 1, n)), CAP
    )
    right = batch.right[0, 0]
    lengths = batch.length[0, 0][right]
    for k in (1, 50, 300, 1000):
        empirical = (lengths <= k).mean()
        exact = stop_within(k, logit(1 / 300))
        assert abs(empirical - exact) < 4 * np.sqrt(exact * (1 - exact) / lengths.size)
    # Truncated responses are exactly those with K > cap, and have L = cap.
    assert np.all(batch.length[~batch.stopped] == CAP)
    assert np.all(batch.length[batch.stopped] <= CAP)


def test_exact_metrics_agree_with_monte_carlo() -> None:
    rng = np.random.default_rng(3)
    prompts, group = 32, 20_000
    theta = random_theta(rng, runs=1, prompts=prompts)
    batch = sample_batch(
        theta,
        np.arange(prompts)[None],
        rng.random((1, prompts, group)),
        rng.standard_exponential((1, prompts, group)),
        CAP,
    )
    reward = WindowReward().rewards(batch, CONFIG)[0].astype(bool)
    length = batch.length[0].astype(np.float64)
    psi, _, _ = split(theta)
    exact = {name: values[0] for name, values in exact_metrics(theta, CAP, MIN_LENGTH).items()}
    samples = {
        "accuracy": reward.ravel().astype(np.float64),
        "length_mean": length.ravel(),
        "length_correct": length[reward],
        "length_incorrect": length[~reward],
        "length_right_approach": length[batch.right[0]],
        "length_wrong_approach": length[~batch.right[0]],
        "p_right_approach": batch.right[0].ravel().astype(np.float64),
    }
    for name, sample in samples.items():
        standard_error = sample.std() / np.sqrt(sample.size)
        assert abs(sample.mean() - exact[name]) < 4 * standard_error, name
    np.testing.assert_allclose(exact["p_right_approach"], expit(psi).mean())


def test_exact_metrics_by_direct_summation() -> None:
    """Every exact metric against a sum over the whole length distribution of each branch."""
    rng = np.random.default_rng(4)
    theta = random_theta(rng, runs=1, prompts=6)
    psi, phi_right, phi_wrong = (np.asarray(v)[0] for v in split(theta))
    k = np.arange(1, 400_001, dtype=np.float64)
    length = np.minimum(k, CAP)
    pmf_right, pmf_wrong = geometric_pmf(expit(phi_right), k), geometric_pmf(expit(phi_wrong), k)
    p_right = expit(psi).mean()
    correct = (k >= MIN_LENGTH) & (k <= CAP)
    accuracy = p_right * pmf_right[correct].sum()
    incorrect_mass = (1 - p_right) + p_right * pmf_right[~correct].sum()
    incorrect_length = (1 - p_right) * (length * pmf_wrong).sum() + p_right * (length * pmf_right)[
        ~correct
    ].sum()
    exact = exact_metrics(theta, CAP, MIN_LENGTH)
    np.testing.assert_allclose(exact["accuracy"], accuracy, rtol=1e-10)
    np.testing.assert_allclose(
        exact["length_correct"], (length * pmf_right)[correct].sum() / pmf_right[correct].sum(), rtol=1e-10
    )
    np.testing.assert_allclose(exact["length_incorrect"], incorrect_length / incorrect_mass, rtol=1e-10)


def test_min_length_one_means_no_response_is_too_short() -> None:
    theta = np.array([[0.0, logit(0.01), logit(0.01)]])
    exact = exact_metrics(theta, cap=10, min_length=1)
    stop_by_cap = 1 - 0.99**10
    np.testing.assert_allclose(exact["accuracy"], 0.5 * stop_by_cap, rtol=1e-12)
    assert np.isfinite(exact["length_incorrect"]).all()


@pytest.mark.parametrize(
    ("ramble", "right", "reward", "length", "stopped"),
    [
        (99, True, 0.0, 99, True),  # one token short of min_length
        (100, True, 1.0, 100, True),  # exactly min_length: the minimum amount of work
        (CAP, True, 1.0, CAP, True),  # stopped on the cap's last token: stopped, counts
        (CAP + 1, True, 0.0, CAP, False),  # the stop token would come after the cap: truncated
        (10 * CAP, True, 0.0, CAP, False),
        (100, False, 0.0, 100, True),  # a wrong approach earns nothing at any length
        (CAP, False, 0.0, CAP, True),
    ],
)
def test_reward_boundaries(ramble: int, right: bool, reward: float, length: int, stopped: bool) -> None:
    """K = floor(E / softplus(phi)) + 1: E chosen in the middle of K's interval gives that K."""
    phi = logit(1 / 300)
    rate = np.logaddexp(0.0, phi)
    theta = np.array([[8.0 if right else -8.0, phi, phi]])
    approach = np.array([[[0.5]]])
    exponential = np.array([[[(ramble - 0.5) * rate]]])
    batch = sample_batch(theta, np.array([[0]]), approach, exponential, CAP)
    assert batch.right.item() is right
    assert (batch.length.item(), batch.stopped.item()) == (length, stopped)
    assert WindowReward().rewards(batch, CONFIG).item() == reward


def test_a_table_of_the_batchs_own_logits_gives_the_same_bits() -> None:
    """Updates take the token table at the batch's B + 2 logits only (`OwnLogits`): each
    gathered value, and the per-kind gradient scattered back, is the same float as from the table
    of all P + 2 logits; `at_tokens` places each outcome at the token that is that outcome."""
    rng = np.random.default_rng(4)
    runs, prompts, chosen, group = 3, 7, 4, 5
    theta = random_theta(rng, runs=runs, prompts=prompts)
    prompt_index = np.stack([rng.permutation(prompts)[:chosen] for _ in range(runs)])
    theta[0, prompt_index[0, 1]] = 40.0  # above SCORE_EXACT_ABOVE: its score takes the other form
    shape = (runs, chosen, group)
    batch = sample_batch(theta, prompt_index, rng.random(shape), rng.standard_exponential(shape), 50)
    own_logits = OwnLogits.of(batch, prompts + 2)
    columns, own = own_logits.columns, own_logits.batch
    assert columns.shape == (runs, chosen + 2)
    assert (columns[:, :chosen] == prompt_index).all()
    assert (columns[:, chosen:] == [prompts, prompts + 1]).all()
    full, local = TokenTable.of(theta), own_logits.table(theta)
    np.testing.assert_array_equal(full.token_scores(batch), local.token_scores(own))
    np.testing.assert_array_equal(
        full.at_tokens(full.log_positive, full.log_negative, batch),
        local.at_tokens(local.log_positive, local.log_negative, own),
    )
    # at_tokens against the tokens themselves: approach psi_j (+ if right), non-stop phi (-), stop phi (+)
    runs_axis = np.arange(runs)[:, None, None]
    psi = theta[runs_axis, prompt_index[..., None]]
    phi = np.where(batch.right, theta[:, -2, None, None], theta[:, -1, None, None])
    tokens = full.at_tokens(theta, -theta, batch)  # the logit, signed by the outcome
    np.testing.assert_array_equal(tokens[0], np.where(batch.right, psi, -psi))
    np.testing.assert_array_equal(tokens[1], -phi)
    np.testing.assert_array_equal(tokens[2], phi)
    kinds = Coefficients(*rng.normal(size=(3, *shape)), n=np.full(runs, 3.0))
    for coefficients in (kinds, Coefficients(kinds.approach, n=kinds.n)):  # per kind, and on-policy
        on_own = own_logits.scatter(policy_gradient(coefficients, own, local), prompts + 2)
        np.testing.assert_array_equal(on_own, policy_gradient(coefficients, batch, full))
