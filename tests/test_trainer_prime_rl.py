"""prime-rl (PrimeIntellect-ai/prime-rl v0.8.0) on the toy: its `rl` TOML and `uv run rl` command
line read as pydantic-config reads them, mapped as its source computes, told apart from the other
trainers' files, `toyrl check` end to end.

The mapping was read from prime-rl's source, not run against it (prime-rl is not installable from
the package registry): each expected spec below cites what it follows."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.reading import detect, read_input
from toyrl.variants import VARIANTS, parse_variant

SMALL = ["--steps", "3", "--prompts", "8", "--batch-prompts", "4", "--seeds", "2", "--quiet"]
PENALTY = "orchestrator.algo.length_penalty"


def spec(settings: dict) -> str:
    return parse_variant(resolve("prime-rl", None, settings).mapping.spec).spec_text()


@pytest.mark.parametrize(
    ("settings", "preset"),
    [
        # orchestrator/algo/grpo.py score_group: rewards - rewards.mean(), no std; trainer/rl/loss.py
        # compute_loss: each token's loss summed, / rl_scale (the step's count of loss tokens)
        ({}, "openrlhf_dr_grpo"),
        # with a length penalty (None by default): reward - mean * (0.25 out/max out + 0.1 in/max in
        # + 0.1 turns/max turns), before the mean
        ({PENALTY: True}, "prime_rl_length_penalty"),
        # orchestrator/algo/max_rl.py: (r - mean) / mean
        ({"orchestrator.algo.type": "max_rl"}, "max_rl"),
    ],
)
def test_the_advantage_and_loss_follow_prime_rl_s_code(settings: dict, preset: str) -> None:
    """Each is the preset's advantage and loss, with the groups of zero advantage out of the step
    (filters.py ZeroAdvantageFilter, enforced in OrchestratorConfig.post_batch_filters by default:
    those rollouts are not sent to the trainer, so the token count covers the other groups')."""
    expected = parse_variant(VARIANTS[preset].spec_text() + ",selector=informative").spec_text()
    assert spec(settings) == expected


def test_the_zero_advantage_filter_follows_post_batch_filters() -> None:
    """OrchestratorConfig: post_batch_filters defaults to [gibberish, repetition, zero_advantage],
    each ZeroAdvantageFilterConfig.enforce True unless set; a list without it, or with enforce false,
    keeps the groups of zero advantage in the step. pre_batch_filters' zero_advantage (monitored by
    default) enforced keeps them from a slot of the batch, which is refilled: refused."""
    key = "orchestrator.post_batch_filters"
    assert "selector" not in parse_variant(spec({key: []})).spec()
    assert "selector" not in parse_variant(spec({key: [{"type": "zero_advantage", "enforce": False}]})).spec()
    kept = spec({key: [{"type": "gibberish"}, {"type": "zero_advantage"}]})
    assert parse_variant(kept).spec()["selector"] == "informative"
    monitored = [{"type": "zero_advantage", "enforce": False}]
    assert spec({"orchestrator.pre_batch_filters": monitored}) == spec({})
    with pytest.raises(InvalidInput, match="is not modelled"):
        resolve("prime-rl", None, {"orchestrator.pre_batch_filters": [{"type": "zero_advantage"}]})
    with pytest.raises(InvalidInput, match=r"orchestrator\.pre_batch_filters=.* is not modelled by toyrl"):
        resolve(
            "prime-rl",
            None,
            {"orchestrator.pre_batch_filters": [{"type": "zero_advantage", "enforce": True}]},
        )
    with pytest.raises(InvalidInput, match="each filter is a table whose type is one of 'gibberish'"):
        resolve("prime-rl", None, {key: [{"type": "zero"}]})
    mapping = resolve("prime-rl", None, {}).mapping
    assert any(
        note.startswith("orchestrator.post_batch_filters: its zero_advantage") for note in mapping.notes
    )
    penalised = resolve("prime-rl", None, {PENALTY: True}).mapping
    assert any(
        item.startswith("the zero_advantage filter with the length penalty") for item in penalised.unmodelled
    )


def test_the_length_penalty_s_weights_and_the_trainer_s_loss() -> None:
    weights = {
        PENALTY: True,
        f"{PENALTY}.num_output_tokens_weight": "0.5",
        f"{PENALTY}.num_turns_weight": "0",
    }
    assert "num_output_tokens_weight=0.5" in spec(weights) and "num_turns_weight=0.0" in spec(weights)
    # the IPO loss, like the default DPPO one, masks only tokens moved since sampling: on-policy, the same
    assert spec({"trainer.loss.type": "ipo"}) == spec({})
    mapping = resolve(
        "prime-rl", None, {"orchestrator.group_size": "16", "orchestrator.batch_size": "128"}
    ).mapping
    assert mapping.config["group_size"] == ("orchestrator.group_size", 16) and mapping.step_responses == 128


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"orchestrator.algo.type": "opd"},
            "orchestrator.algo.type='opd' is not modelled by toyrl yet (distillation",
        ),
        ({"orchestrator.algo.type": "grop"}, "did you mean 'grpo'?"),
        ({"trainer.loss.type": "custom"}, "trainer.loss.type='custom' is not modelled"),
        ({"orchestrator.algo.type": "max_rl", PENALTY: True}, "has no length penalty"),
        ({f"{PENALTY}.num_output_tokens_weight": "-1"}, "valid: a float in [0, 1e+06]"),
        ({"orchestrator.group_size": "0"}, "orchestrator.group_size=0 is not valid"),
    ],
)
def test_bad_values_name_the_valid_ones(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("prime-rl", None, settings)
    assert message in str(error.value) and "\n" not in str(error.value)


RL_TOML = """max_steps = 20
seq_len = 2048

[model]
name = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"

[orchestrator]
batch_size = 128
group_size = 16

[orchestrator.algo]
type = "grpo"

[orchestrator.algo.length_penalty]

[[orchestrator.train.source]]
name = "reverse-text"

[orchestrator.train.source.env.taskset]
id = "reverse-text-v1"

[trainer.optim]
lr = 3e-6

[ckpt]

[inference]
gpu_memory_utilization = 0.5
"""


def test_an_rl_toml_as_its_configs_write_it(tmp_path: Path) -> None:
    """configs/debug/algo/grpo.toml's form; an empty [orchestrator.algo.length_penalty] table turns
    the penalty on at its defaults (docs/configuration.md, "Optional Sub-Configs")."""
    path = tmp_path / "rl.toml"
    path.write_text(RL_TOML)
    read = read_input([str(path)])
    assert detect(list(read.settings), str(path))[0] == "prime-rl"
    assert read.settings[PENALTY] is True and read.settings["orchestrator.group_size"] == 16
    mapping = resolve("prime-rl", None, read.settings, frozenset(read.settings)).mapping
    assert (
        parse_variant(mapping.spec).spec_text()
        == parse_variant(
            VARIANTS["prime_rl_length_penalty"].spec_text() + ",selector=informative"
        ).spec_text()
    )
    path.write_text(RL_TOML.replace("[orchestrator.algo.length_penalty]\n", ""))
    assert PENALTY not in read_input([str(path)]).settings


def test_each_source_s_group_size_is_the_orchestrator_s(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    sources = '[[orchestrator.train.source]]\nname = "a"\ngroup_size = 8\n'
    path.write_text("[orchestrator]\nbatch_size = 64\n\n" + sources)
    assert read_input([str(path)]).settings["orchestrator.group_size"] == 8
    path.write_text("[orchestrator]\nbatch_size = 64\n\n" + sources + sources.replace("8", "4"))
    with pytest.raises(InvalidInput, match=r"set group_size differently; toyrl checks one"):
        read_input([str(path)])


def test_the_uv_run_rl_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README.md's `uv run rl @ FILE`, with kebab-case overrides (docs/configuration.md, "CLI
    Overrides"), a bare flag turning a sub-config on and a section's own file (`--trainer @ FILE`)."""
    monkeypatch.chdir(tmp_path)
    Path("rl.toml").write_text(RL_TOML.replace("[orchestrator.algo.length_penalty]\n", ""))
    Path("trainer.toml").write_text('[loss]\ntype = "ipo"\n')
    read = read_input(
        [
            "uv",
            "run",
            "rl",
            "@",
            "rl.toml",
            "--trainer",
            "@",
            "trainer.toml",
            "--orchestrator.group-size",
            "4",
            "--orchestrator.algo.length-penalty.num-output-tokens-weight",
            "0.5",
            "--output-dir",
            "outputs/grpo",
        ]
    )
    assert read.trainer == "prime-rl"
    assert read.settings["orchestrator.group_size"] == "4" and read.settings["trainer.loss.type"] == "ipo"
    assert read.settings[PENALTY] is True  # a key of the sub-config turns it on
    assert read.settings["orchestrator.batch_size"] == 128  # from rl.toml, under the command's flags


def test_prime_rl_s_files_are_told_apart() -> None:
    assert detect(["orchestrator.batch_size", "trainer.optim.lr", "ckpt.interval"], "x")[0] == "prime-rl"
    assert detect(["actor_rollout_ref.actor.loss_agg_mode", "trainer.n_gpus_per_node"], "x")[0] == "verl"
    assert (
        detect(["ckpt.save_steps", "actor.micro_train_batch_size", "algo.advantage.estimator"], "x")[0]
        == "openrlhf"
    )


def test_check_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    path.write_text(RL_TOML)
    result = CliRunner().invoke(app, ["check", str(path), *SMALL])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("read as prime-rl (keys under ")
    assert (
        "toyrl variant: advantage=none,aggregation=token_mean,reward=length_penalty,selector=informative"
        in result.stdout
    )
    assert "not run against its code: prime-rl is not installable" in result.stdout
    assert sum(line.startswith("verdict: ") for line in lines) == 1
    assert (
        "to Dr. GRPO: no setting of prime-rl 0.8.0 that toyrl models makes these settings Dr. GRPO's loss"
        in lines
    )


def test_a_word_rl_elsewhere_is_not_prime_rl_s_launch(tmp_path: Path) -> None:
    """prime-rl's entry is `uv run rl`: a bare word `rl` among another launch's arguments (a TRL
    script's --output_dir rl) does not start prime-rl."""
    script = tmp_path / "run.sh"
    script.write_text("accelerate launch train_grpo.py --loss_type dr_grpo --output_dir rl\n")
    read = read_input([str(script)])
    assert read.trainer is None and read.settings["output_dir"] == "rl"
    assert detect(list(read.settings), str(script))[0] == "trl"


def test_a_filter_list_in_the_toml_is_read(tmp_path: Path) -> None:
    """`[[orchestrator.post_batch_filters]]` tables, as OrchestratorConfig's list is written in TOML:
    the zero_advantage filter only monitored keeps the groups without a signal in the step."""
    path = tmp_path / "rl.toml"
    filters = '[[orchestrator.post_batch_filters]]\ntype = "zero_advantage"\nenforce = false\n'
    path.write_text("[orchestrator]\nbatch_size = 64\ngroup_size = 8\n\n" + filters)
    read = read_input([str(path)])
    mapping = resolve("prime-rl", None, read.settings, frozenset(read.settings)).mapping
    assert parse_variant(mapping.spec).spec_text() == "advantage=none,aggregation=token_mean"


def test_check_runs_the_length_penalty_s_own_weights_beside_dr_grpo(tmp_path: Path) -> None:
    """A stage parameter of the loss (the penalty's weight) leaves the Dr. GRPO reference with its
    stage, as the stage's name does (check.dr_grpo_in)."""
    path = tmp_path / "rl.toml"
    path.write_text(
        RL_TOML.replace(
            "[orchestrator.algo.length_penalty]\n",
            "[orchestrator.algo.length_penalty]\nnum_output_tokens_weight = 0.5\n",
        )
    )
    result = CliRunner().invoke(app, ["check", str(path), *SMALL])
    assert result.exit_code == 0, result.stderr
    assert "num_output_tokens_weight=0.5" in result.stdout
    assert sum(line.startswith("verdict: ") for line in result.stdout.splitlines()) == 1
