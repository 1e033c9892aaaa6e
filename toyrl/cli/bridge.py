"""`toyrl bridge`: TRL's own GRPOTrainer training a tiny network on the toy task, beside the toy,
and `toyrl check --bridge`'s part of it. Needs the bridge extra (torch, transformers, TRL); the
settings and the budget are checked before anything is imported."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toyrl.cli.options import QUIET_HELP, Command
from toyrl.cli.shared import app, json_text, saved_line
from toyrl.cli.terminal import echo_lines, format_table, output_width, wrap
from toyrl.config import Config, InvalidInput
from toyrl.progress import Progress

if TYPE_CHECKING:
    from toyrl.bridge import Bridge


def bridge_report(bridge: Bridge, seconds: float, width: int | None) -> list[str]:
    """What `toyrl bridge` prints: the settings, the fits, the last step's table and the summary."""
    from toyrl.bridge import MODEL_SHAPE, TRL_VERSION, WINDOW, level, settings_text

    config, frame = bridge.config, bridge.frame
    step = int(frame["step"].max())
    lines = [
        f"TRL {TRL_VERSION}'s GRPOTrainer on a tiny Llama ({MODEL_SHAPE['num_hidden_layers']} layers of "
        f"{MODEL_SHAPE['hidden_size']}) beside the exact toy: cap {config.cap}, min_length "
        f"{config.min_length}, "
        f"{config.batch_prompts} prompts x {config.group_size} completions, {config.steps} steps, "
        f"seed{'s' if len(bridge.seeds) > 1 else ''} {', '.join(map(str, bridge.seeds))}; network lr "
        f"{bridge.learning_rate:g}, toy lr {config.lr:g} (not matched)",
    ]
    for label, settings in bridge.settings.items():
        lines.append(f"{label}: {settings_text(settings)} (toy variant {bridge.variants[label]})")
    for seed, fit in bridge.fits.items():
        lines.append(
            f"seed {seed}: network fitted to the toy's start"
            + (" (cached)" if fit.cached else f" in {fit.steps} steps, {fit.cpu_seconds:.0f} CPU-s")
            + f": accuracy {fit.model_metrics['accuracy']:.3f} (toy {fit.toy_metrics['accuracy']:.3f}), "
            f"incorrect length {fit.model_metrics['length_incorrect']:.1f} "
            f"(toy {fit.toy_metrics['length_incorrect']:.1f})"
        )
    rows = [["", "", "accuracy", "L correct", "L incorrect", "truncated"]]
    shown = {
        "accuracy": "{:.3f}",
        "length_correct": "{:.1f}",
        "length_incorrect": "{:.1f}",
        "truncated": "{:.1%}",
    }
    for label in bridge.settings:
        for source in ("network", "toy"):
            rows.append(
                [
                    label,
                    source,
                    *(form.format(level(frame, label, source, m, step)) for m, form in shown.items()),
                ]
            )
    lines += [
        "",
        f"at step {step}, mean of the last {WINDOW} steps and the seeds:",
        format_table(rows, width=width),
    ]
    lines += ["", *bridge.summary()]
    lines.append(f"training took {seconds:,.0f} CPU-s (the fits apart)")
    return lines


def run_bridge_command(
    labels: dict[str, dict[str, Any]],
    config: Config,
    seeds: list[int],
    cache_dir: Path | None,
    learning_rate: float,
    quiet: bool,
    label: str = "toyrl bridge",
) -> Bridge:
    """The bridge of `labels` (`toyrl.bridge.labelled`) with progress on stderr."""
    from toyrl.bridge import REFERENCE, run_bridge

    with Progress(label, quiet) as progress:
        progress.begin("fitting and training", None, "steps")
        return run_bridge(
            labels, config, seeds, REFERENCE, cache_dir, learning_rate, progress=progress.update
        )


def bridge_input(
    arguments: list[str],
    sets: dict[str, Any],
    trainer: str | None,
    version: str | None,
    config: Config | None = None,
    seeds: int | None = None,
    quick: bool = True,
) -> Any:
    """The settings the bridge trains (`toyrl.bridge.read_input`) at `config` (default the bridge's
    quick preset's) on `seeds` seeds, checked against the budget (`check_budget`, the quick one with
    `quick`), refused (one line) unless they are TRL's, or without the bridge extra. `toyrl bridge`'s,
    and `toyrl check --bridge`'s before the toy's check runs."""
    from toyrl import bridge as bridging

    if config is None:
        config = bridging.BRIDGE_CONFIG.replace(steps=bridging.QUICK_STEPS)
    read = bridging.read_input(arguments, sets, config, trainer, version)
    bridging.check_budget(read.config, list(range(bridging.QUICK_SEEDS if seeds is None else seeds)), quick)
    bridging.require()
    return read


@app.command(cls=Command, short_help="The toy task trained by TRL's own GRPOTrainer, beside the toy.")
def bridge(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="CONFIG",
            help="A TRL configuration file (.json, .yaml/.yml), as toyrl check reads it; its batch and "
            "completion sizes are replaced by the bridge's.",
            show_default=False,
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="A TRL setting, repeatable, e.g. loss_type=grpo."),
    ] = None,
    trainer: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Whose settings: trl (the only trainer the bridge runs)."),
    ] = None,
    version: Annotated[
        str | None, typer.Option(metavar="RELEASE", help="TRL's release: 1.16.0 (the only one).")
    ] = None,
    quick: Annotated[
        bool,
        typer.Option("--quick", help="One seed of 32 steps at cap <= 64 and <= 128 completions a step."),
    ] = False,
    seeds: Annotated[int | None, typer.Option(metavar="N", help="Seeds 0..N-1 (default 3).")] = None,
    steps: Annotated[int | None, typer.Option(metavar="N", help="Optimiser steps (default 150).")] = None,
    cap: Annotated[
        int, typer.Option(metavar="INTEGER", help="Max ramble tokens (cap + 1 completion tokens).")
    ] = 64,
    min_length: Annotated[int, typer.Option(metavar="INTEGER", help="Shortest correct ramble.")] = 4,
    stop_prob_right: Annotated[
        float, typer.Option(metavar="NUMBER", help="Starting stop probability after `right`.")
    ] = 5 / 64,
    stop_prob_wrong: Annotated[
        float, typer.Option(metavar="NUMBER", help="Starting stop probability after `wrong`.")
    ] = 2.14 / 64,
    batch_prompts: Annotated[int, typer.Option(metavar="INTEGER", help="Prompts a step (B).")] = 16,
    group_size: Annotated[int, typer.Option(metavar="INTEGER", help="Completions a prompt (G).")] = 8,
    lr: Annotated[
        float, typer.Option(metavar="NUMBER", help="The network's learning rate (Adam, constant).")
    ] = 3e-5,
    out: Annotated[
        Path, typer.Option(metavar="PATH.csv", help="The per-step table; its settings go beside it as .json.")
    ] = Path("toyrl-bridge.csv"),
    figure: Annotated[
        Path | None, typer.Option(metavar="PATH.png", help="The figure (default: --out's name as .png).")
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(metavar="FOLDER", help="Fitted starting networks (default: the user's cache folder)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace results at --out made with other settings.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The summary as JSON on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
) -> None:
    """Train the toy task as a tiny network with TRL's own GRPOTrainer, the settings and TRL's Dr. GRPO,
    beside the toy's exact curves at the same configuration.

    The network is fitted first to the toy's starting policy of each seed (cached). Writes the
    per-step table (network and toy) with its settings, and a figure. Needs the optional extra
    bridge, with torch's CPU build first (pip install -e ".[bridge]" in toyrl's checkout)."""
    from toyrl import bridge as bridging
    from toyrl.files import check_output_path, claim
    from toyrl.results import check_overwrite, save_results
    from toyrl.trainers import parse_sets

    config = bridging.BRIDGE_CONFIG.replace(
        cap=cap,
        min_length=min_length,
        stop_prob_right=stop_prob_right,
        stop_prob_wrong=stop_prob_wrong,
        batch_prompts=batch_prompts,
        group_size=group_size,
    )
    if quick and (seeds is not None or steps is not None):
        raise InvalidInput(
            f"--quick runs {bridging.QUICK_SEEDS} seed x {bridging.QUICK_STEPS} steps; drop --quick to "
            "choose --seeds and --steps"
        )
    if seeds is not None and not 1 <= seeds <= bridging.MAX_SEEDS:
        raise InvalidInput(f"--seeds must be in 1..{bridging.MAX_SEEDS} (got {seeds})")
    if steps is not None and not 1 <= steps <= bridging.MAX_STEPS:
        raise InvalidInput(f"--steps must be in 1..{bridging.MAX_STEPS:,} (got {steps})")
    if not lr > 0 or lr > 1:
        raise InvalidInput(f"--lr must be in (0, 1] (got {lr:g})")
    check_output_path(out)
    figure = figure or out.with_suffix(".png")
    if figure.suffix not in (".png", ".pdf", ".svg"):
        raise InvalidInput(f"--figure must end in .png, .pdf or .svg (got '{figure}')")
    count = bridging.QUICK_SEEDS if quick else (seeds or bridging.FULL_SEEDS)
    config = config.replace(
        steps=bridging.QUICK_STEPS if quick else (bridging.BRIDGE_CONFIG.steps if steps is None else steps)
    )
    read = bridge_input(arguments or [], parse_sets(set_ or []), trainer, version, config, count, quick)
    seed_list = list(range(count))
    labels = bridging.labelled(read.settings, read.config)
    width = output_width()
    if not (quiet or as_json):
        for note in read.notes:
            typer.echo(wrap(f"toyrl bridge: {note}", width, hanging="    "), err=True)
    with claim(out, "results"):
        # results of other settings at --out are refused before the training, not after
        check_overwrite(out, bridging.sidecar_settings(labels, read.config, seed_list), force)
        result = run_bridge_command(labels, read.config, seed_list, cache_dir, lr, quiet or as_json)
        _, kept = save_results(result.frame, out, result.meta())
        from toyrl.plots import plot_bridge, save_figure

        save_figure(
            plot_bridge(
                result.frame, result.reference, bridging.WINDOW, names=bridging.legend_names(result.settings)
            ),
            figure,
        )
    seconds = sum(result.cpu_seconds.values())
    if as_json:
        typer.echo(json_text(bridging.summary_json(result)))
        return
    echo_lines(bridge_report(result, seconds, width), width)
    typer.echo(wrap(saved_line(out, kept) + f"; {figure}", width, hanging="    "))


def check_bridge(check: Any, read: Any, quiet: bool) -> dict[str, Any]:
    """After `toyrl check`'s verdict: the bridge's quick run of the same settings, its gap beside the
    toy's at the bridge's scale, and whether its sign is the verdict's. Prints unless `quiet`
    (--json: the returned dict goes into the check's JSON)."""
    from toyrl import bridge as bridging

    width = output_width()
    result = run_bridge_command(
        bridging.labelled(read.settings, read.config),
        read.config,
        list(range(bridging.QUICK_SEEDS)),
        None,
        bridging.LEARNING_RATE,
        quiet,
        "toyrl check --bridge",
    )
    data = bridging.summary_json(result)
    direction = check.direction
    data["check_direction"] = direction
    config = read.config
    head = (
        f"bridge: TRL {bridging.TRL_VERSION}'s GRPOTrainer on a tiny network (toyrl bridge --quick: "
        f"{bridging.QUICK_SEEDS} seed x {config.steps} steps, cap {config.cap}, "
        f"{config.batch_prompts} x {config.group_size} completions a step), beside the toy at the same scale"
    )
    lines = ["", head]
    lines += [f"  {note}" for note in read.notes]
    if not data["gaps"]:
        data["sign_agrees"] = direction == 0
        lines.append(
            "  these settings are Dr. GRPO's in TRL: the bridge trained them alone, with no gap to compare"
        )
    else:
        label = next(iter(data["gaps"]))
        found = result.gap(label)
        real = found.network.sign
        data["sign_agrees"] = real == direction
        words = {1: "longer wrong answers", -1: "shorter wrong answers", 0: "no drift beyond its margins"}
        lines.append(
            f"  incorrect length, {label} - {bridging.REFERENCE}, at step {config.steps} (mean of the last "
            f"{bridging.WINDOW} steps, {found.network.se_words}): network {found.network.shown} tokens, toy "
            f"{found.toy.shown}; "
            f"the check's verdict above: {words[direction]}"
        )
        real_words = {1: "longer", -1: "shorter", 0: "within 3 SE of Dr. GRPO's"}[real]
        lines.append(
            f"  the network's wrong answers are {real_words}: "
            + ("the verdict's sign" if data["sign_agrees"] else "not the verdict's sign")
            + (
                " (a quick run; toyrl bridge with more --steps and --seeds says more)"
                if not data["sign_agrees"]
                else ""
            )
        )
    if not quiet:
        echo_lines(lines, width)
    return data
