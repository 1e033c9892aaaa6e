"""Execute docs/lesson.ipynb in a fresh kernel of this environment and write it back with its outputs.

    python scripts/notebook.py [--check]

The notebook is committed with its outputs so that it shows its tables and figures where it is read
(GitHub renders them). The outputs written are the same from run to run and machine to machine
where the numbers are: no execution timings, no kernel version in the metadata (the notebook's own
metadata is kept as it was), execution counts 1, 2, ... in cell order, and PNG figures without
their text chunks (matplotlib writes its version there; the figures of `toyrl plot` drop it the
same way). Run from the repository's root or anywhere; the kernel works in a fresh temporary
directory, so the lesson cannot read or write files of the checkout. With `--check`, the notebook
is executed and compared with the committed one (text outputs exactly, figures by count) instead
of written; exit 1 and the first difference when they differ.
"""

from __future__ import annotations

import argparse
import base64
import copy
import struct
import sys
import tempfile
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "lesson.ipynb"
TIMEOUT = 900  # seconds per cell: a guard against a hang, not a speed target
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_TEXT_CHUNKS = {b"tEXt", b"zTXt", b"iTXt", b"tIME"}


def stable_png(data: bytes) -> bytes:
    """The PNG `data` without its text and time chunks (matplotlib's 'Software' version)."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG")
    kept, position = [PNG_SIGNATURE], len(PNG_SIGNATURE)
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        end = position + 12 + length  # length, type, data, CRC
        if data[position + 4 : position + 8] not in PNG_TEXT_CHUNKS:
            kept.append(data[position:end])
        position = end
    return b"".join(kept)


def execute(path: Path = NOTEBOOK, workdir: Path | None = None) -> nbformat.NotebookNode:
    """The notebook at `path`, executed top to bottom in a fresh python3 kernel whose working
    directory is `workdir` (default: a temporary one, removed after), its outputs made
    machine-independent as the module's docstring says. Raises nbclient's CellExecutionError when
    a cell fails."""
    notebook = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(notebook.metadata)
    with tempfile.TemporaryDirectory() as temporary:
        nbclient.NotebookClient(
            notebook,
            timeout=TIMEOUT,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": str(workdir or temporary)}},
        ).execute()
    notebook.metadata = metadata
    count = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        cell.metadata.pop("execution", None)
        for output in cell.outputs:
            if "execution_count" in output:
                output.execution_count = count
            data = output.get("data", {})
            if "image/png" in data:
                png = stable_png(base64.b64decode(data["image/png"]))
                data["image/png"] = base64.b64encode(png).decode("ascii")
    return notebook


def text_outputs(notebook: nbformat.NotebookNode) -> list[list[str]]:
    """Per code cell, its printed text: streams (name and text), plain-text results and errors."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        texts = []
        for output in cell.outputs:
            if output.output_type == "stream":
                texts.append(f"[{output.name}]\n{output.text}")
            elif output.output_type == "error":
                texts.append(f"[error] {output.ename}: {output.evalue}")
            else:
                texts.append(f"[{output.output_type}]\n{output.get('data', {}).get('text/plain', '')}")
        cells.append(texts)
    return cells


def figure_count(notebook: nbformat.NotebookNode) -> int:
    """How many PNG figures the notebook's outputs hold."""
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed notebook")
    arguments = parser.parse_args()
    fresh = execute()
    if not arguments.check:
        nbformat.write(fresh, NOTEBOOK)
        print(f"wrote {NOTEBOOK}", file=sys.stderr)
        return 0
    committed = nbformat.read(NOTEBOOK, as_version=4)
    for index, (old, new) in enumerate(zip(text_outputs(committed), text_outputs(fresh), strict=True)):
        if old != new:
            print(f"code cell {index + 1} differs:\n--- committed\n{old}\n--- fresh\n{new}", file=sys.stderr)
            return 1
    if figure_count(committed) != figure_count(fresh):
        print(f"figures: {figure_count(committed)} committed, {figure_count(fresh)} fresh", file=sys.stderr)
        return 1
    print(f"{NOTEBOOK} matches a fresh execution", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
