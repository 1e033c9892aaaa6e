"""How the `toyrl` command reads its options and reports its errors.

typer's hooks: usage errors, refused input and failures of the file system as one line on stderr
with exit status 2 (`OneLineErrors`), each command's --help with its own options before the
configuration's (`Command`), and options of plain types read without pydantic (`_PlainValue`).
Help is plain text (typer's rich markup is off: it would read `[g]` and `[dask]` as markup).
The options commands share: one per configuration field (`with_config_options`), `--plugin`
(`with_plugins`), and their help texts.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
import typing
import warnings
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

from toyrl.config import MAX_SEED, MAX_SEEDS, Config, ConfigError, InvalidInput, field_help
from toyrl.values import parse_float, parse_int


class _PlainOptions:
    """A command (or the group) whose options of plain types, --help included, are read without
    pydantic (`_PlainValue`)."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _PlainValue.install(param)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            _PlainValue.install(option)
        return option


class OneLineErrors(_PlainOptions, TyperGroup):
    """Usage errors as `toyrl: error: ...` on one line (exit 2), not a usage box or a traceback."""

    def main(self, args: Any = None, prog_name: Any = None, *_: Any, **extra: Any) -> Any:
        extra["standalone_mode"] = False  # errors come back here instead of being printed
        warnings.showwarning = _one_line_warning
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
        except OSError as error:  # the file system or a connection refused what the command needed
            typer.echo(f"toyrl: error: {_system_message(error)}", err=True)
            sys.exit(2)
        except MemoryError:
            typer.echo(
                "toyrl: error: out of memory; use fewer variants, seeds, steps or responses per step "
                "(--batch-prompts, --group-size), or fewer --n-jobs",
                err=True,
            )
            sys.exit(2)
        except Exception as error:
            # Ctrl-C inside a C extension surfaces as the extension's own error: an ImportError
            # caused by it, or matplotlib's "Invalid bounding box" when the KeyboardInterrupt
            # raised in a conversion it calls back into Python for is replaced by its own.
            if _INTERRUPTED or isinstance(error.__cause__ or error.__context__, KeyboardInterrupt):
                typer.echo("toyrl: interrupted", err=True)
                sys.exit(130)
            raise
        if isinstance(status, int) and status:  # an Exit raised inside: 130 is Ctrl-C
            if status == 130:
                typer.echo("toyrl: interrupted", err=True)
            sys.exit(status)
        return status


class Command(_PlainOptions, TyperCommand):
    """A command whose --help lists its own options first, then the configuration's."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                name = param.metavar or (param.name or "").upper()
                sections.setdefault("Arguments", []).append((name, record[1]))
            else:
                panel = getattr(param, "rich_help_panel", None) or "Options"
                sections.setdefault(panel, []).append(record)
        for title in sorted(sections, key=lambda name: name == CONFIGURATION):
            with formatter.section(title):
                _definitions(formatter, sections[title])


CONFIGURATION = "Configuration (toyrl.config.Config; defaults: the article's toy run)"


def _definitions(formatter: Any, rows: list[tuple[str, str]], widest: int = 30) -> None:
    """click's definition list (option, help), without splitting words at hyphens or in the middle:
    --no-count-approach-token and std-scaled stay whole."""
    first = min(max(len(name) for name, _ in rows), widest) + 2
    indent = " " * formatter.current_indent
    text_width = max(formatter.width - first - 2 - formatter.current_indent, 20)
    for name, text in rows:
        lines = textwrap.wrap(text, text_width, break_long_words=False, break_on_hyphens=False) or [""]
        if len(name) + 2 <= first:
            formatter.write(f"{indent}{name.ljust(first)}{lines[0]}\n")
        else:
            formatter.write(f"{indent}{name}\n{indent}{' ' * first}{lines[0]}\n")
        for line in lines[1:]:
            formatter.write(f"{indent}{' ' * first}{line}\n")


class _PlainValue:
    """Reads an option's text as an int, a float, a str or a Path (or a list of them), as typer
    does, but without building pydantic validators: importing pydantic and building one per option
    would take a sizeable part of a short command's time.

    Installed in place of typer's lazily built coercion (`_runtime_param`) only for options whose
    type is one of those (or a flag) and which have no parser, choices, range or file type;
    anything else, or a typer whose internals differ, keeps typer's own. Integers are read as
    pydantic reads them ("6", " +6 ", "1_000", "6.0"; not "6.5" or "1e6"), floats as Python does
    (inf and nan included: the configuration's checks refuse them).
    """

    KINDS: ClassVar[dict[Any, str]] = {
        int: "an integer",
        float: "a number",
        str: "text",
        Path: "a path",
        bool: "true or false",
    }

    def __init__(self, kind: Any) -> None:
        self.kind = kind

    @classmethod
    def install(cls, param: Any) -> None:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", False) is not None:
            return
        info = descriptor.parameter_info
        annotation = descriptor.annotation
        element = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else annotation
        plain = (
            element in cls.KINDS
            and descriptor.file_annotation is None
            and getattr(info, "parser", None) is None
            and getattr(info, "click_type", None) is None
            and getattr(info, "min", None) is None
            and getattr(info, "max", None) is None
            and descriptor.choices is None
        )
        if plain:
            param._runtime_param = cls(element)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if many:
            if isinstance(value, str):
                raise typer.BadParameter("Value must be an iterable.", ctx=ctx, param=param)
            return [self.one(item, param, ctx) for item in value]
        return self.one(value, param, ctx)

    def one(self, value: Any, param: Any, ctx: Any) -> Any:
        kind = self.kind
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        text = str(value)
        if kind in (int, float):  # toyrl's one reading of integers and numbers
            try:
                return (parse_int if kind is int else parse_float)(text, text)
            except InvalidInput:
                pass
        elif kind is not bool:  # a flag's value is True or False already
            return kind(text)
        raise typer.BadParameter(f"{text!r} is not {self.KINDS[kind]}.", ctx=ctx, param=param)


def _system_message(error: OSError) -> str:
    """An operating-system error as 'path: reason', the way the shell says it."""
    reason = error.strerror or " ".join(str(error).split()) or type(error).__name__
    return f"{error.filename}: {reason}" if error.filename else reason


def _one_line_warning(message: Warning | str, *_: Any, **__: Any) -> None:
    typer.echo(f"toyrl: warning: {message}", err=True)


_INTERRUPTED: list[int] = []  # the signals received: whatever error unwinds after one is an interruption


def terminate(signum: int, frame: Any) -> None:
    """SIGTERM (and Ctrl-C) as KeyboardInterrupt: unwind, so that temporary files are removed and
    nothing half-written stays. The signal is noted first, for a C extension may swallow the
    KeyboardInterrupt and raise an error of its own in its place."""
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def _message(error: Exception) -> str:
    """One line naming the problem; a configuration field is named as its option (--group-size)."""
    if isinstance(error, ConfigError):
        return f"--{error.field.replace('_', '-')} {error.detail}"
    format_message = getattr(error, "format_message", None)
    text = format_message() if callable(format_message) else str(error)
    return " ".join(str(text).split())


def _shown_default(name: str, value: object) -> str:
    """A configuration default as people think of it: 1/300, not 0.0033333333333333335; the cap
    for a length_norm of 0."""
    if name == "length_norm" and value == 0:
        return "0 (the cap)"
    if isinstance(value, bool):
        return f"--{name.replace('_', '-')}" if value else f"--no-{name.replace('_', '-')}"
    if isinstance(value, float):
        if len(repr(value)) > 8 and value > 0 and value == 1 / round(1 / value):
            return f"1/{round(1 / value)}"
        return f"{value:g}"
    return str(value)


def with_config_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command one option per `Config` field (default and help from the dataclass).

    The command receives the validated `config: Config` in place of those options.
    """
    signature = inspect.signature(command, eval_str=True)
    parameters = [p for p in signature.parameters.values() if p.name != "config"]
    annotations = {p.name: p.annotation for p in parameters}
    for spec in fields(Config):
        kind = type(spec.default)
        annotation = Annotated[
            kind,  # type: ignore[valid-type]
            typer.Option(
                help=f"{field_help(spec.name)}  [default: {_shown_default(spec.name, spec.default)}]",
                show_default=False,
                metavar={int: "INTEGER", float: "NUMBER"}.get(kind),
                rich_help_panel=CONFIGURATION,
            ),
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


def with_plugins(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command a repeatable `--plugin PATH` option: each file is loaded
    (`toyrl.plugins.load_plugin`) before the command runs, so that its variants may name the
    plugin's stages (`advantage=custom:NAME`)."""
    signature = inspect.signature(command, eval_str=True)
    annotation = Annotated[
        list[Path] | None,
        typer.Option(
            metavar="PATH",
            help="A plugin: a Python file registering stages, reachable as custom:NAME (repeatable; "
            "docs/plugins.md).",
        ),
    ]
    option = inspect.Parameter("plugin", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)

    def wrapper(plugin: list[Path] | None = None, **options: Any) -> None:
        if plugin:
            from toyrl.plugins import load_plugin

            for path in plugin:
                load_plugin(path)
        command(**options)

    wrapper.__name__ = command.__name__
    wrapper.__doc__ = command.__doc__
    wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {
        "plugin": annotation
    }
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), option]
    )
    return wrapper


QUIET_HELP = "Print nothing but errors (no progress, no summary)."
N_JOBS_HELP = "Worker processes (at most the cores and the runs); -1 uses every core."


def check_seeds(seeds: int, seed_start: int) -> None:
    """ConfigError unless every seed S .. S+N-1, the last one too, fits the results' int64 column."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError("seeds", f"must be an integer in 1..{MAX_SEEDS:,}", seeds)
    if not 0 <= seed_start <= MAX_SEED - (seeds - 1):
        raise ConfigError(
            "seed_start",
            f"must be an integer in 0..{MAX_SEED - (seeds - 1):,} with --seeds {seeds}: the last seed, "
            f"S+N-1, must fit in int64 (at most {MAX_SEED:,})",
            seed_start,
        )


JSON_HELP = "Machine-readable output: strict JSON, where a number that is not finite (inf, NaN) is null."
