"""toyrl.bridge's numpy side: vocabulary, encoding, the toy's reward on token ids, exact targets;
and its one-line refusal without torch and TRL (the TRL side: tests/conformance/test_trl_bridge.py)."""

import re
import sys

import numpy as np
import pytest

from toyrl import bridge
from toyrl.bridge import BRIDGE_CONFIG, EOS, PAD, RAMBLE, RIGHT, WRONG
from toyrl.config import InvalidInput
from toyrl.policy import exact_metrics, expit, sample_batch
from toyrl.stages.reward import correct
from toyrl.variants import VARIANTS

CAP = BRIDGE_CONFIG.cap  # 64
MIN_LENGTH = BRIDGE_CONFIG.min_length  # 4


def test_vocabulary_names_every_token_by_its_id() -> None:
    words = bridge.vocabulary(64)
    assert len(words) == 69
    assert words[:5] == ("<pad>", "<eos>", "right", "wrong", "ramble")
    assert (words[PAD], words[EOS], words[RIGHT], words[WRONG], words[RAMBLE]) == words[:5]
    assert words[bridge.FIRST_PROMPT] == "p0" and words[-1] == "p63"
    assert bridge.prompt_texts(3) == ["p0", "p1", "p2"]


def test_encoding_of_hand_made_responses() -> None:
    """Stopped: approach, L - 1 ramble tokens, <eos>; truncated: approach, cap ramble tokens."""
    right = np.array([True, False, True, True])
    length = np.array([3, CAP, 1, CAP])
    stopped = np.array([True, False, True, True])
    ids, tokens = bridge.encode_completions(right, length, stopped, CAP)
    assert ids.shape == (4, CAP + 1)
    assert tokens.tolist() == [4, CAP + 1, 2, CAP + 1]
    assert ids[0, :5].tolist() == [RIGHT, RAMBLE, RAMBLE, EOS, PAD]
    assert (ids[0, 4:] == PAD).all()
    assert ids[1, 0] == WRONG and (ids[1, 1:] == RAMBLE).all()  # truncated: no <eos>
    assert ids[2, :3].tolist() == [RIGHT, EOS, PAD]
    assert ids[3, 0] == RIGHT and (ids[3, 1:CAP] == RAMBLE).all() and ids[3, CAP] == EOS  # K = cap stopped


def test_reward_on_hand_made_completions() -> None:
    """The toy's reward: right approach, stopped, L >= min_length; L = tokens - 1."""
    completions = [
        [RIGHT, RAMBLE, RAMBLE, EOS],  # right, stopped, L = 3 < 4: too short
        [RIGHT, RAMBLE, RAMBLE, RAMBLE, EOS],  # L = 4: correct
        [WRONG, *[RAMBLE] * 9, EOS],  # wrong approach
        [RIGHT, *[RAMBLE] * CAP],  # truncated, L = cap
        [RIGHT, *[RAMBLE] * (CAP - 1), EOS],  # stopped at K = cap: correct
        [EOS],  # no approach
        [RIGHT, RAMBLE, WRONG, 7, RAMBLE, EOS],  # off-ramble tokens do not change the reward
        [RAMBLE, RAMBLE, RAMBLE, RAMBLE, EOS],  # not `right`: wrong
    ]
    ids, tokens = bridge.pad_completions(completions, CAP + 1)
    read = bridge.read_completions(ids, tokens, BRIDGE_CONFIG)
    assert read["reward"].tolist() == [0, 1, 0, 0, 1, 0, 1, 0]
    assert read["length"].tolist() == [3, 4, 10, CAP, CAP, 0, 5, 4]
    assert read["stopped"].tolist() == [True, True, True, False, True, True, True, True]
    assert read["right"].tolist() == [True, True, False, True, True, False, True, False]
    assert read["off_ramble"].tolist() == [0, 0, 0, 0, 0, 0, 2, 0]


def test_pad_completions_is_the_encoding() -> None:
    right = np.array([True, False, True])
    length = np.array([5, CAP, 2])
    stopped = np.array([True, False, True])
    ids, tokens = bridge.encode_completions(right, length, stopped, CAP)
    lists = [row[:n].tolist() for row, n in zip(ids, tokens, strict=True)]
    padded, counted = bridge.pad_completions(lists, CAP + 1)
    np.testing.assert_array_equal(padded, ids)
    np.testing.assert_array_equal(counted, tokens)


def test_sampled_toy_batches_read_back_as_the_toys_own() -> None:
    """Encoding a sampled toy batch and reading it back gives its approach, L, stop and reward
    (toyrl's `correct`)."""
    rng = np.random.default_rng(3)
    config = BRIDGE_CONFIG
    theta = np.stack([bridge.start_theta(seed, config) for seed in range(4)])
    prompt_index = np.stack([rng.permutation(config.prompts)[: config.batch_prompts] for _ in range(4)])
    shape = (4, config.batch_prompts, config.group_size)
    batch = sample_batch(theta, prompt_index, rng.uniform(size=shape), rng.exponential(size=shape), CAP)
    assert (~batch.stopped).any() and batch.stopped.any()  # both kinds are exercised
    ids, tokens = bridge.encode_completions(
        batch.right.reshape(-1), batch.length.reshape(-1), batch.stopped.reshape(-1), CAP
    )
    read = bridge.read_completions(ids, tokens, config)
    np.testing.assert_array_equal(read["right"], batch.right.reshape(-1))
    np.testing.assert_array_equal(read["length"], batch.length.reshape(-1))
    np.testing.assert_array_equal(read["stopped"], batch.stopped.reshape(-1))
    np.testing.assert_array_equal(read["reward"], correct(batch, config).reshape(-1))
    assert (read["off_ramble"] == 0).all()


def test_target_probabilities_are_the_toys_sigma() -> None:
    theta = bridge.start_theta(0, BRIDGE_CONFIG)
    after_prompt, in_ramble = bridge.target_probabilities(theta, BRIDGE_CONFIG)
    sigma = expit(theta)
    assert after_prompt.shape == (64, 69) and in_ramble.shape == (2, CAP, 69)
    np.testing.assert_array_equal(after_prompt[:, RIGHT], sigma[:64])
    np.testing.assert_array_equal(after_prompt[:, WRONG], expit(-theta[:64]))
    np.testing.assert_array_equal(in_ramble[:, :, EOS], np.repeat(sigma[-2:, None], CAP, axis=1))
    ramble = np.repeat(expit(-theta[-2:])[:, None], CAP, axis=1)
    np.testing.assert_array_equal(in_ramble[:, :, RAMBLE], ramble)
    np.testing.assert_allclose(after_prompt.sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(in_ramble.sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    # the starting stops are the configuration's (the article's scaled to the cap)
    np.testing.assert_allclose(sigma[-2:], [5 / 64, 2.14 / 64], rtol=1e-14)


def test_teacher_forced_rows_are_every_context() -> None:
    theta = bridge.start_theta(1, BRIDGE_CONFIG)
    inputs, targets = bridge.teacher_forced(theta, BRIDGE_CONFIG)
    after_prompt, in_ramble = bridge.target_probabilities(theta, BRIDGE_CONFIG)
    assert inputs.shape == (128, CAP + 1) and targets.shape == (128, CAP + 1, 69)
    j, a = 37, 1  # row 2j + a
    row = 2 * j + a
    assert inputs[row, :3].tolist() == [bridge.FIRST_PROMPT + j, WRONG, RAMBLE]
    assert (inputs[row, 2:] == RAMBLE).all()
    np.testing.assert_array_equal(targets[row, 0], after_prompt[j])
    np.testing.assert_array_equal(targets[row, 1:], in_ramble[a])


def test_hazard_metrics_with_constant_hazards_are_the_exact_metrics() -> None:
    """The position-dependent closed form at hazards sigma(phi_a) equals toyrl's exact metrics."""
    for seed in range(3):
        theta = bridge.start_theta(seed, BRIDGE_CONFIG)
        theta[-2:] += [0.5 * seed, -0.3]  # away from the starting stops too
        sigma = expit(theta)
        hazard = np.broadcast_to(sigma[None, -2:, None], (64, 2, CAP))
        got = bridge.hazard_metrics(sigma[:64], hazard, MIN_LENGTH)
        want = exact_metrics(theta[None], CAP, MIN_LENGTH)
        toy = bridge.toy_start_metrics(theta, BRIDGE_CONFIG)
        for name in bridge.METRICS:
            np.testing.assert_allclose(got[name], want[name][0], rtol=1e-12, err_msg=name)
            assert toy[name] == want[name][0]


def test_hazard_metrics_see_a_hazard_that_moves() -> None:
    """A higher stop probability late in the ramble shortens wrong answers: the closed form is not
    blind to the position."""
    theta = bridge.start_theta(0, BRIDGE_CONFIG)
    sigma = expit(theta)
    flat = np.broadcast_to(sigma[None, -2:, None], (64, 2, CAP)).copy()
    late = flat.copy()
    late[:, :, 40:] = 0.5
    assert bridge.hazard_metrics(sigma[:64], late, MIN_LENGTH)["length_incorrect"] < (
        bridge.hazard_metrics(sigma[:64], flat, MIN_LENGTH)["length_incorrect"] - 1
    )


def test_settings_map_to_the_toys_variants() -> None:
    """TRL's grpo and dr_grpo settings land on toyrl's variants as `toyrl check` maps them."""
    dr = bridge.toy_variant_for({"loss_type": "dr_grpo", "scale_rewards": "none"})
    assert dr.spec() == VARIANTS["dr_grpo"].spec()
    grpo = bridge.toy_variant_for({"loss_type": "grpo", "scale_rewards": "group"})
    assert grpo.spec()["aggregation"] == "seq_mean_token_mean"
    assert grpo.spec()["advantage"] == "group_std_sample"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"num_generations": 4}, "the bridge sets"),
        ({"max_completion_length": 10}, "the bridge sets"),
        ({"loss_typ": "grpo"}, "did you mean 'loss_type'"),
        ({"loss_type": "nonsense"}, "loss_type='nonsense' is not valid"),
    ],
)
def test_bad_settings_are_refused_in_one_line(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as error:
        bridge.resolve_settings(settings)
    assert "\n" not in str(error.value)


def test_num_iterations_one_is_accepted() -> None:
    assert bridge.resolve_settings({"num_iterations": 1}).values["num_iterations"] == 1


def test_toy_curves_are_toyrls_runs() -> None:
    frame = bridge.toy_curves(BRIDGE_CONFIG, "dr_grpo", [0, 1], steps=3)
    assert sorted(frame["seed"].unique()) == [0, 1]
    assert frame["step"].max() == 3
    start = frame[(frame["seed"] == 0) & (frame["step"] == 0)].iloc[0]
    want = bridge.toy_start_metrics(bridge.start_theta(0, BRIDGE_CONFIG), BRIDGE_CONFIG)
    assert start["accuracy"] == want["accuracy"]
    assert start["length_incorrect"] == want["length_incorrect"]


@pytest.mark.parametrize("missing", ["trl", "torch", "transformers", "datasets"])
@pytest.mark.parametrize("call", ["build_model", "train", "tokenizer"])
def test_without_trl_the_bridge_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, missing: str, call: str
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    with pytest.raises(InvalidInput) as error:
        if call == "train":
            bridge.train({"loss_type": "grpo"}, steps=1)
        elif call == "build_model":
            bridge.build_model(0)
        else:
            bridge.tokenizer()
    text = str(error.value)
    assert "\n" not in text
    # the first of them missing is named (here, or another one this environment lacks)
    assert re.search(r"\((torch|transformers|datasets|trl) is missing\): ", text)
    assert text.endswith(bridge.INSTALL)
    assert "[bridge]" in text and "toyrl[bridge]" not in text and "download.pytorch.org/whl/cpu" in text


def test_importing_the_bridge_needs_neither_torch_nor_trl() -> None:
    import subprocess

    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['trl'] = None\n"
        "sys.modules['transformers'] = None\n"
        "import toyrl.bridge\n"
        "print(len(toyrl.bridge.vocabulary(64)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "69"
