"""Plugins: docs/plugins.md run as written, loading errors and contract probes answered in one line,
exact hooks or simulated only, sidecars and sweeps that follow a plugin's source, and workers.

docs/plugins.md's conventions: a fenced block right after `<!-- plugin: FILE -->` is written to
FILE; one after `<!-- json: FILE -->` holds keys that FILE must have with those values; a python
block after `<!-- run -->` is executed; a `console` block's `$` lines are run (`toyrl ...` through
typer's CliRunner, anything else by the shell), each followed by its output (`...` stands for text
left out; a `toyrl: error:` line is a refusal: exit 2, that one line on stderr, no file changed).
Everything runs in order, in one fresh folder.
"""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.configs import SMALL
from toyrl.cli import app
from toyrl.config import Config, InvalidInput
from toyrl.expected import expected_update
from toyrl.experiment import run_experiment
from toyrl.objective import parse_spec
from toyrl.plugins import LOADED, load_plugin, plugins_used, probe, probe_inputs, unload
from toyrl.stages import KINDS, REGISTRY, simulated_only
from toyrl.sweep import Point, run_id, run_sweep
from toyrl.train import initial_theta, run_streams

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plugins.md"
BLOCK = re.compile(r"(?:<!-- (plugin|json|run)(?:: (\S+))? -->\n)?```(\w+)\n(.*?)```", re.DOTALL)
TINY = SMALL.replace(steps=5)  # tests/configs.py's, shorter: these tests start process pools


@pytest.fixture(autouse=True)
def no_plugin_stays_loaded() -> Iterator[None]:
    """Other tests check the registries exactly: every plugin a test loads is unloaded after it."""
    before = {kind: list(stages) for kind, stages in REGISTRY.items()}
    yield
    for plugin in list(LOADED.values()):
        unload(plugin)
    assert {kind: list(stages) for kind, stages in REGISTRY.items()} == before


def blocks() -> list[tuple[str, str, str, str]]:
    """(mark, file, language, body) of every fenced block of docs/plugins.md, in order."""
    return [
        (m.group(1) or "", m.group(2) or "", m.group(3), m.group(4)) for m in BLOCK.finditer(DOC.read_text())
    ]


def plugin_source(name: str) -> str:
    return next(body for mark, file, _, body in blocks() if mark == "plugin" and file == name)


def console(body: str) -> list[tuple[str, str]]:
    """(command, expected output) of each `$` line of a console block, continuation lines joined."""
    steps: list[tuple[str, list[str]]] = []
    lines = iter(body.rstrip("\n").splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + next(lines).strip()
            steps.append((command, []))
        else:
            steps[-1][1].append(line)
    return [(command, "\n".join(expected)) for command, expected in steps]


def matches(expected: str, output: str) -> bool:
    """Whether `output` is `expected`, each `...` standing for any text (across lines too)."""
    pattern = ".*?".join(re.escape(piece) for piece in expected.strip().split("..."))
    return re.fullmatch(pattern, output.strip(), re.DOTALL) is not None


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_documented_walk_through_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = {"plugin": 0, "json": 0, "run": 0, "console": 0, "refused": 0}
    for mark, name, language, body in blocks():
        if mark == "plugin":
            (tmp_path / name).write_text(body)
        elif mark == "json":
            recorded = json.loads((tmp_path / name).read_text())
            for key, value in json.loads(body).items():
                assert recorded[key] == value, f"{name}: {key} is {recorded.get(key)!r}"
        elif mark == "run":
            exec(compile(body, str(DOC), "exec"), {"__name__": "docs_plugins"})
        elif language == "console":
            for command, expected in console(body):
                if not command.startswith("toyrl "):
                    subprocess.run(command, shell=True, cwd=tmp_path, check=True)
                    continue
                before = files(tmp_path)
                result = CliRunner().invoke(app, shlex.split(command)[1:])
                if expected.startswith("toyrl: error:"):
                    assert result.exit_code == 2 and result.stdout == "", command
                    assert result.stderr.count("\n") == 1 and matches(expected, result.stderr), result.stderr
                    assert files(tmp_path) == before, f"{command} changed files"
                    done["refused"] += 1
                else:
                    assert result.exit_code == 0, f"{command}: {result.output}"
                    assert matches(expected, result.output), f"{command}:\n{result.output}"
        else:
            continue
        done[mark or language] += 1
    assert done == {"plugin": 6, "json": 2, "run": 1, "console": 12, "refused": 6}, done
    sha = hashlib.sha256(plugin_source("smoothing.py").encode()).hexdigest()
    assert sha in DOC.read_text() and sha[:12] in DOC.read_text()  # the hashes shown are the file's
    longest = pd.read_csv(tmp_path / "longest.csv")
    assert longest["seed"].nunique() == 4 and np.isfinite(longest["accuracy"]).all()


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


HEADER = "from dataclasses import dataclass\nimport numpy as np\nfrom toyrl.stages import register\n"
SHIFT = """
@register("advantage", "shift")
@dataclass(frozen=True)
class Shift:
    def advantages(self, rewards, std_eps):
        return rewards - 0.5
"""

LOADING_ERRORS = {
    "no such file": (None, "plugin {path}: no such file"),
    "not python": ("x = 1\n", "plugin {path}: a plugin is a Python file, ending in .py"),
    "a syntax error": ("x = (\n", "plugin {path}, line 1: syntax error: '(' was never closed"),
    "an import error": (
        "import no_such_module_for_toyrl\n",
        "plugin {path}, line 1: ModuleNotFoundError: No module named 'no_such_module_for_toyrl'",
    ),
    "an exception": (
        HEADER + "\n\nraise RuntimeError('not today')\n",
        "plugin {path}, line 6: RuntimeError: not today",
    ),
    "nothing registered": ("x = 1\n", "plugin {path}: registers no stage (decorate a frozen dataclass"),
    "a built-in name": (
        HEADER + SHIFT.replace('"shift"', '"rloo"'),
        "plugin {path}, line 5: ValueError: a advantage named 'rloo' is registered already",
    ),
    "no such kind": (
        HEADER + SHIFT.replace('"advantage"', '"critic"'),
        "plugin {path}, line 5: ValueError: no stage kind 'critic': the kinds are reward, selector,",
    ),
    "not its kind's protocol": (
        HEADER + SHIFT.replace('"advantage"', '"kl"'),
        "plugin {path}: kl custom:shift: has no beta (the KL protocol of toyrl.stages.kl)",
    ),
    "a method of other arguments": (
        HEADER + SHIFT.replace("(self, rewards, std_eps)", "(self, rewards)"),
        "plugin {path}: advantage custom:shift: has advantages(rewards): it must take (rewards, std_eps) "
        "(the Advantage protocol of toyrl.stages.advantage)",
    ),
    "a property as a method": (
        HEADER
        + SHIFT.replace('"advantage", "shift"', '"kl", "shift"').replace(
            "    def advantages(self, rewards, std_eps):\n        return rewards - 0.5\n",
            "    def beta(self):\n        return 0.1\n",
        ),
        "plugin {path}: kl custom:shift: has beta as a method, not a value (the KL protocol",
    ),
    "not frozen": (
        HEADER + SHIFT.replace("(frozen=True)", ""),
        "plugin {path}: advantage custom:shift: Shift is not a frozen dataclass",
    ),
    "a bad name": (
        HEADER + SHIFT.replace('"shift"', '"my-shift"'),
        "plugin {path}: advantage custom:my-shift: a stage's name is letters, digits and underscores",
    ),
    "sys.exit(0)": (
        "import sys\nsys.exit(0)\n",
        "plugin {path}, line 2: calls sys.exit(0) (a plugin cannot end toyrl)",
    ),
    "a BaseException": (
        "class Stop(BaseException):\n    pass\n\n\nraise Stop('here')\n",
        "plugin {path}, line 5: Stop: here",
    ),
    "a __version__ that is no text": (
        HEADER + SHIFT + "\n\nclass Version:\n    def __str__(self):\n        raise TypeError('no')\n\n\n"
        "__version__ = Version()\n",
        "plugin {path}: its __version__ cannot be read as text (TypeError: no)",
    ),
    "an empty simulated_only without its hook": (
        HEADER + SHIFT.replace("class Shift:", "class Shift:\n    simulated_only = ''"),
        "plugin {path}: advantage custom:shift: has no conditional (its exact hook) but an empty "
        "simulated_only",
    ),
}


@pytest.mark.parametrize("case", list(LOADING_ERRORS))
def test_a_plugin_that_cannot_load_is_one_line_and_registers_nothing(case: str, tmp_path: Path) -> None:
    source, message = LOADING_ERRORS[case]
    path = tmp_path / ("plugin.txt" if case == "not python" else "plugin.py")
    if source is not None:
        path.write_text(source)
    with pytest.raises(InvalidInput) as error:
        load_plugin(path)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith(message.format(path=path)), str(error.value)
    assert not LOADED and not any(
        name.startswith("custom:") for stages in REGISTRY.values() for name in stages
    )


def test_two_plugins_cannot_register_one_name(tmp_path: Path) -> None:
    first = load_plugin(write(tmp_path, "first.py", HEADER + SHIFT))
    second = write(tmp_path, "second.py", HEADER + SHIFT + "\n__version__ = '2'\n")
    with pytest.raises(
        InvalidInput, match=f"^plugin {second}: advantage custom:shift: that name is registered "
    ):
        load_plugin(second)
    assert (
        list(LOADED.values()) == [first]
        and type(REGISTRY["advantage"]["custom:shift"]).__module__ == first.module
    )


BROKEN = {
    "a reward of another shape": (
        "reward",
        "def rewards(self, batch, config):\n        return batch.length[..., 0] * 1.0",
        "returns shape (3, 3) for a batch of shape (3, 3, 4) (the contract: [runs, prompts, group]",
    ),
    "a selector of floats": (
        "selector",
        "def included(self, batch):\n        return batch.stopped * 1.0",
        "returns float64 values for a batch of shape (3, 3, 4) (the contract: bool [runs, prompts, group]",
    ),
    "an advantage against run 0": (
        "advantage",
        "def advantages(self, rewards, std_eps):\n        return rewards - rewards[:1]",
        "mixes runs: permuting the runs of its input does not permute its output the same way",
    ),
    "an advantage that raises": (
        "advantage",
        "def advantages(self, rewards, std_eps):\n        raise KeyError('std')",
        "raises KeyError: 'std' for rewards of shape (3, 3, 4)",
    ),
    "a denominator of 0": (
        "normaliser",
        "def denominators(self, tokens, included, length_norm, members=None):\n"
        "        return tokens - tokens.min(), 1.0",
        "returns 0.0 at (1, 0, 3) in D for tokens of shape (3, 3, 4) (the contract: "
        "D [runs, prompts, group], positive where a response is in the loss)",
    ),
    "n per prompt": (
        "normaliser",
        "def denominators(self, tokens, included, length_norm, members=None):\n"
        "        return tokens, np.ones(tokens.shape[:2])",
        "returns n of shape (3, 3) for tokens of shape (3, 3, 4) (the contract: n [runs] or one number",
    ),
    "a normaliser over the runs' tokens": (
        "normaliser",
        "def denominators(self, tokens, included, length_norm, members=None):\n"
        "        return tokens / tokens.max(), np.ones(len(tokens))",
        "mixes runs: a run's output changes with another run's input (D)",
    ),
    "coefficients of one kind": (
        "objective",
        "def coefficients(self, update, beta):\n"
        "        from toyrl.policy import Coefficients\n"
        "        return Coefficients(update.advantage[..., 0]), np.zeros(len(update.advantage))",
        "returns approach coefficients of shape (3, 3) for an update of shape (3, 3, 4)",
    ),
    "no clipped tokens": (
        "objective",
        "def coefficients(self, update, beta):\n"
        "        from toyrl.policy import Coefficients\n"
        "        return Coefficients(update.advantage, n=1.0), None",
        "returns clipped tokens of shape () for an update of shape (3, 3, 4)",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_probes_refuse_a_broken_stage_naming_it_and_the_problem(case: str, tmp_path: Path) -> None:
    kind, method, problem = BROKEN[case]
    source = (
        f'{HEADER}\n@register("{kind}", "broken")\n@dataclass(frozen=True)\nclass Broken:\n    {method}\n'
    )
    path = write(tmp_path, "broken.py", source)
    with pytest.raises(InvalidInput) as error:
        load_plugin(path)
    assert str(error.value).startswith(f"plugin {path}: {kind} custom:broken {problem}"), str(error.value)
    assert "\n" not in str(error.value) and not LOADED and "custom:broken" not in REGISTRY[kind]


# Stages that pass the probe (3 runs, 3 prompts, groups of 4) and break the contract in a real run
# (2 runs, 4 prompts, groups of 4 below), or with a spec's parameter, or in an exact hook: the run
# stops with one line naming the plugin, the stage, the method and what was wrong.
LATER = "rewards.shape[1] == 3"  # true in the probe only
ADVANTAGES = "def advantages(self, rewards, std_eps):\n        "
AFTER_THE_PROBE = {
    "NaN after the probe": (
        "advantage",
        ADVANTAGES + f"return rewards - 0.5 if {LATER} else rewards * np.nan",
        "advantages returned nan at (0, 0, 0), not a finite number, for rewards of shape (2, 4, 4)",
    ),
    "a broadcastable shape": (
        "advantage",
        ADVANTAGES + f"return rewards - 0.5 if {LATER} else rewards[..., :1]",
        "advantages returned shape (2, 4, 1), not (2, 4, 4), for rewards of shape (2, 4, 4)",
    ),
    "a string": (
        "advantage",
        ADVANTAGES + f"return rewards - 0.5 if {LATER} else 'high'",
        "advantages returned a str, not an array of shape (2, 4, 4), for rewards of shape (2, 4, 4)",
    ),
    "an unbroadcastable shape": (
        "advantage",
        ADVANTAGES + f"return rewards - 0.5 if {LATER} else rewards[:, :3, :2]",
        "advantages returned shape (2, 3, 2), not (2, 4, 4), for rewards of shape (2, 4, 4)",
    ),
    "an exception after the probe": (
        "advantage",
        ADVANTAGES + f"assert {LATER}, 'later'\n        return rewards - 0.5",
        "advantages raises AssertionError: later",
    ),
    "a spec's parameter": (
        "advantage",
        "offset: float = 0.5\n\n    def advantages(self, rewards, std_eps):\n"
        "        return rewards - self.offset * (1 if self.offset == 0.5 else np.inf)",
        "advantages returned -inf at (0, 0, 0), not a finite number, for rewards of shape (2, 4, 4)",
    ),
    "a selector of ints": (
        "selector",
        "def included(self, batch):\n"
        "        return batch.stopped if batch.right.shape[1] == 3 else batch.stopped * 1",
        "included returned int64 values, not bool, for a batch of shape (2, 4, 4)",
    ),
    "n of zero": (
        "normaliser",
        "def denominators(self, tokens, included, length_norm, members=None):\n"
        "        return tokens, 1.0 if tokens.shape[1] == 3 else 0.0",
        "denominators returned 0.0 at (0,), not positive, in n for tokens of shape (2, 4, 4)",
    ),
    "the exact hook conditional": (
        "advantage",
        "def advantages(self, rewards, std_eps):\n        return rewards - 0.5\n\n"
        "    def conditional(self, r, others, group, std_eps):\n        return others[:1] + r",
        "conditional returned shape (1,), not (4,), for others of shape (4,)",
    ),
    "the exact hook response_denominator": (
        "normaliser",
        "averaged = True\n\n    def denominators(self, tokens, included, length_norm, members=None):\n"
        "        return tokens, np.ones(len(tokens))\n\n"
        "    def response_denominator(self, tokens, length_norm):\n        return tokens - 2.0",
        "response_denominator returned 0.0 at (0,), not positive, for tokens of shape (20,)",
    ),
}
SPEC_OF = {  # the variant each kind of broken stage runs in
    "advantage": "advantage=custom:broken,aggregation=seq_mean_token_sum_norm",
    "selector": "advantage=none,aggregation=token_mean,selector=custom:broken",
    "normaliser": "advantage=none,aggregation=custom:broken",
}
SMALL_RUN = ["--steps", "3", "--prompts", "8", "--batch-prompts", "4", "--group-size", "4", "--cap", "20"]
SMALL_RUN += ["--min-length", "3", "--seeds", "2"]


def broken_plugin(tmp_path: Path, case: str) -> tuple[Path, str, str]:
    """The plugin of an AFTER_THE_PROBE case: (its path, the variant that runs it, the message)."""
    kind, method, problem = AFTER_THE_PROBE[case]
    source = (
        f'{HEADER}\n@register("{kind}", "broken")\n@dataclass(frozen=True)\nclass Broken:\n    {method}\n'
    )
    path = write(tmp_path, "broken.py", source)
    spec = SPEC_OF[kind] + (",offset=2" if "offset" in method else "")
    line = ", line 9" if " raises " in problem else ""  # where in the plugin it raised
    return path, spec, f"toyrl: error: plugin {path}{line}: {kind} custom:broken: {problem}\n"


@pytest.mark.parametrize("case", list(AFTER_THE_PROBE))
def test_a_stage_that_breaks_its_contract_after_the_probe_is_one_line(case: str, tmp_path: Path) -> None:
    path, spec, message = broken_plugin(tmp_path, case)
    out = tmp_path / "runs.csv"
    mean_field = ["--mean-field"] if "exact hook" in case else []
    args = ["run", "--plugin", str(path), "--variant", spec, *SMALL_RUN, *mean_field, "--out", str(out), "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.endswith(message) and result.stderr.count("toyrl: error:") == 1, result.stderr
    assert not out.exists()


def test_workers_hold_plugin_stages_to_the_contract_too(tmp_path: Path) -> None:
    """With loky workers and on a Dask cluster: the same one line (the stage is guarded where it runs)."""
    path, spec, message = broken_plugin(tmp_path, "a string")
    load_plugin(path)
    config = Config(steps=3, prompts=8, batch_prompts=4, group_size=4, cap=20, min_length=3)
    expected = message.removeprefix("toyrl: error: ").strip().replace("(2, 4, 4)", "(4, 4, 4)")
    with pytest.raises(InvalidInput) as error:
        run_experiment(config, [parse_spec(spec)], [0, 1, 2, 3], n_jobs=2)
    assert str(error.value).replace("(1, 4, 4)", "(4, 4, 4)").replace("(2, 4, 4)", "(4, 4, 4)") == expected
    pytest.importorskip("dask.distributed")
    with pytest.raises(InvalidInput) as error:
        run_sweep(tmp_path / "sweep", [parse_spec(spec)], {}, [0, 1, 2, 3], config, n_jobs=2, backend="dask")
    assert str(error.value) == expected


def test_the_guards_are_on_plugin_stages_only(tmp_path: Path) -> None:
    """A plugin stage that subclasses a built-in one is guarded; the built-in class is not touched."""
    source = HEADER + (
        "from toyrl.stages import REGISTRY\n\n\n"
        '@register("advantage", "mine")\n@dataclass(frozen=True)\n'
        'class Mine(type(REGISTRY["advantage"]["group_std"])):\n    pass\n'
    )
    grpo = type(REGISTRY["advantage"]["group_std"])
    load_plugin(write(tmp_path, "mine.py", source))
    assert getattr(type(REGISTRY["advantage"]["custom:mine"]).advantages, "__toyrl_guarded__", False)
    assert not hasattr(grpo.advantages, "__toyrl_guarded__") and not hasattr(
        grpo.conditional, "__toyrl_guarded__"
    )


def test_a_plugin_keeps_numpy_state_and_stdout_to_itself(tmp_path: Path) -> None:
    """np.seterr(all='raise') at its import is undone (toyrl's arithmetic would raise), and what it
    prints, at import or in a call, goes to stderr: --json output stays JSON."""
    source = (
        HEADER
        + "np.seterr(all='raise')\nprint('loading')\n"
        + SHIFT.replace(
            "        return rewards - 0.5",
            "        print('called')\n        np.seterr(all='raise')\n        return rewards - 0.5",
        )
    )
    path = write(tmp_path, "noisy.py", source)
    before = np.geterr()
    runner = CliRunner()
    listed = runner.invoke(app, ["variants", "--json", "--plugin", str(path)])
    assert listed.exit_code == 0 and "loading" in listed.stderr
    assert json.loads(listed.stdout) and "loading" not in listed.stdout
    assert np.geterr() == before
    out = tmp_path / "runs.csv"
    args = ["run", "--plugin", str(path), "--variant", "advantage=custom:shift,aggregation=token_mean"]
    result = runner.invoke(app, [*args, *SMALL_RUN, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and "called" in result.stderr and np.geterr() == before


def test_a_plugin_that_exits_at_import_is_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, "leave.py", "import sys\nsys.exit(0)\n")
    out = tmp_path / "runs.csv"
    result = CliRunner().invoke(app, ["run", "--plugin", str(path), *SMALL_RUN, "--out", str(out), "-q"])
    assert result.exit_code == 2 and result.stderr == (
        f"toyrl: error: plugin {path}, line 2: calls sys.exit(0) (a plugin cannot end toyrl)\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_every_built_in_stage_keeps_the_contract_the_probes_check(kind: str) -> None:
    for name, stage in REGISTRY[kind].items():
        assert probe(kind, stage) == "", f"{kind} {name}: {probe(kind, stage)}"


def test_the_probe_batch_has_what_the_probes_need() -> None:
    """Runs that differ, groups all wrong and mixed, truncated and stopped responses: what lets a
    probe see a stage mix runs or divide by a group's zero std."""
    from toyrl.plugins import PROBE_CONFIG
    from toyrl.stages import correct

    batch, theta, moved = probe_inputs()
    rewards = correct(batch, PROBE_CONFIG).sum(axis=-1)
    assert ((rewards == 0) | (rewards == 4)).any() and ((rewards > 0) & (rewards < 4)).any()
    assert batch.stopped.any() and not batch.stopped.all()
    assert len({batch.length[run].tobytes() for run in range(3)}) == 3 and not np.allclose(theta, moved)


def test_a_stage_with_its_exact_hook_is_exact_and_one_without_is_simulated_only(tmp_path: Path) -> None:
    (tmp_path / "smoothing.py").write_text(plugin_source("smoothing.py"))
    load_plugin(tmp_path / "smoothing.py")
    assert simulated_only(REGISTRY["normaliser"]["custom:group_longest"]) == (
        "normaliser custom:group_longest has no exact hook: it lacks response_denominator and averaged"
    )
    assert not simulated_only(REGISTRY["advantage"]["custom:shrunk_baseline"])
    config = Config(prompts=8, batch_prompts=4, group_size=4, cap=60, min_length=5)
    theta = initial_theta(config, run_streams(2)[0])[None]
    shrunk = "advantage=custom:shrunk_baseline,aggregation=seq_mean_token_mean"
    # m = 0: the group mean exactly (Dr. GRPO's advantage); m > 0 moves the update.
    none = expected_update(theta, config, [parse_spec("advantage=none,aggregation=seq_mean_token_mean")])
    assert np.array_equal(expected_update(theta, config, [parse_spec(f"{shrunk},prior_weight=0")]), none)
    assert not np.allclose(expected_update(theta, config, [parse_spec(shrunk)]), none)
    with pytest.raises(InvalidInput, match="custom:group_longest has no exact hook"):
        expected_update(theta, config, [parse_spec("advantage=none,aggregation=custom:group_longest")])


def test_loading_again_is_a_no_op_and_a_changed_file_replaces_its_stages(tmp_path: Path) -> None:
    path = write(tmp_path, "shift.py", HEADER + SHIFT)
    plugin = load_plugin(path)
    assert load_plugin(path) is plugin and plugin.version == "unversioned" and plugin.name == "shift"
    assert plugin.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    old = REGISTRY["advantage"]["custom:shift"]
    path.write_text(HEADER + SHIFT.replace("0.5", "0.25") + "\n__version__ = '2.0'\n")
    changed = load_plugin(path)
    assert changed.version == "2.0" and changed.sha256 != plugin.sha256 and list(LOADED.values()) == [changed]
    new = REGISTRY["advantage"]["custom:shift"]
    assert type(new) is not type(old) and new.advantages(np.ones((1, 1, 2)), 0.0).tolist() == [[[0.75, 0.75]]]


def test_sidecars_run_ids_and_manifests_follow_the_plugin_source(tmp_path: Path) -> None:
    from toyrl.results import metadata

    path = write(tmp_path, "shift.py", HEADER + SHIFT)
    plugin = load_plugin(path)
    spec = "advantage=custom:shift,aggregation=token_mean"
    mine, plain = parse_spec(spec), parse_spec("advantage=rloo,aggregation=token_mean")
    assert plugins_used([plain, mine, mine]) == [plugin] and plugins_used([plain]) == []
    meta = metadata(TINY, [plain, mine], [0], "toyrl run")
    assert meta["plugins"] == [
        {"name": "shift", "version": "unversioned", "sha256": plugin.sha256, "path": str(path)}
    ]
    assert "plugins" not in metadata(TINY, [plain], [0], "toyrl run")
    point = Point((), TINY)
    # A run without plugin stages keeps the id it always had.
    old = hashlib.sha256(
        json.dumps([plain.name, plain.spec_text(), TINY.to_dict(), 0], sort_keys=True).encode()
    ).hexdigest()[:20]
    assert run_id(plain, point, 0) == old
    before = run_id(mine, point, 0)
    path.write_text(HEADER + SHIFT + "# another version\n")
    load_plugin(path)
    assert run_id(parse_spec(spec), point, 0) != before and run_id(plain, point, 0) == old


def test_workers_run_plugin_stages_to_the_same_numbers(tmp_path: Path) -> None:
    """The stages reach loky and Dask workers with their plugin's source; a run's numbers do not
    depend on the workers (toyrl's noise contract), plugin or not."""
    (tmp_path / "smoothing.py").write_text(plugin_source("smoothing.py"))
    load_plugin(tmp_path / "smoothing.py")
    variants = [
        parse_spec("advantage=custom:shrunk_baseline,aggregation=custom:group_longest"),
        parse_spec("advantage=custom:shrunk_baseline,aggregation=token_mean,prior=0.2"),
    ]
    alone = run_experiment(TINY, variants, [0, 1, 2], n_jobs=1)
    pd.testing.assert_frame_equal(
        run_experiment(TINY, variants, [0, 1, 2], n_jobs=2), alone, check_exact=True
    )
    pytest.importorskip("dask.distributed")
    last = run_sweep(tmp_path / "sweep", variants, {}, [0, 1, 2], TINY, n_jobs=2, backend="dask")
    expected = alone[alone["step"] == TINY.steps].reset_index(drop=True)
    pd.testing.assert_frame_equal(last.reset_index(drop=True), expected, check_exact=True, check_dtype=False)


def test_toyrl_run_refuses_to_overwrite_results_of_another_plugin_source(tmp_path: Path) -> None:
    """`toyrl run --out` onto results of the same variant made with another source of its plugin is
    refused (exit 2, one line), and the file is untouched; with the same source it is kept."""
    path = write(tmp_path, "shift.py", HEADER + SHIFT)
    out = tmp_path / "runs.csv"
    args = ["run", "--plugin", str(path), "--variant", "advantage=custom:shift,aggregation=token_mean"]
    args += ["--steps", "3", "--prompts", "8", "--batch-prompts", "4", "--seeds", "1", "--out", str(out)]
    runner = CliRunner()
    assert runner.invoke(app, args).exit_code == 0
    before = out.read_bytes()
    assert runner.invoke(app, args).exit_code == 0 and out.read_bytes() == before
    path.write_text(HEADER + SHIFT + "# another version\n")  # loading it again replaces the stage
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and out.read_bytes() == before
    message = refused.output.strip()
    assert "holds results made with other settings" in message and len(message.splitlines()) == 1


RESTATED = (
    HEADER
    + """
from toyrl import kernels
from toyrl.stages import Epochs


@register("kl", "k3_again")
@dataclass(frozen=True)
class K3Again:
    beta: float = 0.0

    def loss(self, ratio, log_ref_ratio):
        return kernels.exp(log_ref_ratio) - 1

    def token_advantages(self, advantage, old, ref, batch, counts):
        return None


@register("kl", "k2")
@dataclass(frozen=True)
class K2:
    beta: float = 0.0

    def loss(self, ratio, log_ref_ratio):  # d(x^2 / 2) / d log pi = -x, x = log(pi_ref / pi)
        return log_ref_ratio

    def token_advantages(self, advantage, old, ref, batch, counts):
        return None


@register("schedule", "epochs_again")
@dataclass(frozen=True)
class EpochsAgain(Epochs):
    pass


@register("sampler", "once_again")
@dataclass(frozen=True)
class OnceAgain:
    def batch(self, batch, theta, config, refill):
        return batch, batch.token_count(1).sum(axis=(-2, -1))

    def worst_draws(self, config):
        return config.batch_prompts * config.group_size

    def refills(self, config):
        return 0
"""
)


def test_a_plugin_kl_schedule_and_sampler_restating_the_built_ins_train_to_the_same_bits(
    tmp_path: Path,
) -> None:
    """Every kind is pluggable, through the one path the built-in stages take: a KL term, a
    schedule and a sampler restated in a plugin give the built-ins' numbers bit for bit, and a
    k2 term (verl's kl_penalty 'mse') in the same place moves them."""
    load_plugin(write(tmp_path, "restated.py", RESTATED))
    base = "advantage=group_std,aggregation=seq_mean_token_mean,beta=0.5,num_iterations=2,mini_batches=2"
    built_in = run_experiment(TINY, [parse_spec(base)], [0, 1])
    plugged = parse_spec(f"{base},kl=custom:k3_again,schedule=custom:epochs_again,sampler=custom:once_again")
    again = run_experiment(TINY, [plugged], [0, 1])
    columns = [c for c in built_in.columns if c != "variant"]
    pd.testing.assert_frame_equal(again[columns], built_in[columns], check_exact=True)
    k2 = run_experiment(TINY, [parse_spec(f"{base},kl=custom:k2")], [0, 1])
    assert np.isfinite(k2["accuracy"]).all()
    last = k2["step"] == TINY.steps
    assert not np.allclose(
        k2.loc[last, "p_right_approach"], built_in.loc[last, "p_right_approach"], rtol=0, atol=1e-12
    )
    for kind, name in (("kl", "k2"), ("schedule", "epochs_again"), ("sampler", "once_again")):
        assert probe(kind, REGISTRY[kind][f"custom:{name}"]) == ""
    # no exact form but the built-in one: simulated only unless the stage says otherwise
    assert simulated_only(REGISTRY["sampler"]["custom:once_again"]) == (
        "sampler custom:once_again: the exact update draws the article's batch"
    )
    assert not simulated_only(REGISTRY["schedule"]["custom:epochs_again"])  # Epochs' own, one update


BROKEN_KINDS = {
    "a sampler of the wrong shape": (
        """
@register("sampler", "half")
@dataclass(frozen=True)
class Half:
    def batch(self, batch, theta, config, refill):
        return batch.rows(slice(0, 1)), np.ones(len(theta))

    def worst_draws(self, config):
        return 1

    def refills(self, config):
        return 0
""",
        "sampler custom:half returns prompt_index of shape (1, 3)",
    ),
    "a sampler whose draws mix runs": (
        """
from toyrl.policy import Batch


@register("sampler", "mixed")
@dataclass(frozen=True)
class Mixed:
    def batch(self, batch, theta, config, refill):
        return batch, np.full(len(theta), float(batch.length.sum()))

    def worst_draws(self, config):
        return 1

    def refills(self, config):
        return 0
""",
        "sampler custom:mixed mixes runs",
    ),
    "a KL loss of the wrong shape": (
        """
@register("kl", "flat")
@dataclass(frozen=True)
class Flat:
    beta: float = 0.1

    def loss(self, ratio, log_ref_ratio):
        return log_ref_ratio[0]

    def token_advantages(self, advantage, old, ref, batch, counts):
        return None
""",
        "kl custom:flat returns loss coefficients of shape",
    ),
    "a schedule of no updates": (
        """
from toyrl.stages import Epochs


@register("schedule", "idle")
@dataclass(frozen=True)
class Idle(Epochs):
    @property
    def updates(self):
        return 0
""",
        "schedule custom:idle breaks its contract: updates must be an integer in 1..262,144 (got 0)",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_KINDS))
def test_the_probes_refuse_a_broken_sampler_kl_or_schedule(case: str, tmp_path: Path) -> None:
    source, message = BROKEN_KINDS[case]
    path = write(tmp_path, "broken.py", HEADER + source)
    with pytest.raises(InvalidInput) as error:
        load_plugin(path)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith(f"plugin {path}: {message}"), str(error.value)
    assert not LOADED


@pytest.mark.slow
def test_the_type_checker_holds_a_registered_class_to_its_kinds_protocol(tmp_path: Path) -> None:
    """`register`'s overloads: mypy refuses a class registered as a kind whose Protocol it does not
    meet, and accepts one that does (each kind's module opens with its Protocol)."""
    pytest.importorskip("mypy")
    body = """
@register("advantage", "ok")
@dataclass(frozen=True)
class Fine:
    def advantages(self, rewards: np.ndarray, std_eps: float) -> np.ndarray:
        return rewards


@register("advantage", "too_few")
@dataclass(frozen=True)
class TooFew:
    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        return rewards


@register("kl", "no_beta")
@dataclass(frozen=True)
class NoBeta:
    def loss(self, ratio: np.ndarray, log_ref_ratio: np.ndarray) -> None:
        return None

    def token_advantages(
        self, advantage: np.ndarray, old: object, ref: object, batch: object, counts: object
    ) -> None:
        return None
"""
    path = write(tmp_path, "typed.py", HEADER + body)
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--no-error-summary",
        "--cache-dir",
        str(tmp_path / "cache"),
        str(path),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "MYPYPATH": str(ROOT)}
    )
    errors = sorted(line.split(": error: ")[1] for line in result.stdout.splitlines() if ": error: " in line)
    assert errors == [
        'Value of type variable "AdvantageT" of function cannot be "TooFew"  [type-var]',
        'Value of type variable "KLT" of function cannot be "NoBeta"  [type-var]',
    ], result.stdout + result.stderr


PARTS = """
@register("schedule", "parts")
@dataclass(frozen=True)
class Parts:
    parts: int = 2
    rk: int = 1
    order_count: int = 0

    def __post_init__(self):
        assert self.parts != 5, "five parts are not modelled"

    updates = property(lambda self: self.parts)
    mini_batches = property(lambda self: self.parts)
    micro_batches = property(lambda self: 1)
    orders = property(lambda self: (0, 1, 2)[self.order_count] if self.order_count >= 0 else self.order_count)
    ranks = property(lambda self: self.rk)
    token_budget = property(lambda self: 0)
    prompt_tokens = property(lambda self: 0)
    max_grad_norm = property(lambda self: None)
    laid_out = property(lambda self: self.rk > 1)

    def check(self, config):
        pass
"""
PLAIN_KL = """
@register("kl", "plain")
@dataclass(frozen=True)
class Plain:
    beta: float = 0.1

    def loss(self, ratio, log_ref_ratio):
        return np.exp(log_ref_ratio) - 1

    def token_advantages(self, advantage, old, ref, batch, counts):
        return None
"""
SCHEDULE = "schedule custom:parts"
BUILT = {  # a spec's parameters that build a stage toyrl cannot run, and the line that says so
    "schedule=custom:parts,parts=0": f"{SCHEDULE} (parts=0, rk=1, order_count=0): mini_batches must be an "
    "integer in 1..4,096 (got 0)",
    "schedule=custom:parts,order_count=7": f"{SCHEDULE} (parts=2, rk=1, order_count=7): reading orders "
    "raises IndexError: tuple index out of range",
    "schedule=custom:parts,parts=5": f"{SCHEDULE}: building it with (parts=5, rk=1, order_count=0) raises "
    "AssertionError: five parts are not modelled",
    "schedule=custom:parts,parts=8192": f"{SCHEDULE} (parts=8192, rk=1, order_count=0): mini_batches must be "
    "an integer in 1..4,096 (got 8192)",
    "schedule=custom:parts,order_count=-1": f"{SCHEDULE} (parts=2, rk=1, order_count=-1): orders must be an "
    "integer in 0..64 (got -1)",
    "schedule=custom:parts,parts=64": f"{SCHEDULE} (parts=64, rk=1, order_count=0): mini_batches x "
    "micro_batches = 64 must divide the batch's 16 responses (batch_prompts x group_size)",
    "schedule=custom:parts,rk=3": f"{SCHEDULE} (parts=2, rk=3, order_count=0): mini_batches x "
    "micro_batches x ranks = 6 must divide the batch's 16 responses (batch_prompts x group_size)",
    "kl=custom:plain,beta=inf": "kl custom:plain (beta=inf): beta must be a number in [0, 1e6) (got inf)",
    "kl=custom:plain,beta=-1": "kl custom:plain (beta=-1.0): beta must be a number in [0, 1e6) (got -1.0)",
}


@pytest.mark.parametrize("spec", list(BUILT))
def test_a_stage_built_from_a_spec_s_parameters_is_checked_as_it_is_built(spec: str, tmp_path: Path) -> None:
    """The probe checks a plugin stage's defaults; a spec's parameters build another stage, which is
    checked too: an exception while building it, a count out of the range toyrl knows, parts that do
    not cut the batch, a KL's beta that is not finite. One line naming the plugin, the stage and its
    parameters, exit 2, nothing written (once a ZeroDivisionError traceback, or results written)."""
    path = write(tmp_path, "mine.py", HEADER + PARTS + PLAIN_KL)
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(
        app, ["run", "--plugin", str(path), "--variant", spec, *SMALL_RUN, "--out", str(out), "-q"]
    )
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"plugin {path}" in result.stderr and BUILT[spec] in result.stderr, result.stderr
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_a_stage_with_a_list_field_is_refused_at_loading(tmp_path: Path) -> None:
    source = PLAIN_KL.replace('"plain"', '"listy"').replace(
        "beta: float = 0.1", "beta: float = 0.1\n    weights: list = dataclasses.field(default_factory=list)"
    )
    path = write(tmp_path, "listy.py", "import dataclasses\n" + HEADER + source)
    with pytest.raises(InvalidInput) as error:
        load_plugin(path)
    assert str(error.value) == (
        f"plugin {path}: kl custom:listy breaks its contract: parameter weights is a list, which cannot be "
        "hashed (use a tuple)"
    )
    assert not LOADED


def test_the_spec_key_table_is_the_registry_s() -> None:
    """docs/plugins.md's table of spec keys, kinds and defaults holds every kind once, as the
    kinds' records declare them (`toyrl.stages.KIND`), and its interface table the configuration
    fields each kind's stages see (the records' `settings`)."""
    from toyrl.stages import KIND

    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- kinds -->\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in table:
        key, kind, default = (cell.strip().strip("`") for cell in line.strip("|").split("|"))
        rows[key] = (kind, default)
    assert rows == {record.key: (record.name, record.default) for record in KIND.values()}
    shown = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] in KIND and "`config` shows " in cells[1]:
            shown[cells[0]] = tuple(re.findall(r"`(\w+)`", cells[1].split("`config` shows ", 1)[1]))
    given_config = ("reward", "schedule", "sampler")
    assert shown == {kind: KIND[kind].settings for kind in given_config}
