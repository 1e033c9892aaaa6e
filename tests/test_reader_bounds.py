"""`toyrl check`'s readers bound what they expand, and read what they cannot be sure of as unknown:
interpolations (OmegaConf's) and a script's variables (bash's) counted before they are built, in
every input form; a setting given twice refused; a huge integer refused in every form; no value
guessed (issue 39, round 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import INT_LIMIT, Unresolved
from toyrl.trainers.reading import read_input, read_settings

pytest.importorskip("yaml")
pytest.importorskip("omegaconf")
pytest.importorskip("tree_sitter_bash")
pytest.importorskip("hydra")

ACTOR = "actor_rollout_ref.actor."
# a verl configuration that runs: its estimator and the micro-batch size it requires
RUNS = {"algorithm.adv_estimator": "grpo", ACTOR + "ppo_micro_batch_size_per_gpu": 2}


def _one_line_refusal(*args: str) -> str:
    code, stdout, stderr = invoke("check", *SMALL, *args)  # the options before a command line's --
    assert code == 2, (stdout, stderr)
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return stderr


def _quadrupling(levels: int, base: str = "x") -> dict[str, str]:
    """levels keys each four uses of the one before: 4**levels characters, levels deep."""
    keys = {"a0": base}
    for i in range(1, levels + 1):
        keys[f"a{i}"] = f"${{a{i - 1}}}" * 4
    return keys


def _write_form(tmp_path: Path, form: str, settings: dict[str, object]) -> list[str]:
    """The arguments of `toyrl check` giving `settings` (flat keys) in `form`."""
    if form == "json":
        path = tmp_path / "verl.json"
        path.write_text(json.dumps(settings))
        return [str(path)]
    if form == "yaml":
        import yaml

        path = tmp_path / "verl.yaml"
        path.write_text(yaml.safe_dump(settings))
        return [str(path)]
    overrides = [
        f"{key}='{value}'" if "$" in str(value) else f"{key}={value}" for key, value in settings.items()
    ]
    if form == "sh":
        path = tmp_path / "run.sh"
        quoted = [f'"{override}"'.replace("$", "\\$") for override in overrides]
        path.write_text("python3 -m verl.trainer.main_ppo " + " ".join(quoted) + "\n")
        return [str(path)]
    return ["--", "python3", "-m", "verl.trainer.main_ppo", *overrides]


FORMS = ["yaml", "json", "sh", "command line"]


@pytest.mark.parametrize("form", FORMS)
def test_an_interpolation_bomb_in_a_read_setting_is_refused_in_every_form(tmp_path: Path, form: str) -> None:
    """Twelve levels of `a_i: ${a_j}${a_j}${a_j}${a_j}` are 16 million characters: counted before
    OmegaConf resolves them, refused in one line naming the setting and the bound."""
    settings = {**_quadrupling(12), **RUNS, ACTOR + "loss_agg_mode": "${a12}"}
    stderr = _one_line_refusal(*_write_form(tmp_path, form, settings))
    assert f"{ACTOR}loss_agg_mode: its interpolations expand to more than 1,000,000 characters" in stderr


@pytest.mark.parametrize("form", FORMS)
def test_a_long_chain_of_interpolations_is_refused_naming_the_setting(tmp_path: Path, form: str) -> None:
    """A chain of 30 keys, each the one before: refused at 20 levels, before OmegaConf recurses
    (at about 55, it gives up with Python's recursion error)."""
    chain: dict[str, object] = {"k0": "token-mean"} | {f"k{i}": f"${{k{i - 1}}}" for i in range(1, 31)}
    settings = {**chain, **RUNS, ACTOR + "loss_agg_mode": "${k30}"}
    stderr = _one_line_refusal(*_write_form(tmp_path, form, settings))
    assert f"{ACTOR}loss_agg_mode: its interpolations go more than 20 levels deep" in stderr


def test_interpolations_of_keys_toyrl_does_not_read_are_left_as_written(tmp_path: Path) -> None:
    """A bomb and a chain of 20,000 keys under names toyrl never reads cost nothing: their values
    stay as written, the settings it reads are resolved."""
    path = tmp_path / "verl.yaml"
    chain = "".join(f"k{i}: ${{k{i - 1}}}\n" for i in range(1, 20001))
    bomb = "".join(f"a{i}: '{f'${{a{i - 1}}}' * 4}'\n" for i in range(1, 13))
    path.write_text(
        f"k0: 1\n{chain}a0: x\n{bomb}data.max_response_length: 512\n"
        f"{ACTOR}loss_scale_factor: ${{data.max_response_length}}\n"
    )
    settings = read_settings(path)
    assert settings["k20000"] == "${k19999}" and settings["a12"] == "${a11}" * 4
    assert settings[ACTOR + "loss_scale_factor"] == 512


def test_a_flat_dotted_interpolation_is_read_as_set(tmp_path: Path) -> None:
    """`actor_rollout_ref.actor.loss_scale_factor: ${data.max_response_length}` with both keys flat
    and dotted: the setting is 512 (it was read as unset, and the verdict told to set it)."""
    path = tmp_path / "verl.yaml"
    path.write_text(
        "algorithm.adv_estimator: grpo\nalgorithm.norm_adv_by_std_in_grpo: false\n"
        f"{ACTOR}ppo_micro_batch_size_per_gpu: 2\ndata.max_response_length: 512\n"
        f"{ACTOR}loss_agg_mode: seq-mean-token-sum-norm\n"
        f"{ACTOR}loss_scale_factor: ${{data.max_response_length}}\n"
    )
    assert read_settings(path)[ACTOR + "loss_scale_factor"] == 512
    code, stdout, stderr = invoke("check", str(path), "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["given"][ACTOR + "loss_scale_factor"] == 512
    assert report["dr_grpo_settings"] == {}


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        (
            "actor_rollout_ref:\n  actor:\n    loss_agg_mode: token-mean\n"
            "actor_rollout_ref.actor.loss_agg_mode: seq-mean-token-sum\n",
            ".yaml",
            "actor_rollout_ref.actor.loss_agg_mode is given twice (nested and as a dotted key); keep one",
        ),
        (
            '{"actor_rollout_ref": {"actor.loss_agg_mode": "token-mean"},'
            ' "actor_rollout_ref.actor": {"loss_agg_mode": "seq-mean-token-sum"}}',
            ".json",
            "actor_rollout_ref.actor.loss_agg_mode is given twice (nested and as a dotted key); keep one",
        ),
        (
            "data.max_response_length: 512\ndata:\n  max_response_length: 1024\n",
            ".yml",
            "data.max_response_length is given twice (nested and as a dotted key); keep one",
        ),
        (
            "actor_rollout_ref.actor: 1\nactor_rollout_ref.actor.loss_agg_mode: token-mean\n",
            ".yaml",
            "actor_rollout_ref.actor is given both as a value and as a section; keep one",
        ),
    ],
)
def test_a_setting_given_nested_and_dotted_is_refused(
    tmp_path: Path, text: str, suffix: str, message: str
) -> None:
    path = tmp_path / f"verl{suffix}"
    path.write_text(text)
    with pytest.raises(InvalidInput, match="^" + str(path).replace("\\", "\\\\") + ": ") as error:
        read_settings(path)
    assert message in str(error.value)
    assert message in _one_line_refusal(str(path), "--trainer", "verl")


def test_a_date_beside_an_interpolation_is_read_as_omegaconf_reads_it(tmp_path: Path) -> None:
    """OmegaConf's loader (Hydra's) reads a date as text; so does toyrl, and OmegaConf then
    resolves the file's interpolations."""
    path = tmp_path / "verl.yaml"
    path.write_text(
        "trainer:\n  experiment_name: 2024-01-01\ndata:\n  max_response_length: 512\n"
        "actor_rollout_ref:\n  actor:\n    loss_scale_factor: ${data.max_response_length}\n"
    )
    settings = read_settings(path)
    assert settings["trainer.experiment_name"] == "2024-01-01"
    assert settings[ACTOR + "loss_scale_factor"] == 512


def test_a_key_built_by_an_interpolation_is_unknown_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / "verl.yaml"
    path.write_text(f"name: mode\nmode: token-mean\n{ACTOR}loss_agg_mode: ${{${{name}}}}\n")
    value = read_settings(path)[ACTOR + "loss_agg_mode"]
    assert isinstance(value, Unresolved) and "built by another interpolation" in value.why


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.sh"
    path.write_text(text)
    return str(path)


def test_a_doubling_script_is_refused_naming_its_line(tmp_path: Path) -> None:
    """40 lines of `A_i=$A_{i-1}$A_{i-1}`: the word passes a million characters at line 21."""
    lines = [
        "A0=x",
        *(f"A{i}=$A{i - 1}$A{i - 1}" for i in range(1, 41)),
        "python3 -m verl.trainer.main_ppo a=1",
    ]
    path = _script(tmp_path, "\n".join(lines) + "\n")
    stderr = _one_line_refusal(path)
    assert f"{path}, line 21: a word of more than 1,000,000 characters" in stderr


def test_a_script_of_a_megabyte_is_told_as_the_script_not_as_memory(tmp_path: Path) -> None:
    """150,000 lines of `A=$A$A` (1 MB): refused naming the script's line, not "out of memory"."""
    path = _script(tmp_path, "A=x\n" + "A=$A$A\n" * 150_000 + "python3 -m verl.trainer.main_ppo a=$A\n")
    stderr = _one_line_refusal(path)
    assert f"{path}, line 21: a word of more than 1,000,000 characters" in stderr
    assert "memory" not in stderr


@pytest.mark.parametrize(
    ("body", "line"),
    [
        # a long word used 100 times: 52 million characters, though each word is under a million
        ("B=(" + "$A19 " * 100 + ")\n", 21),
        ("python3 -m verl.trainer.main_ppo " + "a=$A19 " * 100 + "\n", 21),
    ],
)
def test_the_characters_a_script_builds_are_bounded_in_all(tmp_path: Path, body: str, line: int) -> None:
    lines = ["A0=x", *(f"A{i}=$A{i - 1}$A{i - 1}" for i in range(1, 20))]
    path = _script(tmp_path, "\n".join(lines) + "\n" + body + "python3 -m verl.trainer.main_ppo a=1\n")
    stderr = _one_line_refusal(path)
    assert f"{path}, line {line}: more than 20,000,000 characters built by expanding its variables" in stderr


def test_a_word_grown_by_appending_is_bounded_by_what_it_builds(tmp_path: Path) -> None:
    """`A=${A}x...` 20,000 times copies the growing word each time (a quadratic cost): the
    characters built are counted, and the script refused where they pass the bound."""
    path = _script(tmp_path, "A=\n" + "A=${A}" + "x" * 100 + "\n" * 1 + ("A=${A}" + "x" * 100 + "\n") * 20000)
    assert "more than 20,000,000 characters built" in _one_line_refusal(path)


def test_shell_arithmetic_wraps_at_64_bits_as_bash_does(tmp_path: Path) -> None:
    """3 squared forty times: bash's 64-bit arithmetic wraps; toyrl computes the same number, not
    an integer of 10**11 digits (which Python cannot even print)."""
    path = tmp_path / "run.sh"
    path.write_text("A=3\n" + "A=$((A * A))\n" * 40 + "python3 -m openrlhf.cli.train_ppo_ray --seed $A\n")
    expected = pow(3, 2**40, 2**64)
    expected -= 2**64 if expected >= 2**63 else 0
    assert read_input([str(path)]).settings["seed"] == str(expected)


@pytest.mark.parametrize(
    "text",
    [
        "X=$((" + "(" * 50_000 + "1" + ")" * 50_000 + "))\n",
        "X=$((" + "1+" * 50_000 + "1))\n",
        "X=${A:-" * 20_000 + "1" + "}" * 20_000 + "\n",
        "if true; then\n" * 5_000 + "true\n" + "fi\n" * 5_000,
    ],
)
def test_deep_nesting_in_a_script_is_one_line(tmp_path: Path, text: str) -> None:
    path = _script(tmp_path, text + "python3 -m verl.trainer.main_ppo a=$X\n")
    assert f"{path}, line 1: nested too deeply to read" in _one_line_refusal(path)


def test_a_long_hydra_override_is_unparsed_and_refused_only_where_read(tmp_path: Path) -> None:
    """Hydra's parser takes time growing with the square of an override's length: an override of
    more than 1,000 characters is not parsed; a setting toyrl reads given so is refused, another
    only listed."""
    logger = "trainer.logger=[" + "'console'," * 150 + "'wandb']"
    runs = [f"{key}={value}" for key, value in RUNS.items()]
    command = ["--", "python3", "-m", "verl.trainer.main_ppo", *runs]
    code, stdout, stderr = invoke("check", *SMALL, *command, logger)
    assert code == 0, stderr
    assert "trainer.logger" in stdout
    stderr = _one_line_refusal(*command, f"{ACTOR}loss_agg_mode=" + "x" * 1200)
    assert f"{ACTOR}loss_agg_mode=" in stderr and "an override of more than 1,000 characters" in stderr


def test_the_overrides_of_one_command_are_bounded_in_all(tmp_path: Path) -> None:
    overrides = [f"trainer.k{i}=[" + "1," * 400 + "1]" for i in range(30)]
    stderr = _one_line_refusal("--", "python3", "-m", "verl.trainer.main_ppo", *overrides)
    assert "its Hydra overrides hold more than 20,000 characters" in stderr


HUGE = "1" + "0" * 400


@pytest.mark.parametrize("form", ["set", "yaml", "json", "py", "command line", "sh", "hydra"])
def test_a_huge_integer_is_refused_in_every_form(tmp_path: Path, form: str) -> None:
    """An integer setting beyond 64 bits, from any input form, is one line naming the valid range
    (it was an OverflowError traceback from the toy's arithmetic)."""
    key, trainer = "per_device_train_batch_size", "trl"
    if form == "set":
        args = ["--trainer", "trl", "--set", f"{key}={HUGE}"]
    elif form in ("yaml", "json"):
        path = tmp_path / f"trl.{form}"
        path.write_text(f"{key}: {HUGE}\n" if form == "yaml" else json.dumps({key: int(HUGE)}))
        args = [str(path), "--trainer", trainer]
    elif form == "py":
        path = tmp_path / "train.py"
        path.write_text(f"from trl import GRPOConfig\nconfig = GRPOConfig({key}={HUGE})\n")
        args = [str(path)]
    elif form == "command line":
        args = ["--", "trl", "grpo", f"--{key}", HUGE]
    elif form == "sh":
        args = [_script(tmp_path, f"N={HUGE}\ntrl grpo --{key} $N\n")]
    else:
        key = ACTOR + "ppo_micro_batch_size_per_gpu"
        args = [
            "--",
            "python3",
            "-m",
            "verl.trainer.main_ppo",
            "algorithm.adv_estimator=grpo",
            f"{key}={HUGE}",
        ]
    stderr = _one_line_refusal(*args)
    assert key in stderr and f"valid: an int in [1, {INT_LIMIT}]" in stderr


def test_the_largest_64_bit_integer_is_taken() -> None:
    code, stdout, stderr = invoke(
        "check", "--trainer", "trl", "--set", f"per_device_train_batch_size={INT_LIMIT}", *SMALL
    )
    assert code == 0, stderr
    assert "verdict:" in stdout


def test_a_hash_inside_a_word_is_not_a_comment(tmp_path: Path) -> None:
    """bash starts a comment only at a word's start: `grpo#2` is one word, and the flags after it
    are read (they were dropped)."""
    path = _script(
        tmp_path,
        "python3 -m openrlhf.cli.train_ppo_ray --wandb_run_name grpo#2 --advantage_estimator dr_grpo "
        "--generate_max_len 4096 # a comment --n_samples_per_prompt 4\n",
    )
    settings = read_input([path]).settings
    assert settings == {
        "wandb_run_name": "grpo#2",
        "advantage_estimator": "dr_grpo",
        "generate_max_len": "4096",
    }


def test_a_default_expansion_takes_the_set_value(tmp_path: Path) -> None:
    """`${N:-4}` with N=8 is 8 (it was read as '8:-4}'); unset, 4."""
    path = _script(tmp_path, "N=8\npython3 -m verl.trainer.main_ppo a=${N:-4} b=${M:-4} c=x${N:-4}y\n")
    assert read_input([path]).settings == {"a": 8, "b": 4, "c": "x8y"}


def test_a_misspelt_dotted_flag_is_a_warning_not_a_key_error() -> None:
    """OpenRLHF's `--data.generate_max_len` (spelt like rollout.max_new_tokens' old name): a
    warning naming the setting it looks like, exit 1 (it was `KeyError: 'generate_max_len'`)."""
    code, stdout, stderr = invoke(
        "check",
        *SMALL,
        "--",
        "python3",
        "-m",
        "openrlhf.cli.train_ppo_ray",
        "--advantage_estimator",
        "group_norm",
        "--data.generate_max_len",
        "1024",
    )
    assert code == 1 and "Traceback" not in stderr, stderr
    assert "data.generate_max_len: did you mean rollout.max_new_tokens?" in stdout


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("source ./env.sh", "$N: source (line 2) may change it"),
        (". ./env.sh", "$N: . (line 2) may change it"),
        ('eval "N=16"', "$N: eval (line 2) may change it"),
        ("export $(cat .env | xargs)", "$N: export (line 2) may change it"),
        ("declare -n R=N; R=16", "$N: declare (line 2) may change it"),
        ("read -r N < n.txt", "$N: read (line 2) may assign it"),
        ("mapfile -t N < n.txt", "$N: mapfile (line 2) may assign it"),
        ("let N=16", "$N: let (line 2) may assign it"),
        ("printf -v N %s 16", "$N: printf (line 2) may assign it"),
        ("((N = N * 2))", "$N: the arithmetic of line 2 may assign it"),
        ("cd /data && N=16", "$N is assigned after && (line 2)"),
        ("test -f x || N=16", "$N is assigned after || (line 2)"),
        ("echo 16 | N=16", "$N is assigned in a pipeline (line 2)"),
        ("for N in 1 16; do :; done", "$N: the loop of line 2 assigns it"),
        ("double() { N=16; }; double", "$N: double (line 2) may change it"),
        ("echo $((N += 8))", "$N: the arithmetic of line 2 may assign it"),
    ],
)
def test_a_variable_a_command_may_change_is_unknown_not_its_earlier_value(
    tmp_path: Path, line: str, why: str
) -> None:
    """After a command that may assign N in a way toyrl does not evaluate, $N is unknown (the
    check takes the default and says so), never the 8 assigned before (which was read)."""
    path = _script(
        tmp_path, f"N=8\n{line}\npython3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=$N\n"
    )
    value = read_input([path]).settings["actor_rollout_ref.rollout.n"]
    assert isinstance(value, Unresolved) and value.at_run and why in value.why, value


@pytest.mark.parametrize(
    "line", ["export N=16 M=1", "N=16 && echo ok", "M=$((N * 2))", "((N > 3)) && echo", "f() { M=1; }"]
)
def test_an_assignment_that_surely_runs_is_read(tmp_path: Path, line: str) -> None:
    path = _script(
        tmp_path, f"N=16\n{line}\npython3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=$N\n"
    )
    assert read_input([path]).settings == {"actor_rollout_ref.rollout.n": 16}


@pytest.mark.parametrize(
    "assignment",
    [
        'config.loss_type = "dr_grpo"',
        'trainer.args.loss_type = "dr_grpo"',
        'setattr(config, "loss_type", "dr_grpo")',
        "config.loss_type: str = 'dr_grpo'",
    ],
)
def test_a_python_setting_assigned_besides_the_call_is_refused_not_taken_from_the_call(
    tmp_path: Path, assignment: str
) -> None:
    """`config = GRPOConfig(loss_type="grpo")` then `config.loss_type = "dr_grpo"`: the call's
    value is not the run's; refused in one line naming the line and the --set that gives it."""
    path = tmp_path / "train.py"
    path.write_text(f'from trl import GRPOConfig\nconfig = GRPOConfig(loss_type="grpo")\n{assignment}\n')
    stderr = _one_line_refusal(str(path))
    assert "loss_type='dr_grpo' cannot be read: assigned as an attribute (line 3)" in stderr
    assert "--set loss_type=VALUE" in stderr
    code, stdout, stderr = invoke("check", *SMALL, str(path), "--set", "loss_type=dr_grpo")
    assert "verdict:" in stdout
    assert code == 0, stderr


def test_the_list_form_of_an_interpolation_bomb_is_counted_too(tmp_path: Path) -> None:
    """`a_i: ['${a_j}', '${a_j}', '${a_j}', '${a_j}']`: lists of lists, 16 million values once
    resolved, counted as sections' values are."""
    path = tmp_path / "verl.yaml"
    levels = "".join(f"a{i}: [{', '.join([repr(f'${{a{i - 1}}}')] * 4)}]\n" for i in range(1, 13))
    path.write_text(f"a0: [x]\n{levels}{ACTOR}loss_agg_mode: ${{a12}}\n")
    with pytest.raises(InvalidInput, match="its interpolations expand to more than 1,000,000 characters"):
        read_settings(path)


def test_a_hydra_mapping_override_gives_its_settings() -> None:
    """`algorithm={adv_estimator:grpo}` is merged into the section as Hydra merges it: each value
    is the setting under its dotted key (the mapping was one unread key, and verl's default
    estimator, GAE, was checked in its place)."""
    read = read_input(
        [
            "python3",
            "-m",
            "verl.trainer.main_ppo",
            "algorithm={adv_estimator:grpo,norm_adv_by_std_in_grpo:false}",
            "actor_rollout_ref.actor={loss_agg_mode:seq-mean-token-sum,optim:{lr:1e-6}}",
        ]
    )
    assert read.settings == {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        ACTOR + "loss_agg_mode": "seq-mean-token-sum",
        ACTOR + "optim.lr": 1e-6,
    }
