"""`toyrl explore` says where the page is as a browser takes it (the absolute path and a file://
URL, on one line however narrow the terminal), and `--open` opens it in the default browser."""

from __future__ import annotations

import urllib.parse
import urllib.request
import webbrowser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toyrl.cli import app


def _written(stdout: str) -> tuple[Path, str]:
    line = stdout.strip().splitlines()[-1]
    url = line.rsplit(" ", 1)[-1]
    return Path(line.removeprefix("wrote ").split(";", 1)[0]), url


def test_the_page_is_named_by_its_absolute_path_and_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal does not break the URL
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **k: opened.append(url) or True)
    result = CliRunner().invoke(app, ["explore", "--out", "page.html"])
    assert result.exit_code == 0, result.output
    path, url = _written(result.stdout)
    assert path.is_absolute() and path == (tmp_path / "page.html").resolve() and path.is_file()
    assert (
        url.startswith("file:///")
        and Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)) == path
    )
    assert opened == []  # not without --open


def test_open_hands_the_url_to_the_default_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **k: opened.append(url) or True)
    result = CliRunner().invoke(app, ["explore", "--out", str(tmp_path / "a b.html"), "--open"])
    assert result.exit_code == 0, result.output
    _, url = _written(result.stdout)
    assert opened == [url] and "%20" in url and result.stderr == ""


def test_open_without_a_browser_says_so_and_keeps_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **k: False)
    result = CliRunner().invoke(app, ["explore", "--out", str(tmp_path / "page.html"), "--open"])
    assert result.exit_code == 0, result.output
    _, url = _written(result.stdout)
    assert result.stderr == f"toyrl: no browser found to open it; open {url} in one\n"
    assert (tmp_path / "page.html").stat().st_size > 100_000
