"""The `toyrl` command. Every error a user can fix is one line on stderr and exit status 2."""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from toyrl.config import Config, ConfigError, InvalidInput, field_help
from toyrl.objective import VARIANTS, parse_variants
from toyrl.results import check_output_path, final_summary, format_summary, metadata, save_results
from toyrl.train import run_experiment


class _OneLineErrors(TyperGroup):
    """Usage errors as `toyrl: error: ...` on one line (exit 2), not a usage box or a traceback."""

    def main(self, args: Any = None, prog_name: Any = None, *_: Any, **extra: Any) -> Any:
        extra["standalone_mode"] = False  # errors come back here instead of being printed
        try:
            status = super().main(args, prog_name, **extra)
        except (typer.TyperException, InvalidInput) as error:
            message = _message(error)
            if not message:  # `toyrl` alone: the help was shown, nothing went wrong
                sys.exit(0)
            typer.echo(f"toyrl: error: {message}", err=True)
            sys.exit(2)
        except typer.Abort:
            typer.echo("toyrl: interrupted", err=True)
            sys.exit(130)
        if isinstance(status, int) and status:  # an Exit raised inside: 130 is Ctrl-C
            if status == 130:
                typer.echo("toyrl: interrupted", err=True)
            sys.exit(status)
        return status


def _message(error: Exception) -> str:
    """One line naming the problem; a configuration field is named as its option (--group-size)."""
    if isinstance(error, ConfigError):
        return f"--{error.field.replace('_', '-')} {error.detail}"
    format_message = getattr(error, "format_message", None)
    text = format_message() if callable(format_message) else str(error)
    return " ".join(str(text).split())


app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Exact toy simulation of GRPO's length bias and its removal by Dr. GRPO.",
)


@app.callback()
def _toyrl() -> None:
    """Exact toy simulation of GRPO's length bias and its removal by Dr. GRPO."""


def with_config_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command one option per `Config` field (default and help from the dataclass).

    The command receives the validated `config: Config` in place of those options.
    """
    signature = inspect.signature(command, eval_str=True)
    parameters = [p for p in signature.parameters.values() if p.name != "config"]
    annotations = {p.name: p.annotation for p in parameters}
    for spec in fields(Config):
        annotation = Annotated[  # type: ignore[valid-type]
            type(spec.default),
            typer.Option(help=field_help(spec.name), rich_help_panel="Configuration"),
        ]
        annotations[spec.name] = annotation
        parameters.append(
            inspect.Parameter(
                spec.name, inspect.Parameter.KEYWORD_ONLY, default=spec.default, annotation=annotation
            )
        )

    def wrapper(**options: Any) -> None:
        values = {spec.name: options.pop(spec.name) for spec in fields(Config)}
        command(config=Config(**values), **options)

    wrapper.__name__ = command.__name__
    wrapper.__doc__ = command.__doc__
    wrapper.__annotations__ = annotations
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return wrapper


def _progress(label: str) -> Callable[[int, int], None]:
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        left = elapsed / done * (total - done)
        typer.echo(f"{label}: {done}/{total} runs done, {elapsed:.1f} s, ~{left:.1f} s left", err=True)

    return report


@app.command()
@with_config_options
def run(
    config: Config,
    variant: Annotated[
        list[str] | None,
        typer.Option(help=f"Variant to run, repeatable: {', '.join(VARIANTS)}, or all (default all)."),
    ] = None,
    seeds: Annotated[int, typer.Option(help="Number of seeds per variant (>= 1).")] = 6,
    seed_start: Annotated[int, typer.Option(help="First seed (>= 0); seeds are S .. S+N-1.")] = 0,
    n_jobs: Annotated[int, typer.Option(help="Worker processes; -1 uses every core.")] = 1,
    out: Annotated[Path, typer.Option(help="Results CSV; its configuration goes beside it as .json.")] = Path(
        "toyrl-run.csv"
    ),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
) -> None:
    """Train every (variant, seed) pair and write one row per (variant, seed, step)."""
    names = parse_variants(variant or ["all"])
    if seeds < 1:
        raise ConfigError("seeds", "must be an integer >= 1", seeds)
    if seed_start < 0:
        raise ConfigError("seed_start", "must be an integer >= 0", seed_start)
    check_output_path(out)
    seed_list = list(range(seed_start, seed_start + seeds))
    frame = run_experiment(
        config, names, seed_list, n_jobs=n_jobs, progress=None if quiet else _progress("toyrl run")
    )
    save_results(frame, out, metadata(config, names, seed_list, "toyrl run"))
    if not quiet:
        typer.echo(f"Final step ({config.steps}), exact expectations, mean ± sd over seeds:")
        typer.echo(format_summary(final_summary(frame)))
        typer.echo(f"wrote {out} and {out.with_suffix('.json')}")


def main() -> None:
    """Console-script entry point."""
    app()
