"""What every test shares: an environment that does not depend on the runner."""

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """pytest-xdist's workers set COLUMNS=80 and a plain run does not: without it, the CLI writes whole
    lines, as into a pipe (`toyrl.cli.terminal.output_width`), whichever way the tests are run. A
    test that wants a width sets COLUMNS itself."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    yield
