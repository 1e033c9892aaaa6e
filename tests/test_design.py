"""docs/design.md cannot drift: its excerpts are the code, its runnable examples run and do what it
says, and its generated parts (the layers, the stages, what is supported and not yet) are what
scripts/design_doc.py makes from the code now, each item not supported yet refused by the code.

Conventions of the note: a fenced ```python block right after `<!-- excerpt: FILE -->` must appear
verbatim in FILE (after a common dedent, under one indentation; a `# ...` line stands for omitted
lines, the pieces in order); one right after `<!-- run -->` is runnable. Every python block has one
of the two marks. The runnable blocks are executed, in order, in one fresh interpreter, because
registering stages changes the global registries, which other tests check exactly; then
`check_extensions` (below) checks the stages they registered in that same interpreter.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.scripts import load_script
from tests.test_ported import needs_node

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
BLOCK = re.compile(r"(?:<!-- (run|excerpt: ([^ ]+)) -->\n)?```python\n(.*?)```", re.DOTALL)
ELISION = ("# ...", "...")
design_doc = load_script("design_doc")

# The small configuration of the note's examples (the checks below rebuild it, not import it).
SMALL: dict[str, Any] = dict(
    prompts=8, batch_prompts=4, group_size=4, steps=20, cap=60, min_length=5,
    stop_prob_right=1 / 20, stop_prob_wrong=1 / 30,
)  # fmt: skip


def blocks() -> list[tuple[str, str, str]]:
    """Every python block of the note: (mark, file of an excerpt, code)."""
    found = [(m.group(1) or "", m.group(2) or "", m.group(3)) for m in BLOCK.finditer(DESIGN.read_text())]
    assert found, "docs/design.md has no python blocks"
    return found


def test_every_python_block_is_an_excerpt_or_runnable() -> None:
    unmarked = [code.splitlines()[0] for mark, _, code in blocks() if not mark]
    assert not unmarked, f"python blocks without <!-- run --> or <!-- excerpt: FILE -->: {unmarked}"
    assert any(mark == "run" for mark, _, _ in blocks())


def pieces(excerpt: str) -> list[str]:
    """An excerpt's verbatim pieces, split at its elision lines."""
    out: list[list[str]] = [[]]
    for line in textwrap.dedent(excerpt).strip("\n").splitlines():
        if line.strip() in ELISION:
            out.append([])
        else:
            out[-1].append(line)
    return ["\n".join(lines).strip("\n") for lines in out if any(line.strip() for line in lines)]


def appears_in(excerpt: str, source: str) -> bool:
    """Whether the excerpt's pieces appear in `source` in order, all under one indentation."""
    for indent in ("", " " * 4, " " * 8, " " * 12, " " * 16):
        start, found = 0, True
        for piece in pieces(excerpt):
            at = source.find(textwrap.indent(piece, indent), start)
            if at < 0:
                found = False
                break
            start = at + len(piece)
        if found:
            return True
    return False


def test_every_excerpt_is_still_in_its_module() -> None:
    excerpts = [(path, code) for mark, path, code in blocks() if mark.startswith("excerpt")]
    assert excerpts, "docs/design.md quotes no code"
    stale = []
    for path, code in excerpts:
        assert (ROOT / path).is_file(), f"docs/design.md quotes {path}, which does not exist"
        if not appears_in(code, (ROOT / path).read_text()):
            stale.append(f"{path}: {code.strip().splitlines()[0]!r}")
    assert not stale, "excerpts no longer in their module (copy them again): " + "; ".join(stale)


def test_the_excerpt_check_can_fail() -> None:
    source = "def f(x):\n    y = x + 1\n    z = y * 2\n    return z\n"
    assert appears_in("y = x + 1\nz = y * 2", source)
    assert appears_in("def f(x):\n    # ...\n    return z", source)
    assert not appears_in("y = x + 2", source)
    assert not appears_in("return z\n# ...\ny = x + 1", source)  # out of order
    assert not appears_in("def f(x):\ny = x + 1", source)  # the relative indentation matters


# --- the generated parts (scripts/design_doc.py) ----------------------------------------------


def test_the_generated_parts_are_current() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    assert design_doc.generated(text) == text, (
        f"docs/design.md's generated parts are out of date: {design_doc.COMMAND}"
    )


def test_a_new_stage_makes_the_generated_parts_out_of_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage registered without regenerating the note fails the check above (a plugin's or a
    test's stage, whose class is not toyrl's, does not)."""
    from toyrl.stages import REGISTRY

    text = DESIGN.read_text(encoding="utf-8")
    monkeypatch.setitem(REGISTRY["advantage"], "fresh_centred", REGISTRY["advantage"]["none"])
    assert "`fresh_centred`" in design_doc.generated(text) and design_doc.generated(text) != text

    @dataclass(frozen=True)
    class Outside:
        def advantages(self, rewards: np.ndarray, std_eps: float) -> np.ndarray:
            return rewards

    monkeypatch.delitem(REGISTRY["advantage"], "fresh_centred")
    monkeypatch.setitem(REGISTRY["advantage"], "outside", Outside())
    assert design_doc.generated(text) == text


def exact_refuses(spec: str, words: str) -> bool:
    """Whether the exact expected update refuses the variant of `spec`, with `words` in its line."""
    from toyrl.config import InvalidInput
    from toyrl.expected import check_exact_supported
    from toyrl.objective import parse_spec

    try:
        check_exact_supported([parse_spec(spec)])
    except InvalidInput as error:
        return words in str(error)
    return False


def test_every_item_not_supported_yet_is_refused() -> None:
    """Each item of "Not supported yet" is asked of the code: the exact update refuses it, for the
    reason the note gives. (Five items the note listed were supported: mini-batches, micro-batch
    normalisers, selectors that look at rewards, other KL terms and schedules, rewards other than
    0/1; they left the list.)"""
    items = list(design_doc.refusals())
    assert len(items) > 20 and ("num_iterations=2", "later epochs") in items
    accepted = [spec for spec, words in items if not exact_refuses(spec, words)]
    assert accepted == [], f"the code takes these, which the note says it does not yet: {accepted}"
    assert not exact_refuses("advantage=rloo,aggregation=seq_mean_token_mean", "")  # the check can fail
    assert not exact_refuses("num_iterations=2", "the KL term")  # and reads the reason


def test_not_supported_yet_holds_only_generated_items() -> None:
    """No hand-written item can slip past the refusal check: the section's list is the generated one."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("## Not supported yet\n") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    outside = design_doc.PART.sub("", section)
    assert "<!-- generated: not-supported -->" in section
    assert [line for line in outside.splitlines() if line.lstrip().startswith(("- ", "* "))] == []


def run_examples(tmp_path: Path, check: str) -> None:
    """Run the note's runnable blocks, then `check` of this module, in one fresh interpreter."""
    script = tmp_path / "design_examples.py"
    script.write_text("\n\n".join(code for mark, _, code in blocks() if mark == "run"))
    boot = (
        "import runpy, sys\n"
        "runpy.run_path(sys.argv[1], run_name='__main__')\n"
        "import tests.test_design\n"
        "getattr(tests.test_design, sys.argv[2])()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", boot, str(script), check],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"docs/design.md's examples, then {check}, failed:\n{done.stderr[-3000:]}"
    assert not done.stdout, f"the examples printed: {done.stdout[:500]!r}"


def test_the_runnable_examples_register_working_stages(tmp_path: Path) -> None:
    run_examples(tmp_path, "check_extensions")


def test_objectives_with_different_epochs_share_an_array(tmp_path: Path) -> None:
    run_examples(tmp_path, "check_mixed_objectives")


# --- run in the subprocess, after the note's examples -----------------------------------------


def sampled_first_updates(theta: np.ndarray, config: Any, variant: Any, n: int, seed: int) -> np.ndarray:
    """Ascent directions of n independent first updates at theta [P + 2], as `train_step` takes them."""
    from toyrl.train import Adam, Drawn, Plan, train_step

    rng = np.random.default_rng(seed)
    thetas = np.repeat(theta[None], n, axis=0)
    shape = (n, config.batch_prompts, config.group_size)
    noise = (
        rng.random((n, config.prompts)).argsort(axis=-1)[:, : config.batch_prompts],
        rng.random(shape),
        rng.standard_exponential(shape),
    )
    plan = Plan.of([variant] * n)
    step = train_step(
        thetas,
        Adam(thetas, config),
        Drawn.of(thetas, noise, config),
        plan,
        config,
        thetas.copy(),
        apply=False,
    )
    return -step.grad


def check_extensions() -> None:
    """The stages the note registers work as it says (run after its examples, in their interpreter)."""
    from toyrl.config import Config, InvalidInput
    from toyrl.expected import expected_update
    from toyrl.experiment import run_experiment
    from toyrl.objective import parse_spec
    from toyrl.stages import REGISTRY, simulated_only
    from toyrl.train import EXACT_COLUMNS, initial_theta, run_streams

    new = {"advantage": "fixed_baseline", "normaliser": "sqrt_tokens", "objective": "capped_weight"}
    for kind, name in [*new.items(), ("normaliser", "group_token_mean")]:
        assert name in REGISTRY[kind], f"the note registers no {kind} {name!r}"
    for kind, name in new.items():
        assert not simulated_only(REGISTRY[kind][name]), f"{name} should have an exact form"
    assert simulated_only(REGISTRY["normaliser"]["group_token_mean"])

    # The formulas the note states: A = r - b; D = sqrt(|o|), n = B G; D = the group's tokens, n = B.
    rewards = np.array([[[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])  # [R, B, G] = [1, 2, 3]
    tokens = np.array([[[4.0, 9.0, 16.0], [1.0, 2.0, 3.0]]])
    included = np.array([[[True, False, True], [True, True, True]]])
    assert np.array_equal(REGISTRY["advantage"]["fixed_baseline"].advantages(rewards, 0.0), rewards - 0.5)
    denominator, n = REGISTRY["normaliser"]["sqrt_tokens"].denominators(tokens, included, 60.0)
    assert np.array_equal(denominator, np.sqrt(tokens)) and n == 6
    denominator, n = REGISTRY["normaliser"]["group_token_mean"].denominators(tokens, included, 60.0)
    assert np.array_equal(denominator, [[[20.0] * 3, [6.0] * 3]]) and n == 2

    config = Config(**SMALL)
    every = parse_spec(
        "advantage=fixed_baseline,aggregation=sqrt_tokens,objective=capped_weight,num_iterations=2"
    )
    assert parse_spec(every.spec_text()) == every
    grouped = parse_spec("advantage=group_std,aggregation=group_token_mean,mask_truncated=True")
    frame = run_experiment(config, [every, grouped], [0, 1])
    assert len(frame) == 2 * 2 * (config.steps + 1)
    for column in [*EXACT_COLUMNS, "grad_norm", "clip_fraction", "batch_accuracy"]:
        assert np.isfinite(frame[column].to_numpy()).all(), column
    assert (frame.groupby("variant")["accuracy"].nunique() > 1).all()  # the runs moved
    exact_capable = parse_spec("advantage=fixed_baseline,aggregation=sqrt_tokens")
    mean_field = run_experiment(config, [exact_capable], [0], mean_field=True)
    assert np.isfinite(mean_field[EXACT_COLUMNS].to_numpy()).all()

    # The exact hooks: E[g] is the mean of sampled first updates, within a few standard errors.
    for seed in (0, 3):
        theta = initial_theta(config, run_streams(seed)[0])
        for spec in (
            "advantage=fixed_baseline,aggregation=sqrt_tokens",
            "advantage=fixed_baseline,aggregation=sqrt_tokens,baseline=0.2,mask_truncated=True",
            "advantage=fixed_baseline,aggregation=seq_mean_token_mean",
            "advantage=group_std,aggregation=sqrt_tokens",
        ):
            variant = parse_spec(spec)
            g = np.concatenate([sampled_first_updates(theta, config, variant, 25_000, s) for s in range(2)])
            mean, se = g.mean(axis=0), g.std(axis=0, ddof=1) / np.sqrt(len(g))
            exact = expected_update(theta[None], config, [variant])[0]
            z = np.abs(mean - exact) / (se + 1e-300)
            assert (z < 5).all(), f"{spec}, seed {seed}: exact and sampled E[g] differ by {z.max():.1f} SE"

    # The objective: PPO's numbers at one update per batch (ratio 1), with or without KL, and at later
    # epochs where no clip acts (lr 0.02) ...
    base = "advantage=none,aggregation=seq_mean_token_mean"

    def runs(extra: str, run_config: Config) -> list[Any]:
        """The frames of PPO's and the capped weight's runs (seeds 0, 1), without their variant column."""
        variants = [parse_spec(f"{base},{extra}"), parse_spec(f"{base},objective=capped_weight,{extra}")]
        frame = run_experiment(run_config, variants, [0, 1])
        by = [frame[frame["variant"] == v.name] for v in variants]
        return [f.drop(columns="variant").reset_index(drop=True) for f in by]

    for extra in ("num_iterations=1", "beta=0.05", "num_iterations=4"):
        ppo, capped = runs(extra, config)
        assert ppo["clip_fraction"].max() == 0 and ppo.equals(capped), extra
    # ... and not PPO's where clipping acts (later epochs, a larger learning rate).
    ppo, capped = runs("num_iterations=4", Config(**{**SMALL, "lr": 0.3}))
    assert ppo["clip_fraction"].max() > 0 and capped["clip_fraction"].max() > 0
    assert not np.array_equal(ppo["accuracy"], capped["accuracy"])
    theta = initial_theta(config, run_streams(0)[0])[None]
    one = [parse_spec(base), parse_spec(f"{base},objective=capped_weight")]
    assert np.array_equal(*(expected_update(theta, config, [v]) for v in one))

    # A simulated-only stage, or later epochs, have no exact update.
    for spec, reason in (
        ("advantage=fixed_baseline,aggregation=group_token_mean", "couples its responses"),
        (f"{base},objective=capped_weight,num_iterations=2", "later epochs"),
    ):
        try:
            expected_update(theta, config, [parse_spec(spec)])
        except InvalidInput as error:
            assert reason in str(error), str(error)
        else:
            raise AssertionError(f"the exact update took {spec}")


def check_mixed_objectives() -> None:
    """A run's numbers do not depend on the runs of its array, even of another objective class."""
    from toyrl.config import Config
    from toyrl.objective import parse_spec
    from toyrl.train import simulate

    config = Config(**SMALL)
    base = "advantage=none,aggregation=seq_mean_token_mean"
    capped = parse_spec(f"{base},objective=capped_weight,num_iterations=2")
    together = simulate(config, [(parse_spec(base), 0), (capped, 0)]).columns
    alone = simulate(config, [(capped, 0)]).columns
    for name, values in alone.items():
        assert np.array_equal(together[name][1:], values, equal_nan=True), name


# --- "Adding a stage"'s worked example: added to a copy of the package, in Python and in the page


WORKED = {"advantage": "partial_baseline", "baseline_weight": 0.3}
TWIN_BEFORE = "  // Normalisers (toyrl.stages.normaliser)"  # the copy's twin goes after the advantages'


def worked_example() -> tuple[str, str]:
    """The worked example's Python class and JavaScript twin: the one ```js block of "## Adding a
    stage" and the ```python block right before it (the note's fenced blocks, line by line)."""
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Adding a stage")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    fenced: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in lines[start:end]:
        if language is None and line.startswith("```"):
            language, body = line[3:].strip(), []
        elif language is not None and line.startswith("```"):
            fenced.append((language, "\n".join(body) + "\n"))
            language = None
        elif language is not None:
            body.append(line)
    twins = [i for i, (language, _) in enumerate(fenced) if language == "js"]
    assert len(twins) == 1 and twins[0] > 0 and fenced[twins[0] - 1][0] == "python", (
        '"## Adding a stage" must show one ```js twin right after its ```python class'
    )
    return fenced[twins[0] - 1][1], fenced[twins[0]][1]


@needs_node
def test_the_worked_example_runs_in_toyrl_and_in_the_page(tmp_path: Path) -> None:
    """Adding a stage touches its kind's module and, for the page, one port in sim.js: a copy of
    the package given the note's class and twin, and nothing else, trains the new variant in
    Python and in its own page to the same bits (`check_worked_example`, in the copy's interpreter)."""
    python, twin = worked_example()
    copy = tmp_path / "toyrl"
    shutil.copytree(ROOT / "toyrl", copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "stages" / "advantage.py"
    module.write_text(module.read_text(encoding="utf-8") + "\n\n" + python, encoding="utf-8")
    simulator = copy / "explorer" / "sim.js"
    source = simulator.read_text(encoding="utf-8")
    assert source.count(TWIN_BEFORE) == 1, f"sim.js has no {TWIN_BEFORE.strip()!r} after the advantages"
    twinned = source.replace(TWIN_BEFORE, textwrap.indent(twin, "  ") + "\n" + TWIN_BEFORE)
    simulator.write_text(twinned, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", "import tests.test_design as t; t.check_worked_example()"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"the worked example, added to a copy of toyrl, failed:\n{done.stderr[-3000:]}"
    )


def check_worked_example() -> None:
    """In the interpreter of a copy of toyrl given the worked example: the page's twins are its
    stage classes' one for one (and the check names the new class once its twin is taken out),
    and the new advantage trains to the same bits in `toyrl run`'s code and in the page, sampled
    and mean-field."""
    import toyrl
    from tests.explorer_cases import check_case, page_run, python_side, result_expression
    from tests.test_ported import mismatches, page_value, ported, simulator_scripts, stage_classes
    from toyrl.explore import build_explorer

    assert Path(toyrl.__file__).resolve().parent.parent == Path.cwd().resolve(), toyrl.__file__
    scripts = simulator_scripts(build_explorer())
    assert mismatches(ported(scripts), stage_classes()) == []
    without = scripts[1].replace('port("advantage", "PartialBaseline", ', "(")
    assert mismatches(ported([scripts[0], without]), stage_classes()) == [
        "the advantage PartialBaseline has no twin in the page: port it in sim.js"
    ]
    small = {**SMALL, "steps": 10}
    sampled = {
        "variants": [WORKED, {**WORKED, "aggregation": "token_mean", "num_iterations": 2}],
        "seeds": [0, 1],
    }
    mean_field = {"variants": [WORKED], "seeds": [0, 1], "mean_field": True, "gradients": True}
    for spec in ({**sampled, **small}, {**mean_field, **small}):
        check_case(page_run(page_value(scripts, result_expression(spec)), spec), spec, python_side(spec))
