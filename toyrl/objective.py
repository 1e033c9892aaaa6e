"""A loss variant is data: one stage of each kind (`toyrl.stages`), with one canonical spec.

Article, "The two biases" and "The Dr. GRPO objective". At ratio 1 (the first, on-policy update of
a batch, clipping inactive) every variant's loss gradient is

    grad = -(1 / n) sum_i w_i sum_t grad log pi(o_i,t),    w_i = A_i / D_i,

a per-token weight w_i shared by the tokens of response i: the advantage stage gives A_i, the
normaliser (the aggregation) D_i and n. The selector, the PPO objective, the KL term and the
schedule (epochs) act beyond that first update (`toyrl.train`).

A variant's identity is its spec (`Variant.spec`): a flat mapping from keys to values, in one
canonical order, with what is at its default left out (the advantage and the aggregation always
shown). It reads and writes as text, `advantage=rloo,aggregation=token_mean,num_iterations=2`
(`spec_text`, `parse_spec`), and as JSON (`to_json`, `from_json`). Keys:

- `advantage`, `aggregation` (the normaliser), `selector`, `objective`, `kl`, `schedule`,
  `reward`: a registered stage of that kind, by name; `mask_truncated=True` is `selector=stopped`;
- any parameter of a chosen stage, by its field name: `std_eps` (the advantage's std epsilon;
  `eps`, its name in toyrl 0.2, is read as std_eps),
  `epsilon`, `epsilon_high`, `dual_clip` (the clip ranges), `beta` (KL), `num_iterations`
  (epochs), `mini_batches`, `micro_batches`, `shuffle` (the schedule), `per_micro_batch` (the
  aggregation's scope).

Equal specs are equal variants whatever their order or spacing: a variant spelled as a spec is
named by its canonical text. Named variants (the article's four, the trainers' presets) are in
`toyrl.variants`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toyrl.config import InvalidInput
from toyrl.policy import Batch, FloatArray
from toyrl.refusals import say
from toyrl.stages import (
    KIND,
    KL,
    REGISTRY,
    Advantage,
    Normaliser,
    Objective,
    Reward,
    Sampler,
    Schedule,
    Selector,
    advantages_of,
    check_declared,
    included_of,
    parameters,
    stage_name,
    std_eps_of,
    weights,
)
from toyrl.values import parse_as


def kind_keys() -> dict[str, str]:
    """Each kind's spec key and the kind ("aggregation" is the normaliser's, the trainers' word for
    it), in a spec's order (the records' `spec_place`, `toyrl.stages.KIND`)."""
    return {kind.key: kind.name for kind in sorted(KIND.values(), key=lambda kind: kind.spec_place)}


def default_stage(kind: str) -> Any:
    """The registered stage a variant takes when its spec names none of `kind` (its record's default)."""
    return REGISTRY[kind][KIND[kind].default]


KIND_KEYS = kind_keys()  # a view of the records under its earlier name: each spec key's kind


@dataclass(frozen=True)
class Variant:
    """A loss variant: one stage of each kind, a name, and what it stands for (neither is identity)."""

    name: str
    advantage: Advantage = field(default_factory=lambda: default_stage("advantage"))
    normaliser: Normaliser = field(default_factory=lambda: default_stage("normaliser"))
    selector: Selector = field(default_factory=lambda: default_stage("selector"))
    objective: Objective = field(default_factory=lambda: default_stage("objective"))
    kl: KL = field(default_factory=lambda: default_stage("kl"))
    schedule: Schedule = field(default_factory=lambda: default_stage("schedule"))
    reward: Reward = field(default_factory=lambda: default_stage("reward"))
    sampler: Sampler = field(default_factory=lambda: default_stage("sampler"))
    summary: str = ""
    stands_for: str = ""  # the trainer setting a preset stands for
    # the name people read ("GRPO without std division"); `name` is what commands take. A user's
    # label (`label=NAME`, `toyrl.variants.parse_variant`) is a variant's `name`, this left empty.
    label: str = ""

    def __post_init__(self) -> None:
        for kind in KIND:
            stage_name(kind, self.stage(kind))  # ValueError unless a registered kind of stage

    def stage(self, kind: str) -> Any:
        return getattr(self, kind)

    @property
    def num_iterations(self) -> int:
        return int(getattr(self.schedule, "num_iterations", 1))

    @property
    def updates(self) -> int:
        """Optimiser updates per sampled batch (epochs x mini-batches)."""
        return self.schedule.updates

    @property
    def title(self) -> str:
        """The variant as a person reads it: its label, else its name."""
        return self.label or self.name

    def names(self) -> dict[str, str]:
        """The registered name of each stage, by kind."""
        return {kind: stage_name(kind, self.stage(kind)) for kind in KIND}

    def spec(self) -> dict[str, Any]:
        """The canonical spec: stage names in their keys' order, then parameters by the kind of
        stage that has them (toyrl 0.2's order), each only if not at its default (the advantage and
        the aggregation always: their records' `shown`)."""
        names, keys = self.names(), kind_keys()
        out: dict[str, Any] = {key: names[kind] for key, kind in keys.items() if KIND[kind].shown}
        for key, kind in keys.items():
            if key not in out and names[kind] != KIND[kind].default and kind != "selector":
                out[key] = names[kind]
        for kind in sorted(KIND, key=lambda kind: KIND[kind].parameter_place):
            if kind == "selector" and names["selector"] != KIND["selector"].default:
                if names["selector"] == "stopped":
                    out["mask_truncated"] = True
                else:
                    out["selector"] = names["selector"]
            default = parameters(REGISTRY[kind][names[kind]])
            for key, value in parameters(self.stage(kind)).items():
                if value != default[key]:
                    out[key] = value
        return out

    def spec_text(self) -> str:
        """The spec as `key=value,...` text; `parse_spec` reads it back to an equal variant."""
        return ",".join(f"{key}={value}" for key, value in self.spec().items())

    def to_json(self) -> str:
        """The variant as JSON: its name, spec, summary, what it stands for and its label (`from_json`)."""
        fields = {
            "name": self.name,
            "spec": self.spec(),
            "summary": self.summary,
            "stands_for": self.stands_for,
            "label": self.label,
        }
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> Variant:
        data = json.loads(text)
        return from_spec(
            data["name"],
            data["spec"],
            summary=data.get("summary", ""),
            stands_for=data.get("stands_for", ""),
            label=data.get("label", ""),
        )


def from_spec(
    name: str, spec: dict[str, Any], summary: str = "", stands_for: str = "", label: str = ""
) -> Variant:
    """A variant from a flat spec (see the module docstring); InvalidInput naming a bad key or value."""
    stages = _chosen_stages(spec)
    changes: dict[str, dict[str, Any]] = {kind: {} for kind in stages}
    keys = kind_keys()
    for key, value in spec.items():
        if key not in keys and key != "mask_truncated":
            # -0.0 is 0.0: one variant, one name, whichever zero was typed
            zero = isinstance(value, float) and value == 0
            changes[_owner(key, stages, spec)][key] = 0.0 if zero else value
    built = {
        kind: replace(stage, **changes[kind]) if changes[kind] else stage for kind, stage in stages.items()
    }
    for stage in built.values():  # a plugin stage's declared parameters too, without a __post_init__
        check_declared(stage)
    return Variant(name, summary=summary, stands_for=stands_for, label=label, **built)


# what a spec's keys are refused with, declared once: the page says it from its data (`toyrl.explore`)
SPEC_MESSAGES = {
    "mask_and_selector": "mask_truncated and selector both choose the selector (mask_truncated=true is "
    "selector=stopped): give one of them",
    "mask_truncated": "mask_truncated must be true or false (got {value!r})",
    "not_registered": "{key} must be one of {names} (got {value!r}){hint}",
    "plugin_hint": " (a plugin's stage: pass its file with --plugin)",
    "unknown_key": "unknown key {key!r}{where}; valid here: {valid}",
    "not_a_parameter": " (not a parameter of {names})",
    "not_key_value": "variant spec {text!r}: {part!r} is not key=value",
}


def _chosen_stages(spec: dict[str, Any]) -> dict[str, Any]:
    """The registered stage of each kind that a spec names (by its kind key, or mask_truncated for
    the selector), its default where it names none."""
    chosen = {kind.name: kind.default for kind in KIND.values()}
    if "mask_truncated" in spec and "selector" in spec:
        raise InvalidInput(SPEC_MESSAGES["mask_and_selector"])
    if "mask_truncated" in spec:
        masked = spec["mask_truncated"]
        if not isinstance(masked, bool):
            raise InvalidInput(say(SPEC_MESSAGES["mask_truncated"], value=masked))
        chosen["selector"] = "stopped" if masked else "all"
    for key, kind in kind_keys().items():
        if key in spec:
            if spec[key] not in REGISTRY[kind]:
                hint = SPEC_MESSAGES["plugin_hint"] if str(spec[key]).startswith("custom:") else ""
                names = ", ".join(REGISTRY[kind])
                raise InvalidInput(
                    say(SPEC_MESSAGES["not_registered"], key=key, names=names, value=spec[key], hint=hint)
                )
            chosen[kind] = spec[key]
    return {kind: REGISTRY[kind][name] for kind, name in chosen.items()}


def _owner(key: str, stages: dict[str, Any], spec: dict[str, Any]) -> str:
    """The kind of the chosen stage that has parameter `key`; InvalidInput if none has."""
    for kind, stage in stages.items():
        if key in parameters(stage):
            return kind
    names = ", ".join(f"{k}={stage_name(kind, stages[kind])}" for k, kind in kind_keys().items())
    where = say(SPEC_MESSAGES["not_a_parameter"], names=names) if key in spec_keys() else ""
    valid = ", ".join(spec_keys(stages))
    raise InvalidInput(say(SPEC_MESSAGES["unknown_key"], key=key, where=where, valid=valid))


def spec_keys(stages: dict[str, Any] | None = None) -> list[str]:
    """The keys a spec may use: the kinds, the mask_truncated alias, and the chosen (by default,
    every registered) stages' parameters."""
    if stages is None:
        every = [stage for registered in REGISTRY.values() for stage in registered.values()]
    else:
        every = list(stages.values())
    keys = [*kind_keys(), "mask_truncated"]
    for stage in every:
        keys += [key for key in parameters(stage) if key not in keys]
    return keys


def parse_spec(text: str) -> Variant:
    """A variant spelled `key=value,...` (spaces allowed), named by its canonical spec text.

    e.g. `advantage=rloo,aggregation=token_mean,num_iterations=2,epsilon_high=0.28`.
    """
    raw: dict[str, str] = {}
    for part in text.split(","):
        key, sign, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sign or not key:
            raise InvalidInput(say(SPEC_MESSAGES["not_key_value"], text=text, part=part.strip()))
        key = "std_eps" if key == "eps" else key  # toyrl 0.2's name, still read
        if key in raw:
            raise InvalidInput(f"variant spec {text!r}: {_spelled(key)} is given twice")
        raw[key] = value
    values: dict[str, Any] = {key: value for key, value in raw.items() if key in kind_keys()}
    try:
        if "mask_truncated" in raw:
            values["mask_truncated"] = typed_value("mask_truncated", raw["mask_truncated"], False)
        stages = _chosen_stages(values)
        for key, value in raw.items():
            if key not in values:
                values[key] = typed_value(key, value, parameters(stages[_owner(key, stages, raw)])[key])
        variant = from_spec("", values)
    except InvalidInput as error:
        raise InvalidInput(f"variant spec {text!r}: {error}") from None
    return replace(variant, name=variant.spec_text())


def _spelled(key: str) -> str:
    """A key as a spec may spell it: std_eps also as eps, its toyrl 0.2 name."""
    return "'std_eps' (or its old name 'eps')" if key == "std_eps" else repr(key)


def typed_value(key: str, raw: str, default: Any) -> Any:
    """A parameter's value from text, typed as the registered stage's default is (`toyrl.values`)."""
    if default is None and raw.lower() == "none":
        return None
    if isinstance(default, str):  # a named choice: the stage checks it
        return raw
    value = parse_as(key, raw, default if isinstance(default, bool | int) else 0.0)
    if value != value:  # NaN
        raise InvalidInput(f"{key} must be a finite number (got {raw!r})")
    return value


def advantages(rewards: ArrayLike, mode: str, std_eps: float) -> FloatArray:
    """Advantages [..., B, G] of rewards of that shape under the advantage stage named `mode`."""
    if mode not in REGISTRY["advantage"]:
        raise InvalidInput(f"advantage must be one of {', '.join(REGISTRY['advantage'])} (got {mode!r})")
    return np.asarray(REGISTRY["advantage"][mode].advantages(np.asarray(rewards, dtype=np.float64), std_eps))


def variant_weights(
    variant: Variant,
    rewards: ArrayLike,
    token_count: ArrayLike,
    std_eps: float,
    length_norm: float,
    stopped: ArrayLike = True,
) -> FloatArray:
    """Per-token weights A_i / D_i (without 1/n) of one group [G] (or batch [B, G]) of responses, as
    a training step takes them: the advantages of every response (those weighing responses by their
    tokens given `token_count`), the variant's selector on which are in the loss (`stopped`: which
    responses ended before the cap; a truncated one a `mask_truncated` selector leaves out weighs
    0), and the normaliser's D over the ones in the loss."""
    r = np.asarray(rewards, dtype=np.float64)
    tokens = np.broadcast_to(np.asarray(token_count, dtype=np.float64), r.shape)
    batch_rewards, batch_tokens = np.atleast_2d(r), np.atleast_2d(tokens)
    ended = np.broadcast_to(np.asarray(stopped, dtype=bool), batch_rewards.shape)
    eps = std_eps_of(variant.advantage, std_eps)
    advantage = advantages_of(variant.advantage, batch_rewards, eps, batch_tokens)
    # the selectors read which responses stopped (and the batch's shape), or the rewards, not their
    # approach or length
    prompts = np.arange(batch_rewards.shape[0])
    batch = Batch(prompts, batch_rewards > 0, batch_tokens.astype(np.int64), ended)
    included = included_of(variant.selector, batch, batch_rewards)
    denominator, _ = variant.normaliser.denominators(batch_tokens, included, length_norm)
    return weights(advantage, denominator, included).reshape(r.shape)


def rows_by(keys: Sequence[Any]) -> dict[Any, NDArray[np.intp]]:
    """The row indices of each distinct key (a run's stage, say), in order of first appearance: runs
    that share a stage are computed together."""
    rows: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    return {key: np.array(index) for key, index in rows.items()}
