"""docs/lesson.ipynb, the teachers' notebook: committed with its outputs (so GitHub shows its tables and
figures), written by `python scripts/notebook.py`, and the same as a fresh execution in a kernel of this
environment: every printed text exactly, the figures by count (their bytes depend on the fonts and the
matplotlib release, so they are not compared). Its numbers are the article's run (results/article.csv,
the README's), its prose quotes them, and its expected-update table prints an exact 0 as 0, by the rule
`toyrl bias` prints its table with."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import matplotlib.image
import nbformat
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from tests.test_studies import load_script

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "lesson.ipynb"


SCRIPT = load_script("notebook")
# The article's variants as the notebook's tables name them (display names, docs/variants.md)
DISPLAYED = {
    "grpo": "GRPO",
    "std_only": "GRPO without length division",
    "length_only": "GRPO without std division",
    "dr_grpo": "Dr. GRPO",
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lesson")


@pytest.fixture(scope="module")
def fresh(workdir: Path) -> nbformat.NotebookNode:
    return SCRIPT.execute(NOTEBOOK, workdir)  # raises CellExecutionError on any cell's error


@pytest.fixture(scope="module")
def committed() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


def _code_cell(notebook: nbformat.NotebookNode, marker: str) -> nbformat.NotebookNode:
    (cell,) = [cell for cell in notebook.cells if cell.cell_type == "code" and marker in cell.source]
    return cell


def _plain(cell: nbformat.NotebookNode) -> str:
    (result,) = [output for output in cell.outputs if output.output_type == "execute_result"]
    return str(result.data["text/plain"])


def test_the_committed_notebook_matches_a_fresh_execution(
    fresh: nbformat.NotebookNode, committed: nbformat.NotebookNode
) -> None:
    assert SCRIPT.text_outputs(committed) == SCRIPT.text_outputs(fresh)
    assert SCRIPT.figure_count(committed) == SCRIPT.figure_count(fresh) == 3  # 2 x 2, branches, pair
    code = [cell for cell in committed.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))


def test_the_notebook_tells_its_story_and_writes_nothing(fresh: nbformat.NotebookNode, workdir: Path) -> None:
    outputs = [output for cell in fresh.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    text = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert "verdict: length drift: wrong answers end" in text
    assert "these settings are Dr. GRPO itself" in text
    assert not list(workdir.iterdir())  # the lesson writes nothing


def test_the_committed_outputs_carry_nothing_of_the_machine(committed: nbformat.NotebookNode) -> None:
    assert committed.metadata == {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    pngs = []
    for cell in committed.cells:
        assert "execution" not in cell.metadata  # nbclient's timestamps
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                pngs.append(base64.b64decode(output.data["image/png"]))
    assert len(pngs) == 3
    for png in pngs:
        assert png.startswith(b"\x89PNG") and b"tEXt" not in png and b"matplotlib" not in png


def test_stable_png_drops_the_text_chunks_and_keeps_the_pixels() -> None:
    fig = Figure(figsize=(2, 1))
    fig.subplots().plot([0, 1], [1, 0])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # matplotlib's default metadata: its version in a tEXt chunk
    original = buffer.getvalue()
    stripped = SCRIPT.stable_png(original)
    assert b"tEXt" in original and b"matplotlib" in original
    assert b"tEXt" not in stripped and b"matplotlib" not in stripped and len(stripped) < len(original)
    before, after = (matplotlib.image.imread(io.BytesIO(png), format="png") for png in (original, stripped))
    np.testing.assert_array_equal(before, after)
    with pytest.raises(ValueError, match="not a PNG"):
        SCRIPT.stable_png(b"GIF89a")


def test_the_final_table_and_its_prose_are_the_article_run(committed: nbformat.NotebookNode) -> None:
    """The notebook trains the article's 6 seeds itself; its table is results/article.csv's last
    step (the README's numbers), and the sentence under it quotes that table."""
    article = pd.read_csv(ROOT / "results" / "article.csv")
    last = article[article["step"] == article["step"].max()]
    final = last.groupby("variant", sort=False)[["accuracy", "length_correct", "length_incorrect"]].mean()
    final["accuracy"] *= 100
    with pd.option_context("display.precision", 4, "display.width", 160):
        expected = repr(final.rename(index=DISPLAYED).round(1))
    cell = _code_cell(committed, "round(1)")
    assert _plain(cell) == expected
    index = committed.cells.index(cell)
    prose = committed.cells[index + 1].source
    for variant, name in [("grpo", "GRPO's"), ("dr_grpo", "Dr. GRPO's")]:
        tokens, accuracy = final.loc[variant, "length_incorrect"], final.loc[variant, "accuracy"]
        assert f"{name} wrong answers end at {tokens:,.0f} tokens" in prose
        assert f"accuracy at {accuracy:.1f} %" in prose


def test_the_expected_update_prints_an_exact_zero_as_0(fresh: nbformat.NotebookNode) -> None:
    """Dr. GRPO's and grad J's E[g] along the wrong approach's stop logit are 0 in exact arithmetic
    (their floating-point residue is ~1e-20): the table says 0, as `toyrl bias` does."""
    header, _, *lines = _plain(_code_cell(fresh, "expected_update")).splitlines()
    assert header.split() == ["stop_logit_right", "stop_logit_wrong", "cosine", "stop_logit_wrong_share"]
    names = [*DISPLAYED.values(), "grad J"]
    rows = {}
    for line in lines:
        name = max((name for name in names if line.startswith(name + " ")), key=len)  # not GRPO's prefix
        rows[name] = line[len(name) :].split()
    assert list(rows) == names
    for variant in ["GRPO without length division", "Dr. GRPO", "grad J"]:
        assert rows[variant][1] == "0" and rows[variant][3] == "0"
    assert float(rows["GRPO"][1]) < 0  # GRPO lengthens wrong answers: its entry is no residue
