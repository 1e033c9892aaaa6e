"""The README and docs quote no number by hand: each one is tied to the file a command generates.

A number a page quotes carries, right after it, a tie: an HTML comment naming its file and the
value's key and format (tests/claims.py defines the form). These tests read every tie, render the
file's value and require the number before the tie to be that rendering; and in every paragraph,
list item or table row that quotes a tied number, every other number must be tied too or be on
claims.ALLOWED, a short list of settings and constants, each with its reason. The sentence around a
number is free to change; the number and its file are not. Values a page quotes that are not in a
file as such (spans of CPU seconds, seed counts) are computed from the file in claims.DERIVED.
The files: results/seed_study.json (`python scripts/seed_study.py`), init_sensitivity.json
(`scripts/init_sensitivity.py`), presets.json (`scripts/presets_study.py`), trainer_defaults.json
(`scripts/trainer_defaults_study.py`), families.json (`scripts/families_study.py`), verl_width.json
(`scripts/verl_width_study.py`), gpg_scale.json (`scripts/gpg_study.py`), bridge_study.json
(`scripts/bridge_study.py`, with the bridge extra), bench_bridge.txt (`scripts/bench_bridge.py`),
and `toyrl examples`' numbers.
"""

import json
import re
from collections import ChainMap
from pathlib import Path
from typing import Any

import pytest

from tests.claims import COMMENT, NUMBER, check, is_tie, items, untied, values

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md"))]
# The pages whose numbers are not results: the page's screen sizes and the worked examples' inputs
# (G = 8, a 200- and an 800-token answer, the tutorial's sections 2.2 and 4.1). Their ties still hold.
UNTIED_ANYWHERE = {"docs/explorer.md", "docs/teachers.md"}
QUOTING = "bias bridge explorer practitioners researchers results teachers trainers variants".split()


def normalised(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def ties(text: str) -> list[re.Match[str]]:
    return [match for match in COMMENT.finditer(text) if is_tie(match.group(1))]


@pytest.mark.parametrize("page", PAGES)
def test_every_tied_number_is_its_file_s(page: str) -> None:
    problems = check((ROOT / page).read_text(encoding="utf-8"))
    assert not problems, f"{page}: " + "; ".join(problems)


@pytest.mark.parametrize("page", sorted(set(PAGES) - UNTIED_ANYWHERE))
def test_every_number_beside_a_tied_one_is_tied_or_a_setting(page: str) -> None:
    numbers = untied((ROOT / page).read_text(encoding="utf-8"))
    assert not numbers, f"{page}: numbers with no tie, not on claims.ALLOWED: " + ", ".join(numbers)


def test_the_pages_that_quote_results_keep_their_ties() -> None:
    """A page that lost all its ties would pass the two tests above: these pages quote the studies."""
    tied = {page for page in PAGES if ties((ROOT / page).read_text(encoding="utf-8"))}
    assert tied >= {f"docs/{name}.md" for name in QUOTING} | {"README.md"}


def _bumped(number: str) -> str:
    """The number with its last digit changed (9 -> 8, else + 1)."""
    position = max(i for i, c in enumerate(number) if c.isdigit())
    digit = number[position]
    return number[:position] + ("8" if digit == "9" else str(int(digit) + 1)) + number[position + 1 :]


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{name}.md" for name in QUOTING)])
def test_a_number_changed_by_hand_or_in_its_file_fails_its_tie(page: str) -> None:
    """Every tied number of the page, edited in a copy of the text, is reported at its tie's line;
    so is every tied value changed in its file (a reader that returns it changed)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    tied: list[tuple[int, re.Match[str]]] = []  # (the tie's line, its number)
    changed: dict[str, dict[str, Any]] = {}
    for tie in ties(text):
        source, _, body = " ".join(tie.group(1).split()).partition(" ")
        if body == "table":
            continue
        line = text.count("\n", 0, tie.start()) + 1
        keys = [key for key, _ in items(body)]
        tied += [(line, number) for number in list(NUMBER.finditer(text, 0, tie.start()))[-len(keys) :]]
        changed.setdefault(source, {}).update({key: values(source)[key] * 2 + 1 for key in keys})
    edited = text
    for _, number in reversed(tied):
        edited = edited[: number.start()] + _bumped(number.group()) + edited[number.end() :]
    expected = sorted(line for line, _ in tied)
    assert sorted(int(problem.split(":")[0].split()[1]) for problem in check(edited)) == expected
    reports = check(text, read=lambda source: ChainMap(changed.get(source, {}), values(source)))
    assert sorted(int(problem.split(":")[0].split()[1]) for problem in reports) == expected


def test_a_table_tied_whole_fails_when_a_cell_changes() -> None:
    text = (ROOT / "docs" / "variants.md").read_text(encoding="utf-8")
    tie = next(m for m in ties(text) if m.group(1).split() == ["results/presets.md", "table"])
    row = text.index("\n| `grpo` |", tie.end()) + 1
    cell = NUMBER.search(text, row)
    assert cell is not None and check(text) == []
    edited = text[: cell.start()] + _bumped(cell.group()) + text[cell.end() :]
    line = text.count("\n", 0, tie.start()) + 1
    assert check(edited) == [f"line {line}: the table after the tie is not results/presets.md's as written"]


def test_an_untied_number_beside_tied_ones_is_found_and_a_setting_is_not() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = "its accuracy stalls at 27.1"
    assert sentence in text and untied(text) == []
    at = text.index(sentence)
    line = text.count("\n", 0, at) + 1
    assert untied(text[:at] + "it ends at 1,234 tokens; " + text[at:]) == [f"line {line}: 1,234"]
    assert untied(text[:at] + "after 400 steps " + text[at:]) == []
    # a number in code or in a release is not prose
    assert untied(text[:at] + "`--seeds 37` with TRL 1.16.0 " + text[at:]) == []


def test_a_tie_over_more_numbers_than_it_follows_or_to_no_key_is_reported() -> None:
    tie = "<!-- results/seed_study.json headline.six.grpo.final.accuracy_pct.mean:.1f; .se:.1f -->"
    assert check(f"GRPO ends at 27.1{tie}") == ["line 1: 2 values tied to the 1 numbers since the last tie"]
    assert check(
        "27.1 ± 1.2<!-- results/seed_study.json headline.six.grpo.final.accuracy_pct.nothing:.1f -->"
    ) == ["line 1: results/seed_study.json has no headline.six.grpo.final.accuracy_pct.nothing"]
    assert check("1<!-- results/none.json a:.0f -->")[0].startswith("line 1: results/none.json a:.0f: ")


def test_the_bounds_docs_bias_states_hold_in_the_generated_file() -> None:
    """'1 (within 1e-15)', '0 (below 1e-14)', '0 (below 1e-29)': Dr. GRPO's and std-only's rows,
    at every state the study evaluates (rounding around an exact 1 or 0)."""
    bias = json.loads((ROOT / "results" / "seed_study.json").read_text())["bias"]
    for key, value in bias.items():
        parts = key.split(".")
        if len(parts) < 4 or parts[1] not in ("std_only", "dr_grpo") or key.endswith((".sd", ".se")):
            continue
        variant, metric = parts[1], parts[2]
        if metric == "phi_wrong_cosine":
            assert abs(value) < 1e-14, key
        elif metric == "phi_wrong_share":
            assert value < 1e-29, key
        elif metric == "cosine" and variant == "dr_grpo":
            assert abs(value - 1) < 1e-15, key
    assert bias["dr_grpo.max_cosine_deviation"] < 1e-15


def test_docs_variants_includes_the_families_study_and_each_family_s_spec() -> None:
    import dataclasses

    from toyrl.expected import exact_support
    from toyrl.stages import REGISTRY
    from toyrl.variants import VARIANTS

    doc = (ROOT / "docs" / "variants.md").read_text(encoding="utf-8")
    for table in (ROOT / "results" / "families.md").read_text(encoding="utf-8").split("\n\n")[1::2]:
        assert table.strip() in doc
    families = doc.split("## The length-aware families", 1)[1].split("### One study", 1)[0]
    rows = [line for line in families.splitlines() if line.startswith("| `")]
    assert len(rows) == 12
    for row in rows[:-1]:
        name = row.split("`")[1]
        variant = VARIANTS[name]
        assert f"| `{variant.spec_text()}` |" in row, name
        first = dataclasses.replace(
            variant, objective=REGISTRY["objective"]["ppo_clip"], schedule=REGISTRY["schedule"]["epochs"]
        )
        assert row.endswith("| exact |") == (exact_support(first) == ""), name


def test_docs_variants_includes_the_generated_presets_table() -> None:
    table = (ROOT / "results" / "presets.md").read_text(encoding="utf-8").split("\n\n", 1)[1].strip()
    assert table in (ROOT / "docs" / "variants.md").read_text(encoding="utf-8")


def test_docs_trainers_includes_the_generated_table_of_every_trainer_s_defaults() -> None:
    """docs/trainers.md's one table of every trainer's default, what it does to length on the toy
    and the setting that makes it Dr. GRPO's loss is results/trainer_defaults.md's, as the study
    wrote it; and it has a row for every trainer modelled."""
    from toyrl.trainers import registry

    parts = (ROOT / "results" / "trainer_defaults.md").read_text(encoding="utf-8").split("\n\n")
    table, short = parts[1].strip(), parts[3].strip()
    assert table in (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8")
    labels = {row.split(" | ")[0].removeprefix("| ").split(":")[0] for row in table.splitlines()[2:]}
    assert labels == {trainer.name for trainer in registry().values()}
    # the README's short table: one row a trainer, its default, as the study wrote it
    assert short in (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [row.split(" | ")[0].removeprefix("| ") for row in short.splitlines()[2:]]
    assert [row.rsplit(" ", 1)[0] for row in rows] == [trainer.name for trainer in registry().values()]


@pytest.mark.parametrize("name", ["bench.txt", "bench_core.txt", "bench_waits.txt", "bench_bridge.txt"])
def test_docs_performance_shows_the_committed_benchmark(name: str) -> None:
    """Timings are this machine's, so they are not regenerated here; the text must be the file's."""
    bench = (ROOT / "results" / name).read_text(encoding="utf-8").strip()
    assert f"```\n{bench}\n```" in (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")


def test_the_readme_shows_the_measured_test_times_within_five_minutes() -> None:
    """results/test_times.txt (scripts/time_tests.py) is in the README as written, and the README's
    test command took at most 5 minutes there; the slow tests are timed beside it."""
    times = (ROOT / "results" / "test_times.txt").read_text(encoding="utf-8").strip()
    assert f"```\n{times}\n```" in (ROOT / "README.md").read_text(encoding="utf-8")
    fast, slow = times.splitlines()
    assert fast.startswith("python -m pytest ") and slow.startswith("python -m pytest -m slow ")
    minutes = float(re.search(r"([\d.]+) minutes", fast).group(1))  # type: ignore[union-attr]
    assert minutes <= 5.0, fast


def test_docs_results_includes_the_generated_tables() -> None:
    readme = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    study = (ROOT / "results" / "seed_study.md").read_text(encoding="utf-8")
    headline = study.split("## Headline figures\n\n", 1)[1].split("\n\n", 1)[0].strip()
    assert headline in readme
    assert (ROOT / "figures" / "final_numbers.md").read_text(encoding="utf-8") in readme


def test_the_readme_test_command_is_the_one_ci_runs_and_pins_a_cpu_torch() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", setup)
    assert commands == ["pip install . && toyrl reproduce", commands[1]] and len(commands) == 2
    assert "torch==2.13.0" in commands[1].split() and "python -m pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()
    # The project's own files install everything the tests need: nothing resolves a bare torch.
    assert "pytest-timeout" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_the_readme_is_short_with_the_set_up_first() -> None:
    """At most 300 lines, the set-up's heading before line 40, then a first `toyrl run`."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    assert lines.index("## Set-up") < 40
    assert lines.index("## Set-up") < lines.index("## A first run")


def test_the_readme_first_run_prints_what_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's first `toyrl run`, run here: its standard output is the block the README shows."""
    from typer.testing import CliRunner

    from toyrl.cli import app

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A first run", 1)[1].split("\n## ", 1)[0]
    command, shown = re.findall(r"```(?:bash)?\n(.+?)\n```", section, flags=re.DOTALL)[:2]
    words = command.split()
    assert words[:2] == ["toyrl", "run"]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, words[1:], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == shown.strip()


def test_every_relative_link_of_the_readme_and_docs_leads_to_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}"


def test_the_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The researchers' example of the README, executed as written (figures drawn off screen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.+?)\n```", readme, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    open_before = set(plt.get_fignums())
    exec(compile(example, "README.md", "exec"), namespace)
    for number in set(plt.get_fignums()) - open_before:  # the example's figures
        plt.close(number)
    assert set(namespace["frame"]["variant"]) == {"grpo", "dr_grpo"}
    assert namespace["frame"].attrs["toyrl"]["config"]["group_size"] == 16
    assert not list(tmp_path.iterdir())


def test_docs_bridge_quotes_the_committed_bridge_benchmark_within_the_minute() -> None:
    """docs/bridge.md's two CPU times are tied to results/bench_bridge.txt (checked above), and both
    are within the minute."""
    bench = values("results/bench_bridge.txt")
    text = (ROOT / "docs" / "bridge.md").read_text(encoding="utf-8")
    tied = [" ".join(tie.group(1).split()) for tie in ties(text)]
    assert "results/bench_bridge.txt empty_cache:.1f; cached:.1f" in tied
    assert bench["cached"] < bench["empty_cache"] < 60


def test_the_length_figure_captions_quote_the_paired_difference_final_numbers_gives() -> None:
    """The README's and docs/results.md's caption of the length figure quotes GRPO − Dr. GRPO of
    E[L | incorrect] at the last step, with its interval, as figures/final_numbers.md (written by
    `toyrl plot`) gives it."""
    numbers = (ROOT / "figures" / "final_numbers.md").read_text(encoding="utf-8")
    step = re.search(r"Final step \((\d+)\)", numbers).group(1)  # type: ignore[union-attr]
    differences = numbers.split("Paired differences from Dr. GRPO", 1)[1]
    seeds = re.search(r"percentile bootstrap over (\d+) seeds", differences).group(1)  # type: ignore[union-attr]
    header, _, *rows = [line for line in differences.splitlines() if line.startswith("|")]
    titles = [cell.strip() for cell in header.strip("|").split(" | ")]
    (grpo,) = [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows if "| `grpo` |" in row]
    cell = grpo[titles.index("E[L \\| incorrect]")]
    mean, low, high = re.fullmatch(r"(\S+) \((\S+) to (\S+)\)", cell).groups()  # type: ignore[union-attr]
    claim = (
        f"At step {step} GRPO's wrong answers are {mean} tokens longer than Dr. GRPO's (E[L | incorrect], "
        f"95% CI {low} to {high}; paired bootstrap over {seeds} seeds)"
    )
    for page in ("README.md", "docs/results.md"):
        assert claim in normalised(ROOT / page), (page, claim)


def test_the_readme_s_trainer_claims_are_the_study_s() -> None:
    """The README says which trainers no setting makes Dr. GRPO's loss, and that Unsloth's one
    setting does: `toyrl check`'s answers in results/trainer_defaults.json."""
    cases = json.loads((ROOT / "results" / "trainer_defaults.json").read_text())["cases"]
    text = normalised(ROOT / "README.md")
    assert "no setting of NeMo-RL, slime, prime-rl, EasyR1 or AReaL divides by a constant" in text
    for key in ("nemo_rl_default", "slime_default", "prime_rl_default", "easyr1_default", "areal_grpo"):
        assert cases[key]["to_dr_grpo"] is None, key
    assert "Unsloth's `loss_type=\"dr_grpo\"` alone is Dr. GRPO's loss" in text
    assert cases["unsloth_default"]["to_dr_grpo"] == {"loss_type": "dr_grpo"}
    assert cases["unsloth_dr_grpo"]["setting"]["spec"] == cases["unsloth_dr_grpo"]["dr_grpo"]["spec"]
