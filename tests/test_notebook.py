"""docs/lesson.ipynb, the teachers' notebook, runs top to bottom in a fresh kernel, draws its
figures, and is committed without outputs (its numbers are those of the run that shows them)."""

from __future__ import annotations

import json
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "lesson.ipynb"


def test_the_notebook_is_committed_without_outputs() -> None:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, cell["source"]


def test_the_notebook_runs_top_to_bottom_and_tells_its_story(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()  # raises CellExecutionError on any cell's error
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    figures = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(figures) == 3  # the 2 x 2, the branch lengths, GRPO beside Dr. GRPO
    text = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert "verdict: length drift: wrong answers end" in text
    assert "these settings are Dr. GRPO itself" in text
    assert not list(tmp_path.iterdir())  # the lesson writes nothing
