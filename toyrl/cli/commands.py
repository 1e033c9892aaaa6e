"""The commands of `toyrl`, registered on its typer `app`: run, reproduce, plot, explore, bias,
sweep, variants, check and examples, with the helpers they share.

Each command imports what it uses when it runs (`toyrl run` never imports pandas, matplotlib or
joblib on one worker), so that --help loads neither numpy nor pandas.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toyrl.cli.options import (
    JSON_HELP,
    N_JOBS_HELP,
    QUIET_HELP,
    Command,
    check_seeds,
    with_config_options,
    with_plugins,
)
from toyrl.cli.shared import app, json_text, saved_line
from toyrl.cli.terminal import (
    echo_lines,
    format_summary,
    format_table,
    number,
    output_width,
    wrap,
    wrap_list,
)
from toyrl.config import Config, ConfigError, InvalidInput
from toyrl.progress import Progress, duration, step_times

if TYPE_CHECKING:
    import pandas as pd

    from toyrl import plots
    from toyrl.experiment import Columns
    from toyrl.objective import Variant
    from toyrl.results import SavedRuns


def run_experiment(*args: Any, **kwargs: Any) -> Any:
    """`toyrl.experiment.run_experiment`, imported when a command first trains (numpy and the core
    are not needed for --help)."""
    from toyrl.experiment import run_experiment as run

    return run(*args, **kwargs)


def _workers(workers: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}"


@app.command(cls=Command, short_help="Train variants x seeds; write the results CSV and its .json.")
@with_plugins
@with_config_options
def run(
    config: Config,
    given: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="VARIANT",
            help="Variants, as --variant takes them (the two may be mixed), e.g. "
            "mine=advantage=none,aggregation=token_mean: a label, =, then a name or a spec.",
            show_default=False,
        ),
    ] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME|SPEC",
            help="Variant, repeatable: a name (toyrl variants lists them), all (the article's four, the "
            "default), or a spec of key=value pairs joined by commas, such as "
            "advantage=rloo,num_iterations=2; labelled, label=NAME among its pairs or NAME=SPEC "
            "(NAME=PRESET), it is named NAME in the results, tables and figures.",
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(metavar="N", help="Number of seeds per variant (>= 1).")] = 6,
    seed_start: Annotated[
        int, typer.Option(metavar="S", help="First seed (>= 0); seeds are S .. S+N-1.")
    ] = 0,
    n_jobs: Annotated[int, typer.Option(metavar="J", help=N_JOBS_HELP)] = 1,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH.csv",
            help="Results CSV; its configuration goes beside it as .json. Default: toyrl-run.csv for the "
            "four at the defaults, else named by the variants and the settings not at their defaults "
            "(toyrl-run_dr_grpo,steps=200.csv). Runs it holds already, made with the same settings, are "
            "kept; only the missing ones run.",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    mean_field: Annotated[
        bool,
        typer.Option("--mean-field", help="Mean-field runs: Adam driven by the exact expected update."),
    ] = False,
    exact: Annotated[
        bool, typer.Option("--exact", hidden=True, help="Deprecated name of --mean-field.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace results at --out made with other settings; run every run again."
        ),
    ] = False,
) -> None:
    """Train every (variant, seed) pair and write one row per (variant, seed, step); into results of
    the same settings, only the runs they lack."""
    from toyrl.files import check_output_path, claim
    from toyrl.results import (
        default_results_path,
        last_steps,
        metadata,
        save_results,
        saved_runs,
        write_grown,
    )
    from toyrl.variants import parse_variants

    if exact:
        typer.echo(
            "toyrl: warning: --exact is now --mean-field; the old name goes in the next release", err=True
        )
    mean_field = exact or mean_field
    variants = parse_variants([*(given or []), *(variant or [])] or ["all"])
    check_seeds(seeds, seed_start)
    out = default_results_path(config, variants, mean_field) if out is None else out
    check_output_path(out)
    seed_list = list(range(seed_start, seed_start + seeds))
    command = "toyrl run --mean-field" if mean_field else "toyrl run"
    meta = metadata(config, variants, seed_list, command, mean_field=mean_field)
    with Progress("toyrl run", quiet) as progress, claim(out, "results"):
        saved = None if force else saved_runs(out, meta)
        if saved is not None:  # the file's runs, then those asked that it lacks
            variants = _saved_variants(saved, variants)
            seed_list = sorted({*saved.seeds, *seed_list})
            meta = metadata(config, variants, seed_list, command, mean_field=mean_field)
        missing = _missing_runs(saved, variants, seed_list)
        runs = sum(len(names) * len(seeds_) for names, seeds_ in missing)
        workers = _check_run(config, variants, seed_list, n_jobs, mean_field)  # those the file will hold
        if not quiet:
            if saved is not None:
                _say_reused(out, saved, len(variants) * len(seed_list), runs)
            if runs:
                _announce_cost("toyrl run", config, variants, runs // len(variants), mean_field, workers)
        if runs:
            progress.begin(f"simulating {runs:,} runs", runs * (config.steps + 1))
        tables = []
        done = 0
        for chosen, chosen_seeds in missing:
            tables.append(
                run_experiment(
                    config,
                    chosen,
                    chosen_seeds,
                    n_jobs=n_jobs,
                    progress=lambda step, _, base=done: progress.update(base + step),
                    mean_field=mean_field,
                    as_columns=True,
                    workers=min(workers, len(chosen) * len(chosen_seeds)),
                )
            )
            done += len(chosen) * len(chosen_seeds) * (config.steps + 1)
        progress.end()
        if saved is None:
            table, kept = save_results(tables[0], out, meta, progress=progress.saving(out))
        elif runs or saved.remake:
            table, kept = write_grown(out, saved, meta, tables, progress=progress.saving(out)), False
        else:  # every run asked is in the file already
            table, kept = last_steps([lines[-1] for lines in saved.rows.values()]), True
    if not quiet:
        width = output_width()
        steps = step_times(
            progress,
            (f"simulating {runs:,} runs", "simulated in"),
            (f"comparing with {out.name}", "compared with the saved results in"),
            (f"writing {out.name}", "written in"),
        )
        if runs:
            rows = len(variants) * len(seed_list) * (config.steps + 1)
            summary = f"toyrl run: {runs:,} runs x {config.steps + 1:,} steps on {_workers(workers)}, "
            typer.echo(wrap(summary + f"{rows:,} rows: {steps}", width, hanging="    "), err=True)
        _final_tables(table, config.steps, width)
        typer.echo(wrap(saved_line(out, kept), width, hanging="    "))


def _check_run(config: Config, variants: list[Any], seeds: list[int], n_jobs: int, mean_field: bool) -> int:
    """The workers `toyrl run` takes for these runs, or InvalidInput naming what it cannot run."""
    from toyrl.experiment import check_experiment

    if mean_field:
        from toyrl.expected import check_exact_supported

        check_exact_supported(variants)
    return int(check_experiment(config, variants, seeds, n_jobs))


def _saved_variants(saved: SavedRuns, asked: list[Variant]) -> list[Variant]:
    """The variants of a results file (`toyrl.results.saved_runs`: their specs from its sidecar),
    then those asked that it lacks, in the order asked."""
    from toyrl.variants import saved_variant

    known = {variant.name: variant for variant in asked}
    kept = [known.get(name) or saved_variant(name, saved.meta["variants"]) for name in saved.variants]
    return kept + [variant for variant in asked if variant.name not in saved.variants]


def _missing_runs(
    saved: SavedRuns | None, variants: list[Variant], seeds: list[int]
) -> list[tuple[list[Variant], list[int]]]:
    """The runs of variants x seeds a results file lacks, as blocks of variants x seeds: the file's
    variants at the seeds it lacks, then the variants it lacks at every seed (every run when there
    is no file, or its runs are made again). A run's numbers depend on its variant, seed and
    configuration alone (tests/test_train.py), whatever runs beside it."""
    if saved is None or saved.remake:
        return [(variants, seeds)]
    old = [variant for variant in variants if variant.name in saved.variants]
    new = [variant for variant in variants if variant.name not in saved.variants]
    new_seeds = [seed for seed in seeds if seed not in saved.seeds]
    return [(v, s) for v, s in ((old, new_seeds), (new, seeds)) if v and s]


def _say_reused(out: Path, saved: SavedRuns, runs: int, missing: int) -> None:
    """On stderr: how many runs of `out` are kept and how many run (or why all run again)."""
    if saved.remake:
        said = f"{out.name}: running its {runs:,} runs again ({saved.remake})"
    else:
        reused = len(saved.rows)
        said = f"{out.name}: reusing {reused:,} runs it holds, running {missing:,}"
        if not missing and runs == reused:
            said += " (it holds every run asked)"
    typer.echo(wrap(f"toyrl run: {said}", output_width(), hanging="    "), err=True)


def _final_tables(table: pd.DataFrame | Columns, steps: int, width: int | None) -> None:
    """The last step of `toyrl run` and `reproduce`: mean ± sd over seeds per variant, the names
    commands take, then the paired differences from the reference with their 95% intervals
    (`toyrl.results.differences_heading`), without E[L | correct] when that does not fit `width`."""
    from toyrl.results import (
        DIFFERENCE_HEADER,
        command_names,
        difference_rows,
        differences_heading,
        seed_counts,
    )
    from toyrl.spread import over_seeds

    typer.echo(wrap(f"Final step ({steps}), exact expectations, {over_seeds(seed_counts(table))}:", width))
    typer.echo(format_summary(table, width=width))
    names = command_names(table)
    if names:
        typer.echo(wrap(names, width, hanging="    "))
    heading = differences_heading(table)
    if heading:
        typer.echo()
        typer.echo(wrap(heading, width))
    rows = [DIFFERENCE_HEADER, *difference_rows(table).values()]
    if len(rows) > 1:
        natural = sum(max(len(row[i]) for row in rows) + 2 for i in range(len(DIFFERENCE_HEADER))) - 2
        if width is not None and natural > width:  # E[L | correct], the last column, left out
            rows = [row[:-1] for row in rows]
        typer.echo(format_table(rows, width=width))


def _announce_cost(
    label: str, config: Config, variants: list[Any], seeds: int, mean_field: bool, workers: int
) -> None:
    """Say up front what a big job will take (over 20 s or 1 GB): a rough estimate, not a promise;
    with a token budget's layout, what it may take more at worst (`toyrl.train.layout_seconds`)."""
    from toyrl.experiment import estimated_cost
    from toyrl.train import layout_seconds

    simulation, writing, table = estimated_cost(config, variants, seeds, mean_field)
    spans = [layout_seconds(variant, config) for variant in variants] if not mean_field else []
    worse = seeds * (config.steps + 1) * sum(worst - best for best, worst in spans) / workers
    if simulation / workers + worse + writing > 20 or table > 1e9:
        more = f" (up to {worse:,.0f} s more, the token budget's layout at worst)" if worse >= 1 else ""
        typer.echo(
            wrap(
                f"{label}: {len(variants) * seeds:,} runs x {config.steps + 1:,} steps: roughly "
                f"{simulation / workers:,.0f} s on {_workers(workers)}{more}, "
                f"{writing:,.0f} s to write the CSV and {table / 1e6:,.0f} MB for the results table",
                output_width(),
                hanging="    ",
            ),
            err=True,
        )


ARTICLE_SEEDS = 6  # article, "Toy run": "6 seeds"


def _folder(path: Path, option: str) -> Path:
    """An output folder, made if missing (its parent must exist); InvalidInput if it cannot be used."""
    from toyrl.files import check_writable

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


def _render(
    frame: pd.DataFrame,
    meta: dict[str, Any] | None,
    folder: Path,
    progress: Progress,
    style: str = "paper",
    drawing: plots.Drawing | None = None,
) -> list[Path]:
    """Every figure (PNG and SVG) and the final-numbers table (markdown) into `folder`, drawn here
    (`toyrl.plot.save`) or with the workers of `drawing`, which has the teaching figures already
    (`toyrl.plot.save_drawn`)."""
    from toyrl.plot import save, save_drawn  # matplotlib is imported only by commands that draw

    if meta is not None:
        frame.attrs["toyrl"] = meta

    def warn(message: str) -> None:
        typer.echo(f"toyrl: warning: {message}", err=True)

    if drawing is None:
        return save(frame, folder, style=style, progress=progress, warn=warn)
    return save_drawn(frame, folder, drawing, style=style, progress=progress, warn=warn)


def _listing(label: str, paths: Sequence[Path], width: int | None) -> str:
    """'label a, b and c' wrapped to `width`, continuation lines indented."""
    names = [str(path) for path in paths]
    text = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1] if names else "nothing"
    return wrap(f"{label} {text}", width, hanging="    ")


@app.command(cls=Command, short_help="The article's toy run: its results, every figure, the page.")
def reproduce(
    results_dir: Annotated[
        Path, typer.Option(metavar="FOLDER", help="Folder for article.csv and article.json.")
    ] = Path("results"),
    figures_dir: Annotated[
        Path, typer.Option(metavar="FOLDER", help="Folder for the figures and final_numbers.md.")
    ] = Path("figures"),
    n_jobs: Annotated[
        int,
        typer.Option(
            metavar="J",
            help="Processes drawing the figures, this one included (at most the cores and the figures); "
            "-1, the default, uses every core. The workers start on the figures while the runs are "
            "simulated here; the same bytes whatever J.",
        ),
    ] = -1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace results in --results-dir made with other settings.")
    ] = False,
) -> None:
    """Reproduce the article's toy run: 4 variants x 6 seeds at the defaults, results and every figure."""
    from toyrl import plots
    from toyrl.experiment import check_n_jobs, worker_count
    from toyrl.files import check_output_path, claim
    from toyrl.results import check_overwrite, metadata, save_results
    from toyrl.variants import article_variants

    started = time.perf_counter()
    check_n_jobs(n_jobs)
    config, variants, seeds = Config(), article_variants(), list(range(ARTICLE_SEEDS))
    out = _folder(results_dir, "--results-dir") / "article.csv"
    check_output_path(out, "--results-dir")
    _folder(figures_dir, "--figures-dir")
    meta = metadata(config, variants, seeds, "toyrl reproduce")
    runs = len(variants) * len(seeds)
    # The 24 runs take well under a second here: workers would take longer to start. The figures'
    # workers start first (before any thread or claim of this process), on the teaching figures.
    figures = len(plots.TEACHING_FIGURE_NAMES) + len(plots.FIGURE_NAMES) + 2  # the 2 x 2 and the bias
    with (
        plots.drawing(worker_count(n_jobs, figures) - 1) as drawing,
        Progress("toyrl reproduce", quiet) as progress,
    ):
        drawing.add(plots.teaching_jobs())
        with claim(out, "results"), claim(figures_dir, "figures in"):
            check_overwrite(out, meta, force, "--results-dir")
            progress.begin(f"simulating {runs} runs", runs * (config.steps + 1))
            frame = run_experiment(config, variants, seeds, progress=progress.update)
            progress.end()
            frame, kept = save_results(frame, out, meta, progress=progress.saving(out))
            written = _render(frame, meta, figures_dir, progress, drawing=drawing)  # the teaching figures too
            progress.begin("writing the explorer page")
            explorer = figures_dir / "explorer.html"
            description = f"the article's toy run, {len(variants)} variants x {len(seeds)} seeds"
            _explorer(frame, config, description, explorer)
            written.append(explorer)
    if not quiet:
        width = output_width()
        typer.echo(
            wrap(
                f"toyrl reproduce: {len(variants)} variants x {len(seeds)} seeds x {config.steps} steps in "
                f"{duration(time.perf_counter() - started)}: "
                + step_times(
                    progress,
                    (f"simulating {runs} runs", "simulating"),
                    (f"comparing with {out.name}", "comparing with the saved results"),
                    (f"writing {out.name}", "writing the results"),
                    ("rendering the figures", "figures"),
                    ("replaying the runs for the bias figure", "replaying for the bias figure"),
                    ("writing the explorer page", "explorer page"),
                ),
                width,
                hanging="    ",
            ),
            err=True,
        )
        typer.echo(wrap(f"results: {saved_line(out, kept)}", width, hanging="    "))
        typer.echo(_listing("figures:", written, width))
        _final_tables(frame, config.steps, width)


@app.command(cls=Command, short_help="Redraw every figure from a results CSV.")
@with_plugins
def plot(
    results: Annotated[
        Path, typer.Argument(metavar="RESULTS.csv", help="A results CSV written by toyrl run or reproduce.")
    ],
    out: Annotated[
        Path, typer.Option(metavar="FOLDER", help="Folder for the figures (made if missing).")
    ] = Path("figures"),
    style: Annotated[
        str,
        typer.Option(
            metavar="paper|slides",
            help="paper: the committed figures; slides: 16:9, large type, for a projector.",
        ),
    ] = "paper",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
) -> None:
    """Render every figure from saved results, without re-running anything."""
    from toyrl.results import load_results

    styles = ("paper", "slides")
    if style not in styles:
        raise InvalidInput(f"--style must be {' or '.join(styles)} (got {style!r})")
    started = time.perf_counter()
    with Progress("toyrl plot", quiet) as progress:
        progress.begin(f"reading {results.name}")
        frame, meta = load_results(results)
        written = _render(frame, meta, _folder(out, "--out"), progress, style=style)
    if not quiet:
        width = output_width()
        steps = step_times(
            progress,
            ("rendering the figures", "figures"),
            ("replaying the runs for the bias figure", "replaying for the bias figure"),
        )
        took = duration(time.perf_counter() - started)
        typer.echo(wrap(f"toyrl plot: {len(written)} files in {took} ({steps})", width), err=True)
        typer.echo(_listing("wrote", written, width))


def _explorer(frame: pd.DataFrame, config: Config, description: str, out: Path) -> None:
    """The page with the results' mean curves; a note on stderr if some are not finite (drawn as gaps)."""
    from toyrl.explore import build_explorer, run_data
    from toyrl.files import write_atomic

    recorded = run_data(frame, config.cap, description)
    write_atomic(out, build_explorer(recorded, out))
    if "gaps" in recorded:
        where = ", ".join(f"{variant} from step {step}" for variant, step in recorded["gaps"].items())
        typer.echo(
            f"toyrl: note: some recorded means are not finite (a run diverged?): {where}; "
            "the page draws them as gaps",
            err=True,
        )


@app.command(cls=Command, short_help="Write the HTML page that trains the toy live.")
def explore(
    out: Annotated[Path, typer.Option(metavar="PATH.html", help="The HTML file to write.")] = Path(
        "explorer.html"
    ),
    results: Annotated[
        Path | None,
        typer.Option(
            metavar="CSV",
            help="A results CSV whose mean curves the page can overlay on its own runs (optional).",
        ),
    ] = None,
    open_page: Annotated[
        bool,
        typer.Option("--open", help="Open the page in the default browser once it is written."),
    ] = False,
) -> None:
    """Write one self-contained HTML page that trains the toy live: token weights, difficulty bias, runs."""
    from toyrl.files import write_atomic
    from toyrl.results import load_results

    if out.suffix != ".html":
        raise InvalidInput(f"--out must be a path ending in .html (got '{out}')")
    if not out.parent.is_dir():
        raise InvalidInput(f"--out: folder '{out.parent}' does not exist")
    if results is None:
        from toyrl.explore import build_explorer

        write_atomic(out, build_explorer(out=out))
    else:
        frame, meta = load_results(results)
        config = _sidecar_config(meta) or Config()
        description = (
            f"{results.name}, {frame['variant'].nunique()} variants x {frame['seed'].nunique()} seeds"
        )
        _explorer(frame, config, description, out)
    written = out.resolve()
    typer.echo(f"wrote {written}; open it in a browser (no network needed): {written.as_uri()}")
    if open_page:
        import webbrowser

        if not webbrowser.open(written.as_uri()):
            typer.echo(f"toyrl: no browser found to open it; open {written.as_uri()} in one", err=True)


BIAS_COLUMNS = [  # (header, key of toyrl.bias.bias_report)
    ("variant", "variant"),
    ("cosine", "cosine"),
    ("norm ratio", "norm_ratio"),
    ("psi cosine", "psi_cosine"),
    ("E[g] phi_right", "phi_right"),
    ("grad J phi_right", "true_phi_right"),
    ("E[g] phi_wrong", "phi_wrong"),
    ("phi_wrong cosine", "phi_wrong_cosine"),
    ("phi_wrong share", "phi_wrong_share"),
]


@app.command(cls=Command, short_help="Each variant's exact E[g] against the true gradient.")
@with_plugins
def bias(
    variant: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME|SPEC", help="Variant, repeatable, or all (default: all, or those in --results)."
        ),
    ] = None,
    results: Annotated[
        Path | None,
        typer.Option(
            metavar="CSV", help="A results CSV; its runs are replayed to recover the policy at --step."
        ),
    ] = None,
    step: Annotated[
        int | None, typer.Option(metavar="T", help="Step of the runs in --results (default: their last).")
    ] = None,
    seed: Annotated[
        int, typer.Option(metavar="S", help="Without --results: the seed of the initial policy.")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Each variant's exact expected update E[g] against the true gradient of expected accuracy,
    then what the numbers say in words."""
    import numpy as np

    from toyrl.bias import bias_report, replay_states, verdict
    from toyrl.results import load_results, sidecar_path
    from toyrl.train import initial_theta, run_streams
    from toyrl.variants import display_name, parse_variants, saved_variant

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
        at_step = None
    else:
        import pandas as pd

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
        recorded = meta.get("variants") if meta else None  # a labelled variant's spec is there
        runs = [
            (saved_variant(name, recorded), int(s))
            for name in names
            for s in sorted(frame.loc[frame["variant"] == name, "seed"].unique())
        ]
        mean_field = bool(meta.get("mean_field", False)) if meta else False
        with Progress("toyrl bias", quiet=as_json) as progress:
            progress.begin(f"replaying {len(runs):,} runs to step {chosen:,}")
            states = replay_states(config, runs, [chosen], check=frame, mean_field=mean_field)[:, 0]
        per_run = pd.DataFrame(bias_report(states, config, [v for v, _ in runs]))
        means = per_run.groupby("variant", sort=False).mean(numeric_only=True).reset_index()
        rows = [{str(key): value for key, value in row.items()} for row in means.to_dict("records")]
        where = f"step {chosen} of {results}, mean over {len(runs) // len(names)} seeds"
        at_step = chosen
    words = verdict(rows, at_step)
    if as_json:
        typer.echo(json_text({"policy": where, "variants": rows, "verdict": words}))
        return
    width = output_width()
    typer.echo(wrap(f"E[g] against grad J at {where}:", width, hanging="    "))
    header = [title for title, _ in BIAS_COLUMNS]
    body = [[number(row[key]) for _, key in BIAS_COLUMNS] for row in rows]
    for cells in body:  # the variant as people read it (`toyrl variants` maps it to the name to type)
        cells[0] = display_name(cells[0])
    typer.echo(format_table([header, *body], width=width))
    typer.echo(
        wrap(
            "grad J's phi_wrong component is 0: a wrong approach earns nothing at any length. phi_wrong "
            "cosine: E[g]'s cosine with that axis (negative: lengthens wrong answers); share: its part of "
            "|E[g]|^2. Values within 1e-15 of zero print as 0.",
            width,
        )
    )
    typer.echo()
    typer.echo(wrap(words, width))


@app.command(cls=Command, short_help="Variants x configuration grid x seeds, resumable.")
@with_plugins
@with_config_options
def sweep(
    config: Config,
    out_dir: Annotated[
        Path,
        typer.Option(metavar="FOLDER", help="The sweep's folder (made if missing; its parent must exist)."),
    ],
    variant: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME|SPEC",
            help="Variant axis, repeatable: names, presets or key=value specs (default: the four).",
        ),
    ] = None,
    grid: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=V1,V2,...",
            help="An axis, repeatable: a configuration field (group_size=4,8,16,64) or a stage "
            "parameter, by its spec key or as KIND.PARAM (alpha=0,0.5,1; advantage.std_eps=1e-6,1e-4).",
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(metavar="N", help="Seeds per grid point (>= 1).")] = 3,
    seed_start: Annotated[int, typer.Option(metavar="S", help="First seed (>= 0).")] = 0,
    n_jobs: Annotated[
        int,
        typer.Option(
            metavar="J", help="Workers (at most the cores and the chunks of runs); -1 uses every core."
        ),
    ] = 1,
    backend: Annotated[
        str,
        typer.Option(
            metavar="loky|dask",
            help="loky (joblib's processes) or dask (a Dask cluster; the optional extra dask: "
            "pip install -e '.[dask]' in toyrl's checkout).",
        ),
    ] = "loky",
    scheduler: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS", help="With --backend dask: a scheduler address (default: a local cluster)."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace the sweep in --out-dir (instead of growing it) if it is a different one."
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
) -> None:
    """Run every variant x grid point x seed; resumable (run it again to finish a stopped sweep) and
    growable (add seeds, variants or grid values: only the new runs run)."""
    from toyrl.sweep import final_table, parse_grid, run_sweep, unchanged
    from toyrl.variants import parse_variants

    chosen = parse_variants(variant or ["all"])
    axes = parse_grid(grid or [], config, chosen)
    check_seeds(seeds, seed_start)  # the worker count, backend and folder are checked by run_sweep
    width = output_width()
    counts: dict[str, int] = {}  # runs in the sweep, and done before this command
    if not quiet:
        for key, names in unchanged(axes, chosen).items():
            kept = ", ".join(names)
            note = f"toyrl sweep: --grid {key} leaves {kept} unchanged (no stage of theirs has it)"
            typer.echo(wrap(note, width), err=True)

    with Progress("toyrl sweep", quiet) as progress:

        def report(done: int, total: int, just_finished: int) -> None:
            if not counts:  # the first call, before any run: what is done, what is left
                counts.update(total=total, before=done)
                if not quiet:
                    typer.echo(
                        wrap(f"toyrl sweep: {done:,} runs reused, {total - done:,} to run", width), err=True
                    )
                progress.begin("running", total, "runs")
            progress.update(done, total, base=counts["before"])

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
            progress=report,
        )
        progress.begin("rendering the sweep figure")
        from toyrl.plots import plot_sweep, save_figures

        keys = table.attrs["grid"]  # the grown sweep's axes: those given, and the folder's others
        save_figures({"sweep": plot_sweep(table, keys)}, out_dir)
    if not quiet:
        reused = counts.get("before", 0)
        ran = f"{reused:,} runs reused, {counts.get('total', 0) - reused:,} run"
        took = duration(progress.took.get("running", 0.0))
        figure = duration(progress.took["rendering the sweep figure"])
        typer.echo(wrap(f"toyrl sweep: {ran} in {took}; drew the figure in {figure}", width), err=True)
        heading, rows = final_table(table, keys)
        typer.echo(wrap(heading, width))
        typer.echo(format_table(rows, width=width))
        typer.echo(  # last, as `toyrl run`'s
            _listing("wrote", [out_dir / "results.csv", out_dir / "final.csv", out_dir / "sweep.png"], width)
        )


def _kind_name(kind: str) -> str:
    return "aggregation" if kind == "normaliser" else kind


@app.command(cls=Command, short_help="List the named variants and every stage.")
@with_plugins
def variants(
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
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
                "label": v.title,
                "spec": v.spec(),
                "summary": v.summary,
                "stands_for": v.stands_for,
                "simulated_only": exact_support(v),
            }
            for v in VARIANTS.values()
        ]
        typer.echo(json_text(rows))
        return
    width = output_width()
    for v in VARIANTS.values():
        typer.echo(f"{v.name}  ({v.label})" if v.label else v.name)  # what commands take, what people read
        typer.echo(wrap_list(v.spec_text(), width, indent="    ", hanging="        "))
        typer.echo(wrap(v.stands_for or v.summary, width, indent="    "))
    typer.echo("")
    typer.echo(wrap("stages (* simulated only: no exact expected update):", width))
    for kind, stages in REGISTRY.items():
        names = [name + ("*" if simulated_only(stage) else "") for name, stage in stages.items()]
        label = f"  {_kind_name(kind)}: "
        typer.echo(wrap(label + ", ".join(names), width, hanging=" " * len(label)))
    for plugin in LOADED.values():
        given = ", ".join(f"{_kind_name(kind)}={name}" for kind, name in plugin.stages)
        typer.echo(
            wrap(
                f"  plugin {plugin.path} ({plugin.name} {plugin.version}, "
                f"sha256 {plugin.sha256[:12]}): {given}",
                width,
                hanging="      ",
            )
        )
    typer.echo(wrap(f"spell any combination as --variant key=value,... over {', '.join(spec_keys())}", width))
    typer.echo("read from:")
    for source in SOURCES.values():
        typer.echo(wrap(source, width, indent="  - ", hanging="    "))


@app.command(cls=Command, short_help="What a trainer's settings do to length, beside Dr. GRPO.")
@with_config_options
def check(
    config: Config,
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="CONFIG | -- COMMAND",
            help="A trainer's configuration file (.json, .yaml/.yml, .toml; nested keys joined with dots, "
            "${...} interpolations resolved, the files it inherits read), a launch script (.sh: verl's "
            "python3 -m verl.trainer.main_ppo key=value ..., TRL's trl grpo or accelerate launch "
            "script.py --flag value ..., OpenRLHF's, ms-swift's swift rlhf, and the other trainers' "
            "launch lines (docs/trainers.md); read with bash's grammar, never run), Python source or a "
            "notebook holding a GRPOConfig(...) call (.py, .ipynb; read, never imported); or, after --, "
            "a launch command line. The optional extra check (pip install -e '.[check]' in toyrl's "
            "checkout) brings the readers.",
            show_default=False,
        ),
    ] = None,
    trainer: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Whose settings these are: trl, verl, openrlhf, oat, ms-swift, unsloth, skyrl, areal, "
            "nemo-rl, roll, slime, prime-rl or easyr1 (default: told from the input, when it fits one "
            "trainer only).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="A setting, repeatable; over the file's, e.g. loss_type=dr_grpo.",
        ),
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(metavar="RELEASE", help="The trainer's release (default: the newest modelled)."),
    ] = None,
    seeds: Annotated[int, typer.Option(metavar="N", help="Seeds for each of the two variants (>= 2).")] = 6,
    n_jobs: Annotated[int, typer.Option(metavar="J", help=N_JOBS_HELP)] = 1,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
    bridge: Annotated[
        bool,
        typer.Option(
            "--bridge",
            help="Then train the same TRL settings and TRL's Dr. GRPO as a tiny network with TRL's own "
            "GRPOTrainer (toyrl bridge --quick), and compare the real gap's sign with the verdict's.",
        ),
    ] = False,
) -> None:
    """What a trainer's own settings do to response length: the toy run beside Dr. GRPO.

    Exit status 0: checked; 1: checked, but keys of the file look misspelt, or a script leaves
    settings to when it runs (the check took the defaults in their place); 2: input refused."""
    from toyrl.trainers import parse_sets
    from toyrl.trainers.check import as_json as check_json
    from toyrl.trainers.check import report, resolve_input, run_check

    if not 2 <= seeds <= 10_000:
        raise ConfigError("seeds", "must be an integer in 2..10,000 (a standard error needs two)", seeds)
    sets = parse_sets(set_ or [])
    if bridge:  # refused before the toy's check runs: another trainer, or no bridge extra
        from toyrl.cli.bridge import bridge_input

        bridged = bridge_input(arguments or [], sets, trainer, version)
    resolved = resolve_input(arguments or [], trainer, sets, version)
    seed_list = list(range(seeds))
    with Progress("toyrl check", quiet or as_json) as progress:
        progress.begin("simulating")
        result = run_check(resolved, config, seed_list, n_jobs, progress=progress.update)
    data = check_json(result) if as_json else None
    if not as_json:
        echo_lines(report(result), output_width())
    if bridge:
        from toyrl.cli.bridge import check_bridge

        found = check_bridge(result, bridged, quiet or as_json)
        if data is not None:
            data["bridge"] = found
    if data is not None:
        typer.echo(json_text(data))
    if resolved.misspelt or resolved.unknown:
        raise typer.Exit(1)


@app.command(cls=Command, short_help="The source documents' worked examples, computed.")
def examples(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME", help="One example: length, difficulty, four or baseline (default all)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Print the source documents' worked examples, computed by the package's variant code."""
    from toyrl.examples import EXAMPLES

    if name is not None and name not in EXAMPLES:
        raise InvalidInput(f"unknown example {name!r}; valid: {', '.join(EXAMPLES)}")
    chosen = [EXAMPLES[key]() for key in ([name] if name else EXAMPLES)]
    if as_json:
        typer.echo(json_text([example.to_dict() for example in chosen]))
        return
    width = output_width()
    for example in chosen:
        rows = [example.columns, *[[number(value) for value in row] for row in example.rows]]
        typer.echo("")
        typer.echo(wrap(example.title, width, hanging="  "))
        typer.echo(wrap(f"({example.source})", width, indent="  ", hanging="   "))
        typer.echo("")
        typer.echo(format_table(rows, indent="  ", left_first=False, width=width))
        typer.echo("")
        for conclusion in example.conclusions:
            typer.echo(wrap(conclusion, width, indent="  - ", hanging="    "))
