"""The `toyrl` command. Every error a user can fix is one line on stderr and exit status 2.

`commands` holds the commands, registered on the typer `app` (`bridge`, the bridge's two:
`toyrl bridge` and `toyrl check --bridge`'s part); `shared`, what both share (the `app`, --json's
text); `options`, how their options are read and their errors reported; `terminal`, output that
fits the terminal. Start-up is kept short: the package imports only the standard library, typer and
`toyrl.config`, so `toyrl --help` loads neither numpy nor pandas; each command imports what it
uses when it runs.
"""

from __future__ import annotations

import signal

from toyrl.cli.commands import app
from toyrl.cli.options import terminate

# isort: split
from toyrl.cli import bridge as _bridge  # noqa: F401  (registers `toyrl bridge`, after the commands)

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    signal.signal(signal.SIGTERM, terminate)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started ignoring it
        signal.signal(signal.SIGINT, terminate)
    app()
