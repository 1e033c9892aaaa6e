"""User-defined stages: a Python file whose stages every command can run (`toyrl run --plugin FILE`).

A plugin is one Python file that registers stages as toyrl registers its own, with
`toyrl.stages.register(kind, name)` on a frozen dataclass (docs/plugins.md walks through one).
`load_plugin` runs it and files each stage it registered as `custom:NAME`, so a spec names it
`advantage=custom:NAME` and no plugin can shadow a built-in stage or another plugin's. A stage
may be of any kind; its kind's `Protocol` (its record's, `toyrl.stages.KIND`, declared in its
kind's module) is its interface (R runs, B prompts, G members, C logits). A `config` argument is
the configuration as the kind sees it (`toyrl.stages.Settings`: the fields its record's
`settings` names, read-only; any other raises AttributeError naming them):

| kind       | interface                                                                     |
| ---------- | ----------------------------------------------------------------------------- |
| reward     | `rewards(batch, config)` -> [R, B, G]                                         |
| selector   | `included(batch)` -> bool [R, B, G]                                           |
|            | (with `uses_rewards`, a second argument: the rewards [R, B, G])               |
| advantage  | `advantages(rewards [R, B, G], std_eps)` -> [R, B, G]                          |
|            | (with `uses_tokens`, a third argument: the token counts |o| [R, B, G])         |
| normaliser | `denominators(tokens, included, length_norm, members=None)`                   |
|            | -> (D [R, B, G], n [R] or one number); optional, with per_micro_batch:        |
|            | `micro_denominators(tokens, included, length_norm, members, micro)` -> D      |
| objective  | `coefficients(update, beta)` -> (`Coefficients` of [R, B, G] arrays, clipped  |
|            | tokens [R]); its parameters are its own fields (a chunk's runs share one)     |
| kl         | `beta`; `loss(ratio, log_ref_ratio)` -> [2, R, C] or None; `token_advantages( |
|            | advantage, old, ref, batch, counts)` -> `TokenAdvantage` [3, R, B, G] or None |
| schedule   | `updates`, `mini_batches`, `micro_batches`, `orders`, `ranks`, `token_budget`, |
|            | `prompt_tokens`, `max_grad_norm`, `laid_out`; `check(config)`                 |
| sampler    | `batch(batch, theta, config, refill)` -> (`Batch` [R, B, G], tokens [R]);      |
|            | `worst_draws(config)`, `refills(config)` -> int                               |

A stage that lacks a member of its kind's Protocol, or whose method does not take the Protocol's
arguments, is refused when its plugin loads. Then each stage is probed (`probe`): its outputs
must have the contract's shape and finite values, and each run's output must depend on that
run's input alone, or the plugin is refused with one line naming the stage and the problem.
Then every call of a plugin stage's methods (its record's `calls`), the exact hooks and stages
made with a spec's parameters included, is held to the cheap part of the contract (`CONTRACTS`:
type, shape, finite and positive values): a breach, or an exception, stops the command with one
line naming the plugin, the stage, the method and what was wrong (`PluginError`). A plugin's
prints go to stderr (stdout may be JSON) and numpy's error state is restored after its import
and each call. A stage without its kind's exact hooks (its record's `exact_hooks`) that does not
say why (`simulated_only`) is marked simulated only, as is a stage of a kind the exact update
does not have (a sampler, KL term or schedule: its record's `no_exact_form`) that does not say:
`toyrl.expected` then refuses it with that reason instead of failing on the missing hook or
computing the article's update for it.

Worker processes (joblib's loky, Dask) receive variants pickled: a plugin stage pickles as its
file's path, source and field values, and unpickling it loads that source (once per process)
before rebuilding the stage, so a worker runs exactly the code its parent loaded and probed.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import hashlib
import inspect
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels, noise
from toyrl.config import Config, InvalidInput, plain, shown
from toyrl.inputs import PLUGIN, Unreadable, read_bytes
from toyrl.objective import Variant
from toyrl.policy import Batch, Coefficients, FloatArray, OwnLogits, sample_batch
from toyrl.stages import (
    K3,
    KIND,
    REGISTRY,
    Epochs,
    TokenAdvantage,
    advantages_of,
    correct,
    included_of,
    simulated_only,
    std_eps_of,
)
from toyrl.stages.registry import check_declared, declarations, fits
from toyrl.stages.schedule import MAX_ITERATIONS, MAX_PARTS, check_cuts
from toyrl.train import Epoch, Part, Plan, initial_theta, run_streams

PREFIX = "custom:"


@dataclass(frozen=True)
class Plugin:
    """A loaded plugin file: its name (the file's stem), the path it was given as, its `__version__`
    ("unversioned" without one), the SHA-256 of its source bytes, and the (kind, name) of each
    stage it registered (names "custom:...")."""

    name: str
    path: str
    version: str
    sha256: str
    stages: tuple[tuple[str, str], ...]
    source: bytes = field(repr=False, compare=False)
    module: str = field(repr=False, compare=False)  # its name in sys.modules

    def record(self) -> dict[str, str]:
        """What a results sidecar records of it."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "path": self.path}


LOADED: dict[str, Plugin] = {}  # by the file's resolved path


class PluginError(InvalidInput):
    """A plugin stage broke its contract while toyrl ran it (one line, naming where)."""


@contextlib.contextmanager
def _contained() -> Iterator[None]:
    """Plugin code runs here: its prints go to stderr, and numpy's error state is put back after."""
    saved = np.geterr()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        np.seterr(**saved)


def load_plugin(path: str | os.PathLike[str]) -> Plugin:
    """Run the plugin file at `path`, register its stages as custom:NAME and probe them.

    Loading a file again is a no-op while its source is unchanged; a changed file replaces its
    earlier version. InvalidInput, one line naming the file and the problem, for a missing or
    unreadable file, a syntax error, an exception while it runs, a plugin that registers nothing
    (or a stage of another kind, or a name taken by another plugin), or a stage that breaks its
    contract; nothing of a refused plugin stays registered.
    """
    given = str(path)
    if Path(given).suffix != ".py":
        raise InvalidInput(f"plugin {given}: a plugin is a Python file, ending in .py")
    try:
        source = read_bytes(Path(given), PLUGIN)
    except Unreadable as error:
        raise InvalidInput(f"plugin {given}: {error.reason}") from None
    return _load(given, str(Path(given).resolve()), source)


def unload(plugin: Plugin) -> None:
    """Unregister a loaded plugin's stages and forget its module."""
    for kind, name in plugin.stages:
        stage = REGISTRY[kind].get(name)
        if type(stage).__module__ == plugin.module:  # not another plugin's (a refused one's names)
            del REGISTRY[kind][name]
            copyreg.dispatch_table.pop(type(stage), None)
    sys.modules.pop(plugin.module, None)
    for key in [key for key, loaded in LOADED.items() if loaded.module == plugin.module]:
        del LOADED[key]


def plugins_used(variants: Sequence[Variant]) -> list[Plugin]:
    """The loaded plugins whose stages the variants use, in order of first use."""
    owners = {stage: plugin for plugin in LOADED.values() for stage in plugin.stages}
    used = [owners.get(stage) for variant in variants for stage in variant.names().items()]
    return list(dict.fromkeys(plugin for plugin in used if plugin is not None))


def _load(given: str, key: str, source: bytes, evict: bool = False) -> Plugin:
    """The plugin of `source` (the file at resolved path `key`, given as `given`), loaded once.

    `evict` (in a worker process): a plugin loaded earlier whose stage names this one registers is
    unloaded first, as its parent loaded this one alone.
    """
    sha256 = hashlib.sha256(source).hexdigest()
    existing = LOADED.get(key)
    if existing is not None:
        if existing.sha256 == sha256:
            if existing.path != given:
                LOADED[key] = replace(existing, path=given)
            return LOADED[key]
        unload(existing)
    stem = Path(given).stem
    digest = hashlib.sha256(f"{key}:{sha256}".encode()).hexdigest()[:12]
    module = f"_toyrl_plugin_{re.sub(r'[^0-9A-Za-z_]', '_', stem)}_{digest}"
    namespace, added = _execute(given, key, source, module)
    if not added:
        sys.modules.pop(module, None)
        raise InvalidInput(
            f"plugin {given}: registers no stage (decorate a frozen dataclass with "
            "@register(kind, name) from toyrl.stages)"
        )
    try:
        with _contained():
            version = str(namespace.get("__version__", "unversioned"))
    except Exception as error:
        sys.modules.pop(module, None)
        raise InvalidInput(
            f"plugin {given}: its __version__ cannot be read as text ({_describe(error)})"
        ) from None
    plugin = Plugin(stem, given, version, sha256, tuple((k, PREFIX + n) for k, n, _ in added), source, module)
    try:
        for kind, name, stage in added:
            _install(plugin, kind, name, stage, evict)
        for kind, name in plugin.stages:
            problem = probe(kind, REGISTRY[kind][name])
            if problem:
                raise InvalidInput(f"plugin {given}: {kind} {name} {problem}")
        for kind, name in plugin.stages:
            _guard(type(REGISTRY[kind][name]), kind, name, given, key)
    except BaseException:
        unload(plugin)
        raise
    LOADED[key] = plugin
    return plugin


def _execute(
    given: str, key: str, source: bytes, module: str
) -> tuple[dict[str, Any], list[tuple[str, str, Any]]]:
    """Run the plugin's source as module `module`; (its namespace, the (kind, name, stage) it
    registered), those taken back out of the registry (they go in again as custom:NAME)."""
    before = {kind: set(REGISTRY[kind]) for kind in KIND}
    namespace = types.ModuleType(module)
    namespace.__file__ = key
    sys.modules[module] = namespace  # dataclasses look their class's module up there
    ran = False
    try:
        with _contained():
            exec(compile(source, key, "exec"), namespace.__dict__)
        ran = True
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit and the like too: a plugin does not end toyrl
        raise InvalidInput(f"plugin {given}{_line(error, key)}: {_describe(error)}") from None
    finally:
        added = [
            (kind, name, REGISTRY[kind].pop(name))
            for kind in KIND
            for name in [name for name in REGISTRY[kind] if name not in before[kind]]
        ]
        if not ran:
            sys.modules.pop(module, None)
    return namespace.__dict__, added


def _line(error: BaseException, key: str) -> str:
    """', line N': where in the plugin's file `error` arose ('' if not in it)."""
    if isinstance(error, SyntaxError) and error.filename == key:
        return f", line {error.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == key]
    return f", line {lines[-1]}" if lines else ""


def _describe(error: BaseException) -> str:
    """An exception as one line: its type and message."""
    if isinstance(error, SyntaxError):
        return f"syntax error: {error.msg}"
    message = " ".join(str(error).split())
    if isinstance(error, InvalidInput):
        return message
    if isinstance(error, SystemExit):
        return f"calls sys.exit({error.code!r}) (a plugin cannot end toyrl)"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _install(plugin: Plugin, kind: str, name: str, stage: Any, evict: bool) -> None:
    """Register `stage` as custom:`name` of `kind`, after checking what a registry needs of it;
    mark it simulated only if it lacks an exact hook of its kind's (`Kind.exact_hooks`), or is of
    a kind the exact update does not have (`Kind.no_exact_form`: its batch is the article's, with
    no KL term and one update a batch), and does not say why (its own `simulated_only`, '' where
    it changes nothing)."""
    where = f"plugin {plugin.path}: {kind} {PREFIX}{name}"
    if not (name.isidentifier() and name.isascii()):
        raise InvalidInput(f"{where}: a stage's name is letters, digits and underscores (got {name!r})")
    params = getattr(type(stage), "__dataclass_params__", None)
    if not is_dataclass(stage) or params is None or not params.frozen:
        raise InvalidInput(
            f"{where}: {type(stage).__name__} is not a frozen dataclass (@dataclass(frozen=True))"
        )
    taken = next((p for p in LOADED.values() if (kind, PREFIX + name) in p.stages), None)
    if taken is not None and evict:
        unload(taken)
    elif taken is not None or PREFIX + name in REGISTRY[kind]:
        by = f" by plugin {taken.path}" if taken is not None else ""
        raise InvalidInput(f"{where}: that name is registered already{by}")
    problem = protocol_problem(kind, stage)
    if problem:
        raise InvalidInput(f"{where}: {problem}")
    record = KIND[kind]
    if record.no_exact_form and not hasattr(stage, "simulated_only"):
        stage_class: Any = type(stage)  # a class attribute, as the built-in stages declare it
        stage_class.simulated_only = f"{kind} {PREFIX}{name}: {record.no_exact_form}"
    missing = [hook for hook in record.exact_hooks if not hasattr(stage, hook)]
    if missing and hasattr(stage, "simulated_only") and not simulated_only(stage):
        raise InvalidInput(
            f"{where}: has no {', '.join(missing)} (its exact hook) but an empty simulated_only: "
            "give the hook, or say in simulated_only why there is none"
        )
    if missing and not hasattr(stage, "simulated_only"):
        stage_class = type(stage)
        stage_class.simulated_only = (
            f"{kind} {PREFIX}{name} has no exact hook: it lacks {' and '.join(missing)}"
        )
    REGISTRY[kind][PREFIX + name] = stage
    copyreg.pickle(type(stage), functools.partial(_reduce, plugin.module))


def protocol_members(protocol: type) -> dict[str, Any]:
    """The members a Protocol declares: its methods and properties, by name."""
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def protocol_problem(kind: str, stage: Any) -> str:
    """What keeps `stage` from being a `kind` by its Protocol ('' if nothing): a member missing, a
    property that is a method, or a method that does not take the Protocol's arguments."""
    record = KIND[kind]
    protocol = record.protocol
    contract = f"(the {protocol.__name__} protocol of toyrl.stages.{kind})"
    for name, member in protocol_members(protocol).items():
        if not hasattr(stage, name):
            return f"has no {name} {contract}"
        value = getattr(stage, name)
        if isinstance(member, property):
            if inspect.ismethod(value):
                return f"has {name} as a method, not a value {contract}"
            continue
        wanted = list(inspect.signature(member).parameters)[1:]  # without self
        if record.extra_argument is not None:  # `toyrl.stages.advantages_of`, `included_of`
            flag, method, argument = record.extra_argument
            if name == method and getattr(stage, flag, False):
                wanted.append(argument)
        arguments = ", ".join(wanted)
        if not callable(value):
            return f"has {name} as a {type(value).__name__}, not a method taking ({arguments}) {contract}"
        try:
            inspect.signature(value).bind(*wanted)
        except TypeError:
            return f"has {name}{inspect.signature(value)}: it must take ({arguments}) {contract}"
        except ValueError:  # no signature to read (a builtin): called as it is
            continue
    return ""


def _reduce(module: str, stage: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """How a stage of the plugin loaded as `module` pickles: the plugin's path and source, the
    stage's kind and name, its field values."""
    key, plugin = next((key, p) for key, p in LOADED.items() if p.module == module)
    kind, name = next((k, n) for k, n in plugin.stages if type(REGISTRY[k][n]) is type(stage))
    values = {f.name: getattr(stage, f.name) for f in fields(stage) if f.init}
    return _restore, (key, plugin.path, plugin.source, kind, name, values)


def _restore(key: str, given: str, source: bytes, kind: str, name: str, values: dict[str, Any]) -> Any:
    """A plugin stage unpickled (in a worker): its plugin loaded from the source, then the stage."""
    _load(given, key, source, evict=True)
    return type(REGISTRY[kind][name])(**values)


# --- contract probes ------------------------------------------------------------------------------

RUNS = 3
PROBE_CONFIG = Config(
    prompts=6, batch_prompts=3, group_size=4, steps=1, cap=20, min_length=3, stop_prob_right=1 / 6,
    stop_prob_wrong=1 / 10,
)  # fmt: skip
PERMUTED = np.array([2, 0, 1])  # every run moves
# One run's input replaced by another's, each run in turn: a statistic over the runs (a max, a
# sum) changes when the run it comes from does, even where a permutation leaves it as it was.
REPLACED = (np.array([1, 1, 2]), np.array([0, 2, 2]), np.array([0, 1, 0]))


@functools.cache
def probe_inputs() -> tuple[Batch, FloatArray, FloatArray]:
    """The probes' input, three runs: a batch [3, B, G] sampled from the runs' policies theta
    [3, P + 2] (each its seed's initial one), and a later policy, theta moved by 0.3 N(0, 1) (so
    that ratios differ from 1 and clipping acts). Its groups include mixed and all-wrong ones, its
    responses truncated ones, and its runs differ in their rewards, their longest response and
    their truncations, so that a statistic over the runs changes when one run does."""
    config = PROBE_CONFIG
    theta = np.stack([initial_theta(config, run_streams(seed)[0]) for seed in range(RUNS)])
    rng = np.random.default_rng(8)  # a draw whose runs differ in every statistic over them
    prompt_index = noise.permutation_prefix(rng, RUNS, config.prompts, config.batch_prompts)
    shape = (RUNS, config.batch_prompts, config.group_size)
    approach, exponential = noise.uniform(rng, shape), noise.standard_exponential(rng, shape)
    batch = sample_batch(theta, prompt_index, approach, exponential, config.cap)
    return batch, theta, theta + 0.3 * noise.standard_normal(rng, theta.shape)


@dataclass(frozen=True)
class Output:
    """One output of a probed stage, and what its kind's contract says of it."""

    name: str  # what it is ("D", "n", "clipped tokens", ...); "" for a stage's one output
    value: Any
    shape: tuple[int, ...]
    contract: str
    boolean: bool = False
    positive: NDArray[np.bool_] | None = None  # where the values must also be > 0 (None: nowhere)
    runs_axis: int = 0  # the axis of the runs


def probe(kind: str, stage: Any) -> str:
    """The first way `stage` breaks the contract of `kind` on `probe_inputs` ('' if none): an
    exception, an output of the wrong shape or type, a value not finite (or not positive where it
    must be), or mixing runs: permuting the runs of its input must permute its output the same
    way, and replacing one run's input by another's must leave the other runs' outputs as they
    were."""
    with _contained(), np.errstate(all="ignore"):  # what a stage's arithmetic gives is checked, not warned of
        return _probed(kind, stage)


def _probed(kind: str, stage: Any) -> str:
    problem = stage_problem(kind, stage)
    if problem:
        return f"breaks its contract: {problem}"
    batch, theta, moved = probe_inputs()
    outputs_of = PROBES[kind]
    given = f"for {KIND[kind].probe_input} of shape {batch.right.shape}"
    try:
        outputs = outputs_of(stage, batch, theta, moved, np.arange(RUNS))
    except Exception as error:
        return f"raises {_describe(error)} {given}"
    for output in outputs:
        problem = _checked(output, given)
        if problem:
            return problem
    for rows, change in (
        (PERMUTED, "permuting the runs of its input does not permute its output the same way"),
        *((rows, "a run's output changes with another run's input") for rows in REPLACED),
    ):
        try:
            again = outputs_of(stage, batch.rows(rows), theta[rows], moved[rows], rows)
        except Exception as error:
            return f"raises {_describe(error)} {given}, its runs reordered"
        for output, other in zip(outputs, again, strict=True):
            expected = np.take(np.asarray(output.value), rows, axis=output.runs_axis)
            if np.shape(other.value) != expected.shape or not np.allclose(
                expected, other.value, rtol=1e-9, atol=1e-12, equal_nan=True
            ):
                return f"mixes runs: {change}" + (f" ({output.name})" if output.name else "")
    return ""


def _checked(output: Output, given: str) -> str:
    """What is wrong with one output ('' if nothing)."""
    named = f"{output.name} of " if output.name else ""
    contract = f"(the contract: {output.contract})"
    try:
        array = np.asarray(output.value)
    except (TypeError, ValueError):
        return f"returns {named}a {type(output.value).__name__}, not an array, {given} {contract}"
    if array.shape != output.shape:
        return f"returns {named}shape {array.shape} {given} {contract}"
    numeric = array.dtype != bool and np.issubdtype(array.dtype, np.number)
    if not (array.dtype == bool if output.boolean else numeric):
        return f"returns {named}{array.dtype} values {given} {contract}"
    if output.boolean:
        return ""
    bad = ~np.isfinite(array)
    if output.positive is not None:
        bad |= output.positive & ~(array > 0)
    if not bad.any():
        return ""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    value = float(array[index])
    where = (f" at {index}" if index else "") + (f" in {output.name}" if output.name else "")
    need = "finite values" if not np.isfinite(value) else output.contract
    return f"returns {value}{where} {given} (the contract: {need})"


def _reward(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    contract = "[runs, prompts, group], one reward a response"
    settings = KIND["reward"].settings_of(PROBE_CONFIG)
    return [Output("", stage.rewards(batch, settings), batch.right.shape, contract)]


def _selector(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    contract = "bool [runs, prompts, group], True where a response is in the loss"
    rewards = correct(batch, PROBE_CONFIG)  # a selector by the rewards (`uses_rewards`) is given them
    return [Output("", included_of(stage, batch, rewards), batch.right.shape, contract, boolean=True)]


def _advantage(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    """The advantages of the batch's 0/1 rewards (with its token counts, for `uses_tokens`)."""
    rewards = correct(batch, PROBE_CONFIG)
    std_eps = std_eps_of(stage, KIND["advantage"].settings_of(PROBE_CONFIG))
    advantage = advantages_of(stage, rewards, std_eps, batch.token_count(PROBE_CONFIG.approach_tokens))
    return [Output("", advantage, rewards.shape, "the rewards' shape [runs, prompts, group]")]


def _normaliser(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    """D and n on the whole batch, truncated responses out of the loss, then on a mini-batch (the
    first prompts' groups) unless the stage refuses mini-batches (InvalidInput: its own message)."""
    tokens = batch.token_count(PROBE_CONFIG.approach_tokens)
    length_norm, runs = PROBE_CONFIG.length_norm_value, len(tokens)
    members = np.zeros(tokens.shape, dtype=bool)
    members[:, : tokens.shape[1] // 2 + 1] = True
    outputs = []
    for scope, part in (("", None), (" on a mini-batch", members)):
        included = batch.stopped if part is None else batch.stopped & part
        try:
            if part is None:
                denominator, n = stage.denominators(tokens, included, length_norm)
            else:
                denominator, n = stage.denominators(tokens, included, length_norm, part)
        except InvalidInput:
            if part is None:
                raise
            continue
        d_contract = "D [runs, prompts, group], positive where a response is in the loss"
        outputs += [
            Output(f"D{scope}", denominator, tokens.shape, d_contract, positive=included),
            Output(
                f"n{scope}",
                np.broadcast_to(n, (runs,)) if np.ndim(n) == 0 else n,
                (runs,),
                "n [runs] or one number, positive",
                positive=np.ones(runs, dtype=bool),
            ),
        ]
    return outputs


def _objective(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    """The coefficients of a later update (at `moved`: ratios away from 1) with centred advantages,
    Dr. GRPO's normaliser and truncated responses masked, the update built as `toyrl.train` does."""
    runs = len(theta)
    plan = Plan.of([Variant("probe", objective=stage)] * runs)
    included = batch.stopped
    advantage = plan.advantages(correct(batch, PROBE_CONFIG), PROBE_CONFIG)
    part = Part.of(batch, included, *plan.denominators(batch, included, PROBE_CONFIG))
    own = OwnLogits.of(batch, theta.shape[-1])
    epoch = Epoch.of(own, advantage, own.table(theta), None)
    coefficients, clipped, _ = epoch.coefficients(moved, plan, part)
    if not isinstance(coefficients, Coefficients):
        raise TypeError(
            f"coefficients returned a {type(coefficients).__name__} first, not toyrl.policy.Coefficients"
        )
    shape, contract = batch.right.shape, "Coefficients of [runs, prompts, group] arrays"
    by_kind = {
        "approach": coefficients.approach,
        "non_stop": coefficients.non_stop,
        "stop": coefficients.stop,
    }
    return [
        *(
            Output(f"{kind} coefficients", value, shape, contract)
            for kind, value in by_kind.items()
            if value is not None
        ),
        Output("clipped tokens", clipped, (runs,), "clipped tokens [runs]"),
    ]


def _kl(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    """The loss term's coefficients at `moved`, the batch sampled at theta (the old policy) and the
    reference theta shifted by 0.5; and the per-token advantages it gives."""
    own = OwnLogits.of(batch, theta.shape[-1])
    old, ref, table = own.table(theta), own.table(theta + 0.5), own.table(moved)
    ratio = kernels.exp(table.log_both - old.log_both)
    outputs = [
        Output(
            "beta",
            np.broadcast_to(np.asarray(stage.beta, dtype=np.float64), (len(theta),)),
            (len(theta),),
            "beta, a number",
        )
    ]
    loss = stage.loss(ratio, ref.log_both - table.log_both)
    if loss is not None:
        outputs.append(
            Output("loss coefficients", loss, ratio.shape, "[2, runs, logits] or None", runs_axis=1)
        )
    counts = np.stack([np.ones(batch.length.shape), batch.length - batch.stopped, batch.stopped * 1.0])
    advantage = correct(batch, PROBE_CONFIG) - 0.5
    tokens = stage.token_advantages(advantage, old, ref, own.batch, counts)  # at the batch's own logits
    if tokens is not None:
        if not isinstance(tokens, TokenAdvantage):
            raise TypeError(
                f"token_advantages returned a {type(tokens).__name__}, not a TokenAdvantage or None"
            )
        contract = "TokenAdvantage of [3, runs, prompts, group] arrays or None"
        outputs += [
            Output(f"token_advantages {f.name}", getattr(tokens, f.name), counts.shape, contract, runs_axis=1)
            for f in fields(tokens)
        ]
    return outputs


def _schedule(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    """A configuration it accepts or refuses with its own one line (InvalidInput); its settings
    are held to their ranges before (`stage_problem`)."""
    with contextlib.suppress(InvalidInput):
        stage.check(KIND["schedule"].settings_of(PROBE_CONFIG))
    return []


@functools.cache
def known_ranges() -> dict[str, dict[str, dict[str, Any]]]:
    """The values of a kind that toyrl knows the range of, whoever's stage gives them, and their
    rules (`toyrl.stages.registry.declarations`): a KL's beta, a schedule's counts, its clip and
    whether it lays batches out, as toyrl's own stages of the kind declare them."""
    schedule = {
        name: rule
        for name, rule in declarations(Epochs).items()
        if name in protocol_members(KIND["schedule"].protocol)
    }
    counted = {"kind": "integer", "low_open": False, "high_open": False, "optional": False, "choices": []}
    for name, low, high in (("updates", 1, MAX_ITERATIONS * MAX_PARTS), ("orders", 0, MAX_ITERATIONS)):
        schedule[name] = counted | {
            "low": low,
            "high": high,
            "requirement": f"must be an integer in {low}..{high:,}",
        }
    schedule["laid_out"] = {"kind": "boolean", "optional": False, "requirement": "must be true or false"}
    return {"kl": {"beta": declarations(K3)["beta"]}, "schedule": schedule}


def stage_problem(kind: str, stage: Any) -> str:
    """What toyrl can tell is wrong with a built stage of `kind` ('' if nothing): a parameter that
    cannot be hashed (a variant is kept in sets and dicts: a tuple, not a list), a value of the
    kind outside the range toyrl knows (`known_ranges`), or reading one raises."""
    for f in fields(stage):
        try:
            hash(getattr(stage, f.name))
        except TypeError:
            value = getattr(stage, f.name)
            return f"parameter {f.name} is a {type(value).__name__}, which cannot be hashed (use a tuple)"
    for name, rule in known_ranges().get(kind, {}).items():
        try:
            with _contained():
                value = plain(getattr(stage, name))
        except Exception as error:
            return f"reading {name} raises {_describe(error)}"
        if not fits(value, rule):
            return f"{name} {rule['requirement']} (got {shown(value)})"
    return ""


def _sampler(stage: Any, batch: Batch, theta: FloatArray, moved: FloatArray, rows: Any) -> list[Output]:
    """The batch it trains on from the probe batch, each run with its own refill stream (seeded by
    the run, so that reordering the runs reorders their streams), and the bounds of its draws."""
    config = KIND["sampler"].settings_of(PROBE_CONFIG)
    for method in ("worst_draws", "refills"):
        value = getattr(stage, method)(config)
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise TypeError(f"{method}(config) returned {value!r}, not a whole number >= 0")
    refill = [np.random.default_rng(100 + int(run)) for run in rows]
    out = stage.batch(batch, theta, config, refill)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Batch)):
        raise TypeError(f"batch returned a {type(out).__name__}, not (toyrl.policy.Batch, tokens)")
    drawn, tokens = out
    shape, runs = batch.right.shape, len(theta)
    positive = np.ones(shape, dtype=bool)
    return [
        Output("prompt_index", drawn.prompt_index, shape[:2], "prompt indices [runs, prompts]"),
        Output("right", drawn.right, shape, "bool [runs, prompts, group]", boolean=True),
        Output(
            "length", drawn.length, shape, "lengths [runs, prompts, group], at least 1", positive=positive
        ),
        Output("stopped", drawn.stopped, shape, "bool [runs, prompts, group]", boolean=True),
        Output(
            "tokens", tokens, (runs,), "tokens generated [runs], positive", positive=np.ones(runs, dtype=bool)
        ),
    ]


PROBES: dict[str, Callable[[Any, Batch, FloatArray, FloatArray, Any], list[Output]]] = {
    "reward": _reward,
    "selector": _selector,
    "advantage": _advantage,
    "normaliser": _normaliser,
    "objective": _objective,
    "kl": _kl,
    "schedule": _schedule,
    "sampler": _sampler,
}


# --- the contract at every call ------------------------------------------------------------------
# Each method a training step or the exact update calls, and the check of its output given its
# arguments (without self): '' if it keeps the contract, else what is wrong. Cheap: a type, a shape
# and one pass over the values, on arrays the size of a batch.


def _values(
    value: Any, shape: tuple[int, ...], given: str, boolean: bool = False, positive: Any = None
) -> str:
    """What is wrong with an array output of `shape` (bool, or finite real numbers, positive where
    `positive`): '' if nothing."""
    if isinstance(value, str | bytes) or not isinstance(
        value, np.ndarray | np.generic | int | float | list | tuple
    ):
        return f"returned a {type(value).__name__}, not an array of shape {shape}, {given}"
    array = np.asarray(value)
    if array.shape != shape:
        return f"returned shape {array.shape}, not {shape}, {given}"
    if boolean:
        return "" if array.dtype == bool else f"returned {array.dtype} values, not bool, {given}"
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        return f"returned {array.dtype} values, not real numbers, {given}"
    bad = ~np.isfinite(array)
    if positive is not None:
        bad |= np.asarray(positive, dtype=bool) & ~(array > 0)
    if not bad.any():
        return ""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    need = "a finite number" if not np.isfinite(array[index]) else "positive"
    return f"returned {array[index].item()}{f' at {index}' if index else ''}, not {need}, {given}"


def _shape_of(value: Any) -> tuple[int, ...]:
    return tuple(np.shape(value))


def _rewards(out: Any, batch: Batch, *rest: Any) -> str:
    return _values(out, batch.right.shape, f"for a batch of shape {batch.right.shape}")


def _included(out: Any, batch: Batch, *rest: Any) -> str:
    return _values(out, batch.right.shape, f"for a batch of shape {batch.right.shape}", boolean=True)


def _advantages(out: Any, rewards: Any, *rest: Any) -> str:
    return _values(out, _shape_of(rewards), f"for rewards of shape {_shape_of(rewards)}")


def _denominators(out: Any, tokens: Any, included: Any, length_norm: Any, members: Any = None) -> str:
    given = f"for tokens of shape {_shape_of(tokens)}"
    if not (isinstance(out, tuple | list) and len(out) == 2):
        return f"returned a {type(out).__name__}, not the pair (D, n), {given}"
    in_loss = included if members is None else np.logical_and(included, members)
    problem = _values(out[0], _shape_of(tokens), f"in D {given}", positive=in_loss)
    n, runs = out[1], (len(tokens),)
    if np.ndim(n) == 0 and isinstance(n, int | float | np.generic | np.ndarray):  # one number for every run
        n = np.broadcast_to(np.asarray(n), runs)
    return problem or _values(n, runs, f"in n {given}", positive=np.ones(runs, dtype=bool))


def _micro_denominators(
    out: Any, tokens: Any, included: Any, length_norm: Any, members: Any, micro: Any
) -> str:
    given = f"for tokens of shape {_shape_of(tokens)}"
    return _values(out, _shape_of(tokens), f"in D {given}", positive=np.logical_and(included, members))


def _coefficients(out: Any, update: Any, *rest: Any) -> str:
    shape = _shape_of(update.advantage)
    given = f"for an update of shape {shape}"
    if not (isinstance(out, tuple | list) and len(out) == 2 and isinstance(out[0], Coefficients)):
        return f"returned a {type(out).__name__}, not (toyrl.policy.Coefficients, clipped tokens), {given}"
    coefficients, clipped = out
    for kind in ("approach", "non_stop", "stop"):
        value = getattr(coefficients, kind)
        problem = "" if value is None and kind != "approach" else _values(value, shape, f"in {kind} {given}")
        if problem:
            return problem
    return _values(clipped, shape[:1], f"in clipped tokens {given}")


def _window(out: Any, config: Any, *rest: Any) -> str:
    integers = isinstance(out, tuple | list) and len(out) == 2
    integers = integers and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in out)
    if integers and 1 <= out[0] <= out[1]:
        return ""
    return f"returned {out!r}, not two integers 1 <= low <= high (the lengths that earn reward 1)"


def _conditional(out: Any, r: Any, others: Any, *rest: Any) -> str:
    return _values(out, _shape_of(others), f"for others of shape {_shape_of(others)}")


def _response_denominator(out: Any, tokens: Any, *rest: Any) -> str:
    shape = _shape_of(tokens)
    return _values(out, shape, f"for tokens of shape {shape}", positive=np.ones(shape, dtype=bool))


def _loss(out: Any, ratio: Any, *rest: Any) -> str:
    if out is None:
        return ""
    return _values(out, _shape_of(ratio), f"for ratios of shape {_shape_of(ratio)}")


def _token_advantages(out: Any, advantage: Any, old: Any, ref: Any, batch: Any, counts: Any) -> str:
    if out is None:
        return ""
    given = f"for counts of shape {_shape_of(counts)}"
    if not isinstance(out, TokenAdvantage):
        return f"returned a {type(out).__name__}, not a toyrl.stages.TokenAdvantage or None, {given}"
    for f in fields(out):
        problem = _values(getattr(out, f.name), _shape_of(counts), f"in {f.name} {given}")
        if problem:
            return problem
    return ""


def _count(out: Any, *rest: Any) -> str:
    if isinstance(out, bool) or not isinstance(out, int | np.integer) or out < 0:
        return f"returned {out!r}, not a whole number >= 0"
    return ""


def _nothing(out: Any, *rest: Any) -> str:
    return ""  # a check: it refuses by raising InvalidInput


def _batch(out: Any, batch: Batch, *rest: Any) -> str:
    shape = batch.right.shape
    given = f"for a batch of shape {shape}"
    if not (isinstance(out, tuple | list) and len(out) == 2 and isinstance(out[0], Batch)):
        return f"returned a {type(out).__name__}, not (toyrl.policy.Batch, tokens), {given}"
    drawn, tokens = out
    return (
        _values(drawn.prompt_index, shape[:2], f"in prompt_index {given}")
        or _values(drawn.right, shape, f"in right {given}", boolean=True)
        or _values(drawn.length, shape, f"in length {given}", positive=np.ones(shape, dtype=bool))
        or _values(drawn.stopped, shape, f"in stopped {given}", boolean=True)
        or _values(tokens, shape[:1], f"in tokens {given}", positive=np.ones(shape[:1], dtype=bool))
    )


# Each method's check, by the method's name; a kind's record names the methods toyrl calls (`calls`).
CONTRACTS: dict[str, Callable[..., str]] = {
    "rewards": _rewards,
    "window": _window,
    "included": _included,
    "advantages": _advantages,
    "conditional": _conditional,
    "denominators": _denominators,
    "micro_denominators": _micro_denominators,
    "response_denominator": _response_denominator,
    "coefficients": _coefficients,
    "loss": _loss,
    "token_advantages": _token_advantages,
    "batch": _batch,
    "worst_draws": _count,
    "refills": _count,
    "check": _nothing,
}


def guards(kind: str) -> dict[str, Callable[..., str]]:
    """The methods of a kind that toyrl calls (its record's `calls`), each with its check."""
    return {method: CONTRACTS[method] for method in KIND[kind].calls}


def _built(stage: Any) -> str:
    """A stage's parameters as a message names them: (parts=0, rk=1)."""
    return "(" + ", ".join(f"{f.name}={shown(getattr(stage, f.name, '?'))}" for f in fields(stage)) + ")"


def _guard_building(stage_class: Any, kind: str, name: str, given: str, key: str) -> None:
    """Wrap the plugin class's __init__ so that every stage built from it (a spec's parameters
    over its defaults, in this process or a worker) is checked as it is built: an exception while
    building it, or a problem `stage_problem` finds, is a PluginError naming the plugin, the stage
    and its parameters. The stage's own one-line refusal (InvalidInput) stays as it is."""
    init = stage_class.__init__
    if getattr(init, "__toyrl_guarded__", False):
        return

    def built(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            with _contained():
                init(self, *args, **kwargs)
        except (InvalidInput, KeyboardInterrupt):
            raise
        except BaseException as error:
            given_values = ", ".join([*map(shown, args), *(f"{k}={shown(v)}" for k, v in kwargs.items())])
            where = f"plugin {given}{_line(error, key)}: {kind} {name}"
            raise PluginError(
                f"{where}: building it with ({given_values}) raises {_describe(error)}"
            ) from None
        check_declared(self)  # its declared parameters first, in their own words (as toyrl's stages)
        problem = stage_problem(kind, self)
        if problem:
            raise PluginError(f"plugin {given}: {kind} {name} {_built(self)}: {problem}")

    functools.update_wrapper(built, init)
    built.__toyrl_guarded__ = True  # type: ignore[attr-defined]
    stage_class.__init__ = built


# What toyrl asks of a kind's stage beyond the stage's own method, after it: every schedule's parts
# must cut the batch (a plugin's own check may not say so).
AFTER: dict[tuple[str, str], Callable[..., None]] = {("schedule", "check"): check_cuts}


def _guard(stage_class: Any, kind: str, name: str, given: str, key: str) -> None:
    """Wrap the methods of a plugin's stage class that toyrl calls (`guards`) so that every call is
    checked: an exception or a breach of the contract is a PluginError naming the plugin, the stage,
    the method and the problem, and then toyrl's own check of the method (`AFTER`) applies. Its
    __init__ too (`_guard_building`). The class is the plugin's own: toyrl's stages are not touched."""
    _guard_building(stage_class, kind, name, given, key)
    for method, check in guards(kind).items():
        static = inspect.getattr_static(stage_class, method, None)
        if static is None or getattr(static, "__toyrl_guarded__", False):
            continue
        binding = type(static) if isinstance(static, staticmethod | classmethod) else None
        function = static.__func__ if binding is not None else static
        if not callable(function) or getattr(function, "__toyrl_guarded__", False):
            continue
        skip = 0 if binding is staticmethod else 1  # self or cls
        stage_method = f"{kind} {name}: {method}"
        after = AFTER.get((kind, method))

        def guarded(
            *args: Any,
            _function: Any = function,
            _check: Any = check,
            _skip: int = skip,
            _stage_method: str = stage_method,
            _after: Callable[..., None] | None = after,
            **kwargs: Any,
        ) -> Any:
            try:
                with _contained():
                    out = _function(*args, **kwargs)
            except (InvalidInput, KeyboardInterrupt):  # a stage's own one-line refusal; the user's ^C
                raise
            except BaseException as error:
                where = f"plugin {given}{_line(error, key)}: {_stage_method}"
                raise PluginError(f"{where} raises {_describe(error)}") from None
            problem = _check(out, *args[_skip:])
            if problem:
                raise PluginError(f"plugin {given}: {_stage_method} {problem}")
            if _after is not None and _skip == 1:
                try:
                    _after(*args)
                except InvalidInput as error:
                    stage = _stage_method.rpartition(":")[0]
                    raise PluginError(f"plugin {given}: {stage} {_built(args[0])}: {error}") from None
            return out

        functools.update_wrapper(guarded, function)
        guarded.__toyrl_guarded__ = True  # type: ignore[attr-defined]
        setattr(stage_class, method, guarded if binding is None else binding(guarded))
