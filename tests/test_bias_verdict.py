"""`toyrl bias` ends with its verdict in words, worded from its table: which variants' expected update
lengthens wrong answers and by how much, which point against grad J, which are unbiased; and
docs/bias.md shows the command's output as it prints it."""

import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from toyrl.bias import verdict
from toyrl.cli import app

ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str, columns: int | None = None) -> tuple[int, str, str]:
    env = {"COLUMNS": str(columns) if columns else None}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def table_and_verdict(*args: str) -> tuple[dict[str, dict[str, Any]], str, str]:
    """The rows of `toyrl bias ARGS --json`, its verdict, and the last line the command prints."""
    code, data, _ = invoke(*args, "--json")
    assert code == 0, data
    parsed = json.loads(data)
    code, text, _ = invoke(*args)
    assert code == 0, text
    return {row["variant"]: row for row in parsed["variants"]}, parsed["verdict"], text.splitlines()[-1]


def test_at_the_initial_policy_the_length_biased_variants_are_named_with_their_numbers() -> None:
    rows, words, last = table_and_verdict("bias")
    assert last == words  # printed last, one line when stdout is not a terminal
    assert words.startswith(
        "The expected first update of GRPO and GRPO without std division points toward longer wrong"
    )
    shares = [f"{rows[name]['phi_wrong_share']:.0%}" for name in ("grpo", "length_only")]
    cosines = [f"{rows[name]['phi_wrong_cosine']:.3f}" for name in ("grpo", "length_only")]
    assert f"phi_wrong cosine {cosines[0]} and {cosines[1]}, {shares[0]} and {shares[1]} of |E[g]|^2" in words
    assert rows["grpo"]["cosine"] > 0 and "against grad J" not in words  # not yet
    assert "The expected first update of Dr. GRPO is along grad J (cosine 1 within 1e-9)" in words
    std = rows["std_only"]["cosine"]
    assert (
        0.9998 < std < 0.9999
        and "GRPO without length division has no phi_wrong component but is tilted off grad J "
        f"(cosine {std:.5f})"
        in words
    )
    assert words.count(".") - words.count("0.") - words.count("1e-9") <= 3  # one to three sentences


def test_without_a_length_biased_variant_the_verdict_says_so() -> None:
    rows, words, _ = table_and_verdict("bias", "--variant", "dr_grpo", "--variant", "std_only")
    assert set(rows) == {"dr_grpo", "std_only"}
    assert words.startswith(
        "No variant's expected first update moves the length of wrong answers "
        "(phi_wrong cosine 0 within 1e-9)."
    )
    assert "longer" not in words and "along grad J" in words and "tilted off grad J" in words
    _, alone, _ = table_and_verdict("bias", "--variant", "dr_grpo")
    assert "without length division" not in alone and "tilted" not in alone
    assert "Dr. GRPO is along grad J" in alone


def test_along_training_the_verdict_names_the_variants_against_grad_j(tmp_path: Path) -> None:
    csv = tmp_path / "run.csv"
    code, _, _ = invoke(
        "run",
        "--variant",
        "grpo",
        "--variant",
        "dr_grpo",
        "--seeds",
        "2",
        "--steps",
        "100",
        "--out",
        str(csv),
    )
    assert code == 0
    rows, words, _ = table_and_verdict("bias", "--results", str(csv), "--step", "100")
    grpo = rows["grpo"]
    assert grpo["cosine"] < 0 and grpo["phi_wrong_cosine"] < 0  # the state the verdict describes
    assert words.startswith("The expected update of GRPO at step 100 points toward longer wrong answers")
    assert f"and against grad J itself (cosine {grpo['cosine']:.3f})" in words
    assert "The expected update of Dr. GRPO is along grad J" in words
    _, early, _ = table_and_verdict("bias", "--results", str(csv), "--step", "0")
    assert "against grad J" not in early and "at step 0 points toward longer" in early


def test_the_verdict_follows_the_numbers_not_the_names() -> None:
    def row(name: str, cosine: float, phi_wrong_cosine: float) -> dict[str, float | str]:
        return {
            "variant": name,
            "cosine": cosine,
            "phi_wrong_cosine": phi_wrong_cosine,
            "phi_wrong_share": phi_wrong_cosine**2,
        }

    words = verdict([row("dr_grpo", -0.2, 0.5), row("grpo", 1.0, 0.0), row("x", 0.7, -0.1)], step=7)
    assert words.startswith(
        "The expected update of x at step 7 points toward longer wrong answers, a direction grad J does not "
        "have: phi_wrong cosine -0.100, 1% of |E[g]|^2."
    )
    assert "The expected update of Dr. GRPO at step 7 points toward shorter wrong answers" in words
    assert "and against grad J itself (cosine -0.200)" in words
    assert words.endswith(
        "The expected update of GRPO is along grad J (cosine 1 within 1e-9), unbiased up to its scale."
    )
    mixed = verdict([row("a", -0.5, -0.5), row("b", 0.5, -0.5)])
    assert (
        "of a and b points toward longer" in mixed
        and "; that of a also points against grad J (cosine -0.500)" in mixed
    )


def test_docs_bias_shows_the_command_s_output() -> None:
    """The block under "toyrl bias" in docs/bias.md is what `toyrl bias` prints in 100 columns."""
    doc = (ROOT / "docs" / "bias.md").read_text(encoding="utf-8")
    shown = re.search(r"```\n\$ COLUMNS=100 toyrl bias\n(.+?)```", doc, re.S)
    assert shown is not None
    code, text, _ = invoke("bias", columns=100)
    assert code == 0 and shown.group(1) == text


def test_docs_bias_reads_the_verdict_at_step_100_of_the_reproduction_as_the_command_gives_it() -> None:
    doc = " ".join((ROOT / "docs" / "bias.md").read_text(encoding="utf-8").split())
    claim = "verdict adds that GRPO's and GRPO without std division's expected updates point against ∇J"
    assert claim in doc
    csv = str(ROOT / "results" / "article.csv")
    _, words, _ = table_and_verdict("bias", "--results", csv, "--step", "100")
    assert "of GRPO and GRPO without std division at step 100 points toward longer wrong answers" in words
    assert "and against grad J itself" in words
