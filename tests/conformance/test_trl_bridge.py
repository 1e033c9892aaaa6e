"""toyrl.bridge with TRL's installed GRPOTrainer (trl==1.16.0) and a real tiny network.

(a) The network fitted to toyrl's starting policy is that policy: its next-token probabilities
on every context of the toy match the exact targets within the fit's tolerance, and completions
it samples with transformers' own `generate` (TRL's sampling settings) have toyrl's exact step-0
accuracy and lengths within a few standard errors.
(b) A short training run is TRL's own: the GRPOConfig in effect has the loss settings given and
the bridge's schedule; the loss TRL logged at each step is its loss for the batch it sampled
(dr_grpo at ratio 1: -sum_i A_i |o_i| / (N max_completion_length), A_i = r_i - group mean; grpo
with std scaling: minus the mean of the advantages, 0); and the same seed gives the same numbers.
(c) The commands: `toyrl bridge --quick` writes its table, sidecar and figure, its step 0 is the
toy's start, and its rows are the committed study's (results/bridge_study.csv) to the bit, the
same settings and seed for fewer steps, on the study's kind of CPU (on one with AVX-512: the toy's
rows to the bit, the network's within its noise); `toyrl check --trainer trl --set loss_type=dapo --bridge`
reports the network's gap beside the toy's and whether it has the verdict's sign.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.conformance.conftest import trainer_module, version_of
from toyrl import bridge
from toyrl.bridge import BRIDGE_CONFIG

PINNED = bridge.TRL_VERSION
SAMPLED_PER_PROMPT = 16  # completions per prompt in the step-0 check: 1,024 in all
SE_MARGIN = 4.0
DR_GRPO = {"loss_type": "dr_grpo", "scale_rewards": "none"}
GRPO = {"loss_type": "grpo", "scale_rewards": "group"}
# transformers 5 warns at every step that TRL asks for is_gradient_checkpointing
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The network of seed 0 fitted to toyrl's theta_0 of seed 0, and the cache it is in."""
    trainer_module("trl", "trl")
    if version_of("trl") != PINNED:
        pytest.skip(f"the bridge pins trl=={PINNED} (installed: trl {version_of('trl')})")
    import torch

    torch.set_num_threads(1)
    cache = tmp_path_factory.mktemp("bridge-cache")
    theta = bridge.start_theta(0, BRIDGE_CONFIG)
    model = bridge.build_model(0)
    result = bridge.fit(model, theta, BRIDGE_CONFIG, cache)
    return {"model": model, "theta": theta, "fit": result, "cache": cache, "torch": torch}


def test_build_model_is_deterministic_per_seed(fitted: dict[str, Any]) -> None:
    torch = fitted["torch"]
    first, again, other = bridge.build_model(3), bridge.build_model(3), bridge.build_model(4)
    assert sum(p.numel() for p in first.parameters()) == 91_072  # docs/bridge.md and the README say so
    for (name, a), (_, b) in zip(first.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(first.parameters(), other.parameters(), strict=True))


def test_fit_matches_the_exact_next_token_distributions(fitted: dict[str, Any]) -> None:
    """Every context's P(right | p_j) and P(<eos> | context) within the tolerance, and the mass on
    the tokens no context of the toy chooses from (the leak) below it, so that the whole
    distributions are within twice it; the fit's own report agrees."""
    model, theta, result = fitted["model"], fitted["theta"], fitted["fit"]
    torch = fitted["torch"]
    assert max(result.approach_error, result.stop_error, result.leak) < bridge.FIT_TOLERANCE
    inputs, targets = bridge.teacher_forced(theta, BRIDGE_CONFIG)
    with torch.no_grad():
        probability = torch.softmax(model(input_ids=torch.from_numpy(inputs)).logits.double(), -1).numpy()
    right = probability[0::2, 0, bridge.RIGHT]
    np.testing.assert_array_less(np.abs(right - targets[0::2, 0, bridge.RIGHT]), bridge.FIT_TOLERANCE)
    eos = probability[:, 1:, bridge.EOS]
    np.testing.assert_array_less(np.abs(eos - targets[:, 1:, bridge.EOS]), bridge.FIT_TOLERANCE)
    assert np.abs(probability - targets).max() < 2 * bridge.FIT_TOLERANCE
    assert (result.approach_error, result.stop_error, result.leak) == pytest.approx(
        bridge.fit_errors(model, theta, BRIDGE_CONFIG), abs=1e-12
    )
    # exact step-0 metrics of the network on the toy's contexts against toyrl's
    assert result.model_metrics["accuracy"] == pytest.approx(result.toy_metrics["accuracy"], abs=0.005)
    for name in ("length_mean", "length_correct", "length_incorrect"):
        assert result.model_metrics[name] == pytest.approx(result.toy_metrics[name], abs=0.5), name


def test_fit_is_cached(fitted: dict[str, Any]) -> None:
    """A second fit of the same seed loads the first one's weights."""
    torch = fitted["torch"]
    model = bridge.build_model(0)
    again = bridge.fit(model, fitted["theta"], BRIDGE_CONFIG, fitted["cache"])
    assert again.cached and again.steps == fitted["fit"].steps
    for a, b in zip(model.parameters(), fitted["model"].parameters(), strict=True):
        assert torch.equal(a, b)


def test_sampled_step_zero_is_toyrls_exact_step_zero(fitted: dict[str, Any]) -> None:
    """Completions sampled from the fitted network as TRL samples them (transformers' generate,
    temperature 1, no top-k/top-p, at most cap + 1 tokens) read as the toy's responses have toyrl's
    exact step-0 accuracy and mean lengths (overall, correct, incorrect) within 4 standard errors."""
    torch, model = fitted["torch"], fitted["model"]
    config = BRIDGE_CONFIG
    prompts = (
        torch.arange(config.prompts).repeat_interleave(SAMPLED_PER_PROMPT)[:, None] + bridge.FIRST_PROMPT
    )
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            max_new_tokens=config.cap + 1,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=bridge.PAD,
            eos_token_id=bridge.EOS,
        )
    completions = []
    for row in out[:, 1:].tolist():  # up to and including the first <eos>, as TRL keeps them
        completions.append(row[: row.index(bridge.EOS) + 1] if bridge.EOS in row else row)
    ids, tokens = bridge.pad_completions(completions, config.cap + 1)
    read = bridge.read_completions(ids, tokens, config)
    exact = bridge.toy_start_metrics(fitted["theta"], config)
    correct = read["reward"] > 0
    n = len(correct)
    accuracy_se = np.sqrt(exact["accuracy"] * (1 - exact["accuracy"]) / n)
    assert abs(correct.mean() - exact["accuracy"]) < SE_MARGIN * accuracy_se
    for name, chosen in (
        ("length_mean", np.ones(n, bool)),
        ("length_correct", correct),
        ("length_incorrect", ~correct),
    ):
        lengths = read["length"][chosen].astype(float)
        se = lengths.std(ddof=1) / np.sqrt(len(lengths))
        assert abs(lengths.mean() - exact[name]) < SE_MARGIN * se, (name, lengths.mean(), exact[name], se)
    assert read["off_ramble"].sum() / max(1, (tokens - 1 - read["stopped"]).sum()) < 0.01


def _recomputed_losses(run: bridge.BridgeRun, loss_type: str) -> np.ndarray:
    """TRL's loss at ratio 1 (one update a batch, beta 0) per step, from the completions the
    reward function saw (their order is TRL's: the G completions of a prompt adjacent)."""
    config, width = BRIDGE_CONFIG, BRIDGE_CONFIG.cap + 1
    out = []
    for _, frame in run.completions.groupby("step", sort=True):
        rewards = frame["reward"].to_numpy().reshape(-1, config.group_size)
        centred = rewards - rewards.mean(axis=1, keepdims=True)
        tokens = frame["tokens"].to_numpy().reshape(-1, config.group_size)
        if loss_type == "dr_grpo":  # scale_rewards none: A = r - mean; sum of A |o| / (N T)
            out.append(-(centred * tokens).sum() / (rewards.size * width))
        else:  # grpo: each completion's token mean of A, then their mean: -mean(A)
            advantage = centred / (rewards.std(axis=1, ddof=1, keepdims=True) + 1e-4)
            out.append(-advantage.mean())
    return np.array(out)


@pytest.mark.parametrize(("settings", "loss_type"), [(DR_GRPO, "dr_grpo"), (GRPO, "grpo")])
def test_short_training_is_trls_and_deterministic(
    fitted: dict[str, Any], settings: dict[str, str], loss_type: str
) -> None:
    steps = 3
    run = bridge.train(settings, BRIDGE_CONFIG, seed=0, steps=steps, cache_dir=fitted["cache"])
    again = bridge.train(settings, BRIDGE_CONFIG, seed=0, steps=steps, cache_dir=fitted["cache"])
    assert run.fit.cached and max(run.fit.approach_error, run.fit.stop_error) < bridge.FIT_TOLERANCE
    # the GRPOConfig in effect
    args = run.trl_args
    assert (args["loss_type"], args["scale_rewards"]) == (settings["loss_type"], settings["scale_rewards"])
    assert args["num_generations"] == BRIDGE_CONFIG.group_size
    assert args["generation_batch_size"] == args["per_device_train_batch_size"] == 128
    assert args["steps_per_generation"] == args["gradient_accumulation_steps"] == args["num_iterations"] == 1
    assert args["max_completion_length"] == BRIDGE_CONFIG.cap + 1
    assert args["beta"] == 0.0 and args["lr_scheduler_type"] == "constant"
    assert args["bf16"] is False and args["gradient_checkpointing"] is False
    assert (args["temperature"], args["top_p"], args["top_k"], args["repetition_penalty"]) == (
        1.0,
        1.0,
        0,
        1.0,
    )
    # one row per sampled batch: steps 0 .. steps, each with TRL's logged loss and gradient norm
    assert run.steps["step"].tolist() == list(range(steps + 1))
    assert len(run.completions) == (steps + 1) * 128
    assert run.steps[["loss", "grad_norm"]].notna().all().all()
    np.testing.assert_allclose(run.steps["loss"], _recomputed_losses(run, loss_type), rtol=1e-3, atol=1e-6)
    if loss_type == "dr_grpo":  # the check can fail: the loss is not 0 here
        assert (run.steps["loss"].abs() > 1e-5).any()
    # deterministic per seed
    assert run.steps.equals(again.steps)
    assert run.completions.equals(again.completions)


def test_another_seed_gives_other_numbers(fitted: dict[str, Any]) -> None:
    """The seed picks the network, its fit and TRL's prompt order and sampling."""
    first = bridge.train(DR_GRPO, BRIDGE_CONFIG, seed=0, steps=1, cache_dir=fitted["cache"])
    other = bridge.train(DR_GRPO, BRIDGE_CONFIG, seed=1, steps=1, cache_dir=fitted["cache"])
    assert not first.completions.equals(other.completions)


ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "results" / "bridge_study.csv"
STUDY_LABELS = {"trl_grpo": "grpo", "dr_grpo": "dr_grpo"}  # the quick run's labels: the study's


@pytest.fixture(scope="module")
def quick(fitted: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`toyrl bridge --quick` with GRPO's settings (seed 0; the fixture's fit cache)."""
    from toyrl.cli import app

    out = tmp_path_factory.mktemp("quick") / "quick.csv"
    args = ["bridge", "--quick", "--set", "loss_type=grpo", "--set", "scale_rewards=group"]
    result = CliRunner().invoke(app, [*args, "--cache-dir", str(fitted["cache"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return {"out": out, "stdout": result.stdout, "frame": pd.read_csv(out)}


def test_quick_run_writes_its_table_sidecar_and_figure(quick: dict[str, Any]) -> None:
    out, frame = quick["out"], quick["frame"]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert meta["kind"] == "bridge" and meta["seeds"] == [0] and meta["config"]["steps"] == bridge.QUICK_STEPS
    assert meta["settings"] == {"trl_grpo": GRPO, "dr_grpo": DR_GRPO}
    assert meta["versions"]["trl"] == PINNED
    assert set(meta["kernels"]) >= {"torch_cpu_capability"}
    assert sorted(set(frame["label"])) == ["dr_grpo", "trl_grpo"]
    assert len(frame) == 2 * 2 * (bridge.QUICK_STEPS + 1)
    stdout = quick["stdout"]
    assert re.search(r"incorrect length, trl_grpo - dr_grpo, at step 32 .*: network [+-]\d", stdout)
    assert "accuracy of trl_grpo: network" in stdout and "wrote " in stdout


def test_quick_run_starts_at_the_toys_start(quick: dict[str, Any]) -> None:
    """Step 0's sampled batch (128 completions) against the toy's exact step 0, within 4 SE; the
    two labels' first batches are the same (one fitted start, one TRL seed)."""
    frame = quick["frame"]
    start = frame[frame["step"] == 0].set_index(["label", "source"])
    for label in ("trl_grpo", "dr_grpo"):
        network, toy = start.loc[(label, "network")], start.loc[(label, "toy")]
        se = np.sqrt(toy["accuracy"] * (1 - toy["accuracy"]) / 128)
        assert abs(network["accuracy"] - toy["accuracy"]) < SE_MARGIN * se
        assert abs(network["length_mean"] - toy["length_mean"]) < 3.0  # SE of the mean length ~1.5 tokens
    sampled = ["accuracy", "length_mean", "length_correct", "length_incorrect", "truncated", "off_ramble"]
    assert start.loc[("trl_grpo", "network"), sampled].equals(start.loc[("dr_grpo", "network"), sampled])
    assert start.loc[("trl_grpo", "network"), "loss"] != start.loc[("dr_grpo", "network"), "loss"]


def _avx512() -> bool:
    """Whether this CPU has AVX-512 (/proc/cpuinfo's flags; False where it cannot be read)."""
    try:
        return any(line.startswith("flags") and " avx512f" in line for line in Path("/proc/cpuinfo").open())
    except OSError:
        return False


def _study_rows(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame, pd.DataFrame]]:
    """(label, source, the quick run's rows, the study's rows of seed 0, steps 0..32) of each."""
    study = pd.read_csv(STUDY)
    study = study[(study["seed"] == 0) & (study["step"] <= bridge.QUICK_STEPS)]
    return [
        (
            label,
            source,
            frame[(frame["label"] == label) & (frame["source"] == source)].reset_index(drop=True),
            study[(study["label"] == named) & (study["source"] == source)].reset_index(drop=True),
        )
        for label, named in STUDY_LABELS.items()
        for source in bridge.SOURCES
    ]


def _same(a: pd.Series, b: pd.Series) -> bool:
    return bool(np.array_equal(a.to_numpy(), b.to_numpy(), equal_nan=a.dtype.kind == "f"))


@pytest.mark.skipif(_avx512(), reason="the study was made on an x86-64 CPU with AVX2 and without AVX-512")
def test_quick_run_is_the_committed_studys_first_steps(quick: dict[str, Any]) -> None:
    """On the study's kind of CPU (AVX2, no AVX-512), the same settings, seed and kernels give the
    same numbers: the quick run's rows are the study's rows of seed 0, steps 0..32, to the bit
    (network and toy)."""
    for label, source, mine, theirs in _study_rows(quick["frame"]):
        for column in [c for c in bridge.STEP_COLUMNS if c != "step"]:
            assert _same(mine[column], theirs[column]), (label, source, column)


@pytest.mark.skipif(not _avx512(), reason="on the study's kind of CPU the rows are the same bits (above)")
def test_quick_run_on_an_avx512_cpu_is_the_studys_run_within_its_noise(quick: dict[str, Any]) -> None:
    """On a CPU with AVX-512 the pinned kernels do not give the study's bits (docs/bridge.md, "The
    same bits"): the toy's rows are still the study's to the bit (toyrl's own kernels), the
    network's first batch is the study's (the same fitted start and seed), and each later step's
    accuracy and mean length are the study's within SE_MARGIN standard errors of the difference of
    two runs (128 completions a step; a mean length's SE is about 1.5 tokens)."""
    for label, source, mine, theirs in _study_rows(quick["frame"]):
        if source == "toy":
            for column in [c for c in bridge.STEP_COLUMNS if c != "step"]:
                assert _same(mine[column], theirs[column]), (label, source, column)
            continue
        first = ["accuracy", "length_mean", "length_correct", "length_incorrect", "truncated", "off_ramble"]
        assert _same(mine.loc[:0, first].stack(), theirs.loc[:0, first].stack()), (label, "step 0")
        p = theirs["accuracy"].to_numpy()
        se = np.sqrt(2 * p * (1 - p) / bridge.QUICK_RESPONSES)
        assert (np.abs(mine["accuracy"].to_numpy() - p) <= SE_MARGIN * se + 1e-12).all(), label
        length_gap = np.abs(mine["length_mean"].to_numpy() - theirs["length_mean"].to_numpy())
        assert (length_gap <= SE_MARGIN * np.sqrt(2) * 1.5).all(), label


def test_check_bridge_reports_the_real_gap_beside_the_toys(fitted: dict[str, Any], tmp_path: Path) -> None:
    """The acceptance's command: the toy's verdict, then the network's gap and the toy's at the
    bridge's scale, and whether the network's sign is the verdict's, as the numbers say."""
    from toyrl.cli import app

    result = CliRunner().invoke(
        app, ["check", "--trainer", "trl", "--set", "loss_type=dapo", "--bridge", "--seeds", "2"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    found = re.search(
        r"incorrect length, (\w+) - dr_grpo, at step 32 \(mean of the last 10 steps, ± SE over the last 10 "
        r"steps\): network "
        r"([+-][\d.]+) ± ([\d.]+) tokens, toy ([+-][\d.]+) ± ([\d.]+); the check's verdict above: ([^:]+?) "
        r"the network's wrong answers are (longer|shorter|within 3 SE of Dr. GRPO's): "
        r"(the verdict's sign|not the verdict's sign)",
        text,
    )
    assert found, text
    mean, se = float(found.group(2)), float(found.group(3))
    real = 0 if abs(mean) <= 3 * se else int(np.sign(mean))
    assert found.group(7) == {1: "longer", -1: "shorter", 0: "within 3 SE of Dr. GRPO's"}[real]
    verdict = {"longer wrong answers": 1, "shorter wrong answers": -1, "no drift beyond its margins": 0}
    direction = verdict[found.group(6)]
    assert (found.group(8) == "the verdict's sign") == (real == direction)
    assert text.index("verdict") < text.index("bridge: TRL 1.16.0")  # after the toy's verdict


def test_results_of_other_settings_are_refused_before_training(
    fitted: dict[str, Any], tmp_path: Path
) -> None:
    """`toyrl bridge` at an --out holding other results stops at once, one line, nothing replaced
    and nothing trained (the fit cache stays as it was)."""
    from toyrl.cli import app

    out = tmp_path / "other.csv"
    assert (
        CliRunner().invoke(app, ["run", "--steps", "3", "--seeds", "1", "-q", "--out", str(out)]).exit_code
        == 0
    )
    before = {path: path.read_bytes() for path in (out, out.with_suffix(".json"))}
    cache = tmp_path / "cache"
    result = CliRunner().invoke(app, ["bridge", "--quick", "--out", str(out), "--cache-dir", str(cache)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("toyrl: error: --out: ") and result.stderr.count("\n") == 1
    assert "made with other settings" in result.stderr
    assert {path: path.read_bytes() for path in before} == before
    assert not cache.exists()  # refused before the fit
