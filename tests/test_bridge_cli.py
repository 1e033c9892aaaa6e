"""`toyrl bridge` and `toyrl check --bridge` without the bridge extra: what is refused, in one line,
before anything runs or is written; how the settings are read; the gaps, verdicts and summary
from a bridge's table; its figure. (The runs themselves: tests/conformance/test_trl_bridge.py, in
TRL's environment.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from toyrl import bridge
from toyrl.bridge import BRIDGE_CONFIG, FRAME_COLUMNS, WINDOW
from toyrl.cli import app
from toyrl.config import InvalidInput

REFUSED = [
    (["bridge", "--trainer", "verl"], "the bridge trains with TRL 1.16.0's GRPOTrainer only"),
    (["bridge", "--version", "0.22.1"], "the bridge runs TRL 1.16.0 only"),
    (["bridge", "--set", "los_type=grpo"], "did you mean 'loss_type'?"),
    (["bridge", "--set", "loss_type=nope"], "loss_type"),
    (["bridge", "--set", "num_iterations=2"], "--set num_iterations: the bridge sets"),
    (["bridge", "--set", "max_completion_length=65"], "use --cap, --batch-prompts and --group-size"),
    (["bridge", "--quick", "--cap", "128"], "at most 64 for --quick"),
    (["bridge", "--cap", "300"], "at most 256"),
    (["bridge", "--cap", "4"], "above min_length (4)"),
    (["bridge", "--quick", "--batch-prompts", "32"], "too many for --quick (at most 128)"),
    (["bridge", "--quick", "--steps", "10"], "--quick runs 1 seed x 32 steps"),
    (["bridge", "--steps", "0"], "--steps must be in 1..2,000 (got 0)"),
    (["bridge", "--seeds", "0"], "--seeds must be in 1..20"),
    (["bridge", "--seeds", "21"], "--seeds must be in 1..20"),
    (["bridge", "--lr", "0"], "--lr must be in (0, 1]"),
    (["bridge", "--lr", "nan"], "--lr must be in (0, 1]"),
    (["bridge", "--out", "{tmp}/x.txt"], "--out must be a path ending in .csv"),
    (["bridge", "--figure", "{tmp}/x.gif"], "--figure must end in .png, .pdf or .svg"),
    (["bridge", "{verl}"], "holds verl's settings: the bridge trains with TRL 1.16.0 only"),
    (["bridge", "--set", "num_generations=1"], "num_generations=1 is not valid"),
    (["check", "--trainer", "verl", "--bridge"], "the bridge trains with TRL 1.16.0's GRPOTrainer only"),
    (["check", "{verl}", "--bridge"], "holds verl's settings"),
    (["check", "--trainer", "trl", "--version", "0.22.1", "--bridge"], "the bridge runs TRL 1.16.0 only"),
    # valid input, no bridge extra: the install command, before the toy's check runs
    (
        ["bridge", "--quick", "--out", "{tmp}/q.csv"],
        "[bridge]'",
    ),  # this checkout's extra, never the index's toyrl
    (["bridge", "--set", "loss_type=grpo", "--out", "{tmp}/q.csv"], "download.pytorch.org/whl/cpu"),
    (
        ["check", "--trainer", "trl", "--set", "loss_type=dapo", "--bridge"],
        "[bridge]'",
    ),  # this checkout's extra, never the index's toyrl
]


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    verl = tmp_path / "ppo.yaml"
    verl.write_text(
        "algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  actor:\n    loss_agg_mode: token-mean\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "q.csv").write_text("kept\n")  # results already there are neither replaced nor touched
    return {"tmp": str(work), "verl": str(verl)}


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a)[:50] for a, _ in REFUSED])
def test_refused_in_one_line_before_anything_runs(
    args: list[str], message: str, places: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "trl", None)  # the bridge extra is missing, whatever is installed
    monkeypatch.chdir(places["tmp"])
    before = {path: path.stat().st_mtime_ns for path in Path(places["tmp"]).rglob("*")}
    result = CliRunner().invoke(app, [arg.format(**places) for arg in args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # check --bridge: refused before its report
    assert result.stderr.startswith("toyrl: error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    after = {path: path.stat().st_mtime_ns for path in Path(places["tmp"]).rglob("*")}
    assert after == before
    assert (Path(places["tmp"]) / "q.csv").read_text() == "kept\n"


def test_a_trl_file_is_read_with_the_bridges_schedule(tmp_path: Path) -> None:
    """A real TRL file sets batch sizes and lengths: the bridge replaces those (noted), takes
    num_generations as G, and leaves out what toyrl does not read."""
    path = tmp_path / "grpo.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\noutput_dir: out\nloss_type: grpo\nscale_rewards: group\n"
        "num_generations: 4\nper_device_train_batch_size: 8\ngradient_accumulation_steps: 4\n"
        "max_completion_length: 1024\nlearning_rate: 1.0e-6\nbeta: 0.04\n"
    )
    read = bridge.read_input([str(path)], {"epsilon": "0.3"})
    assert read.settings == {"loss_type": "grpo", "scale_rewards": "group", "beta": 0.04, "epsilon": "0.3"}
    assert read.config.group_size == 4 and read.config.cap == BRIDGE_CONFIG.cap
    replaced = [note.split("=")[0] for note in read.notes if "replaced by the bridge's" in note]
    assert replaced == ["per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length"]
    left_out = {note.split(" ")[0] for note in read.notes if "left out" in note}
    assert {"model_name_or_path", "output_dir", "learning_rate"} <= left_out
    assert bridge.read_input([], {}).settings == {}  # nothing given: TRL's defaults
    assert bridge.read_input([], {}).origin == "TRL's defaults"


def test_the_reference_is_trls_dr_grpo_beside_the_settings() -> None:
    assert bridge.reference_settings({"loss_type": "grpo", "scale_rewards": "group"}) == {
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
    }
    assert bridge.reference_settings({})["loss_type"] == "dr_grpo"  # TRL's default dapo
    kept = bridge.reference_settings({"loss_type": "grpo", "beta": 0.04})
    assert kept["beta"] == 0.04 and kept["loss_type"] == "dr_grpo"
    assert bridge.toy_variant_for(kept).spec() != bridge.toy_variant_for({"beta": 0.04}).spec()


def synthetic(
    seeds: list[int], steps: int, network_gap: float, toy_gap: float, noise: float, shared: bool = False
) -> pd.DataFrame:
    """A bridge table whose label `a` has incorrect lengths rising to `gap` above the reference's at
    the last step, plus the network's normal noise: independent per row, or `shared` by the two
    labels (then their gap has none)."""
    rows = []
    for label, base in (("a", 1.0), ("dr_grpo", 0.0)):
        rng = np.random.default_rng(5 if shared else int(base))
        for source, gap in (("network", network_gap), ("toy", toy_gap)):
            for seed in seeds:
                for step in range(steps + 1):
                    length = (
                        20 + base * gap * step / steps + (rng.normal(0, noise) if source == "network" else 0)
                    )
                    rows.append(
                        {
                            "label": label,
                            "source": source,
                            "seed": seed,
                            "step": step,
                            "accuracy": 0.3 + step / 1000,
                            "length_mean": length,
                            "length_correct": 15.0,
                            "length_incorrect": length,
                            "truncated": 0.1,
                            "off_ramble": 0.0,
                            "loss": 0.0,
                            "grad_norm": 1.0,
                            "clipped": False,
                        }
                    )
    return pd.DataFrame(rows)[FRAME_COLUMNS]


def test_gap_means_and_standard_errors_by_hand() -> None:
    frame = synthetic([0, 1, 2], 30, 12.0, 10.0, 2.0)
    found = bridge.gap(frame, "a", "dr_grpo", step=30)
    for source, part in (("network", found.network), ("toy", found.toy)):
        per_seed = []
        for seed in (0, 1, 2):

            def window(label: str, seed: int = seed, source: str = source) -> np.ndarray:
                rows = frame[(frame.label == label) & (frame.source == source) & (frame.seed == seed)]
                return rows[rows.step > 30 - WINDOW]["length_incorrect"].to_numpy()

            per_seed.append(np.mean(window("a") - window("dr_grpo")))
        assert part.per_seed.tolist() == pytest.approx(per_seed, rel=1e-12)
        assert part.mean == pytest.approx(np.mean(per_seed), rel=1e-12)
        assert part.se == pytest.approx(np.std(per_seed, ddof=1) / np.sqrt(3), rel=1e-12)
        assert part.over == "seeds"
    # the toy's gaps at steps 21..30 are 12 x step / 30 of 12... here 10 x step / 30: mean 8.5
    assert found.toy.mean == pytest.approx(10 * np.mean(np.arange(21, 31)) / 30)
    one = bridge.gap(frame[frame.seed == 0], "a", "dr_grpo", step=30)
    assert one.network.over == "steps" and len(one.network.per_seed) == 1


@pytest.mark.parametrize(
    ("network_gap", "toy_gap", "verdict"),
    [
        (12.0, 10.0, "transfers"),
        (-12.0, 10.0, "reversed"),
        (0.0, 10.0, "not shown"),
        (12.0, 0.0, "network only"),
        (0.0, 0.0, "absent"),
    ],
)
def test_verdicts(network_gap: float, toy_gap: float, verdict: str) -> None:
    frame = synthetic([0, 1, 2], 40, network_gap, toy_gap, 0.5, shared=True)
    assert bridge.gap(frame, "a", "dr_grpo").verdict == verdict


def summary_bridge(frame: pd.DataFrame) -> bridge.Bridge:
    fit = bridge.Fit(0.001, 0.001, 0.001, 0, 0.0, True, {"accuracy": 0.2}, {"accuracy": 0.2})
    return bridge.Bridge(
        frame,
        {"a": {"loss_type": "grpo"}, "dr_grpo": {"loss_type": "dr_grpo"}},
        {"a": "trl_grpo", "dr_grpo": "dr_grpo"},
        {},
        {0: fit},
        {},
        BRIDGE_CONFIG,
        sorted(set(frame.seed)),
        3e-5,
    )


def test_summary_words_follow_the_numbers() -> None:
    lines = summary_bridge(synthetic([0, 1, 2], 40, 12.0, 10.0, 0.5)).summary()
    assert lines[0].startswith(
        "incorrect length, a - dr_grpo, at step 40 (mean of the last 10 steps, ± SE over 3 seeds)"
    )
    assert "the drift transfers" in lines[0]
    assert lines[1].startswith("accuracy of a: network 0.30 -> 0.34, toy 0.30 -> 0.34")
    assert lines[1].endswith("matches the toy (within 3 SE)")  # the same accuracies: no difference
    reversed_lines = summary_bridge(synthetic([0], 40, -12.0, 10.0, 0.5)).summary()
    assert "± SE over the last 10 steps" in reversed_lines[0] and "is reversed" in reversed_lines[0]


def test_the_summary_json_holds_the_gap() -> None:
    data = bridge.summary_json(summary_bridge(synthetic([0, 1, 2], 40, 12.0, 10.0, 0.5)))
    assert data["gaps"]["a"]["verdict"] == "transfers"
    assert len(data["gaps"]["a"]["network"]["per_seed"]) == 3
    json.dumps(data, allow_nan=False)


def test_the_figure_draws_every_label_and_seed(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from toyrl.plots import plot_bridge, save_figure

    fig = plot_bridge(synthetic([0, 1], 30, 12.0, 10.0, 1.0))
    gaps = fig.axes[1]
    assert len(gaps.lines) == 2 * 2 + 1  # network and toy per seed, and the zero line
    assert len(fig.axes[0].lines) == 4  # two labels, network and toy
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    plt.close(fig)
    assert legend[:2] == ["a", "dr_grpo"] and "seed 1" in legend
    for kind in ("png", "svg", "pdf"):
        assert (
            save_figure(plot_bridge(synthetic([0], 20, 1.0, 1.0, 1.0)), tmp_path / f"b.{kind}").stat().st_size
        )


def test_combining_seeds_keeps_the_labels_order() -> None:
    parts = [summary_bridge(synthetic([seed], 12, 3.0, 3.0, 1.0)) for seed in (1, 0)]
    whole = bridge.Bridge.combine(parts)
    assert whole.seeds == [1, 0]
    assert list(dict.fromkeys(whole.frame.label)) == ["a", "dr_grpo"]
    assert whole.frame.groupby(["label", "source"], sort=False).seed.first().tolist() == [0, 0, 0, 0]
    other = summary_bridge(synthetic([2], 12, 3.0, 3.0, 1.0))
    other.config = BRIDGE_CONFIG.replace(cap=32)
    with pytest.raises(ValueError, match="cannot be combined"):
        bridge.Bridge.combine([parts[0], other])


def test_budget_limits() -> None:
    bridge.check_budget(BRIDGE_CONFIG, [0], quick=True)
    with pytest.raises(InvalidInput, match="at most 64 for --quick"):
        bridge.check_budget(BRIDGE_CONFIG.replace(cap=65), [0], quick=True)
    bridge.check_budget(BRIDGE_CONFIG.replace(cap=256), [0, 1, 2], quick=False)
    with pytest.raises(InvalidInput, match=r"1\.\.20 seeds"):
        bridge.check_budget(BRIDGE_CONFIG, list(range(21)), quick=False)


def test_kernels_are_pinned_only_before_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in bridge.PINNED_KERNELS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "torch", object())  # torch already imported: too late, untouched
    assert bridge.pin_kernels() == {}
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(bridge, "_has_avx2", lambda: True)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # set by the user: kept
    assert bridge.pin_kernels() == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
