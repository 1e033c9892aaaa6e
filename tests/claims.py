"""Ties of the numbers the README and docs quote to the files they come from.

A number a page quotes from a generated file carries, right after it, an HTML comment (invisible on
GitHub) naming the file and the value:

    27.1<!-- results/seed_study.json headline.six.grpo.final.accuracy_pct.mean:.1f --> %

The comment's first word is the source: a file's path (results/...), or `toyrl.examples` (the
numbers `toyrl examples` computes). Then one `key:format` item per number, separated by "; ", for
the numbers just before the tie, in order: `27.1 ± 0.5<!-- FILE a.b.mean:.1f; .se:.1f -->`. An item
beginning with a dot repeats the previous item's key with its last parts replaced by the item's
(`.se` after `a.b.mean` is `a.b.se`; `.c.se` is `a.c.se`). A key is the file's JSON path joined by
dots (or a value DERIVED computes from the file); the format is Python's format spec; a minus sign
may be written − (U+2212).

A table generated whole from a file is tied once, on a line of its own before it:
`<!-- results/presets.md table -->` says the table that follows is in that file as written.

`check(text)` lists what does not hold: a number that is not its file's rendering, a tie over more
numbers than precede it, an unknown source or key. `untied(text)` lists the numbers of the
paragraphs, list items and table rows that quote a tied number but carry no tie themselves and
are not on the allow-list (ALLOWED, each number with its reason).
"""

import functools
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)
# 1,410 | 27.4 | -0.21 | +3 | 1e-14 | 87% (a minus sign written − is one too)
NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?%?(?!\w)")
EXAMPLES = "toyrl.examples"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}.").items()}
    return {prefix.removesuffix("."): value}


def _bridge_spans(values: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds over the runs and over the fits; the step from which every seed's GRPO network
    stays above Dr. GRPO's (the latest of the seeds' steps)."""
    runs = [value for key, value in values.items() if key.startswith("cpu_seconds.")]
    fits = [
        value for key, value in values.items() if key.startswith("fits.") and key.endswith(".cpu_seconds")
    ]
    return {
        "spans.run_cpu_min": min(runs),
        "spans.run_cpu_max": max(runs),
        "spans.fit_cpu_min": min(fits),
        "spans.fit_cpu_max": max(fits),
        "spans.grpo_above_from": max(values["derived.gaps.grpo.stays_above_from"]),
    }


def _seed_count(values: dict[str, Any]) -> dict[str, Any]:
    return {"meta.seed_count": len(values["meta.seeds"]), "meta.last_seed": max(values["meta.seeds"])}


def _initial_policies(values: dict[str, Any]) -> dict[str, Any]:
    """How many initial policies the sampled first updates are averaged at."""
    return {"meta.cosine_initial_seed_count": len(values["meta.cosine_initial_seeds"])}


# Values a page quotes that the test computes from the file rather than reads, by file.
DERIVED: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "results/bridge_study.json": _bridge_spans,
    "results/gpg_scale.json": _seed_count,
    "results/families.json": _initial_policies,
}


def _bench_bridge(text: str) -> dict[str, Any]:
    """results/bench_bridge.txt (scripts/bench_bridge.py): the quick run's CPU seconds, cold and warm."""
    cold = re.search(r"empty fit cache: ([\d.]+) CPU-s", text)
    warm = re.search(r"start cached: ([\d.]+) CPU-s", text)
    return {
        "empty_cache": float(cold.group(1)) if cold else None,
        "cached": float(warm.group(1)) if warm else None,
    }


# Text files a page quotes, with the reader of their numbers.
TEXT_READERS: dict[str, Callable[[str], dict[str, Any]]] = {"results/bench_bridge.txt": _bench_bridge}


@functools.cache
def values(source: str) -> dict[str, Any]:
    """Every value of one source, by dotted key."""
    if source == EXAMPLES:
        from toyrl.examples import EXAMPLES as MAKERS

        numbers: dict[str, Any] = {}
        for name, make in MAKERS.items():
            for key, value in make().to_dict()["numbers"].items():
                numbers[f"{name}.{key}"] = value
                if isinstance(value, float) and value:  # quoted as 1/x
                    numbers[f"{name}.{key}_inverse"] = 1 / value
        return numbers
    text = (ROOT / source).read_text(encoding="utf-8")
    if source in TEXT_READERS:
        return TEXT_READERS[source](text)
    flat = flatten(json.loads(text))
    return flat | DERIVED.get(source, lambda _: {})(flat)


def is_tie(comment: str) -> bool:
    """A comment whose first word is a path (or `toyrl.examples`) is a tie; `<!-- run -->`,
    `<!-- excerpt: FILE -->` and the like are not."""
    words = comment.split()
    return bool(words) and (words[0] == EXAMPLES or "/" in words[0])


def items(body: str) -> list[tuple[str, str]]:
    """`key:format; .other:format` -> [(key, format), (key', format)], the dotted shorthand resolved."""
    resolved: list[tuple[str, str]] = []
    for item in body.split(";"):
        key, _, spec = item.strip().rpartition(":")
        if key.startswith("."):
            if not resolved:
                raise ValueError(f"{item.strip()!r} continues no key")
            parts = key[1:].split(".")
            key = ".".join(resolved[-1][0].split(".")[: -len(parts)] + parts)
        resolved.append((key, spec))
    return resolved


def _line(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


# A comment, code, a link's target, a release number (0.9.1, 2026.10.9): only a tie of these is prose.
NOT_PROSE = re.compile(r"<!--(.*?)-->|```.*?```|`[^`\n]*`|\]\([^)]*\)|v?\d+(?:\.\d+){2,}", re.DOTALL)


def _prose(text: str) -> str:
    """`text` with what is not prose blanked, its lines and positions kept."""

    def blank(match: re.Match[str]) -> str:
        if match.group(1) is not None and is_tie(match.group(1)):
            return match.group()
        return re.sub(r"[^\n]", " ", match.group())

    return NOT_PROSE.sub(blank, text)


def check(text: str, read: Callable[[str], Mapping[str, Any]] = values) -> list[str]:
    """What in `text` is not what its ties say, one line per problem ([] if every tie holds)."""
    prose = _prose(text)
    problems: list[str] = []
    start = 0
    for match in COMMENT.finditer(prose):
        comment = " ".join(match.group(1).split())
        source, _, body = comment.partition(" ")
        numbers = [number.group() for number in NUMBER.finditer(prose, start, match.start())]
        try:
            if body == "table":
                found = _check_table(text[match.end() :], source)
            else:
                found = _check_numbers(numbers, source, body, read)
        except (OSError, ValueError) as error:
            found = [f"{comment}: {error}"]
        problems += [f"line {_line(text, match.start())}: {problem}" for problem in found]
        start = match.end()
    return problems


def _check_numbers(
    numbers: list[str], source: str, body: str, read: Callable[[str], Mapping[str, Any]]
) -> list[str]:
    """The tie `source body` over `numbers`, the numbers since the last tie."""
    source_values, wanted = read(source), items(body)
    if len(numbers) < len(wanted):
        return [f"{len(wanted)} values tied to the {len(numbers)} numbers since the last tie"]
    problems = []
    for number, (key, spec) in zip(numbers[len(numbers) - len(wanted) :], wanted, strict=True):
        if key not in source_values:
            problems.append(f"{source} has no {key}")
        elif number.replace("−", "-") != (expected := format(source_values[key], spec)):
            problems.append(f"{number} where {source} {key} gives {expected}")
    return problems


def _check_table(after: str, source: str) -> list[str]:
    rows = []
    for row in after.lstrip("\n").splitlines():
        if not row.startswith("|"):
            break
        rows.append(row)
    if not rows or "\n".join(rows) not in (ROOT / source).read_text(encoding="utf-8"):
        return [f"the table after the tie is not {source}'s as written"]
    return []


# Numbers a paragraph that quotes results may hold untied, and why they are not results.
ALLOWED_BECAUSE = {
    "0 1 −1 5 6 8 16 64 99 100 128 150 399 400 700 1,500 1500": (
        "the article's settings (toyrl.config's defaults): seeds 0–5 and 0–99, the steps quoted (100, "
        "150 of the bridge, 399 and 400 the last), 64 prompts and 16 a step, groups of 8 (128 responses), "
        "the 1,500-token cap, the initial stop probability 1/700, rewards 0/1 and 1/−1"
    ),
    "27.4 27.3 1,410 1,405": "the article's results: GRPO 27.4 % and 1,410 tokens, length-only 27.3 %, 1,405",
    "4 7 12000 0.000583 1e-9 1e-14 1e-15 1e-29": (
        "Dr. GRPO's theorem, (G−1)/(G·L_norm) = 7/(8·1500) = 0.000583 = 7/12000, checked to 1e-9 at G = "
        "4, 8, 16; the bounds test_the_bounds_docs_bias_states_hold_in_the_generated_file checks"
    ),
    "2 3 0.005 16,384 4,096 512 0.9": (
        "settings of the other runs: the bridge's 2 layers, 3 seeds and 0.005 fit tolerance, verl's "
        "budgets of 16,384 and 4,096 tokens and responses of up to 512, the power family's alpha 0.9"
    ),
    "91,072 68 19 10 22": (
        "facts of the code, not of a results file: the bridge network's 91,072 parameters and its 68 "
        "tokens besides the ramble's (toyrl.bridge); the 19, 10 and 22 releases the trainers' manifests model"
    ),
}
ALLOWED = frozenset(number for numbers in ALLOWED_BECAUSE for number in numbers.split())


def _pieces(text: str) -> list[tuple[int, int]]:
    """(start, end) of each paragraph, list item and table row of `text`."""
    pieces, start, offset = [], None, 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped or stripped.startswith(("- ", "* ", "|")):
            if start is not None:
                pieces.append((start, offset))
            start = offset if stripped else None
        elif start is None:
            start = offset
        offset += len(line)
    return pieces if start is None else [*pieces, (start, offset)]


def untied(text: str, allowed: frozenset[str] = ALLOWED) -> list[str]:
    """'line N: number' for each number of a paragraph, list item or table row that quotes a tied
    number which carries no tie itself and is not allowed."""
    prose = _prose(text)
    found = []
    for first, last in _pieces(prose):
        ties = [m for m in COMMENT.finditer(prose, first, last) if m.group(1).split()[1:] != ["table"]]
        start = first
        for match in [*ties, None] if ties else []:
            numbers = list(NUMBER.finditer(prose, start, match.start() if match else last))
            if match:
                numbers = numbers[: max(0, len(numbers) - len(match.group(1).split(";")))]
            found += [
                f"line {_line(text, n.start())}: {n.group()}" for n in numbers if n.group() not in allowed
            ]
            start = match.end() if match else last
    return found
