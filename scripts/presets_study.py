"""Every named preset at the article's settings: the final numbers that docs/variants.md quotes.

    python scripts/presets_study.py [--out-dir results] [--seeds 6] [--n-jobs 2]

Runs each variant of `toyrl.variants.VARIANTS` (the article's four and the trainers' presets)
with seeds 0..N-1 at `Config()` and writes, under --out-dir:

- `presets.json`: `meta` (toyrl version, command, configuration, seeds), then `final`, a flat dict
  `{variant}.{metric}.{mean|sd|se}` of the final step's exact metrics over seeds (metric
  accuracy_pct, length_correct, length_incorrect, length_wrong_approach; sd with ddof 1).
- `presets.md`: the same as a markdown table, mean ± sd over seeds, one row per preset.

The variants of a seed share initial logits and noise (common random numbers), so the rows are
paired, not independent. Each preset is what `toyrl.variants` says it is; which trainer release it
matches is the presets' own concern (docs/trainers.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from toyrl import __version__
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.files import write_together
from toyrl.variants import VARIANTS

METRICS = {
    "accuracy_pct": ("accuracy %", 1),
    "length_correct": ("E[L \\| correct]", 0),
    "length_incorrect": ("E[L \\| incorrect]", 0),
    "length_wrong_approach": ("E[L \\| wrong approach]", 0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=Path("results"), help="output folder (default results)"
    )
    parser.add_argument("--seeds", type=int, default=6, help="seeds 0..N-1 (default 6, the article's)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (an sd needs two)")
    if not args.out_dir.is_dir():
        parser.error(f"--out-dir {args.out_dir} is not a folder")
    started = time.perf_counter()
    config, seeds = Config(), list(range(args.seeds))
    names = list(VARIANTS)
    print(f"{len(names)} variants x {len(seeds)} seeds x {config.steps} steps", file=sys.stderr)
    frame = run_experiment(config, names, seeds, n_jobs=args.n_jobs)
    last = frame[frame["step"] == config.steps].assign(accuracy_pct=lambda f: f["accuracy"] * 100)
    grouped = last.groupby("variant", sort=False)
    final: dict[str, float] = {}
    rows = []
    for name in names:
        cells = [f"`{name}`"]
        for metric, (_, digits) in METRICS.items():
            values = grouped.get_group(name)[metric]
            mean, sd = float(values.mean()), float(values.std(ddof=1))
            final |= {f"{name}.{metric}.mean": mean, f"{name}.{metric}.sd": sd}
            final[f"{name}.{metric}.se"] = sd / math.sqrt(len(values))
            cells.append(f"{mean:.{digits}f} ± {sd:.{digits}f}")
        rows.append("| " + " | ".join(cells) + " |")
    header = "| variant | " + " | ".join(label for label, _ in METRICS.values()) + " |"
    rule = "| --- |" + " ---: |" * len(METRICS)
    table = "\n".join([header, rule, *rows])
    meta = {
        "toyrl_version": __version__,
        "command": "python scripts/presets_study.py" + (f" --seeds {args.seeds}" if args.seeds != 6 else ""),
        "config": config.to_dict(),
        "seeds": seeds,
    }
    text = json.dumps({"meta": meta, "final": final}, indent=1, allow_nan=False) + "\n"
    note = (
        f"Final step {config.steps}, exact expectations, mean ± sd over seeds 0–{len(seeds) - 1} "
        "(accuracy in percent, lengths in ramble tokens); made by `python scripts/presets_study.py`.\n\n"
    )
    write_together(
        [(args.out_dir / "presets.json", text), (args.out_dir / "presets.md", note + table + "\n")]
    )
    print(
        f"wrote {args.out_dir / 'presets.json'} and presets.md in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
