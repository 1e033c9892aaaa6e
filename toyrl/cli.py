"""The `toyrl` command. Every error a user can fix is one line on stderr and exit status 2."""

from __future__ import annotations

import inspect
import json
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
import typer
from typer.core import TyperGroup

from toyrl.config import Config, ConfigError, InvalidInput, field_help
from toyrl.experiment import check_experiment, estimated_cost, run_experiment
from toyrl.results import (
    RELATIVE_TOLERANCE,
    check_output_path,
    check_overwrite,
    check_writable,
    claim,
    final_summary,
    final_table_markdown,
    format_summary,
    format_table,
    load_results,
    metadata,
    save_results,
    sidecar_path,
    write_atomic,
)
from toyrl.variants import article_variants, parse_variants, saved_variant


class _OneLineErrors(TyperGroup):
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
            # Ctrl-C inside a C extension's import surfaces as an ImportError caused by it.
            if isinstance(error.__cause__ or error.__context__, KeyboardInterrupt):
                typer.echo("toyrl: interrupted", err=True)
                sys.exit(130)
            raise
        if isinstance(status, int) and status:  # an Exit raised inside: 130 is Ctrl-C
            if status == 130:
                typer.echo("toyrl: interrupted", err=True)
            sys.exit(status)
        return status


def _system_message(error: OSError) -> str:
    """An operating-system error as 'path: reason', the way the shell says it."""
    reason = error.strerror or " ".join(str(error).split()) or type(error).__name__
    return f"{error.filename}: {reason}" if error.filename else reason


def _one_line_warning(message: Warning | str, *_: Any, **__: Any) -> None:
    typer.echo(f"toyrl: warning: {message}", err=True)


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C: unwind, so that temporary files are removed and nothing half-written stays."""
    raise KeyboardInterrupt


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


def with_plugins(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command a repeatable `--plugin PATH` option: each file is loaded
    (`toyrl.plugins.load_plugin`) before the command runs, so that its variants may name the
    plugin's stages (`advantage=custom:NAME`)."""
    signature = inspect.signature(command, eval_str=True)
    annotation = Annotated[
        list[Path] | None,
        typer.Option(
            help="A plugin: a Python file registering stages, reachable as custom:NAME (repeatable; "
            "docs/plugins.md)."
        ),
    ]
    option = inspect.Parameter("plugin", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)

    def wrapper(plugin: list[Path] | None = None, **options: Any) -> None:
        from toyrl.plugins import load_plugin

        for path in plugin or []:
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


MAX_SEEDS = 1_000_000


def _check_seeds(seeds: int, seed_start: int) -> None:
    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError("seeds", f"must be an integer in 1..{MAX_SEEDS:,}", seeds)
    if not 0 <= seed_start < 2**63:
        raise ConfigError("seed_start", "must be an integer >= 0 (and below 2**63)", seed_start)


def _progress(label: str) -> Callable[[int, int], None]:
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        left = elapsed / done * (total - done)
        typer.echo(f"{label}: {done}/{total} runs done, {elapsed:.1f} s, ~{left:.1f} s left", err=True)

    return report


@app.command()
@with_plugins
@with_config_options
def run(
    config: Config,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            help="Variant, repeatable: a name (toyrl variants lists them), all (the article's four, the "
            "default), or a spec such as advantage=rloo,aggregation=token_mean,num_iterations=2."
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(help="Number of seeds per variant (>= 1).")] = 6,
    seed_start: Annotated[int, typer.Option(help="First seed (>= 0); seeds are S .. S+N-1.")] = 0,
    n_jobs: Annotated[
        int, typer.Option(help="Worker processes (at most the cores and the runs); -1 uses every core.")
    ] = 1,
    out: Annotated[Path, typer.Option(help="Results CSV; its configuration goes beside it as .json.")] = Path(
        "toyrl-run.csv"
    ),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    mean_field: Annotated[
        bool,
        typer.Option("--mean-field", help="Mean-field runs: Adam driven by the exact expected update."),
    ] = False,
    exact: Annotated[
        bool, typer.Option("--exact", hidden=True, help="Deprecated name of --mean-field.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Replace results at --out made with other settings.")] = False,
) -> None:
    """Train every (variant, seed) pair and write one row per (variant, seed, step)."""
    if exact:
        typer.echo(
            "toyrl: warning: --exact is now --mean-field; the old name goes in the next release", err=True
        )
    mean_field = exact or mean_field
    variants = parse_variants(variant or ["all"])
    _check_seeds(seeds, seed_start)
    if mean_field:
        from toyrl.expected import check_exact_supported

        check_exact_supported(variants)
    check_output_path(out)
    seed_list = list(range(seed_start, seed_start + seeds))
    command = "toyrl run --mean-field" if mean_field else "toyrl run"
    meta = metadata(config, variants, seed_list, command, mean_field=mean_field)
    workers = check_experiment(config, variants, seed_list, n_jobs)
    if not quiet:
        _announce_cost("toyrl run", config, variants, seeds, mean_field, workers)
    with claim(out, "results"):
        check_overwrite(out, meta, force)
        frame = run_experiment(
            config,
            variants,
            seed_list,
            n_jobs=n_jobs,
            progress=None if quiet else _progress("toyrl run"),
            mean_field=mean_field,
        )
        frame, kept = save_results(frame, out, meta)
    if not quiet:
        typer.echo(f"Final step ({config.steps}), exact expectations, mean ± sd over seeds:")
        typer.echo(format_summary(final_summary(frame)))
        typer.echo(_saved(out, kept))


def _announce_cost(
    label: str, config: Config, variants: list[Any], seeds: int, mean_field: bool, workers: int
) -> None:
    """Say up front what a big job will take (over 20 s or 1 GB): a rough estimate, not a promise."""
    simulation, writing, table = estimated_cost(config, variants, seeds, mean_field)
    if simulation / workers + writing > 20 or table > 1e9:
        typer.echo(
            f"{label}: {len(variants) * seeds:,} runs x {config.steps + 1:,} steps: roughly "
            f"{simulation / workers:,.0f} s on {workers} worker{'s' if workers > 1 else ''}, "
            f"{writing:,.0f} s to write the CSV and {table / 1e6:,.0f} MB for the results table",
            err=True,
        )


def _saved(out: Path, kept: bool) -> str:
    if kept:
        return (
            f"kept {out} and {out.with_suffix('.json')}: the new numbers agree with them by the "
            f"cross-machine rule (exact metrics within {RELATIVE_TOLERANCE:g} relative; "
            "docs/reproducibility.md)"
        )
    return f"wrote {out} and {out.with_suffix('.json')}"


ARTICLE_SEEDS = 6  # article, "Toy run": "6 seeds"


def _folder(path: Path, option: str) -> Path:
    """An output folder, made if missing (its parent must exist); InvalidInput if it cannot be used."""
    if path.exists() and not path.is_dir():
        raise InvalidInput(f"{option}: '{path}' is a file, not a folder")
    if not path.exists():
        if not path.parent.is_dir():
            raise InvalidInput(f"{option}: '{path}' cannot be made: its parent folder does not exist")
        path.mkdir()
    check_writable(path, option)
    return path


def _sidecar_config(meta: dict[str, Any] | None) -> Config | None:
    """The configuration a results sidecar records, or None if there is none it can be read from."""
    try:
        return Config.from_dict(meta["config"]) if meta else None
    except (InvalidInput, KeyError, TypeError):
        return None


def _render(frame: pd.DataFrame, meta: dict[str, Any] | None, folder: Path) -> list[Path]:
    """Every figure (PNG and SVG) and the final-numbers table (markdown) into `folder`."""
    from toyrl.plots import render_all  # matplotlib is imported only by commands that draw

    config = _sidecar_config(meta)
    written = render_all(frame, folder, cap=config.cap if config else None)
    if config is not None and meta is not None:
        from toyrl.bias import bias_over_training
        from toyrl.plots import render_bias

        try:
            written += render_bias(
                bias_over_training(frame, config, mean_field=bool(meta.get("mean_field"))), folder
            )
        except InvalidInput as error:
            typer.echo(f"toyrl: warning: no bias figure: {error}", err=True)
    numbers = folder / "final_numbers.md"
    write_atomic(numbers, final_table_markdown(frame, article=config == Config()))
    return [*written, numbers]


@app.command()
def reproduce(
    results_dir: Annotated[Path, typer.Option(help="Folder for article.csv and article.json.")] = Path(
        "results"
    ),
    figures_dir: Annotated[Path, typer.Option(help="Folder for the figures and final_numbers.md.")] = Path(
        "figures"
    ),
    n_jobs: Annotated[
        int, typer.Option(help="Worker processes (at most the cores and the runs); -1 uses every core.")
    ] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    force: Annotated[
        bool, typer.Option(help="Replace results in --results-dir made with other settings.")
    ] = False,
) -> None:
    """Reproduce the article's toy run: 4 variants x 6 seeds at the defaults, results and every figure."""
    config, variants, seeds = Config(), article_variants(), list(range(ARTICLE_SEEDS))
    out = _folder(results_dir, "--results-dir") / "article.csv"
    check_output_path(out, "--results-dir")
    _folder(figures_dir, "--figures-dir")
    meta = metadata(config, variants, seeds, "toyrl reproduce")
    say = (lambda text: None) if quiet else (lambda text: typer.echo(text, err=True))
    with claim(out, "results"), claim(figures_dir, "figures in"):
        check_overwrite(out, meta, force, "--results-dir")
        say(f"toyrl reproduce: {len(variants)} variants x {len(seeds)} seeds x {config.steps} steps")
        frame = run_experiment(
            config, variants, seeds, n_jobs=n_jobs, progress=None if quiet else _progress("simulate")
        )
        # Figures are drawn from the results on disk: when those are kept (equal within the
        # cross-machine tolerance), the figures are the committed ones to the byte.
        frame, kept = save_results(frame, out, meta)
        say("rendering figures")
        from toyrl.plots import render_teaching

        written = _render(frame, meta, figures_dir) + render_teaching(figures_dir)
        explorer = figures_dir / "explorer.html"
        description = f"the article's toy run, {len(variants)} variants x {len(seeds)} seeds"
        _explorer(frame, config, description, explorer)
        written.append(explorer)
    if not quiet:
        typer.echo(f"results: {_saved(out, kept)}")
        typer.echo("figures: " + ", ".join(str(path) for path in written))
        typer.echo(f"Final step ({config.steps}), exact expectations, mean ± sd over seeds:")
        typer.echo(format_summary(final_summary(frame)))


@app.command()
@with_plugins
def plot(
    results: Annotated[Path, typer.Argument(help="A results CSV written by toyrl run or reproduce.")],
    out: Annotated[Path, typer.Option(help="Folder for the figures (made if missing).")] = Path("figures"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
) -> None:
    """Render every figure from saved results, without re-running anything."""
    frame, meta = load_results(results)
    written = _render(frame, meta, _folder(out, "--out"))
    if not quiet:
        typer.echo("wrote " + ", ".join(str(path) for path in written))


def _explorer(frame: pd.DataFrame, config: Config, description: str, out: Path) -> None:
    from toyrl.explore import build_explorer, run_data

    write_atomic(out, build_explorer(run_data(frame, config.cap, description)))


@app.command()
def explore(
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("explorer.html"),
    results: Annotated[
        Path | None,
        typer.Option(help="A results CSV whose mean curves the page can overlay on its own runs (optional)."),
    ] = None,
) -> None:
    """Write one self-contained HTML page that trains the toy live: token weights, difficulty bias, runs."""
    if out.suffix != ".html":
        raise InvalidInput(f"--out must be a path ending in .html (got '{out}')")
    if not out.parent.is_dir():
        raise InvalidInput(f"--out: folder '{out.parent}' does not exist")
    if results is None:
        from toyrl.explore import build_explorer

        write_atomic(out, build_explorer())
    else:
        frame, meta = load_results(results)
        config = _sidecar_config(meta) or Config()
        description = (
            f"{results.name}, {frame['variant'].nunique()} variants x {frame['seed'].nunique()} seeds"
        )
        _explorer(frame, config, description, out)
    typer.echo(f"wrote {out}; open it in a browser (no network needed)")


@app.command()
@with_plugins
def bias(
    variant: Annotated[
        list[str] | None,
        typer.Option(help="Variant, repeatable, or all (default: all, or those in --results)."),
    ] = None,
    results: Annotated[
        Path | None,
        typer.Option(help="A results CSV; its runs are replayed to recover the policy at --step."),
    ] = None,
    step: Annotated[
        int | None, typer.Option(help="Step of the runs in --results (default: their last).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Without --results: the seed of the initial policy.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Each variant's exact expected update E[g] against the true gradient of expected accuracy."""
    from toyrl.bias import bias_report, replay_states
    from toyrl.train import initial_theta, run_streams

    rows: list[dict[str, Any]]
    if not 0 <= seed < 2**63:
        raise ConfigError("seed", "must be an integer >= 0 (and below 2**63)", seed)
    if results is None:
        if step is not None:
            raise InvalidInput("--step needs --results (the runs whose policy it names)")
        config = Config()
        chosen_variants = parse_variants(variant or ["all"])
        theta = initial_theta(config, run_streams(seed)[0])
        rows = bias_report(np.repeat(theta[None], len(chosen_variants), axis=0), config, chosen_variants)
        where = f"the initial policy of seed {seed} (default settings)"
    else:
        frame, meta = load_results(results)
        saved = _sidecar_config(meta)
        if saved is None:
            raise InvalidInput(
                f"{results}: no readable configuration beside it ({sidecar_path(results).name})"
            )
        config = saved
        present = list(dict.fromkeys(frame["variant"]))
        names = [name for name in (variant or present) if name in present]
        if not names:
            raise InvalidInput(f"{results}: has none of the variants asked for; it has {', '.join(present)}")
        last = int(frame["step"].max())
        chosen = last if step is None else step
        if not 0 <= chosen <= last:
            raise InvalidInput(f"--step must be in 0..{last} for {results} (got {chosen})")
        ends = frame.groupby(["variant", "seed"], sort=False)["step"].max().reset_index()
        short = ends[ends["step"] < chosen]
        if len(short):
            first = short.iloc[0]
            raise InvalidInput(
                f"--step {chosen}: in {results}, variant {first['variant']}, seed {first['seed']} "
                f"ends at step {first['step']}"
            )
        runs = [
            (saved_variant(name), int(s))
            for name in names
            for s in sorted(frame.loc[frame["variant"] == name, "seed"].unique())
        ]
        mean_field = bool(meta.get("mean_field", False)) if meta else False
        states = replay_states(config, runs, [chosen], check=frame, mean_field=mean_field)[:, 0]
        per_run = pd.DataFrame(bias_report(states, config, [v for v, _ in runs]))
        means = per_run.groupby("variant", sort=False).mean(numeric_only=True).reset_index()
        rows = [{str(key): value for key, value in row.items()} for row in means.to_dict("records")]
        where = f"step {chosen} of {results}, mean over {len(runs) // len(names)} seeds"
    if as_json:
        typer.echo(json.dumps({"policy": where, "variants": rows}, indent=2))
        return
    typer.echo(f"E[g] against grad J at {where}:")
    header = [
        "variant",
        "cosine",
        "norm ratio",
        "psi cosine",
        "E[g] phi_right",
        "grad J phi_right",
        "E[g] phi_wrong",
        "phi_wrong cosine",
        "phi_wrong share",
    ]
    keys = [
        "variant",
        "cosine",
        "norm_ratio",
        "psi_cosine",
        "phi_right",
        "true_phi_right",
        "phi_wrong",
        "phi_wrong_cosine",
        "phi_wrong_share",
    ]
    typer.echo(format_table([header, *[[_cell(row[key]) for key in keys] for row in rows]]))
    typer.echo(
        "grad J's phi_wrong component is 0: a wrong approach earns nothing at any length. phi_wrong "
        "cosine: E[g]'s cosine with that axis (negative: lengthens wrong answers); share: its part of "
        "|E[g]|^2."
    )


@app.command()
@with_plugins
@with_config_options
def sweep(
    config: Config,
    out_dir: Annotated[
        Path, typer.Option(help="The sweep's folder (made if missing; its parent must exist).")
    ],
    variant: Annotated[
        list[str] | None,
        typer.Option(help="Variant axis, repeatable: names, presets or key=value specs (default: the four)."),
    ] = None,
    grid: Annotated[
        list[str] | None,
        typer.Option(help="A configuration axis KEY=V1,V2,..., repeatable, e.g. group_size=4,8,16,64."),
    ] = None,
    seeds: Annotated[int, typer.Option(help="Seeds per grid point (>= 1).")] = 3,
    seed_start: Annotated[int, typer.Option(help="First seed (>= 0).")] = 0,
    n_jobs: Annotated[
        int, typer.Option(help="Workers (at most the cores and the chunks of runs); -1 uses every core.")
    ] = 1,
    backend: Annotated[str, typer.Option(help="loky (joblib's processes) or dask (toyrl[dask]).")] = "loky",
    scheduler: Annotated[
        str | None, typer.Option(help="With --backend dask: a scheduler address (default: a local cluster).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace a different sweep already in --out-dir.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
) -> None:
    """Run every variant x grid point x seed; resumable: run it again to finish a stopped sweep."""
    from toyrl.sweep import estimate_left, parse_grid, run_sweep

    chosen = parse_variants(variant or ["all"])
    axes = parse_grid(grid or [], config)
    _check_seeds(seeds, seed_start)  # the worker count, backend and folder are checked by run_sweep
    started = time.perf_counter()
    finished = 0

    def report(done: int, total: int, just_finished: int) -> None:
        nonlocal finished
        finished += just_finished
        left = estimate_left(done, total, time.perf_counter() - started, finished)
        eta = "?" if left == float("inf") else f"~{left:.0f} s"
        typer.echo(f"toyrl sweep: {done}/{total} runs done, {total - done} left, {eta} left", err=True)

    table = run_sweep(
        out_dir,
        chosen,
        axes,
        list(range(seed_start, seed_start + seeds)),
        config,
        n_jobs=n_jobs,
        backend=backend,
        scheduler=scheduler,
        force=force,
        progress=None if quiet else report,
    )
    from toyrl.plots import plot_sweep, save_figures

    save_figures({"sweep": plot_sweep(table, list(axes))}, out_dir)
    if not quiet:
        typer.echo(f"wrote {out_dir / 'results.csv'}, {out_dir / 'final.csv'} and {out_dir / 'sweep.png'}")


@app.command()
@with_plugins
def variants(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List every named variant (its spec and the trainer setting it stands for) and every stage."""
    from toyrl.expected import exact_support
    from toyrl.objective import spec_keys
    from toyrl.plugins import LOADED
    from toyrl.stages import REGISTRY, simulated_only
    from toyrl.variants import SOURCES, VARIANTS

    if as_json:
        rows = [
            {
                "name": v.name,
                "spec": v.spec(),
                "summary": v.summary,
                "stands_for": v.stands_for,
                "simulated_only": exact_support(v),
            }
            for v in VARIANTS.values()
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    for v in VARIANTS.values():
        typer.echo(f"{v.name}\n    {v.spec_text()}\n    {v.stands_for or v.summary}")
    typer.echo("\nstages (* simulated only: no exact expected update):")
    for kind, stages in REGISTRY.items():
        names = [name + ("*" if simulated_only(stage) else "") for name, stage in stages.items()]
        typer.echo(f"  {'aggregation' if kind == 'normaliser' else kind}: {', '.join(names)}")
    for plugin in LOADED.values():
        given = ", ".join(
            f"{'aggregation' if kind == 'normaliser' else kind}={name}" for kind, name in plugin.stages
        )
        typer.echo(
            f"  plugin {plugin.path} ({plugin.name} {plugin.version}, sha256 {plugin.sha256[:12]}): {given}"
        )
    typer.echo(f"spell any combination as --variant key=value,... over {', '.join(spec_keys())}")
    typer.echo("read from: " + "; ".join(SOURCES.values()))


@app.command()
@with_config_options
def check(
    config: Config,
    settings_file: Annotated[
        Path | None,
        typer.Argument(
            metavar="CONFIG",
            help="A trainer configuration file, .json (or .yaml/.yml, with PyYAML installed); nested "
            "keys are joined with dots.",
        ),
    ] = None,
    trainer: Annotated[
        str, typer.Option(help="Whose settings these are: trl, verl, openrlhf or oat.")
    ] = "trl",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="A setting KEY=VALUE, repeatable; over the file's, e.g. loss_type=dr_grpo."
        ),
    ] = None,
    version: Annotated[
        str | None, typer.Option(help="The trainer's release (default: the newest modelled).")
    ] = None,
    seeds: Annotated[int, typer.Option(help="Seeds for each of the two variants (>= 2).")] = 6,
    n_jobs: Annotated[
        int, typer.Option(help="Worker processes (at most the cores and the runs); -1 uses every core.")
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
) -> None:
    """What a trainer's own settings do to response length: the toy run beside Dr. GRPO."""
    from toyrl.trainers import parse_sets, read_settings, resolve
    from toyrl.trainers.check import as_json as check_json
    from toyrl.trainers.check import report, run_check

    if not 2 <= seeds <= 10_000:
        raise ConfigError("seeds", "must be an integer in 2..10,000 (a standard error needs two)", seeds)
    values: dict[str, Any] = read_settings(settings_file) if settings_file is not None else {}
    from_file = frozenset(values)
    values |= parse_sets(set_ or [])
    resolved = resolve(trainer, version, values, from_file - set(parse_sets(set_ or [])))
    seed_list = list(range(seeds))
    result = run_check(
        resolved, config, seed_list, n_jobs, progress=None if quiet or as_json else _progress("toyrl check")
    )
    if as_json:
        typer.echo(json.dumps(check_json(result), indent=2))
        return
    for line in report(result):
        typer.echo(line)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@app.command()
def examples(
    name: Annotated[
        str | None, typer.Argument(help="One example: length, difficulty, four or baseline (default all).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Print the source documents' worked examples, computed by the package's variant code."""
    from toyrl.examples import EXAMPLES

    if name is not None and name not in EXAMPLES:
        raise InvalidInput(f"unknown example {name!r}; valid: {', '.join(EXAMPLES)}")
    chosen = [EXAMPLES[key]() for key in ([name] if name else EXAMPLES)]
    if as_json:
        typer.echo(json.dumps([example.to_dict() for example in chosen], indent=2))
        return
    for example in chosen:
        rows = [example.columns, *[[_cell(value) for value in row] for row in example.rows]]
        typer.echo(f"\n{example.title}\n  ({example.source})\n")
        typer.echo(format_table(rows, indent="  ", left_first=False))
        typer.echo("")
        for conclusion in example.conclusions:
            typer.echo(f"  - {conclusion}")


def main() -> None:
    """Console-script entry point."""
    signal.signal(signal.SIGTERM, _terminate)
    app()


if __name__ == "__main__":
    main()
